/* vram train: trains a model on the CPU with every byte planned first.
 *
 *   vram train [model and step flags, as vram plan] [--lr X] [--steps N] [--warmup N]
 *              [--data FILE] [--init CKPT] [--save CKPT] [--save-state F] [--resume F]
 *              [--device cpu|cuda|auto] [--memory planned|dynamic] [--eval-every N] [--json] [--seed N]
 *
 * With no arguments: a small GPT (L=2 C=64, 120k parameters) on the built-in
 * generated corpus, 1000 steps of 16 x 64 tokens, 13-35 s on two cores (quiet
 * or busy), the loss falling from ln(256) = 5.5 to below 1. Prints the memory
 * plan, progress, and a summary with the planned against the really allocated
 * bytes per role. Bad flags: one line naming the flag, exit 2; failures while
 * running (unreadable data, a checkpoint that does not match): one line, exit 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/model_flags.h"
#include "vram/checkpoint.h"
#include "vram/prof.h"
#include "vram/train.h"
#include "vram/train_state.h"
#include "vram/util.h"

/* The default run: see the comment at the top. */
static const vr_model_defaults train_defaults = {.gpt_preset = "tiny", .mlp_preset = "tiny", .batch = 16, .seq = 64,
                                                 .optim = VR_OPTIM_ADAMW};
#define DEFAULT_STEPS 1000
#define DEFAULT_LR 3e-3

typedef struct topts {
    vr_model_flags m;
    const char *save_init, *dump_batches, *trace, *oom_report;
    uint64_t max_memory, max_host_memory;
    const char *data, *init, *save, *save_state, *resume, *device, *memory, *policy, *schedule;
    long long steps, warmup, seed, save_every, eval_batches, eval_every, threads;
    bool has_warmup, has_eval_every, has_seed, json, quiet, shuffle, inplace;
    double lr, min_lr_frac, weight_decay, beta1, beta2, momentum;
    bool has_wd, has_min_lr, has_beta1, has_beta2, has_momentum;
    double loss_scale;
    long long loss_scale_window;
    bool cuda_graph, multi_tensor, fuse, matmul_tune, profile;
    unsigned attention_v1;
} topts;

/* v2 (0), v1 (3: both), v1-fwd (1), v1-bwd (2); the environment's 1|fwd|bwd spelling too. */
static int parse_attention(const char *cmd, const char *flag, const char *v, void *dst)
{
    static const char *names[][2] = {{"v2", "0"}, {"v1-fwd", "fwd"}, {"v1-bwd", "bwd"}, {"v1", "1"}};
    for (unsigned k = 0; k < 4; k++)
        if (!strcmp(v, names[k][0]) || !strcmp(v, names[k][1])) {
            *(unsigned *)dst = k;
            return 0;
        }
    return vr_cli_fail(cmd, 2, "%s: '%s' is not one of v2|v1|v1-fwd|v1-bwd", flag, v);
}

/* The documented environment defaults of the CUDA switches (flags given later override them). */
static int env_defaults(topts *o)
{
    const char *v;
    o->multi_tensor = true;
    o->fuse = true;
    o->cuda_graph = true; /* on CUDA: the step replayed as a graph where the run allows (exec.c says when not) */
    if ((v = getenv("VRAM_CUDA_GRAPH")) && *v && vr_flag_onoff("train", "VRAM_CUDA_GRAPH", v, &o->cuda_graph))
        return 2;
    if ((v = getenv("VRAM_MULTI_TENSOR")) && *v && vr_flag_onoff("train", "VRAM_MULTI_TENSOR", v, &o->multi_tensor))
        return 2;
    if ((v = getenv("VRAM_FUSE")) && *v && vr_flag_onoff("train", "VRAM_FUSE", v, &o->fuse))
        return 2;
    if ((v = getenv("VRAM_PROFILE")) && *v && vr_flag_onoff("train", "VRAM_PROFILE", v, &o->profile))
        return 2;
    if ((v = getenv("VRAM_ATTN_V1")) && *v && parse_attention("train", "VRAM_ATTN_V1", v, &o->attention_v1))
        return 2;
    return 0;
}

