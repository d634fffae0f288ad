/* vram graph — the Llama-family builder (Llama 3, Qwen2, SmolLM: HF LlamaForCausalLM / Qwen2ForCausalLM).
 *
 * Parameters, one flat buffer in HF order (W = (NH + 2 NKV) hd, element counts):
 *   embed_tokens (Vp,C)
 *   per layer l:  input_layernorm (C)
 *                 self_attn.q_proj (NH hd,C)  k_proj (NKV hd,C)  v_proj (NKV hd,C)   adjacent: qkv (W,C)
 *                 [q_proj.bias (NH hd)  k_proj.bias (NKV hd)  v_proj.bias (NKV hd)]  (qkv_bias only)
 *                 self_attn.o_proj (C,NH hd)
 *                 post_attention_layernorm (C)
 *                 mlp.gate_proj (I,C)  mlp.up_proj (I,C)                           adjacent: gate_up (2I,C)
 *                 mlp.down_proj (C,I)
 *   norm (C)
 *   lm_head (Vp,C)   (untied only; tied models use embed_tokens)
 * vr_llama_tensors lists each HF tensor with its offset (for loading safetensors). The graph's
 * parameter views fuse the adjacent ones: "layers.l.self_attn.qkv_proj" (W,C) (+ ".bias" (W)) and
 * "layers.l.mlp.gate_up_proj" (2I,C); the others carry the HF name without ".weight" — so
 * --freeze 'layers.*.mlp.*' and 'layers.*.self_attn.*' work (q, k, v alone cannot be frozen).
 * Init hints as HF: normal(0.02) matrices, ones for norms, zeros for biases.
 *
 * Forward, per layer l (x is the residual stream, (B,T,C)):
 *   h   = rmsnorm(x) * input_layernorm           (B,T,C) + rstd (B,T)
 *   qkv = h qkv^T (+ bias)                       (B,T,W)
 *   qkv = rope(qkv)   q and k heads rotated      (B,T,W)
 *   a   = attention(qkv), GQA, causal            (B,T,NH hd), lse (B,NH,T)
 *   res = x + a o_proj^T                          (B,T,C)
 *   h2  = rmsnorm(res) * post_attention_layernorm (B,T,C)
 *   gu  = h2 gate_up^T                            (B,T,2I)  [gate | up]
 *   m   = silu(gate) * up                         (B,T,I)
 *   x   = res + m down_proj^T                     (B,T,C)
 * then rmsnorm(x) * norm and the fused classifier over embed_tokens (tied) or lm_head gives the
 * losses (B,T). No position table: positions enter through rope only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct llama_preset {
    const char *name;
    vr_llama_config c;
    int T;
} llama_preset;

/* {L, C, NH, NKV, hd, I, V, Vp, maxT, eps, {theta, scaling, factor, low, high, orig}, tied, qkv_bias} */
static const llama_preset presets[] = {
    {"llama3.2-1b",
     {16, 2048, 32, 8, 64, 8192, 128256, 0, 131072, 1e-5f, {500000.0, 1, 32.0, 1.0, 4.0, 8192.0}, true, false},
     2048},
    {"llama3.2-3b",
     {28, 3072, 24, 8, 128, 8192, 128256, 0, 131072, 1e-5f, {500000.0, 1, 32.0, 1.0, 4.0, 8192.0}, true, false},
     2048},
    {"llama3.1-8b",
     {32, 4096, 32, 8, 128, 14336, 128256, 0, 131072, 1e-5f, {500000.0, 1, 8.0, 1.0, 4.0, 8192.0}, false, false},
     2048},
    {"smollm2-135m", {30, 576, 9, 3, 64, 1536, 49152, 0, 8192, 1e-5f, {100000.0, 0, 0, 0, 0, 0}, true, false}, 2048},
    {"smollm2-360m", {32, 960, 15, 5, 64, 2560, 49152, 0, 8192, 1e-5f, {100000.0, 0, 0, 0, 0, 0}, true, false}, 2048},
    {"qwen2.5-0.5b",
     {24, 896, 14, 2, 64, 4864, 151936, 0, 32768, 1e-6f, {1000000.0, 0, 0, 0, 0, 0}, true, true},
     2048},
    {"tiny", {2, 64, 4, 2, 16, 96, 300, 0, 64, 1e-5f, {10000.0, 0, 0, 0, 0, 0}, true, false}, 16},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *vr_llama_preset_names(void)
{
    return "llama3.2-1b, llama3.2-3b, llama3.1-8b, smollm2-135m, smollm2-360m, qwen2.5-0.5b, tiny";
}

vr_status vr_llama_preset(const char *name, vr_llama_config *out, int *T_default)
{
    for (int i = 0; i < NPRESETS; i++)
        if (name && !strcmp(name, presets[i].name)) {
            *out = presets[i].c;
            if (T_default)
                *T_default = presets[i].T;
            return VR_OK;
        }
    return vr_error(VR_ERR_INVALID, "vr_llama_preset: unknown Llama preset '%s' (one of %s)", name ? name : "",
                    vr_llama_preset_names());
}

vr_status vr_llama_config_check(vr_llama_config *c)
{
    if (c->L < 1)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.L: must be >= 1 (got %d)", c->L);
    if (c->C < 1)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.C: must be >= 1 (got %d)", c->C);
    if (c->NH < 1)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.NH: must be >= 1 (got %d)", c->NH);
    if (c->NKV < 1 || c->NH % c->NKV)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.NKV: %d does not divide the %d heads", c->NKV, c->NH);
    if (c->hd == 0) {
        if (c->C % c->NH)
            return vr_error(VR_ERR_INVALID, "vr_llama_config.hd: not given and %d heads do not divide %d channels",
                            c->NH, c->C);
        c->hd = c->C / c->NH;
    }
    if (c->hd < 2 || c->hd % 2 || c->hd > 1024)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.hd: must be even, 2..1024 (got %d)", c->hd);
    if (c->I < 1)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.I: must be >= 1 (got %d)", c->I);
    if (c->V < 1)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.V: must be >= 1 (got %d)", c->V);
    if (c->Vp == 0)
        c->Vp = (c->V + 127) / 128 * 128;
    if (c->Vp < c->V)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.Vp: %d is less than the vocabulary %d", c->Vp, c->V);
    if (c->maxT < 1)
        return vr_error(VR_ERR_INVALID, "vr_llama_config.maxT: must be >= 1 (got %d)", c->maxT);
    if (!(c->rms_eps > 0.0f))
        return vr_error(VR_ERR_INVALID, "vr_llama_config.rms_eps: must be > 0 (got %g)", (double)c->rms_eps);
    if (!(c->rope.theta > 0.0))
        return vr_error(VR_ERR_INVALID, "vr_llama_config.rope.theta: must be > 0 (got %g)", c->rope.theta);
    return VR_OK;
}

/* The HF tensors in buffer order (see the file comment); returns their number. */
int vr_llama_tensors(const vr_llama_config *cfg, vr_llama_tensor *out)
{
    vr_llama_config c = *cfg;
    if (!c.hd && c.NH > 0)
        c.hd = c.C / c.NH;
    if (!c.Vp)
        c.Vp = (c.V + 127) / 128 * 128;
    int64_t C = c.C, q = (int64_t)c.NH * c.hd, kv = (int64_t)c.NKV * c.hd, I = c.I, off = 0;
    int n = 0;
#define ADD(nm, r, k)                                                                 \
    do {                                                                              \
        if (out) {                                                                    \
            snprintf(out[n].name, sizeof out[n].name, "%s", nm);                      \
            out[n].offset = off, out[n].rows = (r), out[n].cols = (k);                \
        }                                                                             \
        n++, off += (int64_t)(r) * (k);                                               \
    } while (0)
    char nm[64];
    ADD("embed_tokens.weight", c.Vp, C);
    for (int l = 0; l < c.L; l++) {
        static const char *const attn[3] = {"q_proj", "k_proj", "v_proj"};
        static const char *const mlp[3] = {"gate_proj", "up_proj", "down_proj"};
        snprintf(nm, sizeof nm, "layers.%d.input_layernorm.weight", l);
        ADD(nm, C, 1);
        for (int k = 0; k < 3; k++) {
            snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, attn[k]);
            ADD(nm, k ? kv : q, C);
        }
        for (int k = 0; c.qkv_bias && k < 3; k++) {
            snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.bias", l, attn[k]);
            ADD(nm, k ? kv : q, 1);
        }
        snprintf(nm, sizeof nm, "layers.%d.self_attn.o_proj.weight", l);
        ADD(nm, C, q);
        snprintf(nm, sizeof nm, "layers.%d.post_attention_layernorm.weight", l);
        ADD(nm, C, 1);
        for (int k = 0; k < 3; k++) {
            snprintf(nm, sizeof nm, "layers.%d.mlp.%s.weight", l, mlp[k]);
            ADD(nm, k < 2 ? I : C, k < 2 ? C : I);
        }
    }
    ADD("norm.weight", C, 1);
    if (!c.tied)
        ADD("lm_head.weight", c.Vp, C);
#undef ADD
    return n;
}

