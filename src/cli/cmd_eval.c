/* vram eval: the mean loss of a checkpoint on a data file, with the no-grad graph.
 *
 *   vram eval --init CKPT [--data FILE] [--batch N] [--seq N] [--batches N] [--device cpu]
 *             [--memory planned|dynamic] [--inplace] [--split val|all] [--classifier-rows N] [--json]
 *
 * The model's shape comes from the checkpoint (an llm.c file, or a Hugging Face directory's config.json).
 * The loss is averaged over
 * the first --batches batches (all of the split when --batches 0). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/checkpoint.h"
#include "vram/data.h"
#include "vram/device.h"
#include "vram/exec.h"
#include "vram/hf_config.h"
#include "vram/util.h"

typedef struct eopts {
    const char *init, *data, *split, *device, *memory, *precision;
    long long batch, seq, batches, classifier_rows;
    bool json, inplace;
} eopts;

static void eval_flags(vr_flagset *fs, void *p)
{
    eopts *o = p;
    const vr_flag t[] = {
        {"--init", VR_FLAG_STRING, &o->init, "CKPT|DIR", .nonempty = true,
         .help = "the model (required): an llm.c GPT-2 checkpoint, or a Hugging Face Llama\n"
                 "directory (config.json + safetensors: llama, qwen2, mistral)"},
        {"--data", VR_FLAG_STRING, &o->data, "FILE",
         .help = "text file, llm.c .bin token file or 'generated' (generated)"},
        {"--split", VR_FLAG_CHOICE, &o->split, NULL, .choices = "val|all",
         .help = "the held-out tail (10%) or every token (val)"},
        {"--batch", VR_FLAG_INT, &o->batch, "N", .help = "rows per batch (8)", .lo = 1, .hi = 1 << 30},
        {"--seq", VR_FLAG_INT, &o->seq, "N", .help = "sequence length (min(64, the checkpoint's))", .lo = 1,
         .hi = 1 << 30},
        {"--batches", VR_FLAG_INT, &o->batches, "N", .help = "batches to average (0: the whole split) (0)", .lo = 0,
         .hi = 1 << 30},
        {"--device", VR_FLAG_STRING, &o->device, "cpu|cuda|cuda:N", .help = "(cpu)"},
        {"--precision", VR_FLAG_CHOICE, &o->precision, NULL, .choices = "fp32|bf16|fp16",
         .help = "weights and activations of the evaluation (fp32)"},
        {"--memory", VR_FLAG_CHOICE, &o->memory, NULL, .choices = "planned|dynamic", .help = "(planned)"},
        {"--classifier-rows", VR_FLAG_INT, &o->classifier_rows, "N", .lo = 1, .hi = 1 << 30,
         .help = "cuda: rows of logits in each chunk of the fused classifier (4096): fewer\n"
                 "make the no-grad step's peak smaller where the classifier sets it"},
        {"--inplace", VR_FLAG_SWITCH, &o->inplace, NULL,
         .help = "gelu and the residual adds write over their dying input"},
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "one JSON object"},
    };
    VR_FLAGS_ADD(fs, t);
}

static int parse_args(int argc, char **argv, eopts *o)
{
    int rc = vr_flags_parse(&vr_cli_eval, o, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc;
    if (!o->init)
        return vr_cli_fail("eval", 2, "--init: a checkpoint is required (vram eval --init model.bin)");
    if (o->device && strncmp(o->device, "cpu", 3) && strncmp(o->device, "cuda", 4))
        return vr_cli_fail("eval", 2, "--device: '%s' is not one of cpu, cpu:SIZE, cuda, cuda:N", o->device);
    return 0;
}

typedef struct eval_run {
    vr_device *dev;
    vr_graph *g;
    vr_plan *p;
    vr_exec *e;
    vr_data *d;
    float *params;
    int32_t *tok, *tgt;
} eval_run;

static void eval_free(eval_run *r)
{
    vr_exec_free(r->e);
    vr_plan_free(r->p);
    vr_graph_free(r->g);
    vr_data_close(r->d);
    if (r->dev)
        vr_device_close(r->dev);
    free(r->params);
    free(r->tok);
    free(r->tgt);
}

/* Runs the evaluation; VR_OK with *loss and *n batches, or an error with the message set. */
static vr_status run(const eopts *o, eval_run *r, double *loss, int64_t *nb)
{
    /* a directory is a Hugging Face Llama (config.json + safetensors), a file an llm.c GPT-2 checkpoint */
    bool hf = vr_hf_is_dir(o->init);
    vr_llmc_config lc;
    vr_hf_config hc;
    vr_model_config m = {.kind = hf ? VR_MODEL_LLAMA : VR_MODEL_GPT};
    vr_status st = hf ? vr_hf_config_load(o->init, &hc) : vr_llmc_read_header(o->init, &lc);
    if (!st && hf)
        st = vr_hf_to_llama(&hc, o->init, &m.llama);
    if (st)
        return st;
    if (!hf)
        m.gpt = (vr_gpt_config){lc.num_layers, lc.channels, lc.num_heads, lc.vocab_size, lc.padded_vocab_size,
                                lc.max_seq_len};
    int maxT = hf ? m.llama.maxT : lc.max_seq_len, V = hf ? m.llama.V : lc.vocab_size;
    m.B = o->batch ? (int)o->batch : 8;
    m.T = o->seq ? (int)o->seq : maxT < 64 ? maxT : 64;
    if (m.T > maxT)
        return vr_error(VR_ERR_INVALID, "--seq: %d is longer than the checkpoint's %d positions", m.T, maxT);
    vr_step_config s = {.classifier_rows = (int)o->classifier_rows};
    if (o->precision && (st = vr_precision_parse(o->precision, "--precision", &s.precision)))
        return st;
    vr_memory_mode mode = o->memory && !strcmp(o->memory, "dynamic") ? VR_MEMORY_DYNAMIC : VR_MEMORY_PLANNED;
    vr_plan_config pc = {.memory = mode, .inplace = o->inplace};
    vr_exec_config ec = {.memory = mode};
    if ((st = vr_device_open(o->device ? o->device : "cpu", &r->dev)))
        return st;
    if (vr_device_kind_of(r->dev) == VR_DEVICE_CUDA) { /* the CUDA kernels' scratch and cuBLAS workspace */
        s.kernels = VR_KERNELS_CUDA;
        s.workspace_bytes = VR_CUDA_WORKSPACE_BYTES;
    }
    if ((st = vr_graph_build(&m, &s, &r->g)) || (st = vr_plan_create(r->g, &pc, &r->p)) ||
        (st = vr_exec_create(r->p, r->dev, &ec, &r->e)))
        return st;
    r->params = malloc(sizeof(float) * (size_t)r->g->n_params);
    r->tok = malloc(sizeof(int32_t) * (size_t)m.B * (size_t)m.T);
    r->tgt = malloc(sizeof(int32_t) * (size_t)m.B * (size_t)m.T);
    if (!r->params || !r->tok || !r->tgt)
        return vr_error(VR_ERR_OOM, "eval: out of host memory");
    if ((st = hf ? vr_hf_load_llama(o->init, &m.llama, r->params)
                 : vr_llmc_load(o->init, &lc, r->params, (size_t)r->g->n_params)) ||
        (st = vr_exec_write(r->e, r->g->params, r->params, sizeof(float) * (uint64_t)r->g->n_params)))
        return st;
    vr_data_config dc = vr_data_config_default(m.B, m.T);
    dc.kind = vr_data_kind_for(o->data);
    dc.path = o->data;
    dc.vocab = V;
    dc.split = o->split && !strcmp(o->split, "all") ? VR_SPLIT_ALL : VR_SPLIT_VAL;
    if ((st = vr_data_open(&dc, &r->d)))
        return st;
    int64_t per = (int64_t)vr_data_batches_per_epoch(r->d);
    *nb = o->batches && o->batches < per ? o->batches : per;
    double sum = 0;
    for (int64_t k = 0; k < *nb; k++) {
        vr_exec_batch b = {r->tok, r->tgt};
        vr_exec_result res;
        if ((st = vr_data_next(r->d, r->tok, r->tgt)) || (st = vr_exec_step(r->e, &b, NULL, &res)))
            return st;
        sum += res.loss;
    }
    *loss = sum / (double)*nb;
    return VR_OK;
}

