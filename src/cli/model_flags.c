/* vram command: the model and step flags, their table fragment and the configs they fill (see model_flags.h). */
#include "cli/model_flags.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/dist.h"
#include "vram/hf_config.h"
#include "vram/util.h"

bool vr_model_flags_shape_given(const vr_model_flags *f)
{
    return f->preset || f->sizes || f->layers || f->channels || f->heads || f->vocab || f->padded_vocab ||
           f->max_seq || f->kv_heads || f->head_dim || f->intermediate || f->rope_theta || f->rms_eps || f->tied ||
           f->qkv_bias || f->hf;
}

void vr_model_flags_hf_from_init(vr_model_flags *f, const char *init)
{
    if (init && !vr_model_flags_shape_given(f) && (!f->model || !strcmp(f->model, "llama")) && vr_hf_is_dir(init))
        f->hf = init;
}

static int parse_sizes(const char *cmd, const char *s, vr_mlp_config *m)
{
    m->n_sizes = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 30) || (*end && *end != ',') || m->n_sizes == VR_MLP_MAX_SIZES)
            return vr_cli_fail(cmd, 2, "--sizes: '%s' is not a list of 2..%d positive sizes like 784,256,10", s,
                               VR_MLP_MAX_SIZES);
        m->sizes[m->n_sizes++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return m->n_sizes < 2 ? vr_cli_fail(cmd, 2, "--sizes: '%s' needs at least 2 sizes", s) : 0;
}

static int configure_gpt(const char *cmd, const vr_model_flags *o, const vr_model_defaults *d, vr_model_config *m)
{
    m->kind = VR_MODEL_GPT;
    int T = 0;
    if (vr_gpt_preset(o->preset ? o->preset : d->gpt_preset, &m->gpt, &T))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    if (o->sizes || o->act)
        return vr_cli_fail(cmd, 2, "%s: only for --model mlp", o->sizes ? "--sizes" : "--act");
    if (o->layers) m->gpt.L = (int)o->layers;
    if (o->channels) m->gpt.C = (int)o->channels;
    if (o->heads) m->gpt.NH = (int)o->heads;
    if (o->vocab) {
        m->gpt.V = (int)o->vocab;
        m->gpt.Vp = 0;
    }
    if (o->padded_vocab) m->gpt.Vp = (int)o->padded_vocab;
    if (o->max_seq) m->gpt.maxT = (int)o->max_seq;
    m->T = o->seq ? (int)o->seq : d->seq ? d->seq : T;
    if (m->T > m->gpt.maxT && !o->max_seq)
        m->gpt.maxT = m->T;
    return 0;
}

/* --model llama: a preset (default "tiny") or a Hugging Face config (--hf), and shape flags over it. */
static int configure_llama(const char *cmd, const vr_model_flags *o, const vr_model_defaults *d, vr_model_config *m)
{
    m->kind = VR_MODEL_LLAMA;
    int T = 0;
    if (o->hf && o->preset)
        return vr_cli_fail(cmd, 2, "--hf and --preset: give one");
    if (o->hf) {
        vr_hf_config h;
        if (vr_hf_config_load(o->hf, &h) || vr_hf_to_llama(&h, o->hf, &m->llama))
            return vr_cli_fail(cmd, 2, "--hf: %s", vr_last_error());
        T = m->llama.maxT < 2048 ? m->llama.maxT : 2048;
    } else if (vr_llama_preset(o->preset ? o->preset : "tiny", &m->llama, &T)) {
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    }
    if (o->sizes || o->act)
        return vr_cli_fail(cmd, 2, "%s: only for --model mlp", o->sizes ? "--sizes" : "--act");
    vr_llama_config *c = &m->llama;
    if (o->layers) c->L = (int)o->layers;
    if (o->channels) c->C = (int)o->channels;
    if (o->heads) c->NH = (int)o->heads;
    if (o->kv_heads) c->NKV = (int)o->kv_heads;
    if (o->head_dim) c->hd = (int)o->head_dim;
    else if (o->channels || o->heads) c->hd = 0; /* C / NH */
    if (o->intermediate) c->I = (int)o->intermediate;
    if (o->vocab) {
        c->V = (int)o->vocab;
        c->Vp = 0;
    }
    if (o->padded_vocab) c->Vp = (int)o->padded_vocab;
    if (o->max_seq) c->maxT = (int)o->max_seq;
    if (o->rope_theta) c->rope.theta = o->rope_theta;
    if (o->rms_eps) c->rms_eps = (float)o->rms_eps;
    if (o->tied) c->tied = o->tied > 0;
    if (o->qkv_bias) c->qkv_bias = true;
    m->T = o->seq ? (int)o->seq : d->seq ? d->seq : T;
    if (m->T > c->maxT && !o->max_seq)
        c->maxT = m->T;
    if (vr_llama_config_check(c))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    return 0;
}

