/* vram plan: where every byte of one training step goes, before it runs.
 *
 *   vram plan [--model gpt|mlp] [--preset NAME] [model flags] [--batch N] [--accum N]
 *             [--optim ...] [--recompute ...] [--freeze GLOBS] [--precision ...]
 *             [--memory planned|dynamic] [--device meta|cpu|cuda[:N]] [--capacity SIZE]
 *             [--eval] [--timeline] [--json]
 *
 * Builds the step graph (vram/graph.h), plans it (vram/plan.h) and prints the
 * bytes per role, the peak, the arena, and whether it fits the capacity with
 * the CUDA context set aside. Every bad flag: one line naming it, exit 2. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/device.h"
#include "vram/graph.h"
#include "vram/plan.h"
#include "vram/util.h"

/* The CUDA context when it cannot be measured: DESIGN.md's figure (PyTorch on an H100). */
#define CONTEXT_ESTIMATE (527 * VR_MiB)
/* The library workspace on cuda (cuBLAS: 32 MiB in PyTorch). */
#define CUDA_WORKSPACE (32 * VR_MiB)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vram plan [options]\n\n"
            "Plans one training step and says where every byte goes (params, master weights, grads,\n"
            "optimizer state, inputs, activations, temporaries), the peak, and whether it fits.\n\n"
            "model\n"
            "  --model gpt|mlp          model family (gpt)\n"
            "  --preset NAME            gpt: %s (gpt2); mlp: %s (mnist)\n"
            "  --layers N --channels N --heads N --vocab N --padded-vocab N --max-seq N   (gpt)\n"
            "  --sizes A,B,...,Z --act relu|gelu                                          (mlp)\n"
            "  --layers N --channels N (mlp: hidden layers and width) --vocab N (mlp: classes)\n"
            "step\n"
            "  --batch N                micro-batch rows (8)\n"
            "  --seq N                  sequence length (the preset's)\n"
            "  --accum N                micro-batches per optimizer step (1)\n"
            "  --optim sgd|momentum|adam|adamw|none   (adamw)\n"
            "  --recompute none|block|selective       activation checkpointing (none)\n"
            "  --freeze GLOBS           comma-separated globs over parameter names ('h.*.attn*,wte')\n"
            "  --precision fp32|bf16|fp16             (fp32)\n"
            "  --clip X                 clip gradients to global norm X (adds the norm nodes)\n"
            "  --eval                   no-grad evaluation step (forward only, nothing saved)\n"
            "memory\n"
            "  --memory planned|dynamic static arena, or also replay through the caching allocator\n"
            "  --policy NAME            allocator policy in dynamic mode (pytorch)\n"
            "  --device SPEC            meta, meta:SIZE, cpu, cpu:SIZE, cuda, cuda:N (meta)\n"
            "  --capacity SIZE          device memory to fit in (e.g. 80GiB); cuda: the GPU's total\n"
            "  --context SIZE           CUDA context to set aside (cuda: measured, else 527MiB)\n"
            "output\n"
            "  --timeline               live bytes per role after each node\n"
            "  --graph                  list the nodes with their tensors' shapes\n"
            "  --json                   machine-readable output\n",
            vr_gpt_preset_names(), vr_mlp_preset_names());
}

typedef struct opts {
    const char *model, *preset, *sizes, *act, *optim, *recompute, *freeze, *precision, *memory, *policy, *device;
    long long layers, channels, heads, vocab, padded_vocab, max_seq, seq, batch, accum;
    double clip;
    uint64_t capacity, context;
    bool has_capacity, has_context, eval, timeline, json, graph;
} opts;

static int bad(const char *msg) { return vr_cli_fail("plan", 2, "%s", msg); }

static int parse_ll(const char *flag, const char *v, long long lo, long long hi, long long *out)
{
    return vr_parse_int(v, flag, lo, hi, out) == VR_OK ? 0 : bad(vr_last_error());
}

