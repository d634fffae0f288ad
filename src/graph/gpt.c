/* vram graph — the GPT-2 builder (llm.c's train_gpt2.c architecture).
 *
 * Parameters, one flat buffer in llm.c's order (element counts):
 *   wte (Vp,C)  wpe (maxT,C)  ln1w (L,C)  ln1b (L,C)  qkvw (L,3C,C)  qkvb (L,3C)
 *   attprojw (L,C,C)  attprojb (L,C)  ln2w (L,C)  ln2b (L,C)  fcw (L,4C,C)  fcb (L,4C)
 *   fcprojw (L,C,4C)  fcprojb (L,C)  lnfw (C)  lnfb (C)
 * Layer l of a stacked tensor is the slice at base + l * (size of one layer),
 * exposed as a parameter view named like Hugging Face's GPT-2 ("h.3.attn.c_attn.w").
 *
 * Vocabulary: V is the real vocabulary, Vp the rows of wte. The gpt2 presets
 * pad 50257 to 50304 (a multiple of 128) like llm.c, so llm.c's v3 checkpoints
 * load as they are; the padded rows are parameters (counted, with gradients and
 * optimizer state) that the classifier never reads: their gradient stays 0.
 * With Vp = V = 50257 the count is GPT-2's 124,439,808.
 *
 * Forward, per block l (x is the residual stream, (B,T,C)):
 *   ln1 = layernorm(x)        (B,T,C) + mean, rstd (B,T)
 *   qkv = ln1 qkvw^T + qkvb   (B,T,3C)
 *   atty, lse = attention(qkv) (B,T,C), (B,NH,T)   causal, fused, no (T,T) matrix
 *   attproj = atty attprojw^T + attprojb   (B,T,C)
 *   residual2 = x + attproj
 *   ln2 = layernorm(residual2)
 *   fch = ln2 fcw^T + fcb     (B,T,4C)
 *   fch_gelu = gelu(fch)      (B,T,4C)
 *   fcproj = fch_gelu fcprojw^T + fcprojb  (B,T,C)
 *   x = residual3 = residual2 + fcproj
 * then lnf = layernorm(x) and the fused classifier (tied to wte) gives losses (B,T). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "vram/util.h"

typedef struct gpt_preset {
    const char *name;
    vr_gpt_config c;
    int T;
} gpt_preset;

static const gpt_preset presets[] = {
    {"gpt2", {12, 768, 12, 50257, 50304, 1024}, 1024},
    {"gpt2-medium", {24, 1024, 16, 50257, 50304, 1024}, 1024},
    {"gpt2-large", {36, 1280, 20, 50257, 50304, 1024}, 1024},
    {"gpt2-xl", {48, 1600, 25, 50257, 50304, 1024}, 1024},
    {"small", {4, 256, 4, 256, 256, 256}, 256},
    {"tiny", {2, 64, 4, 256, 256, 64}, 64},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *vr_gpt_preset_names(void) { return "gpt2, gpt2-medium, gpt2-large, gpt2-xl, small, tiny"; }

vr_status vr_gpt_preset(const char *name, vr_gpt_config *out, int *T_default)
{
    for (int i = 0; i < NPRESETS; i++)
        if (name && !strcmp(name, presets[i].name)) {
            *out = presets[i].c;
            if (T_default)
                *T_default = presets[i].T;
            return VR_OK;
        }
    return vr_error(VR_ERR_INVALID, "vr_gpt_preset: unknown GPT preset '%s' (one of %s)", name ? name : "",
                    vr_gpt_preset_names());
}

vr_status vr_gpt_config_check(vr_gpt_config *c)
{
    if (c->L < 1)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.L: must be >= 1 (got %d)", c->L);
    if (c->C < 1)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.C: must be >= 1 (got %d)", c->C);
    if (c->NH < 1 || c->C % c->NH)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.NH: %d does not divide the %d channels", c->NH, c->C);
    if (c->V < 1)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.V: must be >= 1 (got %d)", c->V);
    if (c->V > 2147483647 - 127)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.V: %d is too large", c->V);
    if (c->Vp == 0)
        c->Vp = (c->V + 127) / 128 * 128;
    if (c->Vp < c->V)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.Vp: %d is less than the vocabulary %d", c->Vp, c->V);
    if (c->maxT < 1)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.maxT: must be >= 1 (got %d)", c->maxT);
    if (c->L > VR_GPT_MAX_LAYERS)
        return vr_error(VR_ERR_INVALID, "vr_gpt_config.L: %d is above the limit %d", c->L, VR_GPT_MAX_LAYERS);
    int64_t n;
    if (!vr_gpt_num_params_checked(c, &n))
        return vr_error(VR_ERR_INVALID, "gpt config: the parameter count of layers %d, channels %d, vocab %d, "
                        "max-seq %d overflows 64 bits", c->L, c->C, c->Vp, c->maxT);
    return VR_OK;
}

bool vr_gpt_num_params_checked(const vr_gpt_config *c, int64_t *n)
{
    /* rows of each block times C, times 4 bytes, and their sum: every product checked */
    int64_t C = c->C, L = c->L, Vp = c->Vp ? c->Vp : ((int64_t)c->V + 127) / 128 * 128, total = 0, s, r;
    const int64_t rows[16][2] = {{Vp, 1}, {c->maxT, 1}, {L, 1}, {L, 1}, {L, 3 * C}, {L, 3}, {L, C}, {L, 1},
                                 {L, 1}, {L, 1}, {L, 4 * C}, {L, 4}, {L, 4 * C}, {L, 1}, {1, 1}, {1, 1}};
    for (int i = 0; i < 16; i++)
        if (!vr_mul_i64(rows[i][0], rows[i][1], &r) || !vr_mul_i64(r, C, &s) || !vr_mul_i64(s, 4, &s) ||
            !vr_add_i64(total, s, &total))
            return false;
    *n = total / 4;
    return true;
}

