/* Multi-tensor apply (vr_cuda_mt_optim, vr_cuda_mt_sumsq) against the single-tensor kernels
 * (skips without a GPU).
 *
 * Tensors of sizes that cut chunks every way (1, 255, one chunk, one chunk + 1, several chunks with a
 * partial last one, GPT-2 shapes), decay on every other one: one multi-tensor launch must leave the
 * param, master, m and v of every tensor bit for bit equal to one vr_cuda_sgd / sgd_momentum / adam /
 * adamw call per tensor (weight decay 0 on the tensors without decay), with a host and a device
 * gradient multiplier, over three steps, for bf16 params with an fp32 master (bf16 and fp32
 * gradients) and fp32 params updated in place; also through ctx.opt_scalars (the CUDA graph path).
 * The multi-tensor sum of squares equals the sum of vr_cuda_sumsq over the tensors within 1e-5
 * relative (3.5M fp32 squares in two orders), is run-to-run identical, and its clip factor and norm are vr_cuda_clip_scale's.
 * A split master (bf16 params = the high halves, 16 low bits beside: kernels/optim_math.h) through the multi-tensor
 * and the compact-state kernels keeps, step after step, the fp32 values of a full master bit for bit; the bf16
 * params equal the full master's round-to-nearest-even ones except at exact ties (low half 0x8000), rounded away. */
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

#include "kernels/cuda/kernels_cuda.h"
#include "kcuda/kcuda_test.h"
#include "kernels/optim_math.h"