static int configure_mlp(const char *cmd, const vr_model_flags *o, const vr_model_defaults *d, vr_model_config *m)
{
    m->kind = VR_MODEL_MLP;
    if (vr_mlp_preset(o->preset ? o->preset : d->mlp_preset, &m->mlp))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    if (o->heads || o->padded_vocab || o->max_seq || o->seq)
        return vr_cli_fail(cmd, 2, "%s: only for --model gpt",
                           o->heads ? "--heads" : o->padded_vocab ? "--padded-vocab" : o->max_seq ? "--max-seq" : "--seq");
    if (o->sizes && parse_sizes(cmd, o->sizes, &m->mlp))
        return 2;
    if (o->layers || o->channels) { /* hidden layers x width, keeping input and classes */
        int in = m->mlp.sizes[0], out = m->mlp.sizes[m->mlp.n_sizes - 1];
        int width = o->channels ? (int)o->channels : m->mlp.sizes[1];
        int hidden = o->layers ? (int)o->layers : m->mlp.n_sizes - 2;
        if (hidden + 2 > VR_MLP_MAX_SIZES)
            return vr_cli_fail(cmd, 2, "--layers: at most %d hidden layers", VR_MLP_MAX_SIZES - 2);
        m->mlp.n_sizes = hidden + 2;
        m->mlp.sizes[0] = in;
        for (int i = 1; i <= hidden; i++)
            m->mlp.sizes[i] = width;
        m->mlp.sizes[hidden + 1] = out;
    }
    if (o->vocab)
        m->mlp.sizes[m->mlp.n_sizes - 1] = (int)o->vocab;
    if (o->act) /* relu|gelu (the table's choices) */
        m->mlp.act = !strcmp(o->act, "gelu") ? VR_OP_GELU : VR_OP_RELU;
    m->T = 1;
    return 0;
}

bool vr_model_flags_default_split(const vr_step_config *s)
{
    return s->train && vr_step_config_split_master_ok(s);
}

