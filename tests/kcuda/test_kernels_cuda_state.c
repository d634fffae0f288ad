/* Compact optimizer state on the GPU (vr_cuda_optim_state, vr_cuda_mt_optim_state) against the CPU
 * kernels (skips without a GPU): 8-bit AdamW / Adam / momentum and bf16-state AdamW over fp32 params,
 * tensor sizes that cut blocks and chunks every way (1, 255, 4096, 4097, 3 chunks + 300), an inf and a
 * NaN gradient (8-bit), four steps:
 *   - params within 2e-6 + 5% of lr x steps of the CPU's (both fp32, but the CPU contracts to FMAs
 *     freely, so a value at a code's boundary may round to the neighbour code), 8-bit codes equal or one apart, absmax within 1e-5 relative; bf16 state within 2% of the tensor's largest (one
 *     rounding the other way feeds the next steps);
 *   - the multi-tensor launch equals one call per tensor bit for bit (same code), also through
 *     ctx.opt_scalars (the CUDA graph path);
 *   - bf16 weights without a master: within one bf16 ulp of the CPU's fp32 update rounded with the same
 *     random bits, and the same bits run to run;
 *   - a split master (bf16 weights = its high halves, 16 low bits beside) with 8-bit and bf16 state: the fp32
 *     master values, the codes, absmax and state of a full master's run bit for bit over three steps. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kcuda/kcuda_test.h"
#include "kernels/optim_math.h"
#include "vram/optim_state.h"


static bool gpu;
static vr_cuda_ctx ctx;
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    CU(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes)
        CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void host_copy(void *h, const void *d, size_t bytes) { CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost)); }

enum { NT = 5 };
static const int64_t sizes[NT] = {1, 255, 4096, 4097, 3 * 4096 + 300};

typedef struct tens {
    int64_t n;
    float *p, *g, *m, *v, *am, *av; /* host: params, grads; f32 state (bf16 runs: unused) */
    uint8_t *mq, *vq;
    uint16_t *mb, *vb;
} tens;

static void tens_init(tens *t, int64_t n)
{
    t->n = n;
    size_t nb = (size_t)vr_q8_blocks(n);
    t->p = malloc((size_t)n * 4), t->g = malloc((size_t)n * 4);
    t->m = calloc((size_t)n, 4), t->v = calloc((size_t)n, 4);
    t->am = calloc(nb, 4), t->av = calloc(nb, 4);
    t->mq = calloc((size_t)n, 1), t->vq = calloc((size_t)n, 1);
    t->mb = calloc((size_t)n, 2), t->vb = calloc((size_t)n, 2);
    for (int64_t i = 0; i < n; i++)
        t->p[i] = urand();
}

static void tens_free(tens *t)
{
    free(t->p), free(t->g), free(t->m), free(t->v), free(t->am), free(t->av), free(t->mq), free(t->vq), free(t->mb),
        free(t->vb);
}

/* Device copies of one tensor's param, grad and state in format fmt. */
typedef struct dtens {
    void *p, *g, *m, *v;
    float *am, *av;
} dtens;

static dtens up(const tens *t, int fmt)
{
    size_t n = (size_t)t->n, nb = (size_t)vr_q8_blocks(t->n);
    dtens d = {dev_copy(t->p, n * 4), dev_copy(t->g, n * 4), NULL, NULL, dev_copy(t->am, nb * 4), dev_copy(t->av, nb * 4)};
    d.m = fmt == VR_CUDA_STATE_Q8 ? dev_copy(t->mq, n) : fmt == VR_CUDA_STATE_BF16 ? dev_copy(t->mb, n * 2) : dev_copy(t->m, n * 4);
    d.v = fmt == VR_CUDA_STATE_Q8 ? dev_copy(t->vq, n) : fmt == VR_CUDA_STATE_BF16 ? dev_copy(t->vb, n * 2) : dev_copy(t->v, n * 4);
    return d;
}

static void down_free(dtens *d)
{
    cudaFree(d->p), cudaFree(d->g), cudaFree(d->m), cudaFree(d->v), cudaFree(d->am), cudaFree(d->av);
}

static vr_cuda_mt_tensor entry(const dtens *d, int64_t n, int fmt, int decay)
{
    vr_cuda_mt_tensor e;
    memset(&e, 0, sizeof e);
    e.param = d->p, e.grad = d->g, e.m = d->m, e.v = d->v, e.n = n, e.decay = decay, e.fmt = fmt;
    e.absmax_m = d->am, e.absmax_v = d->av;
    return e;
}

