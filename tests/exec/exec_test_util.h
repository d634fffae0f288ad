/* Helpers shared by the executor tests: tiny models, parameter fill, batches. */
#ifndef VRAM_TESTS_EXEC_UTIL_H
#define VRAM_TESTS_EXEC_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vram/exec.h"
#include "vram/graph.h"
#include "vram/plan.h"

static inline uint64_t et_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float et_uniform(uint64_t *s) { return (float)((et_next(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

/* A tiny GPT: L=2 C=32 NH=4 V=60 (wte padded to 128 rows) maxT=32, B x T. */
static inline vr_model_config et_gpt(int B, int T)
{
    vr_model_config m;
    memset(&m, 0, sizeof m);
    m.kind = VR_MODEL_GPT;
    m.gpt = (vr_gpt_config){.L = 2, .C = 32, .NH = 4, .V = 60, .Vp = 0, .maxT = 32};
    m.B = B;
    m.T = T;
    return m;
}

/* A tiny MLP: 16-32-32-4 relu, batch B. */
static inline vr_model_config et_mlp(int B)
{
    vr_model_config m;
    memset(&m, 0, sizeof m);
    m.kind = VR_MODEL_MLP;
    vr_mlp_preset("tiny", &m.mlp);
    m.B = B;
    m.T = 1;
    return m;
}

/* Fills the parameter buffer from the graph's init hints (uniform stand-ins for normal). */
static inline float *et_params(const vr_graph *g, uint64_t seed)
{
    float *p = calloc((size_t)g->n_params, sizeof(float));
    uint64_t s = seed;
    for (int t = 0; t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of != g->params || x->param_offset < 0)
            continue;
        int64_t n = vr_tensor_numel(x);
        for (int64_t i = 0; i < n; i++) {
            float v = 0;
            switch (x->init) {
            case VR_INIT_ONES: v = 1.0f + 0.1f * et_uniform(&s); break;
            case VR_INIT_ZEROS: v = 0.02f * et_uniform(&s); break;
            case VR_INIT_NORMAL: v = x->init_scale * 1.7f * et_uniform(&s); break;
            default: v = x->init_scale * et_uniform(&s); break;
            }
            p[x->param_offset + i] = v;
        }
    }
    return p;
}

/* A batch for g: tokens/targets in [0,V) (GPT) or features/labels (MLP). Caller frees both. */
static inline void et_batch(const vr_graph *g, uint64_t seed, void **inputs, int32_t **targets)
{
    uint64_t s = seed * 7919 + 1;
    const vr_tensor *in = &g->tensors[g->tokens], *tg = &g->tensors[g->targets];
    int64_t ni = vr_tensor_numel(in), nt = vr_tensor_numel(tg);
    *targets = malloc((size_t)nt * sizeof(int32_t));
    if (g->model.kind == VR_MODEL_GPT || g->model.kind == VR_MODEL_LLAMA) {
        uint64_t V = (uint64_t)(g->model.kind == VR_MODEL_GPT ? g->model.gpt.V : g->model.llama.V);
        int32_t *tok = malloc((size_t)ni * sizeof(int32_t));
        for (int64_t i = 0; i < ni; i++)
            tok[i] = (int32_t)(et_next(&s) % V);
        for (int64_t i = 0; i < nt; i++)
            (*targets)[i] = (int32_t)(et_next(&s) % V);
        *inputs = tok;
    } else {
        float *f = malloc((size_t)ni * sizeof(float));
        int classes = g->model.mlp.sizes[g->model.mlp.n_sizes - 1];
        for (int64_t i = 0; i < ni; i++)
            f[i] = et_uniform(&s);
        for (int64_t i = 0; i < nt; i++)
            (*targets)[i] = (int32_t)(et_next(&s) % (uint64_t)classes);
        *inputs = f;
    }
}

#endif