int64_t vr_llama_num_params(const vr_llama_config *c)
{
    int n = vr_llama_tensors(c, NULL);
    vr_llama_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t)
        return -1;
    vr_llama_tensors(c, t);
    int64_t total = t[n - 1].offset + t[n - 1].rows * t[n - 1].cols;
    free(t);
    return total;
}

static int pv(vr_graph *g, const char *name, int64_t off, int64_t rows, int64_t cols, vr_init init, float scale)
{
    int64_t shape[2] = {rows, cols};
    return vr_graph_param(g, name, cols > 1 ? 2 : 1, shape, off, init, scale);
}

/* The parameter views of layer l; t points at the layer's first HF tensor (input_layernorm). */
typedef struct layer_params {
    int ln1, qkvw, qkvb, o, ln2, gu, down;
} layer_params;

static const vr_llama_tensor *layer_views(vr_graph *g, const vr_llama_config *c, const vr_llama_tensor *t, int l,
                                          layer_params *p)
{
    int64_t C = c->C, W = (int64_t)(c->NH + 2 * c->NKV) * c->hd;
    char nm[VR_NAME_MAX];
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm", l);
    p->ln1 = pv(g, nm, t[0].offset, C, 1, VR_INIT_ONES, 0);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_proj", l);
    p->qkvw = pv(g, nm, t[1].offset, W, C, VR_INIT_NORMAL, 0.02f);
    t += 4;
    p->qkvb = -1;
    if (c->qkv_bias) {
        snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_proj.bias", l);
        p->qkvb = pv(g, nm, t[0].offset, W, 1, VR_INIT_ZEROS, 0);
        t += 3;
    }
    snprintf(nm, sizeof nm, "layers.%d.self_attn.o_proj", l);
    p->o = pv(g, nm, t[0].offset, C, (int64_t)c->NH * c->hd, VR_INIT_NORMAL, 0.02f);
    snprintf(nm, sizeof nm, "layers.%d.post_attention_layernorm", l);
    p->ln2 = pv(g, nm, t[1].offset, C, 1, VR_INIT_ONES, 0);
    snprintf(nm, sizeof nm, "layers.%d.mlp.gate_up_proj", l);
    p->gu = pv(g, nm, t[2].offset, 2 * (int64_t)c->I, C, VR_INIT_NORMAL, 0.02f);
    snprintf(nm, sizeof nm, "layers.%d.mlp.down_proj", l);
    p->down = pv(g, nm, t[4].offset, C, c->I, VR_INIT_NORMAL, 0.02f);
    return t + 5;
}

