/* vram train — parameter initialisation and the MLP's generated task.
 *
 * GPT-2 (llm.c / nanoGPT): every weight matrix and both embeddings normal(0, 0.02),
 * the two residual projections of each block (attn.c_proj, mlp.c_proj)
 * normal(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1; rows V..Vp-1 of
 * wte (vocabulary padding) 0. MLP: nn.Linear's uniform(-1/sqrt(in), 1/sqrt(in)).
 * The graph's parameter tensors carry these as init hints; values are drawn
 * in parameter-buffer order from one splitmix64 stream (Box-Muller for the
 * normals, in double), so a seed gives the same weights on every machine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/loop_internal.h"
#include "train/rng.h"

static double uniform01(vr_rng *r) { return ((double)(vr_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double normal01(vr_rng *r)
{
    double u1 = uniform01(r), u2 = uniform01(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* The parameter tensors by their place in the model's flat weights (held by this rank or not: ZeRO-3): pairs
 * {param_offset, id} in increasing order, the lower id first at one offset. */
static int by_offset(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The parameter at `offset` (the first tensor, by id, that starts there), or -1; *k: where the previous
 * lookup stopped in key (the offsets asked only grow). key NULL (no memory for it): a scan of the tensors. */
static int param_at(const vr_graph *g, const int64_t (*key)[2], int nk, int *k, int64_t offset)
{
    if (!key) {
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].param_offset == offset)
                return t;
        return -1;
    }
    while (*k < nk && key[*k][0] < offset)
        (*k)++;
    return *k < nk && key[*k][0] == offset ? (int)key[*k][1] : -1;
}

/* Draws of the RNG per element of an initialisation (normal: two uniforms, Box-Muller). */
static uint64_t draws_per(vr_init init) { return init == VR_INIT_NORMAL ? 2 : init == VR_INIT_UNIFORM ? 1 : 0; }

/* One sequence of draws in element order over every parameter, as if drawn one by one; splitmix64 jumps to
 * any point (its state advances by a constant per draw), so chunks of a tensor are drawn in parallel and the
 * values do not depend on the thread count. */
void vr_train_init_params(const vr_graph *g, uint64_t seed, float *params)
{
    vr_rng r = vr_rng_seed(seed);
    memset(params, 0, sizeof(float) * (size_t)g->n_params);
    int64_t (*key)[2] = malloc(sizeof *key * ((size_t)g->n_tensors + 1));
    int nk = 0, k = 0;
    for (int t = 0; key && t < g->n_tensors; t++)
        if (g->tensors[t].param_offset >= 0) {
            key[nk][0] = g->tensors[t].param_offset;
            key[nk++][1] = t;
        }
    if (key)
        qsort(key, (size_t)nk, sizeof *key, by_offset);
    for (int64_t off = 0; off < g->n_params;) {
        int t = param_at(g, (const int64_t(*)[2])key, nk, &k, off);
        if (t < 0)
            break;
        const vr_tensor *x = &g->tensors[t];
        int64_t n = vr_tensor_numel(x);
        float *p = params + off;
        if (g->model.kind == VR_MODEL_GPT && !strcmp(x->name, "wte"))
            n = (int64_t)g->model.gpt.V * g->model.gpt.C; /* padded rows stay 0 */
        const uint64_t per = draws_per(x->init);
        const vr_rng base = r;
        const vr_init init = x->init;
        const double scale = x->init_scale;
        const int64_t chunk = 1 << 16;
#pragma omp parallel for schedule(static) if (n > 4 * chunk)
        for (int64_t c = 0; c < n; c += chunk) {
            vr_rng cr = vr_rng_jump(base, (uint64_t)c * per);
            int64_t end = c + chunk < n ? c + chunk : n;
            for (int64_t i = c; i < end; i++) {
                switch (init) {
                case VR_INIT_ONES: p[i] = 1.0f; break;
                case VR_INIT_NORMAL: p[i] = (float)(normal01(&cr) * scale); break;
                case VR_INIT_UNIFORM: p[i] = (float)((2.0 * uniform01(&cr) - 1.0) * scale); break;
                default: p[i] = 0.0f; break;
                }
            }
        }
        r = vr_rng_jump(base, (uint64_t)n * per);
        off += vr_tensor_numel(x);
    }
    free(key);
}

/* ------------------------------------------------------------------ the MLP task */

vr_status vr__mlp_task_init(vr_mlp_task *t, int D, int K, int B, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->D = D;
    t->K = K;
    t->B = B;
    t->seed = seed;
    t->teacher = malloc(sizeof(float) * (size_t)D * (size_t)K);
    if (!t->teacher)
        return vr_error(VR_ERR_OOM, "mlp task: out of host memory");
    vr_rng r = vr_rng_seed(seed ^ 0x7EAC4E5ull);
    for (size_t i = 0; i < (size_t)D * (size_t)K; i++)
        t->teacher[i] = (float)normal01(&r);
    return VR_OK;
}

void vr__mlp_task_free(vr_mlp_task *t)
{
    free(t->teacher);
    t->teacher = NULL;
}

void vr__mlp_task_batch(const vr_mlp_task *t, int stream, uint64_t index, float *features, int32_t *labels)
{
    vr_rng r = vr_rng_seed(t->seed * 0x100000001B3ull + index * 2 + (uint64_t)stream + 1);
    for (int b = 0; b < t->B; b++) {
        float *x = features + (size_t)b * t->D;
        for (int d = 0; d < t->D; d++)
            x[d] = (float)normal01(&r);
        int best = 0;
        double best_v = -INFINITY;
        for (int k = 0; k < t->K; k++) {
            double v = 0;
            for (int d = 0; d < t->D; d++)
                v += (double)t->teacher[(size_t)k * t->D + d] * x[d];
            if (v > best_v) {
                best_v = v;
                best = k;
            }
        }
        labels[b] = best;
    }
}