static void train_flags(vr_flagset *fs, void *p)
{
    topts *o = p;
    const long long big = (long long)1 << 40;
    vr_model_flags_add(fs, &o->m, &train_defaults);
    const vr_flag t[] = {
        VR_FLAG_HEADING_TEXT("optimization"),
        {"--steps", VR_FLAG_INT, &o->steps, "N", .lo = 1, .hi = big,
         .help = vr_flags_text(fs, "optimizer steps (%d)", DEFAULT_STEPS)},
        {"--lr", VR_FLAG_DOUBLE, &o->lr, "X", .min = 1e-12, .max = 1e3,
         .help = vr_flags_text(fs, "peak learning rate (%g)", DEFAULT_LR)},
        {"--warmup", VR_FLAG_INT, &o->warmup, "N", .lo = 0, .hi = big, .given = &o->has_warmup,
         .help = "linear warmup steps (steps/20)"},
        {"--lr-schedule", VR_FLAG_CHOICE, &o->schedule, NULL, .choices = "cosine|constant",
         .help = "after warmup (cosine, to --min-lr-frac of the peak)"},
        {"--min-lr-frac", VR_FLAG_DOUBLE, &o->min_lr_frac, "X", .min = 0, .max = 1, .given = &o->has_min_lr,
         .help = "(0.1)"},
        {"--weight-decay", VR_FLAG_DOUBLE, &o->weight_decay, "X", .min = 0, .max = 1e3, .given = &o->has_wd,
         .help = "decay of the matrices and embeddings (adamw 0.1, else 0)"},
        {"--beta1", VR_FLAG_DOUBLE, &o->beta1, "X", .min = 0, .max = 0.999999, .given = &o->has_beta1,
         .help = "Adam's first beta (0.9)"},
        {"--beta2", VR_FLAG_DOUBLE, &o->beta2, "X", .min = 0, .max = 0.999999, .given = &o->has_beta2,
         .help = "Adam's second beta (0.95)"},
        {"--momentum", VR_FLAG_DOUBLE, &o->momentum, "X", .min = 0, .max = 0.999999, .given = &o->has_momentum,
         .help = "SGD momentum (0.9)"},
        {"--seed", VR_FLAG_INT, &o->seed, "N", .lo = 0, .hi = INT64_MAX, .given = &o->has_seed,
         .help = "initialisation and data seed (1337)"},
        VR_FLAG_HEADING_TEXT("data and checkpoints"),
        {"--data", VR_FLAG_STRING, &o->data, "FILE",
         .help = "a text file (bytes), a .bin token file (llm.c uint16 or vram uint32), or\n'generated' (default)"},
        {"--shuffle", VR_FLAG_SWITCH, &o->shuffle, NULL, .help = "shuffled windows instead of sequential batches"},
        {"--init", VR_FLAG_STRING, &o->init, "CKPT|DIR",
         .help = "start from an llm.c GPT-2 checkpoint, or a Hugging Face Llama directory\n"
                 "(config.json + safetensors); its shape unless flags say otherwise"},
        {"--save", VR_FLAG_STRING, &o->save, "CKPT|DIR",
         .help = "write the model at the end (atomically): GPT an llm.c checkpoint, Llama a\n"
                 "Hugging Face directory that transformers loads (fp32)"},
        {"--save-init", VR_FLAG_STRING, &o->save_init, "CKPT|DIR",
         .help = "the same for the initial parameters (before step 1)"},
        {"--dump-batches", VR_FLAG_STRING, &o->dump_batches, "FILE",
         .help = "write every training batch as B rows of T+1 int32 tokens, in order"},
        {"--trace", VR_FLAG_STRING, &o->trace, "FILE", .nonempty = true,
         .help = "Chrome/Perfetto trace of the run (cuda: with each node's time on the GPU\n"
                 "and, offloaded, the copies beside the host's updates)"},
        {"--oom-report", VR_FLAG_STRING, &o->oom_report, "FILE", .nonempty = true,
         .help = "out of memory: the step's HTML report ($TMPDIR)"},
        {"--save-state", VR_FLAG_STRING, &o->save_state, "FILE",
         .help = "write a resumable state (params, optimizer, step, data position)"},
        {"--resume", VR_FLAG_STRING, &o->resume, "FILE",
         .help = "continue a saved state bit-exactly (same flags otherwise)"},
        {"--save-every", VR_FLAG_INT, &o->save_every, "N", .lo = 1, .hi = big, .help = "also save every N steps"},
        {"--eval-every", VR_FLAG_INT, &o->eval_every, "N", .lo = -1, .hi = big, .given = &o->has_eval_every,
         .help = "held-out loss every N steps (0: at the end only; -1: never)"},
        {"--eval-batches", VR_FLAG_INT, &o->eval_batches, "N", .lo = 1, .hi = 1 << 20,
         .help = "held-out batches per evaluation (8)"},
        VR_FLAG_HEADING_TEXT("running"),
        {"--device", VR_FLAG_STRING, &o->device, "cpu|cuda|auto", .help = "(cpu; auto: cuda when a GPU is there)"},
        {"--memory", VR_FLAG_CHOICE, &o->memory, NULL, .choices = "planned|dynamic",
         .help = "one arena at the plan's offsets, or PyTorch-like caching allocator (planned)"},
        {"--max-memory", VR_FLAG_SIZE, &o->max_memory, "SIZE", .lo = 1,
         .help = "device memory the whole run may use, CUDA context included (e.g. 16GiB):\n"
                 "a planned arena that does not fit is refused before it runs; dynamic:\n"
                 "the allocator is capped; cuda: the process's use is checked each step"},
        {"--max-host-memory", VR_FLAG_SIZE, &o->max_host_memory, "SIZE", .lo = 1,
         .help = "host memory an --offload run may pin (default: what the host has available)"},
        {"--loss-scale", VR_FLAG_DOUBLE, &o->loss_scale, "S", .min = 1e-30, .max = 1e30,
         .help = "fp16: the first dynamic loss scale (65536); halved on an overflow\n"
                 "(that step's update skipped), doubled after --loss-scale-window"},
        {"--loss-scale-window", VR_FLAG_INT, &o->loss_scale_window, "N", .lo = 1, .hi = 1000000000,
         .help = "fp16: good steps in a row before the scale doubles (2000)"},
        {"--policy", VR_FLAG_STRING, &o->policy, "NAME", .help = "allocator policy with --memory dynamic (stitch on cuda, pytorch on cpu)"},
        {"--inplace", VR_FLAG_SWITCH, &o->inplace, NULL,
         .help = "gelu/relu/add write their output over a dying input (as vram plan)"},
        {"--threads", VR_FLAG_INT, &o->threads, "N", .lo = 1, .hi = 4096,
         .help = "CPU threads for OpenMP and OpenBLAS (their defaults: all cores)"},
        VR_FLAG_HEADING_TEXT("cuda kernels (the environment variable in brackets gives the default)"),
        {"--cuda-graph", VR_FLAG_CUSTOM, &o->cuda_graph, "on|off", .parse = vr_flag_onoff,
         .help = "on CUDA, replay the step as a CUDA graph from step 3 on where the run allows it: planned\nmemory, "
                 "one micro-batch, no offload or ranks (on) [VRAM_CUDA_GRAPH=0]"},
        {"--multi-tensor", VR_FLAG_CUSTOM, &o->multi_tensor, "on|off", .parse = vr_flag_onoff,
         .help = "one launch for the global norm and one for all updates (on)\n[VRAM_MULTI_TENSOR=0]"},
        {"--fuse", VR_FLAG_CUSTOM, &o->fuse, "on|off", .parse = vr_flag_onoff,
         .help = "the executor's fusions: a residual add inside the next layernorm, a Linear and the\nGELU after it as one cuBLASLt product, a Linear's bias gradient in the layernorm\nbackward before it, attention's q|k|v bias gradient from its identities (on)\n[VRAM_FUSE=0]"},
        {"--matmul-tune", VR_FLAG_CUSTOM, &o->matmul_tune, "on|off", .parse = vr_flag_onoff,
         .help = "large matrix products take cuBLASLt's fastest candidate, timed at the first step,\nwhere "
                 "clearly faster; runs may then differ in the last bits (off)"},
        {"--profile", VR_FLAG_SWITCH, &o->profile, NULL,
         .help = "GPU time per node and per op at the end (node by node only) [VRAM_PROFILE=1]"},
        VR_FLAG_HEADING_TEXT("output"),
        {"--json", VR_FLAG_SWITCH, &o->json, NULL,
         .help = "JSON Lines: plan, one record per step, evaluations, summary"},
        {"--quiet", VR_FLAG_SWITCH, &o->quiet, NULL, .help = "only errors"},
    };
    VR_FLAGS_ADD(fs, t);
}

