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
#include "vram/util.h"

/* The default run: see the comment at the top. */
static const vr_model_defaults train_defaults = {.gpt_preset = "tiny", .mlp_preset = "tiny", .batch = 16, .seq = 64,
                                                 .optim = VR_OPTIM_ADAMW};
#define DEFAULT_STEPS 1000
#define DEFAULT_LR 3e-3

static void usage(FILE *f)
{
    fprintf(f, "usage: vram train [options]\n\n"
               "Trains a model with every byte planned before the first step (vram plan's table), then\n"
               "checks the run against it: the summary shows planned and really allocated bytes per role.\n"
               "With no options: a small GPT on the built-in generated corpus, on the CPU.\n\n");
    vr_model_flags_usage(f, &train_defaults);
    fprintf(f, "step\n");
    vr_step_flags_usage(f, &train_defaults);
    fprintf(f,
            "optimization\n"
            "  --steps N                optimizer steps (%d)\n"
            "  --lr X                   peak learning rate (%g)\n"
            "  --warmup N               linear warmup steps (steps/20)\n"
            "  --lr-schedule cosine|constant   after warmup (cosine, to --min-lr-frac of the peak)\n"
            "  --min-lr-frac X          (0.1)\n"
            "  --weight-decay X         decay of the matrices and embeddings (adamw 0.1, else 0)\n"
            "  --beta1 X --beta2 X      Adam betas (0.9, 0.95)\n"
            "  --momentum X             SGD momentum (0.9)\n"
            "  --seed N                 initialisation and data seed (1337)\n"
            "data and checkpoints\n"
            "  --data FILE              a text file (bytes), a .bin token file (llm.c uint16 or vram uint32), or\n"
            "                           'generated' (default)\n"
            "  --shuffle                shuffled windows instead of sequential batches\n"
            "  --init CKPT|DIR          start from an llm.c GPT-2 checkpoint, or a Hugging Face Llama directory\n"
            "                           (config.json + safetensors); its shape unless flags say otherwise\n"
            "  --save CKPT|DIR          write the model at the end (atomically): GPT an llm.c checkpoint, Llama a\n"
            "                           Hugging Face directory that transformers loads (fp32)\n"
            "  --save-init CKPT|DIR     the same for the initial parameters (before step 1)\n"
            "  --dump-batches FILE      write every training batch as B rows of T+1 int32 tokens, in order\n"
            "  --trace FILE             Chrome/Perfetto trace of the run (cuda: with each node's time on the GPU\n"
            "                           and, offloaded, the copies beside the host's updates)\n"
            "  --oom-report FILE        out of memory: the step's HTML report ($TMPDIR)\n"
            "  --save-state FILE        write a resumable state (params, optimizer, step, data position)\n"
            "  --resume FILE            continue a saved state bit-exactly (same flags otherwise)\n"
            "  --save-every N           also save every N steps\n"
            "  --eval-every N           held-out loss every N steps (0: at the end only; -1: never)\n"
            "  --eval-batches N         held-out batches per evaluation (8)\n"
            "running\n"
            "  --device cpu|cuda|auto   (cpu; auto: cuda when a GPU is there)\n"
            "  --memory planned|dynamic one arena at the plan's offsets, or PyTorch-like caching allocator (planned)\n"
            "  --max-memory SIZE        device memory the whole run may use, CUDA context included (e.g. 16GiB):\n"
            "                           a planned arena that does not fit is refused before it runs; dynamic:\n"
            "                           the allocator is capped; cuda: the process's use is checked each step\n"
            "  --max-host-memory SIZE   host memory an --offload run may pin (default: what the host has available)\n"
            "  --loss-scale S           fp16: the first dynamic loss scale (65536); halved on an overflow\n"
            "                           (that step's update skipped), doubled after --loss-scale-window\n"
            "  --loss-scale-window N    fp16: good steps in a row before the scale doubles (2000)\n"
            "  --policy NAME            allocator policy with --memory dynamic (pytorch)\n"
            "  --inplace                gelu/relu/add write their output over a dying input (as vram plan)\n"
            "  --threads N              CPU threads for OpenMP and OpenBLAS (their defaults: all cores)\n"
            "cuda kernels (the environment variable in brackets gives the default)\n"
            "  --cuda-graph on|off      replay the step as a CUDA graph from step 3 on (off) [VRAM_CUDA_GRAPH=1]\n"
            "  --multi-tensor on|off    one launch for the global norm and one for all updates (on)\n"
            "                           [VRAM_MULTI_TENSOR=0]\n"
            "  --profile                GPU time per node and per op at the end (node by node only) [VRAM_PROFILE=1]\n"
            "  --attention v2|v1|v1-fwd|v1-bwd   attention kernels; v1's backward is deterministic (v2)\n"
            "                           [VRAM_ATTN_V1=1|fwd|bwd]\n"
            "  --json                   JSON Lines: plan, one record per step, evaluations, summary\n"
            "  --quiet                  only errors\n",
            DEFAULT_STEPS, DEFAULT_LR);
}