void vr_gpt_param_sizes(const vr_gpt_config *c, int64_t s[16])
{
    /* Unsigned products: an llm.c header's fields (up to 2^24 each) wrap rather than overflow. */
    uint64_t L = (uint64_t)c->L, C = (uint64_t)c->C, Vp = (uint64_t)(c->Vp ? c->Vp : (c->V + 127) / 128 * 128);
    s[0] = Vp * C;       /* wte */
    s[1] = c->maxT * C;  /* wpe */
    s[2] = L * C;        /* ln1w */
    s[3] = L * C;        /* ln1b */
    s[4] = L * 3 * C * C; /* qkvw */
    s[5] = L * 3 * C;    /* qkvb */
    s[6] = L * C * C;    /* attprojw */
    s[7] = L * C;        /* attprojb */
    s[8] = L * C;        /* ln2w */
    s[9] = L * C;        /* ln2b */
    s[10] = L * 4 * C * C; /* fcw */
    s[11] = L * 4 * C;   /* fcb */
    s[12] = L * C * 4 * C; /* fcprojw */
    s[13] = L * C;       /* fcprojb */
    s[14] = C;           /* lnfw */
    s[15] = C;           /* lnfb */
}

int64_t vr_gpt_num_params(const vr_gpt_config *c)
{
    int64_t s[16], n = 0;
    vr_gpt_param_sizes(c, s);
    for (int i = 0; i < 16; i++)
        n += s[i];
    return n;
}

/* The parameter views of one block. */
typedef struct block_params {
    int ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
} block_params;

static int pv(vr_graph *g, const char *name, int64_t off, int ndim, int64_t d0, int64_t d1, vr_init init,
              float scale)
{
    int64_t shape[2] = {d0, d1};
    return vr_graph_param(g, name, ndim, shape, off, init, scale);
}

static void block_views(vr_graph *g, const vr_gpt_config *c, const int64_t base[16], int l, block_params *p)
{
    int64_t C = c->C;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->L);
    char nm[VR_NAME_MAX];
#define PV(field, k, suffix, ndim, d0, d1, init, scale)                                    \
    do {                                                                                   \
        snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                                     \
        p->field = pv(g, nm, base[k] + (int64_t)l * (d0) * (d1), ndim, d0, d1, init, scale); \
    } while (0)
    PV(ln1w, 2, "ln_1.w", 1, C, 1, VR_INIT_ONES, 0);
    PV(ln1b, 3, "ln_1.b", 1, C, 1, VR_INIT_ZEROS, 0);
    PV(qkvw, 4, "attn.c_attn.w", 2, 3 * C, C, VR_INIT_NORMAL, std);
    PV(qkvb, 5, "attn.c_attn.b", 1, 3 * C, 1, VR_INIT_ZEROS, 0);
    PV(attprojw, 6, "attn.c_proj.w", 2, C, C, VR_INIT_NORMAL, proj_std);
    PV(attprojb, 7, "attn.c_proj.b", 1, C, 1, VR_INIT_ZEROS, 0);
    PV(ln2w, 8, "ln_2.w", 1, C, 1, VR_INIT_ONES, 0);
    PV(ln2b, 9, "ln_2.b", 1, C, 1, VR_INIT_ZEROS, 0);
    PV(fcw, 10, "mlp.c_fc.w", 2, 4 * C, C, VR_INIT_NORMAL, std);
    PV(fcb, 11, "mlp.c_fc.b", 1, 4 * C, 1, VR_INIT_ZEROS, 0);
    PV(fcprojw, 12, "mlp.c_proj.w", 2, C, 4 * C, VR_INIT_NORMAL, proj_std);
    PV(fcprojb, 13, "mlp.c_proj.b", 1, C, 1, VR_INIT_ZEROS, 0);