static int parse_args(int argc, char **argv, topts *o)
{
    if (env_defaults(o))
        return 2;
    return vr_flags_parse(&vr_cli_train, o, argc, argv, NULL, 0, NULL);
}

/* --resume without --master: the master the state was saved with (a state saved before the split master was
 * the default has a full one). A file that cannot be read is left to the resume itself, which names it. */
static void master_from_state(const char *path, int world, vr_step_config *s)
{
    char rank0[4096];
    vr_train_state *st = calloc(1, sizeof *st);
    if (!st)
        return;
    if (world > 1)
        snprintf(rank0, sizeof rank0, "%s.rank0", path);
    int64_t v = 0;
    if (vr_state_read_meta(world > 1 ? rank0 : path, st) == VR_OK)
        s->split_master = vr_state_get_config(st, "split_master", &v) && v == 1;
    vr_clear_error();
    free(st);
}

/* With --init and no shape flags, the model's shape comes from the checkpoint. */
static int shape_from_checkpoint(const char *cmd, const char *path, const vr_model_flags *mf, vr_model_config *m)
{
    if (!path || m->kind != VR_MODEL_GPT || vr_model_flags_shape_given(mf))
        return 0;
    vr_llmc_config lc;
    if (vr_llmc_read_header(path, &lc) != VR_OK)
        return vr_cli_fail(cmd, 1, "%s", vr_last_error());
    m->gpt = (vr_gpt_config){lc.num_layers, lc.channels, lc.num_heads, lc.vocab_size, lc.padded_vocab_size,
                             lc.max_seq_len};
    if (mf->seq && mf->seq > lc.max_seq_len)
        return vr_cli_fail(cmd, 2, "--seq: %lld is longer than the checkpoint's %d positions", mf->seq,
                           lc.max_seq_len);
    if (!mf->seq && m->T > lc.max_seq_len)
        m->T = lc.max_seq_len;
    return 0;
}