typedef struct topts {
    vr_model_flags m;
    const char *save_init, *dump_batches, *trace, *oom_report;
    uint64_t max_memory, max_host_memory;
    const char *data, *init, *save, *save_state, *resume, *device, *memory, *policy, *schedule;
    long long steps, warmup, seed, save_every, eval_batches, eval_every, threads;
    bool has_warmup, has_eval_every, has_seed, json, quiet, shuffle, inplace;
    double lr, min_lr_frac, weight_decay, beta1, beta2, momentum;
    bool has_wd, has_min_lr;
    double loss_scale;
    long long loss_scale_window;
    bool cuda_graph, per_node_optimizer, profile;
    unsigned attention_v1;
} topts;

/* "on"/"1" or "off"/"0" into *out; 0, or prints the error naming flag and returns 2. */
static int parse_onoff(const char *flag, const char *v, bool *out)
{
    if (!strcmp(v, "on") || !strcmp(v, "1"))
        *out = true;
    else if (!strcmp(v, "off") || !strcmp(v, "0"))
        *out = false;
    else
        return vr_cli_fail("train", 2, "%s: '%s' is not one of on|off", flag, v);
    return 0;
}

/* v2 (0), v1 (3: both), v1-fwd (1), v1-bwd (2); the environment's 1|fwd|bwd spelling too. */
static int parse_attention(const char *flag, const char *v, unsigned *out)
{
    static const char *names[][2] = {{"v2", "0"}, {"v1-fwd", "fwd"}, {"v1-bwd", "bwd"}, {"v1", "1"}};
    for (unsigned k = 0; k < 4; k++)
        if (!strcmp(v, names[k][0]) || !strcmp(v, names[k][1])) {
            *out = k;
            return 0;
        }
    return vr_cli_fail("train", 2, "%s: '%s' is not one of v2|v1|v1-fwd|v1-bwd", flag, v);
}

/* The documented environment defaults of the CUDA switches (flags given later override them). */
static int env_defaults(topts *o)
{
    const char *v;
    bool mt = true;
    if ((v = getenv("VRAM_CUDA_GRAPH")) && *v && parse_onoff("VRAM_CUDA_GRAPH", v, &o->cuda_graph))
        return 2;
    if ((v = getenv("VRAM_MULTI_TENSOR")) && *v && parse_onoff("VRAM_MULTI_TENSOR", v, &mt))
        return 2;
    o->per_node_optimizer = !mt;
    if ((v = getenv("VRAM_PROFILE")) && *v && parse_onoff("VRAM_PROFILE", v, &o->profile))
        return 2;
    if ((v = getenv("VRAM_ATTN_V1")) && *v && parse_attention("VRAM_ATTN_V1", v, &o->attention_v1))
        return 2;
    return 0;
}

static int parse_double(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi))
        return vr_cli_fail("train", 2, "%s: '%s' is not a number in [%g, %g]", flag, v, lo, hi);
    *out = x;
    return 0;
}

static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out)
{
    return vr_parse_int(v, flag, lo, hi, out) == VR_OK ? 0 : vr_cli_fail("train", 2, "%s", vr_last_error());
}