int vr_model_flags_configure(const char *cmd, const vr_model_flags *o, const vr_model_defaults *d,
                             vr_model_config *m, vr_step_config *s)
{
    memset(m, 0, sizeof *m);
    memset(s, 0, sizeof *s);
    if (o->hf && o->model && strcmp(o->model, "llama"))
        return vr_cli_fail(cmd, 2, "--hf: a Hugging Face config describes a Llama-family model, not --model %s",
                           o->model);
    bool llama = o->hf || (o->model && !strcmp(o->model, "llama"));
    bool gpt = !llama && (!o->model || !strcmp(o->model, "gpt")); /* else mlp: gpt|llama|mlp are the choices */
    if (!llama && (o->kv_heads || o->head_dim || o->intermediate || o->rope_theta || o->rms_eps || o->tied ||
                   o->qkv_bias))
        return vr_cli_fail(cmd, 2, "--kv-heads, --head-dim, --intermediate, --rope-theta, --rms-eps, --tied, "
                                   "--untied, --qkv-bias: only for --model llama");
    int rc = gpt ? configure_gpt(cmd, o, d, m) : llama ? configure_llama(cmd, o, d, m) : configure_mlp(cmd, o, d, m);
    if (rc)
        return rc;
    m->B = o->batch ? (int)o->batch : d->batch;
    s->train = !o->eval;
    s->accum = o->accum ? (int)o->accum : 1;
    s->optim = d->optim;
    if (o->optim && vr_optim_parse(o->optim, "--optim", &s->optim))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    if (o->recompute && vr_recompute_parse(o->recompute, "--recompute", &s->recompute))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    s->recompute_layers = (int)o->recompute_layers;
    s->norm_from_out = o->norm_backward && !strcmp(o->norm_backward, "output");
    s->classifier_rows = (int)o->classifier_rows;
    if (o->precision && vr_precision_parse(o->precision, "--precision", &s->precision))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    if (o->optim_state && vr_optim_state_parse(o->optim_state, "--optim-state", &s->optim_state))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    if (o->offload && vr_offload_parse(o->offload, "--offload", &s->offload))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    s->no_master = o->master && !strcmp(o->master, "none");
    /* by default a bf16 step keeps its master split (the same fp32 values in 2 bytes a weight less), except
     * where the update runs on the host (--offload optim keeps a full master there) */
    s->split_master = o->master ? !strcmp(o->master, "split") : vr_model_flags_default_split(s);
    if (o->attention) { /* v2|v1|v1-fwd|v1-bwd: vram's kernels (vram train picks the variant) */
        if (o->attention[0] == 'v' && o->attention[1] != 'r')
            s->attention = VR_ATTENTION_VRAM;
        else if (vr_attention_parse(o->attention, "--attention", &s->attention))
            return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    }
    s->freeze = o->freeze;
    s->grad_clip = (float)o->clip;
    s->world = (int)o->gpus;
    if (!s->world) /* under mpirun: its world (vr_cli_dist_setup checks it against MPI's own) */
        s->world = vr_comm_mpi_launched_size();
    s->zero = o->zero_given ? (int)o->zero : 0;
    if (vr_step_config_check(s))
        return vr_cli_fail(cmd, 2, "%s", vr_last_error());
    return 0;
}

/* ------------------------------------------------------------------ the table fragment */

/* "a|b|c": the library's names of an enum's values, from 0 until the name is "?". */
static const char *enum_choices(vr_flagset *fs, const char *(*name)(int), char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; strcmp(name(i), "?") && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "|" : "", name(i));
    return vr_flags_text(fs, "%s", buf);
}
static const char *optim_name(int i) { return vr_optim_name((vr_optim)i); }
static const char *recompute_name(int i) { return vr_recompute_name((vr_recompute)i); }
static const char *precision_name(int i) { return vr_precision_name((vr_precision)i); }
static const char *optim_state_name(int i) { return vr_optim_state_name((vr_optim_state)i); }
static const char *offload_name(int i) { return vr_offload_name((vr_offload)i); }