/* cpu, cuda[:N], cpu:SIZE; auto (and no --device) picks cuda when this build has CUDA and a GPU is there. */
static int resolve_device(const char *cmd, const char *spec, const char **out)
{
    if (!spec || !strcmp(spec, "auto")) {
        int n = 0;
#ifdef VRAM_HAVE_CUDA
        if (spec && vr_cuda_device_count(&n) != VR_OK)
            n = 0;
#endif
        *out = n > 0 ? "cuda" : "cpu";
        return 0;
    }
    if (strncmp(spec, "cpu", 3) && strncmp(spec, "cuda", 4))
        return vr_cli_fail(cmd, 2, "--device: '%s' is not one of cpu, cpu:SIZE, cuda, cuda:N, auto", spec);
    *out = spec;
    return 0;
}

/* Checkpoints as instant events of the trace. */
static void trace_event(void *ctx, const char *what) { vr_trace_instant(ctx, what); }

static int run(int argc, char **argv)
{
    topts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    vr_train_config c = vr_train_config_default();
    vr_model_flags_hf_from_init(&o.m, o.init);
    if ((rc = vr_model_flags_configure("train", &o.m, &train_defaults, &c.model, &c.step)))
        return rc;
    if ((rc = shape_from_checkpoint("train", o.init, &o.m, &c.model)))
        return rc;
    if (o.resume && !o.m.master && vr_model_flags_default_split(&c.step))
        master_from_state(o.resume, c.step.world, &c.step);
    if ((rc = resolve_device("train", o.device, &c.device)))
        return rc;
    c.memory = o.memory && !strcmp(o.memory, "dynamic") ? VR_MEMORY_DYNAMIC : VR_MEMORY_PLANNED;
    if (o.policy && c.memory != VR_MEMORY_DYNAMIC)
        return vr_cli_fail("train", 2, "--policy: only with --memory dynamic");
    /* dynamic mode on a GPU: stitch (reserved ~= allocated); elsewhere (cpu has no physical memory
     * handles) pytorch */
    c.alloc_policy = o.policy ? o.policy : c.memory == VR_MEMORY_DYNAMIC && !strncmp(c.device, "cuda", 4) ? "stitch" : NULL;
    c.inplace = o.inplace;
    if (o.schedule && vr_lr_parse_kind(o.schedule, "--lr-schedule", &c.lr_kind))
        return vr_cli_fail("train", 2, "%s", vr_last_error());
    c.steps = o.steps ? o.steps : DEFAULT_STEPS;
    c.warmup = o.has_warmup ? o.warmup : c.steps / 20;
    if (c.warmup > c.steps)
        return vr_cli_fail("train", 2, "--warmup: %lld is more than the %lld steps", (long long)c.warmup,
                           (long long)c.steps);
    c.hp = vr_optim_hparams_default(c.step.optim);
    c.hp.lr = (float)(o.lr > 0 ? o.lr : DEFAULT_LR);
    if (o.has_wd)
        c.hp.weight_decay = (float)o.weight_decay;
    if (o.has_beta1)
        c.hp.beta1 = (float)o.beta1;
    if (o.has_beta2)
        c.hp.beta2 = (float)o.beta2;
    if (o.has_momentum)
        c.hp.momentum = (float)o.momentum;
    if (o.has_min_lr)
        c.min_lr_frac = o.min_lr_frac;
    if (o.has_seed)
        c.seed = (uint64_t)o.seed;
    c.data = o.data;
    c.data_order = o.shuffle ? VR_DATA_SHUFFLED : VR_DATA_SEQUENTIAL;
    c.eval_batches = (int)o.eval_batches;
    c.init = o.init;
    c.resume = o.resume;
    c.max_memory = o.max_memory;
    c.max_host_memory = o.max_host_memory;
    c.loss_scale = (float)o.loss_scale;
    c.loss_scale_window = (int)o.loss_scale_window;
    /* --profile times every node with events between them: node by node */
    c.cuda_graph = o.cuda_graph && !o.profile && !strncmp(c.device, "cuda", 4);
    c.per_node_optimizer = !o.multi_tensor;
    c.unfused = !o.fuse;
    c.matmul_tune = o.matmul_tune;
    c.profile = o.profile;
    c.device_times = o.trace != NULL; /* the trace shows each node's time on the GPU too */
    if (o.m.attention && o.m.attention[0] == 'v' && o.m.attention[1] != 'r') /* --attention v2|v1|v1-fwd|v1-bwd */
        (void)parse_attention("train", "--attention", o.m.attention, &o.attention_v1);
    c.attention_v1 = o.attention_v1;
    if ((o.loss_scale > 0 || o.loss_scale_window > 0) && c.step.precision != VR_PREC_FP16)
        return vr_cli_fail("train", 2, "--loss-scale%s: only with --precision fp16 (bf16 and fp32 need no scaling)",
                           o.loss_scale > 0 ? "" : "-window");
    c.dump_batches = o.dump_batches;

    if (o.threads)
        vr_exec_cpu_set_threads((int)o.threads);
    if (!vr_exec_cpu_wait_policy_ok() && !o.quiet && !o.json)
        fprintf(stderr, "vram train: note: OMP_WAIT_POLICY is not passive; OpenMP's spinning threads can slow "
                        "OpenBLAS's many times over (see vram/exec.h)\n");
    vr_train_run_opts ro = {
        .progress = o.quiet ? VR_PROGRESS_QUIET : o.json ? VR_PROGRESS_JSON : VR_PROGRESS_AUTO,
        .eval_every = o.has_eval_every ? o.eval_every : 0,
        .save_every = o.save_every,
        .save = o.save,
        .save_init = o.save_init,
        .save_state = o.save_state,
        .print_plan = true,
    };
    vr_train_summary sum;
    vr_trace *trace = NULL;
    if (o.trace && vr_trace_open(o.trace, &trace) != VR_OK)
        return vr_cli_fail("train", 1, "--trace: %s", vr_last_error());
    vr_cli_status status = {.trace = trace, .device = c.device ? c.device : "cpu"};
    if (trace) {
        ro.on_event = trace_event;
        ro.on_event_ctx = trace;
    }
    c.on_node = vr_cli_status_hook; /* the status file vram watch reads, and the trace */
    c.on_node_ctx = &status;
    vr_cli_dist dist;
    int drc = vr_cli_dist_setup("train", argc, argv, &c.step, &c.device, &dist);
    if (drc > 0 || (drc == 0 && dist.launcher)) {
        if (trace)
            vr_trace_close(trace, false);
        return drc > 0 ? drc : dist.status;
    }
    c.comm = dist.comm;
    status.device = c.device;
    if (c.comm && c.step.rank > 0) /* rank 0 prints */
        ro.progress = VR_PROGRESS_QUIET;
    vr_status st = vr_train_run(&c, &ro, stdout, &sum);
    char status_path[96];
    vr_cli_status_path(status_path, sizeof status_path);
    remove(status_path);
    char err[1024];
    snprintf(err, sizeof err, "%s", st ? vr_last_error() : "");
    vr_cli_dist_end(&dist);
    if (trace) {
        if (st == VR_ERR_OOM)
            vr_trace_instant(trace, "OOM");
        /* a run that failed before its first step leaves no trace; an OOM's trace is kept */
        if (vr_trace_close(trace, st == VR_OK || st == VR_ERR_OOM) != VR_OK && !st)
            return vr_cli_fail("train", 1, "--trace: %s", vr_last_error());
    }
    char where[300];
    if (st == VR_ERR_OOM && vr_cli_oom_report(&c, o.oom_report, where, sizeof where) == 0)
        return vr_cli_fail("train", 1, "%s (memory report of the step: %s)", err, where);
    if (st)
        return vr_cli_fail("train", 1, "%s", err);
    return 0;
}

const vr_cli_command vr_cli_train = {
    "train", "train a model (a small GPT on a built-in corpus by default) in the memory the plan says", run,
    "[options]",
    "Trains a model with every byte planned before the first step (vram plan's table), then\n"
    "checks the run against it: the summary shows planned and really allocated bytes per role.\n"
    "With no options: a small GPT on the built-in generated corpus, on the CPU.",
    train_flags, sizeof(topts)};