/* kind 1 momentum, 2 adam, 3 adamw; fmt q8 or bf16: GPU (single and multi-tensor) vs CPU, 4 steps. */
static void compare(int kind, int fmt)
{
    if (!gpu)
        skip();
    tens t[NT];
    dtens d1[NT], d2[NT];
    for (int i = 0; i < NT; i++)
        tens_init(&t[i], sizes[i]);
    for (int i = 0; i < NT; i++)
        for (int64_t j = 0; j < t[i].n; j++)
            t[i].g[j] = urand();
    for (int i = 0; i < NT; i++)
        d1[i] = up(&t[i], fmt), d2[i] = up(&t[i], fmt);
    vr_cuda_mt_tensor tab[NT];
    for (int i = 0; i < NT; i++)
        tab[i] = entry(&d2[i], t[i].n, fmt, i % 2);
    int64_t chunks = vr_cuda_mt_layout(tab, NT);
    vr_cuda_mt_tensor *dtab = dev_copy(tab, sizeof tab);
    float lr = 1e-2f, wd = 0.1f;
    double worst = 0;
    for (int step = 1; step <= 4; step++) {
        for (int i = 0; i < NT; i++) {
            for (int64_t j = 0; j < t[i].n; j++)
                t[i].g[j] = urand() * (step == 3 ? 0.01f : 1.0f);
            if (step == 2 && t[i].n > 300 && fmt == VR_CUDA_STATE_Q8) /* the 8-bit rule; fp32/bf16 propagate */
                t[i].g[7] = INFINITY, t[i].g[299] = NAN;
            CU(cudaMemcpy(d1[i].g, t[i].g, (size_t)t[i].n * 4, cudaMemcpyHostToDevice));
            CU(cudaMemcpy(d2[i].g, t[i].g, (size_t)t[i].n * 4, cudaMemcpyHostToDevice));
            float w = i % 2 ? wd : 0.0f;
            size_t n = (size_t)t[i].n;
            vr_cuda_mt_tensor e = entry(&d1[i], t[i].n, fmt, 1);
            OK(vr_cuda_optim_state(&ctx, kind, VR_CUDA_F32, VR_CUDA_F32, &e, lr, 0.9f, 0.95f, 1e-8f, 0.9f, 0.0f, 0, w,
                                   step, 1.0f, NULL, NULL));
            if (kind == VR_CUDA_MT_MOMENTUM)
                vr_cpu_sgd_momentum_q8(t[i].p, t[i].g, t[i].mq, t[i].am, n, lr, 0.9f, 0.0f, w, 0, step, 1.0f);
            else if (fmt == VR_CUDA_STATE_Q8)
                vr_cpu_adam_q8(t[i].p, t[i].g, t[i].mq, t[i].vq, t[i].am, t[i].av, n, lr, 0.9f, 0.95f, 1e-8f, w, step,
                               1.0f, kind == VR_CUDA_MT_ADAMW);
            else
                vr_cpu_adam_bf16s(t[i].p, t[i].g, t[i].mb, t[i].vb, n, lr, 0.9f, 0.95f, 1e-8f, w, step, 1.0f,
                                  kind == VR_CUDA_MT_ADAMW, (uint64_t)step, 0);
        }
        OK(vr_cuda_mt_optim_state(&ctx, kind, VR_CUDA_F32, VR_CUDA_F32, dtab, NT, chunks, lr, 0.9f, 0.95f, 1e-8f, 0.9f,
                                  0.0f, 0, wd, step, 1.0f, NULL, NULL));
        CU(cudaDeviceSynchronize());
        for (int i = 0; i < NT; i++) {
            size_t n = (size_t)t[i].n, nb = (size_t)vr_q8_blocks(t[i].n);
            float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *a1 = malloc(nb * 4);
            host_copy(p1, d1[i].p, n * 4);
            host_copy(p2, d2[i].p, n * 4);
            assert_memory_equal(p1, p2, n * 4); /* multi-tensor == single */
            for (size_t j = 0; j < n; j++) {
                double e = fabs((double)p1[j] - t[i].p[j]);
                worst = e > worst ? e : worst;
                assert_true(e <= 2e-6 + 0.05 * lr * step);
                assert_true(isfinite(p1[j]));
            }
            if (fmt == VR_CUDA_STATE_Q8) {
                uint8_t *c = malloc(n);
                host_copy(c, d1[i].m, n);
                host_copy(a1, d1[i].am, nb * 4);
                for (size_t j = 0; j < n; j++)
                    assert_true(abs((int)c[j] - (int)t[i].mq[j]) <= 1);
                for (size_t b = 0; b < nb; b++)
                    assert_true(fabsf(a1[b] - t[i].am[b]) <= 1e-5f * fabsf(t[i].am[b]) + 1e-30f);
                free(c);
            } else {
                uint16_t *c = malloc(n * 2);
                host_copy(c, d1[i].m, n * 2);
                float most = 0.0f; /* a rounding that went the other way on one side feeds the next steps */
                for (size_t j = 0; j < n; j++)
                    most = fmaxf(most, fabsf(vr_bf16_to_f32(t[i].mb[j])));
                for (size_t j = 0; j < n; j++)
                    assert_true(fabsf(vr_bf16_to_f32(c[j]) - vr_bf16_to_f32(t[i].mb[j])) <= 0.02f * most);
                free(c);
            }
            free(p1), free(p2), free(a1);
        }
    }
    print_message("  kind %d fmt %d: max |p_gpu - p_cpu| %.2e\n", kind, fmt, worst);
    for (int i = 0; i < NT; i++)
        down_free(&d1[i]), down_free(&d2[i]), tens_free(&t[i]);
    cudaFree(dtab);
}