static int parse_args(int argc, char **argv, opts *o)
{
    static const char *str_flags[] = {"--model", "--preset", "--sizes", "--act", "--optim", "--recompute",
                                      "--freeze", "--precision", "--memory", "--policy", "--device"};
    static const char *int_flags[] = {"--layers", "--channels", "--heads", "--vocab", "--padded-vocab",
                                      "--max-seq", "--seq", "--batch", "--accum"};
    const char **str_dst[] = {&o->model, &o->preset, &o->sizes, &o->act, &o->optim, &o->recompute,
                              &o->freeze, &o->precision, &o->memory, &o->policy, &o->device};
    long long *int_dst[] = {&o->layers, &o->channels, &o->heads, &o->vocab, &o->padded_vocab,
                            &o->max_seq, &o->seq, &o->batch, &o->accum};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--eval") || !strcmp(a, "--timeline") || !strcmp(a, "--json") || !strcmp(a, "--graph")) {
            *(a[2] == 'e' ? &o->eval : a[2] == 't' ? &o->timeline : a[2] == 'j' ? &o->json : &o->graph) = true;
            continue;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof str_flags / sizeof *str_flags; k++)
            known |= !strcmp(a, str_flags[k]);
        for (size_t k = 0; k < sizeof int_flags / sizeof *int_flags; k++)
            known |= !strcmp(a, int_flags[k]);
        known |= !strcmp(a, "--capacity") || !strcmp(a, "--context") || !strcmp(a, "--clip");
        if (!known)
            return vr_cli_fail("plan", 2, "unknown flag '%s' (see vram plan --help)", a);
        if (i + 1 >= argc)
            return vr_cli_fail("plan", 2, "%s needs a value", a);
        const char *v = argv[++i];
        for (size_t k = 0; k < sizeof str_flags / sizeof *str_flags; k++)
            if (!strcmp(a, str_flags[k]))
                *str_dst[k] = v;
        for (size_t k = 0; k < sizeof int_flags / sizeof *int_flags; k++)
            if (!strcmp(a, int_flags[k]) && parse_ll(a, v, 1, 1 << 30, int_dst[k]))
                return 2;
        if (!strcmp(a, "--capacity") || !strcmp(a, "--context")) {
            bool cap = a[3] == 'a';
            if (vr_parse_size(v, a, cap ? &o->capacity : &o->context) != VR_OK)
                return bad(vr_last_error());
            *(cap ? &o->has_capacity : &o->has_context) = true;
        }
        if (!strcmp(a, "--clip")) {
            char *end;
            o->clip = strtod(v, &end);
            if (end == v || *end || !(o->clip > 0))
                return vr_cli_fail("plan", 2, "--clip: '%s' is not a positive number", v);
        }
    }
    return 0;
}

static int parse_sizes(const char *s, vr_mlp_config *m)
{
    m->n_sizes = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 30) || (*end && *end != ',') || m->n_sizes == VR_MLP_MAX_SIZES)
            return vr_cli_fail("plan", 2, "--sizes: '%s' is not a list of 2..%d positive sizes like 784,256,10", s,
                               VR_MLP_MAX_SIZES);
        m->sizes[m->n_sizes++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return m->n_sizes < 2 ? vr_cli_fail("plan", 2, "--sizes: '%s' needs at least 2 sizes", s) : 0;
}

