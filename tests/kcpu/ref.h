/* vram tests — plain, obviously-correct double-precision reference forwards for the CPU kernels,
 * plus the small helpers the kcpu tests share (random numbers, error measures, finite differences).
 * Header-only (static inline) because each test is a single source file. */
#ifndef VRAM_TESTS_KCPU_REF_H
#define VRAM_TESTS_KCPU_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ random numbers */

static inline uint64_t ref_rng_next(uint64_t *s)
{
    // xorshift64*
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [lo, hi). */
static inline float ref_uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((ref_rng_next(s) >> 40) * (1.0 / 16777216.0));
}

static inline void ref_fill(float *x, size_t n, uint64_t *s, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = ref_uniform(s, lo, hi);
}

static inline float *ref_falloc(size_t n)
{
    float *p = (float *)calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}

static inline double *ref_dalloc(size_t n)
{
    double *p = (double *)calloc(n ? n : 1, sizeof(double));
    if (!p) abort();
    return p;
}

static inline double *ref_to_double(const float *x, size_t n)
{
    double *d = ref_dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* ------------------------------------------------------------------ error measures */

/* Normwise relative error: max_i |a_i - b_i| / max_i |b_i| (b is the reference). */
static inline double ref_relerr(const float *a, const double *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || d != d) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

static inline double ref_relerr_ff(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || d != d) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ------------------------------------------------------------------ reference forwards (double) */

static inline double ref_gelu1(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* out(N,OC) = inp(N,C) w(OC,C)^T + bias(OC) */
static inline void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                              int N, int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = s;
        }
}

/* out(N,C) = layernorm(inp) * w + b, eps 1e-5, biased variance */
static inline void ref_layernorm(double *out, const double *inp, const double *w, const double *b,
                                 int N, int C)
{
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (x[c] - m) * r * w[c] + b[c];
    }
}

/* out(B,T,C) = wte[tok] + wpe[t] */
static inline void ref_embedding(double *out, const int32_t *tok, const double *wte,
                                 const double *wpe, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] =
                    wte[(size_t)tok[b * T + t] * C + c] + wpe[(size_t)t * C + c];
}

/* Naive causal attention with the full (T,T) softmax. out(B,T,C), lse(B,NH,T) (may be NULL),
 * qkv(B,T,3C). */
static inline void ref_attention(double *out, double *lse, const double *qkv, int B, int T, int C,
                                 int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *att = ref_dalloc((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0.0;
                    for (int d = 0; d < hs; d++) s += q[d] * k[d];
                    att[j] = s * scale;
                    if (att[j] > mx) mx = att[j];
                }
                double sum = 0.0;
                for (int j = 0; j <= i; j++) sum += exp(att[j] - mx);
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    double p = exp(att[j] - mx) / sum;
                    for (int d = 0; d < hs; d++) o[d] += p * v[d];
                }
                if (lse) lse[((size_t)b * NH + h) * T + i] = mx + log(sum);
            }
    free(att);
}

/* losses(N) = -log softmax(logits(N,V))[target], 0 where target < 0. */
static inline void ref_xent(double *losses, const double *logits, const int32_t *targets, int N, int V)
{
    for (int i = 0; i < N; i++) {
        const double *z = logits + (size_t)i * V;
        if (targets[i] < 0) {
            losses[i] = 0.0;
            continue;
        }
        double mx = -INFINITY, s = 0.0;
        for (int v = 0; v < V; v++)
            if (z[v] > mx) mx = z[v];
        for (int v = 0; v < V; v++) s += exp(z[v] - mx);
        losses[i] = log(s) + mx - z[targets[i]];
    }
}

/* ------------------------------------------------------------------ finite differences */

/* A scalar function of the double inputs held by ctx. */
typedef double (*ref_loss_fn)(void *ctx);

/* Central difference dL/dx[i] for the entries idx[0..k) of x (the others are left 0 in g),
 * or for all n entries when idx is NULL. g is (n). Step h relative to max(1, |x_i|). */
static inline void ref_fd_grad(double *g, double *x, size_t n, const size_t *idx, size_t k,
                               ref_loss_fn f, void *ctx)
{
    size_t cnt = idx ? k : n;
    for (size_t q = 0; q < cnt; q++) {
        size_t i = idx ? idx[q] : q;
        double x0 = x[i], h = 1e-5 * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

/* Normwise relative error of a float gradient against a finite-difference one, over the checked
 * entries only (idx, or all when idx is NULL). */
static inline double ref_relerr_idx(const float *a, const double *b, size_t n, const size_t *idx,
                                    size_t k)
{
    if (!idx) return ref_relerr(a, b, n);
    double num = 0.0, den = 0.0;
    for (size_t q = 0; q < k; q++) {
        size_t i = idx[q];
        double d = fabs((double)a[i] - b[i]);
        if (d > num || d != d) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* Up to kmax distinct random indices in [0,n) (all of them, in order, when n <= kmax). Caller frees. */
static inline size_t *ref_pick(size_t n, size_t kmax, size_t *k, uint64_t *s)
{
    size_t cnt = n < kmax ? n : kmax;
    size_t *idx = (size_t *)malloc((cnt ? cnt : 1) * sizeof(size_t));
    if (!idx) abort();
    if (n <= kmax) {
        for (size_t i = 0; i < n; i++) idx[i] = i;
    } else {
        // partial Fisher-Yates over a permutation
        size_t *perm = (size_t *)malloc(n * sizeof(size_t));
        if (!perm) abort();
        for (size_t i = 0; i < n; i++) perm[i] = i;
        for (size_t i = 0; i < cnt; i++) {
            size_t j = i + (size_t)(ref_rng_next(s) % (n - i));
            size_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            idx[i] = perm[i];
        }
        free(perm);
    }
    *k = cnt;
    return idx;
}

#endif