#undef PV
}

vr_status vr_gpt_forward(vr_graph *g, const vr_gpt_config *cfg, int B, int T)
{
    vr_gpt_config c = *cfg;
    vr_status st = vr_gpt_config_check(&c);
    if (st)
        return g->err = st;
    if (B < 1)
        return g->err = vr_error(VR_ERR_INVALID, "vr_model_config.B: must be >= 1 (got %d)", B);
    if (T < 1 || T > c.maxT)
        return g->err = vr_error(VR_ERR_INVALID, "vr_model_config.T: %d is outside 1..%d (the model's maxT)", T,
                                 c.maxT);
    g->model.kind = VR_MODEL_GPT;
    g->model.gpt = c;
    g->model.B = B;
    g->model.T = T;

    int64_t size[16], base[16], off = 0;
    vr_gpt_param_sizes(&c, size);
    for (int i = 0; i < 16; i++) {
        base[i] = off;
        off += size[i];
    }
    vr_graph_param_buffer(g, off);
    int64_t C = c.C;
    int wte = pv(g, "wte", base[0], 2, c.Vp, C, VR_INIT_NORMAL, 0.02f);
    int wpe = pv(g, "wpe", base[1], 2, c.maxT, C, VR_INIT_NORMAL, 0.02f);

    int64_t bt[2] = {B, T};
    g->tokens = vr_graph_tensor(g, "tokens", VR_I32, VR_ROLE_INPUT, 2, bt);
    g->targets = vr_graph_tensor(g, "targets", VR_I32, VR_ROLE_INPUT, 2, bt);

    int x = vr_graph_embedding(g, "encoded", g->tokens, wte, wpe);
    char nm[VR_NAME_MAX];
    for (int l = 0; l < c.L; l++) {
        block_params p;
        block_views(g, &c, base, l, &p);
        int n0 = g->n_nodes;
#define NM(s) (snprintf(nm, sizeof nm, "h.%d.%s", l, s), nm)
        int ln1 = vr_graph_layernorm(g, NM("ln1"), x, p.ln1w, p.ln1b, NULL, NULL);
        int qkv = vr_graph_linear(g, NM("qkv"), ln1, p.qkvw, p.qkvb);
        int atty = vr_graph_attention(g, NM("atty"), qkv, c.NH, NULL);
        int attproj = vr_graph_linear(g, NM("attproj"), atty, p.attprojw, p.attprojb);
        int res2 = vr_graph_add(g, NM("residual2"), x, attproj);
        int ln2 = vr_graph_layernorm(g, NM("ln2"), res2, p.ln2w, p.ln2b, NULL, NULL);
        int fch = vr_graph_linear(g, NM("fch"), ln2, p.fcw, p.fcb);
        int gelu = vr_graph_gelu(g, NM("fch_gelu"), fch);
        int fcproj = vr_graph_linear(g, NM("fcproj"), gelu, p.fcprojw, p.fcprojb);
        x = vr_graph_add(g, NM("residual3"), res2, fcproj);
#undef NM
        for (int n = n0; n < g->n_nodes; n++)
            g->nodes[n].layer = l;
    }
    int lnfw = pv(g, "ln_f.w", base[14], 1, C, 1, VR_INIT_ONES, 0);
    int lnfb = pv(g, "ln_f.b", base[15], 1, C, 1, VR_INIT_ZEROS, 0);
    int lnf = vr_graph_layernorm(g, "lnf", x, lnfw, lnfb, NULL, NULL);
    g->losses = vr_graph_classifier(g, "losses", lnf, wte, g->targets, c.V);
    return vr_graph_set_loss(g, g->losses);
}