/* Fills the model and step configs from the options; 2 after a usage error. */
static int configure(const opts *o, vr_model_config *m, vr_step_config *s)
{
    memset(m, 0, sizeof *m);
    memset(s, 0, sizeof *s);
    bool gpt = !o->model || !strcmp(o->model, "gpt");
    if (!gpt && strcmp(o->model, "mlp"))
        return vr_cli_fail("plan", 2, "--model: '%s' is not one of gpt|mlp", o->model);
    if (gpt) {
        m->kind = VR_MODEL_GPT;
        int T = 0;
        if (vr_gpt_preset(o->preset ? o->preset : "gpt2", &m->gpt, &T))
            return bad(vr_last_error());
        if (o->sizes || o->act)
            return vr_cli_fail("plan", 2, "%s: only for --model mlp", o->sizes ? "--sizes" : "--act");
        if (o->layers) m->gpt.L = (int)o->layers;
        if (o->channels) m->gpt.C = (int)o->channels;
        if (o->heads) m->gpt.NH = (int)o->heads;
        if (o->vocab) {
            m->gpt.V = (int)o->vocab;
            m->gpt.Vp = 0;
        }
        if (o->padded_vocab) m->gpt.Vp = (int)o->padded_vocab;
        if (o->max_seq) m->gpt.maxT = (int)o->max_seq;
        m->T = o->seq ? (int)o->seq : T;
        if (m->T > m->gpt.maxT && !o->max_seq)
            m->gpt.maxT = m->T;
    } else {
        m->kind = VR_MODEL_MLP;
        if (vr_mlp_preset(o->preset ? o->preset : "mnist", &m->mlp))
            return bad(vr_last_error());
        if (o->heads || o->padded_vocab || o->max_seq || o->seq)
            return vr_cli_fail("plan", 2, "%s: only for --model gpt",
                               o->heads ? "--heads" : o->padded_vocab ? "--padded-vocab" : o->max_seq ? "--max-seq" : "--seq");
        if (o->sizes && parse_sizes(o->sizes, &m->mlp))
            return 2;
        if (o->layers || o->channels) { /* hidden layers x width, keeping input and classes */
            int in = m->mlp.sizes[0], out = m->mlp.sizes[m->mlp.n_sizes - 1];
            int width = o->channels ? (int)o->channels : m->mlp.sizes[1];
            int hidden = o->layers ? (int)o->layers : m->mlp.n_sizes - 2;
            if (hidden + 2 > VR_MLP_MAX_SIZES)
                return vr_cli_fail("plan", 2, "--layers: at most %d hidden layers", VR_MLP_MAX_SIZES - 2);
            m->mlp.n_sizes = hidden + 2;
            m->mlp.sizes[0] = in;
            for (int i = 1; i <= hidden; i++)
                m->mlp.sizes[i] = width;
            m->mlp.sizes[hidden + 1] = out;
        }
        if (o->vocab)
            m->mlp.sizes[m->mlp.n_sizes - 1] = (int)o->vocab;
        if (o->act) {
            if (!strcmp(o->act, "relu"))
                m->mlp.act = VR_OP_RELU;
            else if (!strcmp(o->act, "gelu"))
                m->mlp.act = VR_OP_GELU;
            else
                return vr_cli_fail("plan", 2, "--act: '%s' is not one of relu|gelu", o->act);
        }
        m->T = 1;
    }
    m->B = o->batch ? (int)o->batch : 8;
    s->train = !o->eval;
    s->accum = o->accum ? (int)o->accum : 1;
    s->optim = VR_OPTIM_ADAMW;
    if (o->optim && vr_optim_parse(o->optim, "--optim", &s->optim))
        return bad(vr_last_error());
    if (o->recompute && vr_recompute_parse(o->recompute, "--recompute", &s->recompute))
        return bad(vr_last_error());
    if (o->precision && vr_precision_parse(o->precision, "--precision", &s->precision))
        return bad(vr_last_error());
    s->freeze = o->freeze;
    s->grad_clip = (float)o->clip;
    return 0;
}

/* Device, capacity and context. */
typedef struct target {
    char spec[64];
    bool cuda;
    uint64_t capacity; /* 0: none given */
    uint64_t context;
    const char *context_how;
} target;

static int resolve_device(const opts *o, target *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->spec, sizeof t->spec, "%s", o->device ? o->device : "meta");
    const char *colon = strchr(t->spec, ':');
    size_t kind = colon ? (size_t)(colon - t->spec) : strlen(t->spec);
    if ((kind == 4 && !strncmp(t->spec, "meta", 4)) || (kind == 3 && !strncmp(t->spec, "cpu", 3))) {
        if (colon && vr_parse_size(colon + 1, "--device", &t->capacity) != VR_OK)
            return bad(vr_last_error());
        t->context_how = kind == 4 ? "none (meta device: address space only)" : "none (host memory)";
    } else if (kind == 4 && !strncmp(t->spec, "cuda", 4)) {
        long long idx = 0;
        if (colon && vr_parse_int(colon + 1, "--device", 0, 1024, &idx) != VR_OK)
            return bad(vr_last_error());
        t->cuda = true;
        vr_cuda_info info;
        if (vr_cuda_device_info((int)idx, &info) == VR_OK)
            t->capacity = info.total;
        uint64_t cost = 0;
        if (o->has_context) {
            t->context = o->context;
            t->context_how = "as given";
        } else if (vr_cuda_context_cost((int)idx, &cost) == VR_OK && cost > 0) {
            t->context = cost;
            t->context_how = "measured";
        } else {
            t->context = CONTEXT_ESTIMATE;
            t->context_how = "estimate (527 MiB measured with PyTorch on an H100; no GPU to measure here)";
        }
    } else {
        return vr_cli_fail("plan", 2, "--device: '%s' is not one of meta, meta:SIZE, cpu, cpu:SIZE, cuda, cuda:N",
                           t->spec);
    }
    if (o->has_capacity)
        t->capacity = o->capacity;
    if (o->has_context && !t->cuda)
        t->context = o->context, t->context_how = "as given";
    return 0;
}