void vr_model_flags_add(vr_flagset *fs, vr_model_flags *f, const vr_model_defaults *d)
{
    char buf[256], seq[32] = "the preset's";
    if (d->seq)
        snprintf(seq, sizeof seq, "%d", d->seq);
    const long long most = 1 << 30;
    const vr_flag model[] = {
        VR_FLAG_HEADING_TEXT("model"),
        {"--model", VR_FLAG_CHOICE, &f->model, NULL, .choices = "gpt|llama|mlp", .help = "model family (gpt)"},
        {"--preset", VR_FLAG_STRING, &f->preset, "NAME",
         .help = vr_flags_text(fs, "gpt: %s (%s);\nmlp: %s (%s);\nllama: %s (tiny)", vr_gpt_preset_names(),
                               d->gpt_preset, vr_mlp_preset_names(), d->mlp_preset, vr_llama_preset_names())},
        {"--hf", VR_FLAG_STRING, &f->hf, "DIR|config.json", .nonempty = true,
         .help = "llama: the shape of a Hugging Face model (llama, qwen2, mistral) from its config"},
        {"--layers", VR_FLAG_INT, &f->layers, "N", .lo = 1, .hi = most,
         .help = "transformer blocks (gpt, llama); mlp: hidden layers"},
        {"--channels", VR_FLAG_INT, &f->channels, "N", .lo = 1, .hi = most,
         .help = "hidden size (gpt, llama); mlp: the width of the hidden layers"},
        {"--heads", VR_FLAG_INT, &f->heads, "N", .lo = 1, .hi = most, .help = "attention heads (gpt, llama)"},
        {"--vocab", VR_FLAG_INT, &f->vocab, "N", .lo = 1, .hi = most,
         .help = "vocabulary (gpt, llama); mlp: classes"},
        {"--padded-vocab", VR_FLAG_INT, &f->padded_vocab, "N", .lo = 1, .hi = most,
         .help = "rows of the embedding (gpt, llama; the vocabulary rounded up to 128)"},
        {"--max-seq", VR_FLAG_INT, &f->max_seq, "N", .lo = 1, .hi = most, .help = "longest sequence (gpt, llama)"},
        {"--kv-heads", VR_FLAG_INT, &f->kv_heads, "N", .lo = 1, .hi = most,
         .help = "llama: key and value heads (grouped-query attention; they divide --heads)"},
        {"--head-dim", VR_FLAG_INT, &f->head_dim, "N", .lo = 1, .hi = most,
         .help = "llama: the width of a head (channels / heads)"},
        {"--intermediate", VR_FLAG_INT, &f->intermediate, "N", .lo = 1, .hi = most, .help = "llama: MLP width"},
        {"--rope-theta", VR_FLAG_DOUBLE, &f->rope_theta, "X", .min = 0, .max = DBL_MAX, .above = true,
         .help = "llama: the base of the rotary embedding"},
        {"--rms-eps", VR_FLAG_DOUBLE, &f->rms_eps, "X", .min = 0, .max = DBL_MAX, .above = true,
         .help = "llama: RMSNorm epsilon"},
        {"--tied", VR_FLAG_CONST, &f->tied, NULL, .lo = 1, .help = "llama: the output layer is the token embedding"},
        {"--untied", VR_FLAG_CONST, &f->tied, NULL, .lo = -1, .help = "llama: an output layer of its own"},
        {"--qkv-bias", VR_FLAG_SWITCH, &f->qkv_bias, NULL, .help = "llama: q, k, v projections have biases (Qwen2)"},
        {"--sizes", VR_FLAG_STRING, &f->sizes, "A,B,...,Z", .help = "mlp: every layer's size, input to classes"},
        {"--act", VR_FLAG_CHOICE, &f->act, NULL, .choices = "relu|gelu", .help = "mlp: the activation (relu)"},
        {.name = "", .kind = VR_FLAG_HEADING, .help = d->step_heading ? d->step_heading : "step"},
        {"--batch", VR_FLAG_INT, &f->batch, "N", .lo = 1, .hi = most,
         .help = vr_flags_text(fs, "micro-batch rows (%d)", d->batch)},
        {"--seq", VR_FLAG_INT, &f->seq, "N", .lo = 1, .hi = most,
         .help = vr_flags_text(fs, "sequence length (%s)", seq)},
        {"--accum", VR_FLAG_INT, &f->accum, "N", .lo = 1, .hi = most, .help = "micro-batches per optimizer step (1)"},
        {"--optim", VR_FLAG_CHOICE, &f->optim, NULL, .choices = enum_choices(fs, optim_name, buf, sizeof buf),
         .help = vr_flags_text(fs, "(%s)", vr_optim_name(d->optim))},
        {"--recompute", VR_FLAG_CHOICE, &f->recompute, NULL,
         .choices = enum_choices(fs, recompute_name, buf, sizeof buf), .help = "activation checkpointing (none)"},
        {"--recompute-layers", VR_FLAG_INT, &f->recompute_layers, "N", .lo = 1, .hi = most,
         .help = "--recompute's policy in the first N blocks only (every block)"},
        {"--norm-backward", VR_FLAG_CHOICE, &f->norm_backward, NULL, .choices = "input|output",
         .help = "what the LayerNorm/RMSNorm backward reads: the norm's input (kept for it),\n"
                 "or its output (x-hat = (y - b) / w), the input then not kept: GPT-2 saves 2\n"
                 "of its 16 C values a token and block less; a weight at 0 gets no gradient (input)"},
        {"--classifier-rows", VR_FLAG_INT, &f->classifier_rows, "N", .lo = 1, .hi = most,
         .help = "CUDA: rows of logits in each chunk of the fused classifier (4096, fewer\n"
                 "where those take over 512 MiB): fewer rows, less memory where the\n"
                 "classifier sets the peak, smaller products"},
        {"--freeze", VR_FLAG_STRING, &f->freeze, "GLOBS",
         .help = "comma-separated globs over parameter names ('h.*.attn*,wte')"},
        {"--precision", VR_FLAG_CHOICE, &f->precision, NULL,
         .choices = enum_choices(fs, precision_name, buf, sizeof buf), .help = "(fp32)"},
        {"--optim-state", VR_FLAG_CHOICE, &f->optim_state, NULL,
         .choices = enum_choices(fs, optim_state_name, buf, sizeof buf),
         .help = "Adam/momentum state: fp32, bf16 (stochastic rounding) or\n8-bit block-wise (tensors under "
                 "4096 elements stay fp32) (fp32)"},
        {"--master", VR_FLAG_CHOICE, &f->master, NULL, .choices = "fp32|split|none",
         .help = "bf16: an fp32 master copy of the weights (4 bytes a weight); split: the same\n"
                 "fp32 values as the bf16 weights (their high half) + 16 low bits (2 bytes);\n"
                 "none: no master, stochastic rounding (split; fp32 with --offload optim or\n"
                 "fp16; a resumed training state: the master it was saved with)"},
        {"--offload", VR_FLAG_CHOICE, &f->offload, NULL, .choices = enum_choices(fs, offload_name, buf, sizeof buf),
         .help = "optim: fp32 master and optimizer state in pinned host memory, the update\n"
                 "run by the host while the backward goes on (none)"},
        {"--attention", VR_FLAG_CHOICE, &f->attention, NULL, .choices = "auto|cudnn|vram|v2|v1|v1-fwd|v1-bwd",
         .help = "CUDA attention kernels: cuDNN's fused flash attention where libcudnn.so.9\n"
                 "loads and takes the shape (bf16/fp16, head size a multiple of 8 up to 128),\n"
                 "else vram's (auto); cudnn: cuDNN's or an error; vram (= v2): vram's own;\n"
                 "v1|v1-fwd|v1-bwd: vram's first kernels (deterministic backward), in either\n"
                 "direction or one [vram train: VRAM_ATTN_V1=1|fwd|bwd]"},
        {"--clip", VR_FLAG_DOUBLE, &f->clip, "X", .min = 0, .max = DBL_MAX, .above = true,
         .help = "clip gradients to global norm X"},
        {"--gpus", VR_FLAG_INT, &f->gpus, "N", .lo = 1, .hi = most,
         .help = "data parallel over N GPUs of this host, one process each (mpirun -np N: CPU\n"
                 "ranks); --batch is per GPU"},
        {"--zero", VR_FLAG_INT, &f->zero, "0|1|2|3", .lo = 0, .hi = 3, .given = &f->zero_given,
         .help = "0: gradients all-reduced; 1: + master and optimizer state sharded over the\n"
                 "ranks; 2: + gradients reduced to their owner only; 3: + weights held by their\n"
                 "owner only, gathered before each use (0)"},
    };
    VR_FLAGS_ADD(fs, model);
    if (d->eval) {
        const vr_flag eval[] = {
            {"--eval", VR_FLAG_SWITCH, &f->eval, NULL, .help = "no-grad evaluation step (forward only, nothing saved)"},
        };
        VR_FLAGS_ADD(fs, eval);
    }
}