static int cmd_eval(int argc, char **argv)
{
    eopts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    eval_run r;
    memset(&r, 0, sizeof r);
    double loss = NAN;
    int64_t nb = 0;
    vr_status st = run(&o, &r, &loss, &nb);
    if (st) {
        rc = vr_cli_fail("eval", st == VR_ERR_INVALID ? 2 : 1, "%s", vr_last_error());
        eval_free(&r);
        return rc;
    }
    vr_exec_memory mem;
    vr_exec_get_memory(r.e, &mem);
    char a[32], b[32];
    if (o.json) {
        printf("{\"loss\": %.6f, \"batches\": %lld, \"batch\": %lld, \"seq\": %lld, \"plan_peak\": %llu, "
               "\"run_peak\": %llu, \"arena\": %llu}\n",
               loss, (long long)nb, (long long)r.g->model.B, (long long)r.g->model.T,
               (unsigned long long)r.p->peak, (unsigned long long)mem.peak, (unsigned long long)mem.arena);
    } else {
        printf("eval      %s on %s (%s split): %lld batches of %d x %d tokens\n", o.init,
               o.data ? o.data : "the generated corpus", o.split ? o.split : "val", (long long)nb, r.g->model.B,
               r.g->model.T);
        printf("loss      %.6f\n", loss);
        printf("memory    no-grad step: planned peak %s, really live at peak %s\n", vr_format_size(r.p->peak, a, 32),
               vr_format_size(mem.peak, b, 32));
    }
    eval_free(&r);
    return 0;
}

const vr_cli_command vr_cli_eval = {
    "eval", "mean held-out loss of a checkpoint with the no-grad graph", cmd_eval, "--init CKPT [options]",
    "Mean cross-entropy of an llm.c GPT-2 checkpoint on data, with the no-grad graph (nothing\n"
    "saved for a backward pass).",
    eval_flags, sizeof(eopts)};