static bool gpu_present(void)
{
    int n = 0;
    bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    if (!ok)
        cudaGetLastError();
    return ok;
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static float urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

enum { NT = 9 };
static const int64_t sizes[NT] = {1, 255, VR_CUDA_MT_CHUNK, VR_CUDA_MT_CHUNK + 1, 3 * VR_CUDA_MT_CHUNK + 17, 768,
                                  2304, 768 * 768, 3 * 768 * 768 + 5};

typedef struct side {
    void *param[NT];
    float *master[NT], *m[NT], *v[NT];
} side;

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    CU(cudaMalloc(&d, bytes));
    CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* One configuration: kind, param dtype (bf16: with master), grad dtype, opt_scalars or not. */
static void run_config(vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt, bool dev_scalars)
{
    static const char *kinds[] = {"sgd", "sgd_momentum", "adam", "adamw"};
    size_t ps = vr_cuda_dtype_size(pdt), gs = vr_cuda_dtype_size(gdt);
    bool master = pdt != VR_CUDA_F32;
    side s[2];
    void *grad[NT];
    for (int t = 0; t < NT; t++) {
        size_t n = (size_t)sizes[t];
        float *f = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            f[i] = 0.05f * urand();
            m[i] = 1e-3f * urand();
            v[i] = 1e-6f * fabsf(urand());
            h[i] = to_bf16(f[i]);
        }
        for (int k = 0; k < 2; k++) { /* the same state on both sides */
            s[k].param[t] = dev_copy(pdt == VR_CUDA_F32 ? (void *)f : (void *)h, n * ps);
            s[k].master[t] = master ? dev_copy(f, n * 4) : NULL;
            s[k].m[t] = dev_copy(m, n * 4);
            s[k].v[t] = dev_copy(v, n * 4);
        }
        for (size_t i = 0; i < n; i++) {
            f[i] = urand();
            h[i] = to_bf16(f[i]);
        }
        grad[t] = dev_copy(gdt == VR_CUDA_F32 ? (void *)f : (void *)h, n * gs);
        free(f);
        free(m);
        free(v);
        free(h);
    }
    float scale_h = 0.7f, *dscale = dev_copy(&scale_h, 4);
    vr_cuda_mt_tensor tab[NT];
    memset(tab, 0, sizeof tab);
    for (int t = 0; t < NT; t++) {
        tab[t].param = s[1].param[t];
        tab[t].master = s[1].master[t];
        tab[t].grad = grad[t];
        tab[t].m = kind == VR_CUDA_MT_SGD ? NULL : s[1].m[t];
        tab[t].v = kind >= VR_CUDA_MT_ADAM ? s[1].v[t] : NULL;
        tab[t].n = sizes[t];
        tab[t].decay = t % 2;
    }
    int64_t chunks = vr_cuda_mt_layout(tab, NT);
    vr_cuda_mt_tensor *dtab = dev_copy(tab, sizeof tab);
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, mom = 0.9f, damp = 0.1f, wd = 0.1f;
    float *hp = NULL;
    if (dev_scalars)
        CU(cudaMalloc((void **)&hp, VR_CUDA_OPT_SCALARS * sizeof(float)));
    for (int step = 1; step <= 3; step++) {
        if (dev_scalars) { /* the device values differ from the arguments: the kernels must read them */
            float v[VR_CUDA_OPT_SCALARS];
            vr_cuda_opt_scalars(v, lr * (float)step, b1, b2, step);
            CU(cudaMemcpy(hp, v, sizeof v, cudaMemcpyHostToDevice));
            ctx->opt_scalars = hp;
        }
        for (int t = 0; t < NT; t++) {
            float w = t % 2 ? wd : 0.0f;
            size_t n = (size_t)sizes[t];
            switch (kind) {
            case VR_CUDA_MT_SGD:
                OK(vr_cuda_sgd(ctx, pdt, s[0].param[t], s[0].master[t], gdt, grad[t], n, lr, w, 0.5f, dscale, NULL));
                break;
            case VR_CUDA_MT_MOMENTUM:
                OK(vr_cuda_sgd_momentum(ctx, pdt, s[0].param[t], s[0].master[t], gdt, grad[t], s[0].m[t], n, lr, mom,
                                        damp, w, step == 2, step, 0.5f, dscale, NULL));
                break;
            case VR_CUDA_MT_ADAM:
                OK(vr_cuda_adam(ctx, pdt, s[0].param[t], s[0].master[t], gdt, grad[t], s[0].m[t], s[0].v[t], n, lr, b1,
                                b2, eps, w, step, 0.5f, dscale, NULL));
                break;
            default:
                OK(vr_cuda_adamw(ctx, pdt, s[0].param[t], s[0].master[t], gdt, grad[t], s[0].m[t], s[0].v[t], n, lr,
                                 b1, b2, eps, w, step, 0.5f, dscale, NULL));
                break;
            }
        }
        /* nesterov on at step 2 only, in both calls */
        OK(vr_cuda_mt_optim(ctx, kind, pdt, gdt, dtab, NT, chunks, lr, b1, b2, eps, mom, damp, step == 2, wd, step,
                            0.5f, dscale, NULL));
        CU(cudaDeviceSynchronize());
        ctx->opt_scalars = NULL;
        int bad = 0;
        for (int t = 0; t < NT; t++) {
            size_t n = (size_t)sizes[t];
            bad += !kc_same_bytes(s[0].param[t], s[1].param[t], n * ps);
            if (master)
                bad += !kc_same_bytes(s[0].master[t], s[1].master[t], n * 4);
            if (kind != VR_CUDA_MT_SGD)
                bad += !kc_same_bytes(s[0].m[t], s[1].m[t], n * 4);
            if (kind >= VR_CUDA_MT_ADAM)
                bad += !kc_same_bytes(s[0].v[t], s[1].v[t], n * 4);
        }
        printf("mt %s param %s grad %s%s step %d: %d buffers differ (of %d tensors, %lld chunks)\n", kinds[kind],
               vr_cuda_dtype_name(pdt), vr_cuda_dtype_name(gdt), dev_scalars ? " opt_scalars" : "", step, bad, NT,
               (long long)chunks);
        assert_int_equal(bad, 0);
    }
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < NT; t++) {
            cudaFree(s[k].param[t]);
            cudaFree(s[k].master[t]);
            cudaFree(s[k].m[t]);
            cudaFree(s[k].v[t]);
        }
    for (int t = 0; t < NT; t++)
        cudaFree(grad[t]);
    cudaFree(dscale);
    cudaFree(dtab);
    cudaFree(hp);
}

/* Each test's state: a CUDA context (legacy stream, no workspace), NULL without a GPU (the test skips). */
static int ctx_setup(void **state)
{
    *state = NULL;
    if (!gpu_present())
        return 0;
    vr_cuda_ctx *ctx = malloc(sizeof *ctx);
    if (!ctx || vr_cuda_ctx_init(ctx, NULL, NULL, 0) != VR_OK) {
        free(ctx);
        return -1;
    }
    *state = ctx;
    return 0;
}

static int ctx_teardown(void **state)
{
    if (*state) {
        vr_cuda_ctx_destroy(*state);
        free(*state);
    }
    return 0;
}

static void mt_optim_equals_single(void **state)
{
    vr_cuda_ctx *ctx = *state;
    if (!ctx)
        skip();
    for (int kind = VR_CUDA_MT_SGD; kind <= VR_CUDA_MT_ADAMW; kind++) {
        run_config(ctx, kind, VR_CUDA_BF16, VR_CUDA_BF16, false);
        run_config(ctx, kind, VR_CUDA_F32, VR_CUDA_F32, false);
    }
    run_config(ctx, VR_CUDA_MT_ADAMW, VR_CUDA_BF16, VR_CUDA_F32, false);
    run_config(ctx, VR_CUDA_MT_ADAMW, VR_CUDA_BF16, VR_CUDA_BF16, true);
    run_config(ctx, VR_CUDA_MT_MOMENTUM, VR_CUDA_BF16, VR_CUDA_BF16, true);
}