static int parse_args(int argc, char **argv, topts *o)
{
    if (env_defaults(o))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        int r = vr_model_flags_parse("train", argc, argv, &i, &o->m);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(a, "--json") || !strcmp(a, "--quiet") || !strcmp(a, "--shuffle") || !strcmp(a, "--inplace")) {
            *(a[2] == 'j' ? &o->json : a[2] == 'q' ? &o->quiet : a[2] == 's' ? &o->shuffle : &o->inplace) = true;
            continue;
        }
        if (!strcmp(a, "--profile")) {
            o->profile = true;
            continue;
        }
        if (!strcmp(a, "--cuda-graph") || !strcmp(a, "--multi-tensor") || !strcmp(a, "--attention")) {
            if (i + 1 >= argc)
                return vr_cli_fail("train", 2, "%s needs a value", a);
            const char *v = argv[++i];
            bool on = false;
            int rc = a[2] == 'a' ? parse_attention(a, v, &o->attention_v1) : parse_onoff(a, v, &on);
            if (rc)
                return rc;
            if (a[2] == 'c')
                o->cuda_graph = on;
            else if (a[2] == 'm')
                o->per_node_optimizer = !on;
            continue;
        }
        if (!strcmp(a, "--loss-scale") || !strcmp(a, "--loss-scale-window")) {
            if (i + 1 >= argc)
                return vr_cli_fail("train", 2, "%s needs a value", a);
            const char *v = argv[++i];
            int rc = a[12] ? parse_int(a, v, 1, 1000000000, &o->loss_scale_window)
                           : parse_double(a, v, 1e-30, 1e30, &o->loss_scale);
            if (rc)
                return rc;
            continue;
        }
        if (!strcmp(a, "--trace") || !strcmp(a, "--oom-report")) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return vr_cli_fail("train", 2, "%s needs a file name", a);
            *(a[2] == 't' ? &o->trace : &o->oom_report) = argv[++i];
            continue;
        }
        if (!strcmp(a, "--max-host-memory")) {
            if (i + 1 >= argc)
                return vr_cli_fail("train", 2, "%s needs a value", a);
            if (vr_parse_size(argv[++i], a, &o->max_host_memory) != VR_OK)
                return vr_cli_fail("train", 2, "%s", vr_last_error());
            if (!o->max_host_memory)
                return vr_cli_fail("train", 2, "--max-host-memory: must be more than 0");
            continue;
        }
        if (!strcmp(a, "--max-memory") || !strcmp(a, "--save-init") || !strcmp(a, "--dump-batches")) {
            if (i + 1 >= argc)
                return vr_cli_fail("train", 2, "%s needs a value", a);
            const char *v = argv[++i];
            if (a[2] == 's')
                o->save_init = v;
            else if (a[2] == 'd')
                o->dump_batches = v;
            else if (vr_parse_size(v, a, &o->max_memory) != VR_OK)
                return vr_cli_fail("train", 2, "%s", vr_last_error());
            else if (!o->max_memory)
                return vr_cli_fail("train", 2, "--max-memory: must be more than 0");
            continue;
        }
        static const char *with_value[] = {"--data", "--init", "--save", "--save-state", "--resume", "--device",
                                           "--memory", "--policy", "--lr-schedule", "--steps", "--warmup", "--seed",
                                           "--save-every", "--eval-batches", "--eval-every", "--lr", "--min-lr-frac",
                                           "--weight-decay", "--beta1", "--beta2", "--momentum", "--threads"};
        int k = -1;
        for (int j = 0; j < (int)(sizeof with_value / sizeof *with_value); j++)
            if (!strcmp(a, with_value[j]))
                k = j;
        if (k < 0)
            return vr_cli_fail("train", 2, "unknown flag '%s' (see vram train --help)", a);
        if (i + 1 >= argc)
            return vr_cli_fail("train", 2, "%s needs a value", a);
        const char *v = argv[++i];
        const char **str[] = {&o->data, &o->init, &o->save, &o->save_state, &o->resume, &o->device, &o->memory,
                              &o->policy, &o->schedule};
        int rc = 0;
        if (k < 9)
            *str[k] = v;
        else if (k == 9)
            rc = parse_int(a, v, 1, (long long)1 << 40, &o->steps);
        else if (k == 10)
            rc = parse_int(a, v, 0, (long long)1 << 40, &o->warmup), o->has_warmup = true;
        else if (k == 11)
            rc = parse_int(a, v, 0, INT64_MAX, &o->seed), o->has_seed = true;
        else if (k == 12)
            rc = parse_int(a, v, 1, (long long)1 << 40, &o->save_every);
        else if (k == 13)
            rc = parse_int(a, v, 1, 1 << 20, &o->eval_batches);
        else if (k == 14) {
            rc = !strcmp(v, "-1") ? (o->eval_every = -1, 0) : parse_int(a, v, 0, (long long)1 << 40, &o->eval_every);
            o->has_eval_every = true;
        } else if (k == 15)
            rc = parse_double(a, v, 1e-12, 1e3, &o->lr);
        else if (k == 16)
            rc = parse_double(a, v, 0, 1, &o->min_lr_frac), o->has_min_lr = true;
        else if (k == 17)
            rc = parse_double(a, v, 0, 1e3, &o->weight_decay), o->has_wd = true;
        else if (k == 18)
            rc = parse_double(a, v, 0, 0.999999, &o->beta1);
        else if (k == 19)
            rc = parse_double(a, v, 0, 0.999999, &o->beta2);
        else if (k == 20)
            rc = parse_double(a, v, 0, 0.999999, &o->momentum);
        else
            rc = parse_int(a, v, 1, 4096, &o->threads);
        if (rc)
            return 2;
    }
    return 0;
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

int vr_cmd_train(int argc, char **argv)
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
    if (o.m.eval)
        return vr_cli_fail("train", 2, "--eval: use 'vram eval' for a no-grad evaluation");
    if ((rc = shape_from_checkpoint("train", o.init, &o.m, &c.model)))
        return rc;
    if ((rc = resolve_device("train", o.device, &c.device)))
        return rc;
    if (o.memory && strcmp(o.memory, "planned") && strcmp(o.memory, "dynamic"))
        return vr_cli_fail("train", 2, "--memory: '%s' is not one of planned|dynamic", o.memory);
    c.memory = o.memory && !strcmp(o.memory, "dynamic") ? VR_MEMORY_DYNAMIC : VR_MEMORY_PLANNED;
    if (o.policy && c.memory != VR_MEMORY_DYNAMIC)
        return vr_cli_fail("train", 2, "--policy: only with --memory dynamic");
    c.alloc_policy = o.policy;
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
    if (o.beta1 > 0)
        c.hp.beta1 = (float)o.beta1;
    if (o.beta2 > 0)
        c.hp.beta2 = (float)o.beta2;
    if (o.momentum > 0)
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
    c.cuda_graph = o.cuda_graph;
    c.per_node_optimizer = o.per_node_optimizer;
    c.profile = o.profile;
    c.device_times = o.trace != NULL; /* the trace shows each node's time on the GPU too */
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