int vr_cmd_plan(int argc, char **argv)
{
    opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    vr_model_config m;
    vr_step_config s;
    target t;
    if ((rc = configure(&o, &m, &s)) || (rc = resolve_device(&o, &t)))
        return rc;
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED, .alloc_policy = o.policy};
    if (o.memory && !strcmp(o.memory, "dynamic"))
        pc.memory = VR_MEMORY_DYNAMIC;
    else if (o.memory && strcmp(o.memory, "planned"))
        return vr_cli_fail("plan", 2, "--memory: '%s' is not one of planned|dynamic", o.memory);
    if (o.policy && pc.memory != VR_MEMORY_DYNAMIC)
        return vr_cli_fail("plan", 2, "--policy: only with --memory dynamic");
    if (t.cuda)
        s.workspace_bytes = CUDA_WORKSPACE;
    pc.capacity = t.capacity > t.context ? t.capacity - t.context : t.capacity ? 1 : 0;

    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g) != VR_OK)
        return bad(vr_last_error());
    vr_plan *p = NULL;
    if (vr_plan_create(g, &pc, &p) != VR_OK) {
        int r = vr_cli_fail("plan", strstr(vr_last_error(), "policy") ? 2 : 1, "%s", vr_last_error());
        vr_graph_free(g);
        return r;
    }
    uint64_t need = (p->has_dynamic ? p->dynamic.peak_reserved : p->arena_size) + t.context;
    bool fits = t.capacity ? need <= t.capacity && (!p->has_dynamic || p->dynamic.status == VR_OK) : true;
    char a[32], b[32], c[32];
    if (o.json) {
        char *js = vr_plan_json(p, o.timeline);
        cJSON *root = js ? cJSON_Parse(js) : NULL;
        free(js);
        if (!root) {
            vr_plan_free(p);
            vr_graph_free(g);
            return vr_cli_fail("plan", 1, "could not build the JSON output");
        }
        cJSON *d = cJSON_AddObjectToObject(root, "device");
        cJSON_AddStringToObject(d, "spec", t.spec);
        cJSON_AddNumberToObject(d, "context", (double)t.context);
        cJSON_AddStringToObject(d, "context_source", t.context_how);
        cJSON_AddNumberToObject(d, "capacity", (double)t.capacity);
        cJSON_AddNumberToObject(d, "need", (double)need);
        cJSON_AddBoolToObject(d, "fits", fits);
        char *out = cJSON_Print(root);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(root);
    } else {
        if (o.graph) {
            vr_graph_print(g, stdout);
            printf("\n");
        }
        vr_plan_print(p, stdout, o.timeline);
        printf("device    %s; CUDA context %s%s%s\n", t.spec, t.context ? vr_format_size(t.context, a, sizeof a) : "",
               t.context ? ", " : "", t.context_how);
        if (t.cuda)
            printf("          library workspace %s (cuBLAS) counted as temp\n",
                   vr_format_size(CUDA_WORKSPACE, a, sizeof a));
        printf("need      %s = %s %s + context %s\n", vr_format_size(need, a, sizeof a),
               p->has_dynamic ? "peak reserved" : "arena", vr_format_size(need - t.context, b, sizeof b),
               vr_format_size(t.context, c, sizeof c));
        if (t.capacity)
            printf("capacity  %s: %s (%s %s)\n", vr_format_size(t.capacity, a, sizeof a),
                   fits ? "fits" : "DOES NOT FIT", fits ? "headroom" : "short by",
                   vr_format_size(fits ? t.capacity - need : need - t.capacity, b, sizeof b));
        else
            printf("capacity  none given (--capacity SIZE to check a fit)\n");
    }
    vr_plan_free(p);
    vr_graph_free(g);
    return 0;
}