static void mt_sumsq_equals_single(void **state)
{
    vr_cuda_ctx *ctx = *state;
    if (!ctx)
        skip();
    for (int d = 0; d < 2; d++) {
        vr_cuda_dtype dt = d ? VR_CUDA_BF16 : VR_CUDA_F32;
        size_t es = vr_cuda_dtype_size(dt);
        vr_cuda_mt_tensor tab[NT];
        memset(tab, 0, sizeof tab);
        float *acc = NULL, *out = NULL, *partials = NULL;
        CU(cudaMalloc((void **)&acc, 16));
        CU(cudaMalloc((void **)&out, 16));
        CU(cudaMalloc((void **)&partials, VR_CUDA_MT_MAX_PARTIALS * sizeof(float)));
        for (int t = 0; t < NT; t++) {
            size_t n = (size_t)sizes[t];
            float *f = malloc(n * 4);
            uint16_t *h = malloc(n * 2);
            for (size_t i = 0; i < n; i++) {
                f[i] = 0.01f * urand();
                h[i] = to_bf16(f[i]);
            }
            void *x = dev_copy(d ? (void *)h : (void *)f, n * es);
            tab[t].grad = x;
            tab[t].n = (int64_t)n;
            OK(vr_cuda_sumsq(ctx, dt, acc, x, n, t > 0));
            free(f);
            free(h);
        }
        int64_t chunks = vr_cuda_mt_layout(tab, NT);
        vr_cuda_mt_tensor *dtab = dev_copy(tab, sizeof tab);
        float r[2][3], ref[3];
        for (int k = 0; k < 2; k++) { /* out[0] normsq, out[1] scale, out[2] norm */
            OK(vr_cuda_mt_sumsq(ctx, dt, dtab, NT, chunks, partials, &out[0], &out[1], &out[2], NULL, 0.05f, 1.0f, 1.0f));
            CU(cudaMemcpy(r[k], out, 12, cudaMemcpyDeviceToHost));
        }
        OK(vr_cuda_clip_scale(ctx, &acc[1], &acc[2], NULL, &acc[0], 0.05f, 1.0f, 1.0f));
        CU(cudaMemcpy(ref, acc, 12, cudaMemcpyDeviceToHost));
        double rel = fabs((double)r[0][0] - ref[0]) / ref[0];
        printf("mt sumsq %s: %.9g (per tensor %.9g, rel %.2g), norm %.9g (%.9g), clip %.9g (%.9g), rerun %s\n",
               vr_cuda_dtype_name(dt), r[0][0], ref[0], rel, r[0][2], ref[2], r[0][1], ref[1],
               memcmp(r[0], r[1], sizeof r[0]) ? "differs" : "identical");
        assert_true(rel <= 1e-5); /* 3.5M fp32 squares, two summation orders (atomics on one side) */
        assert_true(fabs((double)r[0][2] - ref[2]) <= 5e-6 * ref[2]);
        assert_true(fabs((double)r[0][1] - ref[1]) <= 5e-6 * ref[1]);
        assert_true(!memcmp(r[0], r[1], sizeof r[0]));
        for (int t = 0; t < NT; t++)
            cudaFree((void *)tab[t].grad);
        cudaFree(dtab);
        cudaFree(acc);
        cudaFree(out);
        cudaFree(partials);
    }
}

/* kind over the table: full fp32 master (mt kernel) against split master through the mt kernel (state 0) or the
 * compact-state kernel (state 1), 3 steps. */