static void adamw_q8(void **s) { (void)s; compare(VR_CUDA_MT_ADAMW, VR_CUDA_STATE_Q8); }
static void adam_q8(void **s) { (void)s; compare(VR_CUDA_MT_ADAM, VR_CUDA_STATE_Q8); }
static void momentum_q8(void **s) { (void)s; compare(VR_CUDA_MT_MOMENTUM, VR_CUDA_STATE_Q8); }
static void adamw_bf16_state(void **s) { (void)s; compare(VR_CUDA_MT_ADAMW, VR_CUDA_STATE_BF16); }

/* bf16 weights, no master, fp32 state: the update rounded stochastically, as the CPU reference rounds the
 * fp32 update with the same bits; the same bits twice; through ctx.opt_scalars too. */
static void no_master_sr(void **state)
{
    (void)state;
    if (!gpu)
        skip();
    enum { N = 10000 };
    static float p32[N], g[N], m[N], v[N];
    static uint16_t pb[N], out[N], out2[N];
    for (int i = 0; i < N; i++) {
        pb[i] = vr_bf16_sr(urand(), 0x8000u);
        p32[i] = vr_bf16_to_f32(pb[i]);
        g[i] = urand();
    }
    void *dp = dev_copy(pb, sizeof pb), *dg = dev_copy(g, sizeof g), *dm = dev_copy(m, sizeof m), *dv = dev_copy(v, sizeof v);
    float *hp = NULL;
    CU(cudaMalloc((void **)&hp, VR_CUDA_OPT_SCALARS * sizeof(float)));
    for (int run = 0; run < 2; run++) {
        CU(cudaMemcpy(dp, pb, sizeof pb, cudaMemcpyHostToDevice));
        CU(cudaMemset(dm, 0, sizeof m));
        CU(cudaMemset(dv, 0, sizeof v));
        vr_cuda_mt_tensor e;
        memset(&e, 0, sizeof e);
        e.param = dp, e.grad = dg, e.m = dm, e.v = dv, e.n = N, e.decay = 1, e.fmt = VR_CUDA_STATE_F32, e.windex = 1000;
        float sc[VR_CUDA_OPT_SCALARS];
        vr_cuda_opt_scalars(sc, 1e-3f, 0.9f, 0.95f, 1);
        CU(cudaMemcpy(hp, sc, sizeof sc, cudaMemcpyHostToDevice));
        ctx.opt_scalars = run ? hp : NULL; /* the second run through the device scalars */
        OK(vr_cuda_optim_state(&ctx, VR_CUDA_MT_ADAMW, VR_CUDA_BF16, VR_CUDA_F32, &e, 1e-3f, 0.9f, 0.95f, 1e-8f, 0, 0, 0,
                               0.1f, 1, 1.0f, NULL, NULL));
        ctx.opt_scalars = NULL;
        host_copy(run ? out2 : out, dp, sizeof out);
    }
    assert_memory_equal(out, out2, sizeof out);
    vr_cpu_adamw(p32, g, m, v, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
    int up = 0, down = 0;
    for (int i = 0; i < N; i++) {
        uint16_t ref = vr_bf16_sr(p32[i], vr_sr_bits(1, VR_SR_W, 1000 + (uint64_t)i));
        assert_true(abs((int)out[i] - (int)ref) <= 1);
        uint16_t near = (uint16_t)((vr_f32_bits(p32[i]) + 0x8000u) >> 16);
        up += out[i] != near && out[i] > near, down += out[i] != near && out[i] < near;
    }
    assert_true(up + down > 0); /* stochastic: not always the nearest */
    cudaFree(dp), cudaFree(dg), cudaFree(dm), cudaFree(dv), cudaFree(hp);
}

/* bf16 weights with a full fp32 master (side 0) and with a split master (side 1), state fmt, three AdamW steps
 * through the multi-tensor compact-state launch: masters (joined) bit for bit, state bit for bit, and a bf16
 * weight differs only at an exact tie of its master (rounded away from zero instead of to even). */
static void split_master_state(int fmt)
{
    if (!gpu)
        skip();
    tens t[NT];
    dtens d[2][NT];
    void *par[2][NT], *mas[2][NT];
    vr_cuda_mt_tensor tab[2][NT];
    for (int i = 0; i < NT; i++) {
        tens_init(&t[i], sizes[i]);
        size_t n = (size_t)t[i].n;
        uint16_t *h = malloc(n * 2), *hs = malloc(n * 2), *lo = malloc(n * 2);
        for (size_t j = 0; j < n; j++) {
            t[i].p[j] *= 0.05f;
            t[i].g[j] = urand();
            uint32_t u = vr_f32_bits(t[i].p[j]);
            h[j] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
            hs[j] = vr_split_hi(u), lo[j] = vr_split_lo(u);
        }
        par[0][i] = dev_copy(h, n * 2), mas[0][i] = dev_copy(t[i].p, n * 4);
        par[1][i] = dev_copy(hs, n * 2), mas[1][i] = dev_copy(lo, n * 2);
        for (int k = 0; k < 2; k++) {
            d[k][i] = up(&t[i], fmt);
            tab[k][i] = entry(&d[k][i], t[i].n, fmt, i % 2);
            tab[k][i].param = par[k][i], tab[k][i].master = mas[k][i], tab[k][i].split = k;
            tab[k][i].grad = d[0][i].g; /* f32 gradients, the same on both sides */
        }
        free(h), free(hs), free(lo);
    }
    int64_t chunks = vr_cuda_mt_layout(tab[0], NT);
    vr_cuda_mt_layout(tab[1], NT);
    vr_cuda_mt_tensor *dtab[2] = {dev_copy(tab[0], sizeof tab[0]), dev_copy(tab[1], sizeof tab[1])};
    for (int step = 1; step <= 3; step++) {
        for (int k = 0; k < 2; k++)
            OK(vr_cuda_mt_optim_state(&ctx, VR_CUDA_MT_ADAMW, VR_CUDA_BF16, VR_CUDA_F32, dtab[k], NT, chunks, 1e-2f,
                                      0.9f, 0.95f, 1e-8f, 0, 0, 0, 0.1f, step, 1.0f, NULL, NULL));
        CU(cudaDeviceSynchronize());
        long diff[3] = {0, 0, 0}, state = 0; /* masters, ties, other weights (kc_split_diff) */
        for (int i = 0; i < NT; i++) {
            size_t n = (size_t)t[i].n, sb = fmt == VR_CUDA_STATE_Q8 ? n : n * 2, nb = (size_t)vr_q8_blocks(t[i].n);
            kc_split_diff(mas[0][i], par[0][i], par[1][i], mas[1][i], n, diff);
            state += !kc_same_bytes(d[0][i].m, d[1][i].m, sb) + !kc_same_bytes(d[0][i].v, d[1][i].v, sb);
            if (fmt == VR_CUDA_STATE_Q8)
                state += !kc_same_bytes(d[0][i].am, d[1][i].am, nb * 4) + !kc_same_bytes(d[0][i].av, d[1][i].av, nb * 4);
        }
        long masters = diff[0], ties = diff[1], other = diff[2];
        printf("split master, %s state, step %d: %ld masters differ, %ld state buffers differ; weights: %ld ties "
               "rounded away, %ld other differences\n", fmt == VR_CUDA_STATE_Q8 ? "8-bit" : "bf16", step, masters,
               state, ties, other);
        assert_int_equal(masters, 0);
        assert_int_equal(state, 0);
        assert_int_equal(other, 0);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NT; i++)
            down_free(&d[k][i]), cudaFree(par[k][i]), cudaFree(mas[k][i]);
    for (int i = 0; i < NT; i++)
        tens_free(&t[i]);
    cudaFree(dtab[0]), cudaFree(dtab[1]);
}

static void split_master_q8(void **s) { (void)s; split_master_state(VR_CUDA_STATE_Q8); }
static void split_master_bf16_state(void **s) { (void)s; split_master_state(VR_CUDA_STATE_BF16); }

static int setup(void **state)
{
    (void)state;
    int n = 0;
    gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    if (!gpu) {
        cudaGetLastError();
        return 0;
    }
    return vr_cuda_ctx_init(&ctx, NULL, NULL, 0) == VR_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (gpu)
        vr_cuda_ctx_destroy(&ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adamw_q8), cmocka_unit_test(adam_q8), cmocka_unit_test(momentum_q8),
        cmocka_unit_test(adamw_bf16_state), cmocka_unit_test(no_master_sr),
        cmocka_unit_test(split_master_q8), cmocka_unit_test(split_master_bf16_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