vr_status vr_llama_forward(vr_graph *g, const vr_llama_config *cfg, int B, int T)
{
    vr_llama_config c = *cfg;
    vr_status st = vr_llama_config_check(&c);
    if (st)
        return g->err = st;
    if (B < 1)
        return g->err = vr_error(VR_ERR_INVALID, "vr_model_config.B: must be >= 1 (got %d)", B);
    if (T < 1 || T > c.maxT)
        return g->err = vr_error(VR_ERR_INVALID, "vr_model_config.T: %d is outside 1..%d (the model's maxT)", T,
                                 c.maxT);
    g->model.kind = VR_MODEL_LLAMA;
    g->model.llama = c;
    g->model.B = B;
    g->model.T = T;

    int n = vr_llama_tensors(&c, NULL);
    vr_llama_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t)
        return g->err = vr_error(VR_ERR_OOM, "graph: out of host memory");
    vr_llama_tensors(&c, t);
    vr_graph_param_buffer(g, t[n - 1].offset + t[n - 1].rows * t[n - 1].cols);
    int64_t C = c.C;
    int emb = pv(g, "embed_tokens", t[0].offset, c.Vp, C, VR_INIT_NORMAL, 0.02f);
    int64_t bt[2] = {B, T};
    g->tokens = vr_graph_tensor(g, "tokens", VR_I32, VR_ROLE_INPUT, 2, bt);
    g->targets = vr_graph_tensor(g, "targets", VR_I32, VR_ROLE_INPUT, 2, bt);
    int x = vr_graph_embedding(g, "embedded", g->tokens, emb, -1);
    const vr_llama_tensor *lt = t + 1;
    char nm[VR_NAME_MAX];
    for (int l = 0; l < c.L; l++) {
        layer_params p;
        lt = layer_views(g, &c, lt, l, &p);
        int n0 = g->n_nodes;
#define NM(s) (snprintf(nm, sizeof nm, "layers.%d.%s", l, s), nm)
        int h = vr_graph_rmsnorm(g, NM("ln1"), x, p.ln1, c.rms_eps, NULL);
        int qkv = vr_graph_linear(g, NM("qkv"), h, p.qkvw, p.qkvb);
        int qkvr = vr_graph_rope(g, NM("rope"), qkv, c.NH, c.NKV, &c.rope);
        int a = vr_graph_attention_gqa(g, NM("atty"), qkvr, c.NH, c.NKV, NULL);
        int o = vr_graph_linear(g, NM("o_proj"), a, p.o, -1);
        int res = vr_graph_add(g, NM("residual2"), x, o);
        int h2 = vr_graph_rmsnorm(g, NM("ln2"), res, p.ln2, c.rms_eps, NULL);
        int gu = vr_graph_linear(g, NM("gate_up"), h2, p.gu, -1);
        int m = vr_graph_swiglu(g, NM("swiglu"), gu);
        int d = vr_graph_linear(g, NM("down"), m, p.down, -1);
        x = vr_graph_add(g, NM("residual3"), res, d);
#undef NM
        for (int k = n0; k < g->n_nodes; k++)
            g->nodes[k].layer = l;
    }
    int normw = pv(g, "norm", lt[0].offset, C, 1, VR_INIT_ONES, 0);
    int head = c.tied ? emb : pv(g, "lm_head", lt[1].offset, c.Vp, C, VR_INIT_NORMAL, 0.02f);
    free(t);
    int xf = vr_graph_rmsnorm(g, "norm", x, normw, c.rms_eps, NULL);
    g->losses = vr_graph_classifier(g, "losses", xf, head, g->targets, c.V);
    return vr_graph_set_loss(g, g->losses);
}