static void split_config(vr_cuda_ctx *ctx, int kind, bool state_kernel)
{
    static const char *kinds[] = {"sgd", "sgd_momentum", "adam", "adamw"};
    void *par[2][NT], *mas[2][NT], *m[2][NT], *v[2][NT], *grad[NT];
    vr_cuda_mt_tensor tab[2][NT];
    memset(tab, 0, sizeof tab);
    for (int t = 0; t < NT; t++) {
        size_t n = (size_t)sizes[t];
        float *f = malloc(n * 4), *mm = malloc(n * 4), *vv = malloc(n * 4);
        uint16_t *h = malloc(n * 2), *hs = malloc(n * 2), *lo = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            f[i] = 0.05f * urand();
            if (i % 97 == 3) { /* an exact tie: RNE and the split's rounding part */
                uint32_t u;
                memcpy(&u, &f[i], 4);
                u = (u & 0xFFFF0000u) | 0x8000u;
                memcpy(&f[i], &u, 4);
            }
            mm[i] = 1e-3f * urand();
            vv[i] = 1e-6f * fabsf(urand());
            h[i] = to_bf16(f[i]);
            hs[i] = vr_split_hi(vr_f32_bits(f[i]));
            lo[i] = vr_split_lo(vr_f32_bits(f[i]));
        }
        par[0][t] = dev_copy(h, n * 2);
        mas[0][t] = dev_copy(f, n * 4);
        par[1][t] = dev_copy(hs, n * 2);
        mas[1][t] = dev_copy(lo, n * 2);
        for (int k = 0; k < 2; k++) {
            m[k][t] = dev_copy(mm, n * 4);
            v[k][t] = dev_copy(vv, n * 4);
            tab[k][t].param = par[k][t];
            tab[k][t].master = mas[k][t];
            tab[k][t].m = kind == VR_CUDA_MT_SGD ? NULL : m[k][t];
            tab[k][t].v = kind >= VR_CUDA_MT_ADAM ? v[k][t] : NULL;
            tab[k][t].n = sizes[t];
            tab[k][t].decay = t % 2;
            tab[k][t].split = k;
        }
        for (size_t i = 0; i < n; i++)
            h[i] = to_bf16(urand());
        grad[t] = dev_copy(h, n * 2);
        tab[0][t].grad = tab[1][t].grad = grad[t];
        free(f), free(mm), free(vv), free(h), free(hs), free(lo);
    }
    int64_t chunks = vr_cuda_mt_layout(tab[0], NT);
    vr_cuda_mt_layout(tab[1], NT);
    vr_cuda_mt_tensor *dtab[2] = {dev_copy(tab[0], sizeof tab[0]), dev_copy(tab[1], sizeof tab[1])};
    for (int step = 1; step <= 3; step++) {
        OK(vr_cuda_mt_optim(ctx, kind, VR_CUDA_BF16, VR_CUDA_BF16, dtab[0], NT, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f,
                            0.9f, 0.1f, 0, 0.1f, step, 0.5f, NULL, NULL));
        OK((state_kernel ? vr_cuda_mt_optim_state : vr_cuda_mt_optim)(ctx, kind, VR_CUDA_BF16, VR_CUDA_BF16, dtab[1],
                                                                     NT, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.9f, 0.1f,
                                                                     0, 0.1f, step, 0.5f, NULL, NULL));
        CU(cudaDeviceSynchronize());
        long diff[3] = {0, 0, 0}, state = 0; /* masters, ties, other weights (kc_split_diff) */
        for (int t = 0; t < NT; t++) {
            size_t n = (size_t)sizes[t];
            kc_split_diff(mas[0][t], par[0][t], par[1][t], mas[1][t], n, diff);
            if (kind != VR_CUDA_MT_SGD)
                state += !kc_same_bytes(m[0][t], m[1][t], n * 4);
            if (kind >= VR_CUDA_MT_ADAM)
                state += !kc_same_bytes(v[0][t], v[1][t], n * 4);
        }
        long masters = diff[0], ties = diff[1], other = diff[2];
        printf("split master %s (%s kernel) step %d: %ld masters differ, %ld state buffers differ; params: %ld ties "
               "rounded away, %ld other differences\n", kinds[kind], state_kernel ? "compact-state" : "multi-tensor",
               step, masters, state, ties, other);
        assert_int_equal(masters, 0);
        assert_int_equal(state, 0);
        assert_int_equal(other, 0);
    }
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < NT; t++)
            cudaFree(par[k][t]), cudaFree(mas[k][t]), cudaFree(m[k][t]), cudaFree(v[k][t]);
    for (int t = 0; t < NT; t++)
        cudaFree(grad[t]);
    cudaFree(dtab[0]);
    cudaFree(dtab[1]);
}

static void split_master_equals_full(void **state)
{
    vr_cuda_ctx *ctx = *state;
    if (!ctx)
        skip();
    for (int kind = VR_CUDA_MT_SGD; kind <= VR_CUDA_MT_ADAMW; kind++)
        split_config(ctx, kind, false);
    split_config(ctx, VR_CUDA_MT_ADAMW, true);
    split_config(ctx, VR_CUDA_MT_MOMENTUM, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(mt_optim_equals_single, ctx_setup, ctx_teardown),
        cmocka_unit_test_setup_teardown(mt_sumsq_equals_single, ctx_setup, ctx_teardown),
        cmocka_unit_test_setup_teardown(split_master_equals_full, ctx_setup, ctx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
