/* The CUDA kernels against the CPU kernels (the CPU contract is the oracle).
 *
 * Without a GPU (cudaGetDeviceCount finds none) every test is skipped. With one, every op runs on
 * fresh random inputs, in fp32 and bf16 (fp16 where cheap), and its outputs are compared with the
 * CPU kernel's on the same inputs (for bf16/fp16, the CPU sees the inputs rounded to that dtype):
 *   relative error  ||out - ref||_2 / ||ref||_2  within TOL_F32 (1e-5; 1e-4 for long sums: attention,
 *   the classifier, reductions over many rows) or TOL_LOW (1e-2: bf16 and fp16 storage).
 * Outputs are filled with NaN before each run so that an element the kernel forgets to write shows
 * up as NaN (the error is then NaN and fails). acc = 1 is checked against prior + (the acc = 0 result).
 * Shapes: GPT-2 124M sizes (B=4, T=1024, C=768, NH=12, V=50257) and small odd ones.
 * Every measured error is printed. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cuda_runtime_api.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kcuda/kcuda_test.h"

#define TOL_F32 1e-5
#define TOL_F32_LONG 1e-4
#define TOL_LOW 1e-2

static vr_cuda_ctx ctx;
static void *workspace;
static int have_gpu = -1;
static uint64_t rng = 0x9E3779B97F4A7C15ULL;

/* ------------------------------------------------------------------ helpers */


static int gpu_present(void)
{
    if (have_gpu < 0) {
        int n = 0;
        have_gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        if (!have_gpu) cudaGetLastError();
    }
    return have_gpu;
}

static int setup(void **state)
{
    (void)state;
    if (!gpu_present()) return 0;
    size_t ws = vr_cuda_matmul_workspace_bytes();
    if (cudaMalloc(&workspace, ws) != cudaSuccess) return -1;
    if (vr_cuda_ctx_init(&ctx, NULL, workspace, ws) != VR_OK) return -1;
    /* VRAM_ATTN_V1=1|fwd|bwd (this test's switch) runs the attention tests on the first kernels */
    const char *v1 = getenv("VRAM_ATTN_V1");
    ctx.attention_v1 = !v1 || !v1[0] || !strcmp(v1, "0") ? 0 : !strcmp(v1, "fwd") ? 1 : !strcmp(v1, "bwd") ? 2 : 3;
    struct cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    print_message("GPU: %s, %d SMs, compute %d.%d\n", p.name, ctx.sm_count, p.major, p.minor);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!gpu_present()) return 0;
    vr_cuda_ctx_destroy(&ctx);
    cudaFree(workspace);
    return 0;
}

#define NEED_GPU()                   \
    do {                             \
        if (!gpu_present()) skip();  \
    } while (0)

static float urand(float lo, float hi)
{
    uint64_t x = rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng = x;
    return lo + (hi - lo) * (float)(((x * 0x2545F4914F6CDD1DULL) >> 40) * (1.0 / 16777216.0));
}

static float *hrand(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
    return p;
}

static float *hzero(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static float *hcopy(const float *x, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CU(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

/* Scratch with a guard band, to see that a kernel given n bytes of scratch uses no more (the plan gives
 * each node exactly the size function's bytes, kernels/scratch.h): dalloc_guarded(cap) holds cap bytes and
 * VR_GUARD more; guard_set fills everything from byte n on with 0xA5, guard_check fails naming `what` if a
 * byte of it changed. */
#define VR_GUARD 4096
static void *dalloc_guarded(size_t cap) { return dalloc(cap + VR_GUARD); }
static void guard_set(void *p, size_t n, size_t cap) { CU(cudaMemset((char *)p + n, 0xA5, cap + VR_GUARD - n)); }
static void guard_check(const char *what, const void *p, size_t n, size_t cap)
{
    size_t len = cap + VR_GUARD - n;
    unsigned char *h = malloc(len);
    CU(cudaMemcpy(h, (const char *)p + n, len, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < len; i++)
        if (h[i] != 0xA5) {
            free(h);
            fail_msg("%s: wrote byte %zu past the %zu bytes of scratch it was given", what, i, n);
        }
    free(h);
}

/* Device buffer of dt holding h (h is rounded in place to dt, so the CPU reference sees what the GPU
 * sees). */
static void *up(vr_cuda_dtype dt, float *h, size_t n)
{
    void *f = dalloc(n * 4);
    CU(cudaMemcpy(f, h, n * 4, cudaMemcpyHostToDevice));
    if (dt == VR_CUDA_F32) return f;
    void *d = dalloc(n * vr_cuda_dtype_size(dt));
    OK(vr_cuda_convert(&ctx, dt, d, VR_CUDA_F32, f, n));
    OK(vr_cuda_convert(&ctx, VR_CUDA_F32, f, dt, d, n));
    CU(cudaMemcpy(h, f, n * 4, cudaMemcpyDeviceToHost));
    cudaFree(f);
    return d;
}

/* Device buffer of n elements of dt filled with NaN. */
static void *dnan(vr_cuda_dtype dt, size_t n)
{
    void *d = dalloc(n * vr_cuda_dtype_size(dt));
    OK(vr_cuda_fill(&ctx, dt, d, n, NAN));
    return d;
}

static void poison(vr_cuda_dtype dt, void *d, size_t n) { OK(vr_cuda_fill(&ctx, dt, d, n, NAN)); }

static float *down(vr_cuda_dtype dt, const void *d, size_t n)
{
    float *h = hzero(n);
    if (dt == VR_CUDA_F32) {
        CU(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
        return h;
    }
    void *f = dalloc(n * 4);
    OK(vr_cuda_convert(&ctx, VR_CUDA_F32, f, dt, d, n));
    CU(cudaMemcpy(h, f, n * 4, cudaMemcpyDeviceToHost));
    cudaFree(f);
    return h;
}

static double relerr(const float *out, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0.0) return sqrt(num);
    return sqrt(num / den);
}

static double tol_for(vr_cuda_dtype dt, double f32tol) { return dt == VR_CUDA_F32 ? f32tol : TOL_LOW; }

/* Compares device tensor d (dt) with host reference ref; prints and asserts. */
static void expect_close(const char *what, vr_cuda_dtype dt, const void *d, const float *ref, size_t n,
                         double tol)
{
    CU(cudaDeviceSynchronize());
    float *h = down(dt, d, n);
    double e = relerr(h, ref, n);
    print_message("    %-44s %-4s n=%-10zu rel err %.2e (tol %.0e)\n", what, vr_cuda_dtype_name(dt), n, e, tol);
    if (!(e <= tol)) { // where: the first few elements off by more than the tolerance
        double rn = 0.0;
        for (size_t i = 0; i < n; i++) rn += (double)ref[i] * ref[i];
        rn = sqrt(rn / (n ? n : 1));
        int shown = 0;
        for (size_t i = 0; i < n && shown < 8; i++)
            if (!(fabs((double)h[i] - ref[i]) <= tol * rn)) {
                print_message("      [%zu] got %.7g want %.7g\n", i, h[i], ref[i]);
                shown++;
            }
    }
    free(h);
    if (!(e <= tol)) fail_msg("%s (%s): rel err %.3e > %.0e", what, vr_cuda_dtype_name(dt), e, tol);
}

/* acc = 1 check: device d (after an acc = 1 run over prior) against prior + fresh. */
static void expect_acc(const char *what, vr_cuda_dtype dt, const void *d, const float *prior, const float *fresh,
                       size_t n)
{
    float *sum = hzero(n);
    for (size_t i = 0; i < n; i++) sum[i] = prior[i] + fresh[i];
    char buf[96];
    snprintf(buf, sizeof buf, "%s acc=1", what);
    expect_close(buf, dt, d, sum, n, dt == VR_CUDA_F32 ? TOL_F32 : TOL_LOW);
    free(sum);
}

static const vr_cuda_dtype DTS[] = {VR_CUDA_F32, VR_CUDA_BF16, VR_CUDA_F16};

/* ------------------------------------------------------------------ elementwise */

static void test_elementwise(void **state)
{
    (void)state;
    NEED_GPU();
    size_t sizes[] = {1, 7, 1000, 4 * 1024 * 768 + 3};
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        for (int si = 0; si < 4; si++) {
            size_t n = sizes[si];
            float *a = hrand(n, -3, 3), *b = hrand(n, -3, 3), *prior = hrand(n, -1, 1);
            void *da = up(dt, a, n), *db = up(dt, b, n), *dp = up(dt, prior, n);
            void *out = dnan(dt, n);
            float *ref = hzero(n);

            OK(vr_cuda_add_fwd(&ctx, dt, out, da, db, n));
            vr_cpu_add_fwd(ref, a, b, n);
            expect_close("add_fwd", dt, out, ref, n, tol_for(dt, TOL_F32));

            poison(dt, out, n);
            OK(vr_cuda_acc(&ctx, dt, out, da, n, 0));
            expect_close("acc acc=0", dt, out, a, n, tol_for(dt, TOL_F32));
            CU(cudaMemcpy(out, dp, n * vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice));
            OK(vr_cuda_acc(&ctx, dt, out, da, n, 1));
            expect_acc("acc", dt, out, prior, a, n);

            CU(cudaMemcpy(out, da, n * vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice));
            OK(vr_cuda_scale(&ctx, dt, out, n, 0.37f));
            memcpy(ref, a, n * 4);
            vr_cpu_scale(ref, n, 0.37f);
            expect_close("scale", dt, out, ref, n, tol_for(dt, TOL_F32));

            poison(dt, out, n);
            OK(vr_cuda_gelu_fwd(&ctx, dt, out, da, n));
            vr_cpu_gelu_fwd(ref, a, n);
            expect_close("gelu_fwd", dt, out, ref, n, tol_for(dt, TOL_F32));

            poison(dt, out, n);
            OK(vr_cuda_gelu_bwd(&ctx, dt, out, da, db, n, 0));
            vr_cpu_gelu_bwd(ref, a, b, n, 0);
            expect_close("gelu_bwd", dt, out, ref, n, tol_for(dt, TOL_F32));
            CU(cudaMemcpy(out, dp, n * vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice));
            OK(vr_cuda_gelu_bwd(&ctx, dt, out, da, db, n, 1));
            expect_acc("gelu_bwd", dt, out, prior, ref, n);

            poison(dt, out, n);
            OK(vr_cuda_relu_fwd(&ctx, dt, out, da, n));
            vr_cpu_relu_fwd(ref, a, n);
            expect_close("relu_fwd", dt, out, ref, n, tol_for(dt, TOL_F32));

            poison(dt, out, n);
            OK(vr_cuda_relu_bwd(&ctx, dt, out, da, db, n, 0));
            vr_cpu_relu_bwd(ref, a, b, n, 0);
            expect_close("relu_bwd", dt, out, ref, n, tol_for(dt, TOL_F32));
            CU(cudaMemcpy(out, dp, n * vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice));
            OK(vr_cuda_relu_bwd(&ctx, dt, out, da, db, n, 1));
            expect_acc("relu_bwd", dt, out, prior, ref, n);

            // in place: gelu_bwd with dinp aliasing dout
            CU(cudaMemcpy(out, db, n * vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice));
            OK(vr_cuda_gelu_bwd(&ctx, dt, out, da, out, n, 0));
            vr_cpu_gelu_bwd(ref, a, b, n, 0);
            expect_close("gelu_bwd in place", dt, out, ref, n, tol_for(dt, TOL_F32));

            poison(dt, out, n);
            OK(vr_cuda_fill(&ctx, dt, out, n, 1.5f));
            for (size_t i = 0; i < n; i++) ref[i] = 1.5f;
            expect_close("fill", dt, out, ref, n, 0.0);
            OK(vr_cuda_zero(&ctx, dt, out, n));
            float *z = down(dt, out, n);
            for (size_t i = 0; i < n; i++) assert_true(z[i] == 0.0f);
            free(z);

            free(a), free(b), free(prior), free(ref);
            cudaFree(da), cudaFree(db), cudaFree(dp), cudaFree(out);
        }
    }
}

/* Conversions against host-side rounding of a few known values. */
static void test_convert(void **state)
{
    (void)state;
    NEED_GPU();
    float h[6] = {1.0f, 1.00390625f /* 1 + 2^-8: bf16 tie, rounds to even (1.0) */, 1.01171875f, -2.5f, 3.0e38f,
                  1e-3f};
    // 3e38 = 225.7 steps of 2^120 (bf16 spacing at 2^127) -> 226 * 2^120
    float want_bf16[6] = {1.0f, 1.0f, 1.015625f, -2.5f, 3.00405527e38f, 0.00099945068f};
    void *f = up(VR_CUDA_F32, h, 6);
    void *b = dnan(VR_CUDA_BF16, 6);
    OK(vr_cuda_convert(&ctx, VR_CUDA_BF16, b, VR_CUDA_F32, f, 6));
    float *back = down(VR_CUDA_BF16, b, 6);
    for (int i = 0; i < 6; i++) {
        print_message("    bf16(%.9g) = %.9g (want %.9g)\n", h[i], back[i], want_bf16[i]);
        assert_true(fabsf(back[i] - want_bf16[i]) <= 1e-3f * fabsf(want_bf16[i]));
    }
    // bf16 <-> fp16 through fp32 values that both represent exactly
    float e[4] = {0.5f, -1.25f, 2.0f, 0.0f};
    void *eb = up(VR_CUDA_BF16, e, 4), *eh = dnan(VR_CUDA_F16, 4);
    OK(vr_cuda_convert(&ctx, VR_CUDA_F16, eh, VR_CUDA_BF16, eb, 4));
    float *eback = down(VR_CUDA_F16, eh, 4);
    for (int i = 0; i < 4; i++) assert_true(eback[i] == e[i]);
    free(back), free(eback);
    cudaFree(f), cudaFree(b), cudaFree(eb), cudaFree(eh);
}

/* ------------------------------------------------------------------ reductions */

static void test_reductions(void **state)
{
    (void)state;
    NEED_GPU();
    size_t sizes[] = {1, 333, 124439808 / 16};
    float *d_out = dalloc(4 * 4);
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        for (int si = 0; si < 3; si++) {
            size_t n = sizes[si];
            float *x = hrand(n, -1, 1), *y = hrand(n, -1, 1);
            void *dx = up(dt, x, n), *dy = up(dt, y, n);
            OK(vr_cuda_sumsq(&ctx, dt, d_out, dx, n, 0));
            OK(vr_cuda_sumsq(&ctx, dt, d_out, dy, n, 1));
            float ref = (float)(vr_cpu_sumsq(x, n) + vr_cpu_sumsq(y, n));
            expect_close("sumsq (acc over two tensors)", VR_CUDA_F32, d_out, &ref, 1, TOL_F32_LONG);
            OK(vr_cuda_sum(&ctx, dt, d_out, dx, n, 0));
            ref = (float)vr_cpu_sum(x, n);
            // a sum of +-1 values cancels: compare against the sum of |x| as the scale
            CU(cudaDeviceSynchronize());
            float got;
            CU(cudaMemcpy(&got, d_out, 4, cudaMemcpyDeviceToHost));
            double scale = 0;
            for (size_t i = 0; i < n; i++) scale += fabs(x[i]);
            double e = fabs(got - ref) / scale;
            print_message("    %-44s %-4s n=%-10zu rel err %.2e (of sum |x|)\n", "sum", vr_cuda_dtype_name(dt), n, e);
            assert_true(e <= TOL_F32_LONG);

            void *dm = dnan(dt, 1);
            OK(vr_cuda_mean_fwd(&ctx, dt, dm, dx, n));
            float mref;
            vr_cpu_mean_fwd(&mref, x, n);
            float *mg = down(dt, dm, 1);
            double me = fabs(mg[0] - mref) * (double)n / scale;
            print_message("    %-44s %-4s n=%-10zu rel err %.2e (of mean |x|)\n", "mean_fwd", vr_cuda_dtype_name(dt),
                          n, me);
            assert_true(me <= (dt == VR_CUDA_F32 ? TOL_F32_LONG : TOL_LOW));
            free(mg);

            // fp16: g/n above the smallest normal (6.1e-5) and g below the largest value
            float g = dt == VR_CUDA_F16 ? 0.75f * (float)(n < 65536 ? n : 65536) / 64.0f : 0.75f;
            void *dg = up(dt, &g, 1), *dd = dnan(dt, n);
            float *ref_d = hzero(n), *prior = hrand(n, -1, 1);
            OK(vr_cuda_mean_bwd(&ctx, dt, dd, dg, n, 0));
            vr_cpu_mean_bwd(ref_d, &g, n, 0);
            expect_close("mean_bwd", dt, dd, ref_d, n, tol_for(dt, TOL_F32));
            void *dp = up(dt, prior, n);
            OK(vr_cuda_mean_bwd(&ctx, dt, dp, dg, n, 1));
            expect_acc("mean_bwd", dt, dp, prior, ref_d, n);
            free(x), free(y), free(ref_d), free(prior);
            cudaFree(dx), cudaFree(dy), cudaFree(dm), cudaFree(dg), cudaFree(dd), cudaFree(dp);
        }
    }
    // clip factor: norm 5 with max 1 -> scale extra/5; max 10 -> extra
    float ss = 25.0f, res[2];
    float *d_ss = up(VR_CUDA_F32, &ss, 1);
    OK(vr_cuda_clip_scale(&ctx, d_out, d_out + 1, NULL, d_ss, 1.0f, 0.5f, 1.0f));
    CU(cudaMemcpy(res, d_out, 8, cudaMemcpyDeviceToHost));
    print_message("    clip_scale: scale %.7g (want %.7g), norm %.7g\n", res[0], 0.5 / (5 + 1e-6), res[1]);
    assert_true(fabs(res[0] - 0.5 / (5.0 + 1e-6)) < 1e-6 && res[1] == 5.0f);
    OK(vr_cuda_clip_scale(&ctx, d_out, NULL, NULL, d_ss, 10.0f, 0.5f, 1.0f));
    CU(cudaMemcpy(res, d_out, 4, cudaMemcpyDeviceToHost));
    assert_true(res[0] == 0.5f);
    // under a loss scale of 4: sumsq 25 is a true norm of 5/4 -> factor 1/(1.25) clipped to max 1, times 1/4
    int32_t skip = -1;
    int32_t *d_skip = dalloc(4);
    OK(vr_cuda_clip_scale(&ctx, d_out, d_out + 1, d_skip, d_ss, 1.0f, 1.0f, 0.25f));
    CU(cudaMemcpy(res, d_out, 8, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(&skip, d_skip, 4, cudaMemcpyDeviceToHost));
    print_message("    clip_scale unscale 1/4: scale %.7g (want %.7g), norm %.7g, skip %d\n", res[0],
                  0.25 / (1.25 + 1e-6), res[1], skip);
    assert_true(fabs(res[0] - 0.25 / (1.25 + 1e-6)) < 1e-6 && res[1] == 1.25f && skip == 0);
    ss = INFINITY; // an overflow: skip
    CU(cudaMemcpy(d_ss, &ss, 4, cudaMemcpyHostToDevice));
    OK(vr_cuda_clip_scale(&ctx, d_out, d_out + 1, d_skip, d_ss, 1.0f, 1.0f, 0.25f));
    CU(cudaMemcpy(&skip, d_skip, 4, cudaMemcpyDeviceToHost));
    assert_int_equal(skip, 1);
    cudaFree(d_skip);
    cudaFree(d_ss);
    cudaFree(d_out);
}

/* ------------------------------------------------------------------ loss scaling */

static void test_loss_scaling(void **state)
{
    (void)state;
    NEED_GPU();
    size_t n = 100003;
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        float *x = hrand(n, -1, 1);
        void *dx = up(dt, x, n);
        int32_t *found = dalloc(4), hf;
        OK(vr_cuda_zero(&ctx, VR_CUDA_F32, found, 1));
        OK(vr_cuda_check_finite(&ctx, dt, found, dx, n));
        CU(cudaMemcpy(&hf, found, 4, cudaMemcpyDeviceToHost));
        assert_int_equal(hf, 0);
        float bad[2] = {INFINITY, NAN};
        for (int k = 0; k < 2; k++) {
            x[n - 1 - k * 5000] = bad[k];
            cudaFree(dx);
            dx = up(dt, x, n);
            OK(vr_cuda_zero(&ctx, VR_CUDA_F32, found, 1));
            OK(vr_cuda_check_finite(&ctx, dt, found, dx, n));
            CU(cudaMemcpy(&hf, found, 4, cudaMemcpyDeviceToHost));
            assert_int_equal(hf, 1);
        }
        print_message("    check_finite %-4s: clean 0, inf 1, nan 1\n", vr_cuda_dtype_name(dt));
        free(x);
        cudaFree(dx);
        cudaFree(found);
    }
    // GradScaler update: growth after `interval` clean steps, backoff on overflow
    float *scale = dalloc(4), *inv = dalloc(4), hs = 65536.0f, hinv;
    int32_t *tracker = dalloc(4), *found = dalloc(4), zero = 0, one = 1;
    CU(cudaMemcpy(scale, &hs, 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(tracker, &zero, 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(found, &zero, 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < 3; i++) OK(vr_cuda_loss_scale_update(&ctx, scale, tracker, found, 2.0f, 0.5f, 3));
    CU(cudaMemcpy(&hs, scale, 4, cudaMemcpyDeviceToHost));
    assert_true(hs == 131072.0f);
    CU(cudaMemcpy(found, &one, 4, cudaMemcpyHostToDevice));
    OK(vr_cuda_loss_scale_update(&ctx, scale, tracker, found, 2.0f, 0.5f, 3));
    CU(cudaMemcpy(&hs, scale, 4, cudaMemcpyDeviceToHost));
    assert_true(hs == 65536.0f);
    OK(vr_cuda_reciprocal(&ctx, inv, scale, 2.0f));
    CU(cudaMemcpy(&hinv, inv, 4, cudaMemcpyDeviceToHost));
    assert_true(hinv == 2.0f / 65536.0f);
    print_message("    loss_scale_update: grow x2 after 3 clean steps, back off x0.5 on overflow; reciprocal ok\n");
    cudaFree(scale), cudaFree(inv), cudaFree(tracker), cudaFree(found);
}

/* ------------------------------------------------------------------ embedding */

static void run_embedding(vr_cuda_dtype dt, int B, int T, int C, int V, int repeat_tokens)
{
    size_t BT = (size_t)B * T;
    int32_t *tok = malloc(BT * 4);
    for (size_t i = 0; i < BT; i++) tok[i] = repeat_tokens ? (int32_t)(i % 5) * (V / 5) : (int32_t)(urand(0, 1) * V) % V;
    float *wte = hrand((size_t)V * C, -1, 1), *wpe = hrand((size_t)T * C, -1, 1), *dout = hrand(BT * C, -1, 1);
    void *dwte_in = up(dt, wte, (size_t)V * C), *dwpe_in = up(dt, wpe, (size_t)T * C), *ddout = up(dt, dout, BT * C);
    int32_t *dtok = dalloc(BT * 4);
    CU(cudaMemcpy(dtok, tok, BT * 4, cudaMemcpyHostToDevice));
    void *out = dnan(dt, BT * C);
    float *ref = hzero(BT * C);
    char what[80];
    snprintf(what, sizeof what, "embedding_fwd B%d T%d C%d V%d", B, T, C, V);
    OK(vr_cuda_embedding_fwd(&ctx, dt, out, dtok, dwte_in, dwpe_in, B, T, C));
    vr_cpu_embedding_fwd(ref, tok, wte, wpe, B, T, C);
    expect_close(what, dt, out, ref, BT * C, tol_for(dt, TOL_F32));

    size_t sb = vr_cuda_embedding_bwd_scratch_bytes(B, T, V);
    void *scratch = dalloc_guarded(sb);
    guard_set(scratch, sb, sb);
    void *gwte = dnan(dt, (size_t)V * C), *gwpe = dnan(dt, (size_t)T * C);
    float *rwte = hzero((size_t)V * C), *rwpe = hzero((size_t)T * C);
    OK(vr_cuda_embedding_bwd(&ctx, dt, gwte, gwpe, ddout, dtok, B, T, C, V, 0, scratch, sb));
    vr_cpu_embedding_bwd(rwte, rwpe, dout, tok, B, T, C, V, 0);
    snprintf(what, sizeof what, "embedding_bwd dwte%s", repeat_tokens ? " (5 tokens)" : "");
    expect_close(what, dt, gwte, rwte, (size_t)V * C, tol_for(dt, TOL_F32_LONG));
    expect_close("embedding_bwd dwpe", dt, gwpe, rwpe, (size_t)T * C, tol_for(dt, TOL_F32));
    // deterministic: a second run gives the same bits
    float *first = down(dt, gwte, (size_t)V * C);
    poison(dt, gwte, (size_t)V * C);
    OK(vr_cuda_embedding_bwd(&ctx, dt, gwte, NULL, ddout, dtok, B, T, C, V, 0, scratch, sb));
    float *second = down(dt, gwte, (size_t)V * C);
    assert_memory_equal(first, second, (size_t)V * C * 4);
    // acc = 1 on top of random priors
    float *pwte = hrand((size_t)V * C, -1, 1), *pwpe = hrand((size_t)T * C, -1, 1);
    void *awte = up(dt, pwte, (size_t)V * C), *awpe = up(dt, pwpe, (size_t)T * C);
    OK(vr_cuda_embedding_bwd(&ctx, dt, awte, awpe, ddout, dtok, B, T, C, V, 1, scratch, sb));
    expect_acc("embedding_bwd dwte", dt, awte, pwte, rwte, (size_t)V * C);
    expect_acc("embedding_bwd dwpe", dt, awpe, pwpe, rwpe, (size_t)T * C);
    guard_check("embedding_bwd", scratch, sb, sb);
    free(tok), free(wte), free(wpe), free(dout), free(ref), free(rwte), free(rwpe), free(first), free(second);
    free(pwte), free(pwpe);
    cudaFree(dwte_in), cudaFree(dwpe_in), cudaFree(ddout), cudaFree(dtok), cudaFree(out), cudaFree(scratch);
    cudaFree(gwte), cudaFree(gwpe), cudaFree(awte), cudaFree(awpe);
}

static void test_embedding(void **state)
{
    (void)state;
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        run_embedding(DTS[di], 3, 7, 13, 29, 0);
        run_embedding(DTS[di], 2, 33, 48, 1000, 1);
        run_embedding(DTS[di], 4, 1024, 768, 50257, 0);
        run_embedding(DTS[di], 8, 1024, 768, 50257, 1); /* runs of 1638 rows: spread over a block */
        run_embedding(DTS[di], 4, 300, 13, 100, 1);     /* odd C: no vector loads */
        run_embedding(DTS[di], 2, 64, 4096, 500, 1);    /* C of the 6.7B shape: the shared-memory limit */
        run_embedding(DTS[di], 1, 32, 16384, 100, 1);   /* beyond 48 KiB of partial sums: opted in */
    }
}

/* ------------------------------------------------------------------ matmul */

static void run_matmul(vr_cuda_dtype dt, int N, int C, int OC, int with_bias)
{
    float *inp = hrand((size_t)N * C, -1, 1), *w = hrand((size_t)OC * C, -0.2f, 0.2f),
          *bias = with_bias ? hrand(OC, -1, 1) : NULL, *dout = hrand((size_t)N * OC, -1, 1);
    void *dinp_in = up(dt, inp, (size_t)N * C), *dw_in = up(dt, w, (size_t)OC * C),
         *db_in = with_bias ? up(dt, bias, OC) : NULL, *ddout = up(dt, dout, (size_t)N * OC);
    double tol = tol_for(dt, TOL_F32_LONG);
    char what[96];
    void *out = dnan(dt, (size_t)N * OC);
    float *ref = hzero((size_t)N * OC);
    snprintf(what, sizeof what, "matmul_fwd N%d C%d OC%d%s", N, C, OC, with_bias ? " +bias" : "");
    OK(vr_cuda_matmul_fwd(&ctx, dt, out, dinp_in, dw_in, db_in, N, C, OC));
    vr_cpu_matmul_fwd(ref, inp, w, bias, N, C, OC);
    expect_close(what, dt, out, ref, (size_t)N * OC, tol);

    // fused GELU: pre equals the plain product, out = gelu(pre)
    void *pre = dnan(dt, (size_t)N * OC);
    poison(dt, out, (size_t)N * OC);
    OK(vr_cuda_matmul_gelu_fwd(&ctx, dt, out, pre, dinp_in, dw_in, db_in, N, C, OC));
    float *gref = hzero((size_t)N * OC);
    vr_cpu_gelu_fwd(gref, ref, (size_t)N * OC);
    expect_close("matmul_gelu_fwd pre", dt, pre, ref, (size_t)N * OC, tol);
    expect_close("matmul_gelu_fwd out", dt, out, gref, (size_t)N * OC, dt == VR_CUDA_F32 ? 1e-3 : TOL_LOW);

    float *rdinp = hzero((size_t)N * C), *rdw = hzero((size_t)OC * C), *rdb = hzero(OC);
    vr_cpu_matmul_bwd(rdinp, rdw, with_bias ? rdb : NULL, dout, inp, w, N, C, OC, 0, 0);
    void *gdinp = dnan(dt, (size_t)N * C), *gdw = dnan(dt, (size_t)OC * C), *gdb = with_bias ? dnan(dt, OC) : NULL;
    OK(vr_cuda_matmul_bwd(&ctx, dt, gdinp, gdw, gdb, ddout, dinp_in, dw_in, N, C, OC, 0, 0));
    expect_close("matmul_bwd dinp", dt, gdinp, rdinp, (size_t)N * C, tol);
    expect_close("matmul_bwd dw", dt, gdw, rdw, (size_t)OC * C, tol);
    if (with_bias) expect_close("matmul_bwd dbias", dt, gdb, rdb, OC, tol);
    // dbias alone (no dw): the column-sum kernel
    if (with_bias) {
        poison(dt, gdb, OC);
        OK(vr_cuda_matmul_bwd(&ctx, dt, NULL, NULL, gdb, ddout, dinp_in, dw_in, N, C, OC, 0, 0));
        expect_close("matmul_bwd dbias (colsum)", dt, gdb, rdb, OC, tol);
    }
    // acc = 1
    float *p1 = hrand((size_t)N * C, -1, 1), *p2 = hrand((size_t)OC * C, -1, 1), *p3 = hrand(OC, -1, 1);
    void *a1 = up(dt, p1, (size_t)N * C), *a2 = up(dt, p2, (size_t)OC * C), *a3 = with_bias ? up(dt, p3, OC) : NULL;
    OK(vr_cuda_matmul_bwd(&ctx, dt, a1, a2, a3, ddout, dinp_in, dw_in, N, C, OC, 1, 1));
    expect_acc("matmul_bwd dinp", dt, a1, p1, rdinp, (size_t)N * C);
    expect_acc("matmul_bwd dw", dt, a2, p2, rdw, (size_t)OC * C);
    if (with_bias) expect_acc("matmul_bwd dbias", dt, a3, p3, rdb, OC);

    // fused GELU backward: dpre(N,C) = (dout w) * gelu'(pre), the DGELU epilogue (where cuBLASLt has one)
    {
        float *hp = hrand((size_t)N * C, -3, 3), *rdpre = hzero((size_t)N * C);
        void *dpre_in = up(dt, hp, (size_t)N * C), *gdpre = dnan(dt, (size_t)N * C);
        float *hpr = down(dt, dpre_in, (size_t)N * C); /* pre as the device holds it */
        vr_cpu_gelu_bwd(rdpre, hpr, rdinp, (size_t)N * C, 0);
        vr_status dst = vr_cuda_matmul_dgelu_bwd(&ctx, dt, gdpre, ddout, dw_in, dpre_in, N, C, OC);
        if (dst == VR_ERR_UNSUPPORTED) {
            printf("matmul_dgelu_bwd %s N%d C%d OC%d: no cuBLASLt algorithm (the executor runs the two steps)\n",
                   vr_cuda_dtype_name(dt), N, C, OC);
        } else {
            OK(dst);
            expect_close("matmul_dgelu_bwd", dt, gdpre, rdpre, (size_t)N * C, dt == VR_CUDA_F32 ? 1e-3 : TOL_LOW);
        }
        assert_int_equal(vr_cuda_matmul_dgelu_bwd(&ctx, dt, dpre_in, ddout, dw_in, dpre_in, N, C, OC),
                         VR_ERR_INVALID); /* dpre aliasing pre */
        vr_clear_error();
        free(hp), free(rdpre), free(hpr);
        cudaFree(dpre_in), cudaFree(gdpre);
    }

    // general gemm: D(N,OC) = inp(N,C) w(OC,C)^T through the row-major entry point
    poison(dt, out, (size_t)N * OC);
    OK(vr_cuda_gemm(&ctx, dt, out, dinp_in, dw_in, N, OC, C, C, C, OC, 0, 1, 1.0f, 0));
    float *ref2 = hzero((size_t)N * OC);
    vr_cpu_matmul_fwd(ref2, inp, w, NULL, N, C, OC);
    expect_close("gemm (A B^T)", dt, out, ref2, (size_t)N * OC, tol);

    free(inp), free(w), free(bias), free(dout), free(ref), free(gref), free(rdinp), free(rdw), free(rdb);
    free(p1), free(p2), free(p3), free(ref2);
    cudaFree(dinp_in), cudaFree(dw_in), cudaFree(db_in), cudaFree(ddout), cudaFree(out), cudaFree(pre);
    cudaFree(gdinp), cudaFree(gdw), cudaFree(gdb), cudaFree(a1), cudaFree(a2), cudaFree(a3);
}

static void test_matmul(void **state)
{
    (void)state;
    NEED_GPU();
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        run_matmul(dt, 1, 8, 8, 1);
        run_matmul(dt, 37, 24, 40, 1);
        run_matmul(dt, 37, 24, 40, 0);
        run_matmul(dt, 1000, 16, 100, 1);    // bias gradient: column sums, unaligned rows (scalar loads)
        run_matmul(dt, 300, 16, 33000, 1);   // ... partials beyond the workspace's reserve: one pass
        if (dt == VR_CUDA_F16) continue;
        run_matmul(dt, 4096, 768, 2304, 1);  // qkv
        run_matmul(dt, 4096, 768, 3072, 1);  // fc
        run_matmul(dt, 4096, 3072, 768, 1);  // proj
    }
}

/* ------------------------------------------------------------------ layernorm */

static void run_layernorm(vr_cuda_dtype dt, int N, int C)
{
    size_t n = (size_t)N * C;
    float *inp = hrand(n, -2, 2), *w = hrand(C, 0.5f, 1.5f), *b = hrand(C, -0.5f, 0.5f), *dout = hrand(n, -1, 1);
    void *di = up(dt, inp, n), *dw = up(dt, w, C), *dbb = up(dt, b, C), *dd = up(dt, dout, n);
    void *out = dnan(dt, n);
    float *mean = dnan(VR_CUDA_F32, N), *rstd = dnan(VR_CUDA_F32, N);
    float *ref = hzero(n), *rm = hzero(N), *rr = hzero(N);
    char what[80];
    snprintf(what, sizeof what, "layernorm_fwd N%d C%d", N, C);
    OK(vr_cuda_layernorm_fwd(&ctx, dt, out, mean, rstd, di, dw, dbb, N, C));
    vr_cpu_layernorm_fwd(ref, rm, rr, inp, w, b, N, C);
    expect_close(what, dt, out, ref, n, tol_for(dt, TOL_F32));
    expect_close("layernorm_fwd mean", VR_CUDA_F32, mean, rm, N, TOL_F32);
    expect_close("layernorm_fwd rstd", VR_CUDA_F32, rstd, rr, N, TOL_F32);

    float *rdi = hzero(n), *rdw = hzero(C), *rdb = hzero(C);
    vr_cpu_layernorm_bwd(rdi, rdw, rdb, dout, inp, w, rm, rr, N, C, 0, 0);
    size_t sb = vr_cuda_layernorm_bwd_scratch_bytes(N, C);
    void *scratch = dalloc_guarded(sb);
    guard_set(scratch, sb, sb);
    void *gdi = dnan(dt, n), *gdw = dnan(dt, C), *gdb = dnan(dt, C);
    OK(vr_cuda_layernorm_bwd(&ctx, dt, gdi, gdw, gdb, dd, di, dw, mean, rstd, N, C, 0, 0, scratch, sb));
    expect_close("layernorm_bwd dinp", dt, gdi, rdi, n, tol_for(dt, TOL_F32_LONG));
    expect_close("layernorm_bwd dw", dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
    expect_close("layernorm_bwd db", dt, gdb, rdb, C, tol_for(dt, TOL_F32_LONG));
    float *p1 = hrand(n, -1, 1), *p2 = hrand(C, -1, 1), *p3 = hrand(C, -1, 1);
    void *a1 = up(dt, p1, n), *a2 = up(dt, p2, C), *a3 = up(dt, p3, C);
    OK(vr_cuda_layernorm_bwd(&ctx, dt, a1, a2, a3, dd, di, dw, mean, rstd, N, C, 1, 1, scratch, sb));
    expect_acc("layernorm_bwd dinp", dt, a1, p1, rdi, n);
    expect_acc("layernorm_bwd dw", dt, a2, p2, rdw, C);
    expect_acc("layernorm_bwd db", dt, a3, p3, rdb, C);
    // the ctx workspace may serve as the scratch
    if (sb <= ctx.workspace_bytes) {
        poison(dt, gdw, C);
        OK(vr_cuda_layernorm_bwd(&ctx, dt, NULL, gdw, gdb, dd, di, dw, mean, rstd, N, C, 0, 0, ctx.workspace,
                                 ctx.workspace_bytes));
        expect_close("layernorm_bwd dw (workspace scratch)", dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
    }
    // a frozen weight or bias: db or dw alone, from the same scratch
    poison(dt, gdb, C);
    OK(vr_cuda_layernorm_bwd(&ctx, dt, NULL, NULL, gdb, dd, di, dw, mean, rstd, N, C, 0, 0, scratch, sb));
    expect_close("layernorm_bwd db alone", dt, gdb, rdb, C, tol_for(dt, TOL_F32_LONG));
    poison(dt, gdw, C);
    OK(vr_cuda_layernorm_bwd(&ctx, dt, NULL, gdw, NULL, dd, di, dw, mean, rstd, N, C, 0, 0, scratch, sb));
    expect_close("layernorm_bwd dw alone", dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
    guard_check("layernorm_bwd", scratch, sb, sb);
    free(inp), free(w), free(b), free(dout), free(ref), free(rm), free(rr), free(rdi), free(rdw), free(rdb);
    free(p1), free(p2), free(p3);
    cudaFree(di), cudaFree(dw), cudaFree(dbb), cudaFree(dd), cudaFree(out), cudaFree(mean), cudaFree(rstd);
    cudaFree(scratch), cudaFree(gdi), cudaFree(gdw), cudaFree(gdb), cudaFree(a1), cudaFree(a2), cudaFree(a3);
}

/* The backward twice on the same inputs: bit for bit the same dinp, dw and db (a fixed summation order). */
static void run_layernorm_determinism(vr_cuda_dtype dt, int N, int C)
{
    size_t n = (size_t)N * C, es = vr_cuda_dtype_size(dt);
    float *inp = hrand(n, -2, 2), *w = hrand(C, 0.5f, 1.5f), *b = hrand(C, -0.5f, 0.5f), *dout = hrand(n, -1, 1);
    void *di = up(dt, inp, n), *dw = up(dt, w, C), *dbb = up(dt, b, C), *dd = up(dt, dout, n);
    void *out = dnan(dt, n);
    float *mean = dnan(VR_CUDA_F32, N), *rstd = dnan(VR_CUDA_F32, N);
    OK(vr_cuda_layernorm_fwd(&ctx, dt, out, mean, rstd, di, dw, dbb, N, C));
    size_t sb = vr_cuda_layernorm_bwd_scratch_bytes(N, C);
    void *scratch = dalloc(sb), *g[2][3];
    for (int r = 0; r < 2; r++) {
        g[r][0] = dnan(dt, n), g[r][1] = dnan(dt, C), g[r][2] = dnan(dt, C);
        OK(vr_cuda_layernorm_bwd(&ctx, dt, g[r][0], g[r][1], g[r][2], dd, di, dw, mean, rstd, N, C, 0, 0, scratch,
                                 sb));
    }
    CU(cudaDeviceSynchronize());
    print_message("    layernorm_bwd twice N%d C%d %s: bitwise equal\n", N, C, vr_cuda_dtype_name(dt));
    if (!kc_same_bytes(g[0][0], g[1][0], n * es) || !kc_same_bytes(g[0][1], g[1][1], C * es) ||
        !kc_same_bytes(g[0][2], g[1][2], C * es))
        fail_msg("layernorm_bwd N%d C%d (%s): two runs differ", N, C, vr_cuda_dtype_name(dt));
    free(inp), free(w), free(b), free(dout);
    cudaFree(di), cudaFree(dw), cudaFree(dbb), cudaFree(dd), cudaFree(out), cudaFree(mean), cudaFree(rstd);
    cudaFree(scratch);
    for (int r = 0; r < 2; r++) cudaFree(g[r][0]), cudaFree(g[r][1]), cudaFree(g[r][2]);
}

/* vr_cuda_layernorm_bwd_sum: dinp, dw, db what vr_cuda_layernorm_bwd writes (16 bits: bit for bit; fp32: to
 * 1e-6, its FMAs may differ), and dsum the column
 * sums of that dinp (the next Linear's bias gradient), overwritten and added to; dinp added to as the residual
 * stream's gradient is. `fused` 0: a shape the one-pass kernel does not take (nothing written, unsupported). */
static void run_layernorm_sum(vr_cuda_dtype dt, int N, int C, int fused)
{
    size_t n = (size_t)N * C, es = vr_cuda_dtype_size(dt);
    float *inp = hrand(n, -2, 2), *w = hrand(C, 0.5f, 1.5f), *b = hrand(C, -0.5f, 0.5f), *dout = hrand(n, -1, 1);
    float *prior = hrand(n, -1, 1), *sprior = hrand(C, -4, 4);
    void *di = up(dt, inp, n), *dw = up(dt, w, C), *dbb = up(dt, b, C), *dd = up(dt, dout, n), *out = dnan(dt, n);
    float *mean = dnan(VR_CUDA_F32, N), *rstd = dnan(VR_CUDA_F32, N);
    OK(vr_cuda_layernorm_fwd(&ctx, dt, out, mean, rstd, di, dw, dbb, N, C));
    size_t sb = vr_cuda_layernorm_bwd_scratch_bytes(N, C);
    void *scratch = dalloc_guarded(sb);
    guard_set(scratch, sb, sb);
    void *g[2][3], *ds = dnan(dt, C);
    for (int acc = 0; acc < 2; acc++) {
        for (int r = 0; r < 2; r++) {
            g[r][0] = acc ? up(dt, prior, n) : dnan(dt, n), g[r][1] = dnan(dt, C), g[r][2] = dnan(dt, C);
        }
        OK(vr_cuda_layernorm_bwd(&ctx, dt, g[0][0], g[0][1], g[0][2], dd, di, dw, mean, rstd, N, C, acc, 0, scratch,
                                 sb));
        vr_status st = vr_cuda_layernorm_bwd_sum(&ctx, dt, g[1][0], g[1][1], g[1][2], ds, dd, di, dw, mean, rstd, N, C,
                                                 acc, 0, 0, scratch, sb);
        CU(cudaDeviceSynchronize());
        if (!fused) {
            assert_int_equal(st, VR_ERR_UNSUPPORTED);
            float *h = down(dt, g[1][0], n);
            assert_true(isnan(h[0]) || acc); /* nothing queued */
            free(h);
        } else {
            OK(st);
            if (dt == VR_CUDA_F32) { /* the kernel with the sums may contract other products into FMAs */
                size_t len[3] = {n, (size_t)C, (size_t)C};
                static const char *what[3] = {"layernorm_bwd_sum dinp", "layernorm_bwd_sum dw", "layernorm_bwd_sum db"};
                for (int k = 0; k < 3; k++) {
                    float *h = down(dt, g[0][k], len[k]);
                    expect_close(what[k], dt, g[1][k], h, len[k], 1e-6);
                    free(h);
                }
            } else if (!kc_same_bytes(g[0][0], g[1][0], n * es) || !kc_same_bytes(g[0][1], g[1][1], C * es) ||
                       !kc_same_bytes(g[0][2], g[1][2], C * es)) {
                fail_msg("layernorm_bwd_sum N%d C%d (%s): dinp, dw, db not those of layernorm_bwd", N, C,
                         vr_cuda_dtype_name(dt));
            }
            float *h = down(dt, g[1][0], n), *ref = hzero(C);
            for (int c = 0; c < C; c++) {
                double t = 0.0;
                for (int r = 0; r < N; r++) t += h[(size_t)r * C + c];
                ref[c] = (float)t;
            }
            char what[80];
            snprintf(what, sizeof what, "layernorm_bwd_sum dsum N%d C%d acc_dinp %d", N, C, acc);
            expect_close(what, dt, ds, ref, C, tol_for(dt, TOL_F32_LONG));
            void *ds2 = up(dt, sprior, C); /* added to */
            OK(vr_cuda_layernorm_bwd_sum(&ctx, dt, g[1][0], g[1][1], g[1][2], ds2, dd, di, dw, mean, rstd, N, C, 0, 0,
                                         1, scratch, sb));
            float *h2 = down(dt, g[1][0], n);
            for (int c = 0; c < C; c++) {
                double t = 0.0;
                for (int r = 0; r < N; r++) t += h2[(size_t)r * C + c];
                ref[c] = (float)t;
            }
            expect_acc("layernorm_bwd_sum dsum", dt, ds2, sprior, ref, C);
            free(h), free(h2), free(ref);
            cudaFree(ds2);
        }
        for (int r = 0; r < 2; r++) cudaFree(g[r][0]), cudaFree(g[r][1]), cudaFree(g[r][2]);
    }
    guard_check("layernorm_bwd_sum", scratch, sb, sb);
    free(inp), free(w), free(b), free(dout), free(prior), free(sprior);
    cudaFree(di), cudaFree(dw), cudaFree(dbb), cudaFree(dd), cudaFree(out), cudaFree(mean), cudaFree(rstd);
    cudaFree(scratch), cudaFree(ds);
}

/* add + layernorm in one call: res = x + y and out = layernorm(res) against the CPU, and bit for bit what
 * vr_cuda_add_fwd then vr_cuda_layernorm_fwd give; also with res in place of x. */
static void run_add_layernorm(vr_cuda_dtype dt, int N, int C)
{
    size_t n = (size_t)N * C, es = vr_cuda_dtype_size(dt);
    float *x = hrand(n, -2, 2), *y = hrand(n, -1, 1), *w = hrand(C, 0.5f, 1.5f), *b = hrand(C, -0.5f, 0.5f);
    void *dx = up(dt, x, n), *dy = up(dt, y, n), *dw = up(dt, w, C), *dbb = up(dt, b, C);
    void *res = dnan(dt, n), *out = dnan(dt, n), *res2 = dnan(dt, n), *out2 = dnan(dt, n);
    float *mean = dnan(VR_CUDA_F32, N), *rstd = dnan(VR_CUDA_F32, N);
    float *mean2 = dnan(VR_CUDA_F32, N), *rstd2 = dnan(VR_CUDA_F32, N);
    OK(vr_cuda_add_layernorm_fwd(&ctx, dt, res, out, mean, rstd, dx, dy, dw, dbb, N, C));
    // the CPU: the sum rounded to dt as the GPU stores it, then the layernorm of that
    float *rs = down(dt, res, n), *rsum = hzero(n), *ref = hzero(n), *rm = hzero(N), *rr = hzero(N);
    vr_cpu_add_fwd(rsum, x, y, n);
    char what[80];
    snprintf(what, sizeof what, "add_layernorm_fwd res N%d C%d", N, C);
    expect_close(what, dt, res, rsum, n, tol_for(dt, TOL_F32));
    vr_cpu_layernorm_fwd(ref, rm, rr, rs, w, b, N, C);
    expect_close("add_layernorm_fwd out", dt, out, ref, n, tol_for(dt, TOL_F32));
    expect_close("add_layernorm_fwd mean", VR_CUDA_F32, mean, rm, N, TOL_F32);
    expect_close("add_layernorm_fwd rstd", VR_CUDA_F32, rstd, rr, N, TOL_F32);
    OK(vr_cuda_add_fwd(&ctx, dt, res2, dx, dy, n));
    OK(vr_cuda_layernorm_fwd(&ctx, dt, out2, mean2, rstd2, res2, dw, dbb, N, C));
    CU(cudaDeviceSynchronize());
    if (!kc_same_bytes(res, res2, n * es) || !kc_same_bytes(out, out2, n * es) || !kc_same_bytes(mean, mean2, N * 4) ||
        !kc_same_bytes(rstd, rstd2, N * 4))
        fail_msg("add_layernorm_fwd N%d C%d (%s): not the bytes of add then layernorm", N, C,
                 vr_cuda_dtype_name(dt));
    // in place: the sum over x
    poison(dt, out, n);
    OK(vr_cuda_add_layernorm_fwd(&ctx, dt, dx, out, mean, rstd, dx, dy, dw, dbb, N, C));
    CU(cudaDeviceSynchronize());
    if (!kc_same_bytes(dx, res2, n * es) || !kc_same_bytes(out, out2, n * es))
        fail_msg("add_layernorm_fwd N%d C%d (%s): in place differs", N, C, vr_cuda_dtype_name(dt));
    print_message("    add_layernorm_fwd N%d C%d %s: bitwise add + layernorm (also in place)\n", N, C,
                  vr_cuda_dtype_name(dt));
    free(x), free(y), free(w), free(b), free(rs), free(rsum), free(ref), free(rm), free(rr);
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(dbb), cudaFree(res), cudaFree(out), cudaFree(res2);
    cudaFree(out2), cudaFree(mean), cudaFree(rstd), cudaFree(mean2), cudaFree(rstd2);
}

/* Shapes: tiny, odd C (100: the generic kernels for 16-bit rows; 1600: the forward's widest register rows,
 * the generic backward), GPT-2's 768 and 1024 from one row to over 10000 (the slices of the dw/db sums,
 * 128 at most, cut rows unevenly), C not a multiple of 256 columns (96, 200: lanes without a vector). */
static const int LN_SHAPES[][2] = {{1, 5},     {37, 100},  {1, 768},   {3, 768},   {129, 768}, {4096, 768},
                                   {10007, 768}, {16384, 768}, {300, 1024}, {8192, 1024}, {77, 520}, {129, 1600},
                                   {65, 96}, {513, 200}, {33, 2048}};

static void test_layernorm(void **state)
{
    (void)state;
    NEED_GPU();
    for (int di = 0; di < 3; di++)
        for (size_t k = 0; k < sizeof LN_SHAPES / sizeof LN_SHAPES[0]; k++) {
            int N = LN_SHAPES[k][0], C = LN_SHAPES[k][1];
            if (DTS[di] == VR_CUDA_F16 && N > 600) continue; /* fp16 where cheap */
            run_layernorm(DTS[di], N, C);
            run_add_layernorm(DTS[di], N, C);
        }
    for (int di = 0; di < 2; di++) {
        run_layernorm_determinism(DTS[di], 16384, 768);
        run_layernorm_determinism(DTS[di], 8192, 1024);
        run_layernorm_determinism(DTS[di], 1000, 1600);
        run_layernorm_determinism(DTS[di], 513, 100);
    }
    /* the next Linear's bias gradient in the backward's pass: GPT-2 124M's and medium's rows (registers, shared
     * memory), a slice of one row, fp32 and fp16; a row the one-pass kernel does not take (1600 16-bit columns) */
    run_layernorm_sum(VR_CUDA_BF16, 16384, 768, 1);
    run_layernorm_sum(VR_CUDA_BF16, 8192, 1024, 1);
    run_layernorm_sum(VR_CUDA_BF16, 129, 768, 1);
    run_layernorm_sum(VR_CUDA_F32, 4096, 768, 1);
    run_layernorm_sum(VR_CUDA_F32, 37, 200, 1);
    run_layernorm_sum(VR_CUDA_F16, 300, 1024, 1);
    run_layernorm_sum(VR_CUDA_BF16, 129, 1600, 0);
    /* the generic kernels (the ones before the register rows) against the CPU too */
    vr__cuda_layernorm_generic(1);
    run_layernorm(VR_CUDA_BF16, 4096, 768);
    run_layernorm(VR_CUDA_F32, 129, 768);
    run_add_layernorm(VR_CUDA_BF16, 129, 768);
    run_layernorm_sum(VR_CUDA_BF16, 4096, 768, 0);
    vr__cuda_layernorm_generic(0);
}

/* VRAM_KCUDA_BENCH=1: microseconds per call and GB/s (the bytes each must move: the forward reads x and
 * writes y; add + layernorm reads two and writes two; the backward reads x and dout and writes dinp) for
 * GPT-2 124M's and medium's layernorms, 16384 x 768 and 8192 x 1024 bf16, the register-row kernels against the
 * generic ones, and the add then the layernorm as two calls. Skipped otherwise. */
static double bench_us(int which, int generic, void *const *p, int N, int C, void *scratch, size_t sb)
{
    vr__cuda_layernorm_generic(generic);
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    const int reps = 50;
    float ms = 0.0f;
    for (int pass = 0; pass < 2; pass++) { /* the first warms up */
        CU(cudaEventRecord(e0, 0));
        for (int r = 0; r < reps; r++) {
            if (which == 0)
                OK(vr_cuda_layernorm_fwd(&ctx, VR_CUDA_BF16, p[1], p[5], p[6], p[0], p[3], p[4], N, C));
            else if (which == 1)
                OK(vr_cuda_add_layernorm_fwd(&ctx, VR_CUDA_BF16, p[7], p[1], p[5], p[6], p[0], p[2], p[3], p[4], N, C));
            else if (which == 2) {
                OK(vr_cuda_add_fwd(&ctx, VR_CUDA_BF16, p[7], p[0], p[2], (size_t)N * C));
                OK(vr_cuda_layernorm_fwd(&ctx, VR_CUDA_BF16, p[1], p[5], p[6], p[7], p[3], p[4], N, C));
            } else if (which == 3 || which == 4)
                OK(vr_cuda_layernorm_bwd(&ctx, VR_CUDA_BF16, p[8], p[9], p[10], p[2], p[0], p[3], p[5], p[6], N, C,
                                         which == 4, 0, scratch, sb));
            else if (which == 5)
                OK(vr_cuda_layernorm_bwd_sum(&ctx, VR_CUDA_BF16, p[8], p[9], p[10], p[11], p[2], p[0], p[3], p[5],
                                             p[6], N, C, 1, 0, 0, scratch, sb));
            else
                OK(vr_cuda_matmul_bwd(&ctx, VR_CUDA_BF16, NULL, NULL, p[11], p[8], NULL, NULL, N, C, C, 0, 0));
        }
        CU(cudaEventRecord(e1, 0));
        CU(cudaEventSynchronize(e1));
        CU(cudaEventElapsedTime(&ms, e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    vr__cuda_layernorm_generic(0);
    return 1000.0 * ms / reps;
}

static void bench_layernorm_shape(int N, int C)
{
    size_t n = (size_t)N * C;
    float *h = hrand(n, -2, 2), *hw = hrand(C, 0.5f, 1.5f);
    void *p[12];
    p[0] = up(VR_CUDA_BF16, h, n), p[1] = dnan(VR_CUDA_BF16, n), p[2] = up(VR_CUDA_BF16, h, n);
    p[3] = up(VR_CUDA_BF16, hw, C), p[4] = up(VR_CUDA_BF16, hw, C), p[5] = dnan(VR_CUDA_F32, N);
    p[6] = dnan(VR_CUDA_F32, N), p[7] = dnan(VR_CUDA_BF16, n), p[8] = dnan(VR_CUDA_BF16, n);
    p[9] = dnan(VR_CUDA_BF16, C), p[10] = dnan(VR_CUDA_BF16, C), p[11] = dnan(VR_CUDA_BF16, C);
    size_t sb = vr_cuda_layernorm_bwd_scratch_bytes(N, C);
    void *scratch = dalloc(sb);
    OK(vr_cuda_layernorm_fwd(&ctx, VR_CUDA_BF16, p[1], p[5], p[6], p[0], p[3], p[4], N, C));
    OK(vr_cuda_zero(&ctx, VR_CUDA_BF16, p[8], n)); /* added to (+=) by the rows below */
    /* the backward adding into dinp (a residual stream's gradient), with the next Linear's bias gradient, and
     * that gradient's own column-sum kernel (matmul_bwd's, which the sum replaces) */
    static const char *names[] = {"layernorm_fwd", "add_layernorm_fwd", "add_fwd + layernorm_fwd", "layernorm_bwd",
                                  "layernorm_bwd +=",  "layernorm_bwd_sum +=", "matmul_bwd dbias alone"};
    const double mb[] = {2.0 * n * 2, 4.0 * n * 2, 4.0 * n * 2, 3.0 * n * 2, 4.0 * n * 2, 4.0 * n * 2, 1.0 * n * 2};
    print_message("    %d x %d bf16           new: us    GB/s   generic: us    GB/s\n", N, C);
    for (int k = 0; k < 7; k++) {
        double t = bench_us(k, 0, p, N, C, scratch, sb);
        if (k < 5) {
            double tg = bench_us(k, 1, p, N, C, scratch, sb);
            print_message("    %-24s %10.1f %7.0f %12.1f %7.0f\n", names[k], t, mb[k] / t / 1e3, tg, mb[k] / tg / 1e3);
        } else {
            print_message("    %-24s %10.1f %7.0f\n", names[k], t, mb[k] / t / 1e3);
        }
    }
    free(h), free(hw);
    for (int k = 0; k < 12; k++) cudaFree(p[k]);
    cudaFree(scratch);
}

static void test_layernorm_bench(void **state)
{
    (void)state;
    NEED_GPU();
    const char *b = getenv("VRAM_KCUDA_BENCH");
    if (!b || !*b || !strcmp(b, "0")) skip();
    bench_layernorm_shape(16384, 768); /* GPT-2 124M, B=16 */
    bench_layernorm_shape(8192, 1024); /* GPT-2 medium, B=8 */
    /* RMSNorm's backward at llama3.2-1b's B=8 T=2048: dinp and dw in one call (one pass where the row fits),
     * against dinp alone then dw alone (the two kernels, each reading dout and inp) */
    int N = 16384, C = 2048;
    size_t n = (size_t)N * C, sb = vr_cuda_rmsnorm_bwd_scratch_bytes(N, C);
    float *h = hrand(n, -2, 2), *hw = hrand(C, 0.5f, 1.5f);
    void *x = up(VR_CUDA_BF16, h, n), *g = up(VR_CUDA_BF16, h, n), *w = up(VR_CUDA_BF16, hw, C);
    void *d = dnan(VR_CUDA_BF16, n), *dw = dnan(VR_CUDA_BF16, C), *scratch = dalloc(sb), *o = dnan(VR_CUDA_BF16, n);
    float *rstd = (float *)dnan(VR_CUDA_F32, N);
    OK(vr_cuda_rmsnorm_fwd(&ctx, VR_CUDA_BF16, o, rstd, x, w, N, C, 1e-5f));
    OK(vr_cuda_zero(&ctx, VR_CUDA_BF16, d, n));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int both = 1; both >= 0; both--) {
        float ms = 0.0f;
        for (int pass = 0; pass < 2; pass++) {
            CU(cudaEventRecord(e0, 0));
            for (int r = 0; r < 20; r++) {
                if (both) OK(vr_cuda_rmsnorm_bwd(&ctx, VR_CUDA_BF16, d, dw, g, x, w, rstd, N, C, 1, 0, scratch, sb));
                else {
                    OK(vr_cuda_rmsnorm_bwd(&ctx, VR_CUDA_BF16, d, NULL, g, x, w, rstd, N, C, 1, 0, scratch, sb));
                    OK(vr_cuda_rmsnorm_bwd(&ctx, VR_CUDA_BF16, NULL, dw, g, x, w, rstd, N, C, 1, 0, scratch, sb));
                }
            }
            CU(cudaEventRecord(e1, 0));
            CU(cudaEventSynchronize(e1));
            CU(cudaEventElapsedTime(&ms, e0, e1));
        }
        double us = 1000.0 * ms / 20;
        print_message("    rmsnorm_bwd += %d x %d bf16, %-28s %7.1f us %6.0f GB/s of 4 rows' bytes\n", N, C,
                      both ? "dinp and dw in one call" : "dinp alone, then dw alone", us, 4.0 * n * 2 / us / 1e3);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    free(h), free(hw);
    cudaFree(x), cudaFree(g), cudaFree(w), cudaFree(d), cudaFree(dw), cudaFree(scratch), cudaFree(o), cudaFree(rstd);
}

/* VRAM_KCUDA_BENCH=1: the bias gradient's column sums alone (matmul_bwd with only dbias), microseconds per call and
 * GB/s of the dout read, for the products whose bias gradients still come from them: GPT-2 124M's (16384 rows) and
 * medium's (8192) qkv (3C) and fch (4C) columns, and the projections' (C). */
static void test_colsum_bench(void **state)
{
    (void)state;
    NEED_GPU();
    const char *b = getenv("VRAM_KCUDA_BENCH");
    if (!b || !*b || !strcmp(b, "0")) skip();
    static const int shapes[][2] = {{16384, 768}, {16384, 2304}, {16384, 3072}, {8192, 1024}, {8192, 3072}, {8192, 4096}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int N = shapes[k][0], OC = shapes[k][1];
        size_t n = (size_t)N * OC;
        float *h = hrand(n, -1, 1);
        void *dout = up(VR_CUDA_BF16, h, n), *db = dnan(VR_CUDA_BF16, OC);
        cudaEvent_t e0, e1;
        CU(cudaEventCreate(&e0));
        CU(cudaEventCreate(&e1));
        float ms = 0.0f;
        for (int pass = 0; pass < 2; pass++) { /* the first warms up */
            CU(cudaEventRecord(e0, 0));
            for (int r = 0; r < 50; r++)
                OK(vr_cuda_matmul_bwd(&ctx, VR_CUDA_BF16, NULL, NULL, db, dout, NULL, NULL, N, OC, OC, 0, 0));
            CU(cudaEventRecord(e1, 0));
            CU(cudaEventSynchronize(e1));
            CU(cudaEventElapsedTime(&ms, e0, e1));
        }
        double us = 1000.0 * ms / 50;
        print_message("    column sums %5d x %4d bf16: %6.1f us, %5.0f GB/s\n", N, OC, us, 2.0 * n / us / 1e3);
        if (OC % 3 == 0 && (OC / 3) % 256 == 0) { /* a q|k|v projection's: by the identities */
            int C = OC / 3;
            void *wp = dnan(VR_CUDA_BF16, (size_t)C * C);
            OK(vr_cuda_fill(&ctx, VR_CUDA_BF16, wp, (size_t)C * C, 0.5f));
            for (int pass = 0; pass < 2; pass++) {
                CU(cudaEventRecord(e0, 0));
                for (int r = 0; r < 50; r++) OK(vr_cuda_qkv_bias_bwd(&ctx, VR_CUDA_BF16, db, dout, db, wp, N, C, 0));
                CU(cudaEventRecord(e1, 0));
                CU(cudaEventSynchronize(e1));
                CU(cudaEventElapsedTime(&ms, e0, e1));
            }
            print_message("    q|k|v bias by the identities %5d x %4d bf16: %6.1f us\n", N, OC, 1000.0 * ms / 50);
            for (int pass = 0; pass < 2; pass++) { /* without rows: the k and v thirds alone */
                CU(cudaEventRecord(e0, 0));
                for (int r = 0; r < 50; r++) OK(vr_cuda_qkv_bias_bwd(&ctx, VR_CUDA_BF16, db, dout, db, wp, 0, C, 0));
                CU(cudaEventRecord(e1, 0));
                CU(cudaEventSynchronize(e1));
                CU(cudaEventElapsedTime(&ms, e0, e1));
            }
            print_message("    q|k|v bias, k and v thirds alone       C %4d bf16: %6.1f us\n", C, 1000.0 * ms / 50);
            cudaFree(wp);
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        free(h);
        cudaFree(dout), cudaFree(db);
    }
}

/* ------------------------------------------------------------------ attention */

/* Attention with NH query heads over NKV kv heads of size hs: qkv (B,T,(NH+2NKV)hs). NKV == NH goes
 * through the multi-head entry points (C = NH hs), the others through the grouped-query ones; the CPU's
 * grouped-query kernels are the oracle for both. */
static vr_status att_fwd(vr_cuda_dtype dt, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                         int hs)
{
    if (NKV == NH) return vr_cuda_attention_fwd(&ctx, dt, out, lse, qkv, B, T, NH * hs, NH);
    return vr_cuda_attention_gqa_fwd(&ctx, dt, out, lse, qkv, B, T, NH, NKV, hs);
}

static vr_status att_bwd(vr_cuda_dtype dt, void *dqkv, const void *dout, const void *qkv, const void *out,
                         const float *lse, int B, int T, int NH, int NKV, int hs, int acc, void *scr, size_t sb)
{
    if (NKV == NH) return vr_cuda_attention_bwd(&ctx, dt, dqkv, dout, qkv, out, lse, B, T, NH * hs, NH, acc, scr, sb);
    return vr_cuda_attention_gqa_bwd(&ctx, dt, dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs, acc, scr, sb);
}

static void run_attention(vr_cuda_dtype dt, int B, int T, int NH, int NKV, int hs)
{
    int W = (NH + 2 * NKV) * hs, C = NH * hs;
    size_t nqkv = (size_t)B * T * W, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = hrand(nqkv, -1.5f, 1.5f), *dout = hrand(nout, -1, 1);
    void *dq = up(dt, qkv, nqkv), *dd = up(dt, dout, nout);
    void *out = dnan(dt, nout);
    float *lse = dnan(VR_CUDA_F32, nl);
    float *ref = hzero(nout), *rl = hzero(nl);
    double tol = tol_for(dt, TOL_F32_LONG);
    char what[96];
    snprintf(what, sizeof what, "attention_fwd B%d T%d NH%d NKV%d hs%d%s", B, T, NH, NKV, hs,
             dt != VR_CUDA_F32 && hs == 64 ? " (tensor cores)" : "");
    OK(att_fwd(dt, out, lse, dq, B, T, NH, NKV, hs));
    vr_cpu_attention_gqa_fwd(ref, rl, qkv, B, T, NH, NKV, hs);
    expect_close(what, dt, out, ref, nout, tol);
    expect_close("attention_fwd lse", VR_CUDA_F32, lse, rl, nl, dt == VR_CUDA_F32 ? TOL_F32_LONG : 1e-3);

    // backward from the CPU's own out/lse (rounded to dt) so both see the same saved tensors
    float *ref_out = hcopy(ref, nout);
    void *dout_saved = up(dt, ref_out, nout);
    float *rdq = hzero(nqkv);
    vr_cpu_attention_gqa_bwd(rdq, dout, qkv, ref_out, rl, B, T, NH, NKV, hs, 0);
    // scratch variants: exactly the minimum (bf16/fp16 head size 64: the two deterministic kernels),
    // room for the fp32 dq of one (b, kv head) pair's query heads (the fused backward one pair at a time),
    // 32 MiB (fused, as few chunks as fit), and what a training step plans for the node (fp32: the minimum;
    // 16 bits: every head at once), each with a guard band after it
    size_t sb_min = vr_cuda_attention_scratch_bytes(B, T, C, NH);
    size_t sb_dl = (sb_min + 255) & ~(size_t)255, per_pair = (size_t)(NH / NKV) * T * 64 * 4;
    size_t sbs[4] = {sb_min, sb_dl + per_pair, (size_t)32 << 20,
                     dt == VR_CUDA_F32 ? sb_min : vr_cuda_attention_scratch_fused_bytes(B, T, C, NH)};
    if (sbs[2] < sb_min) sbs[2] = sb_min;
    size_t sb = 0;
    for (int v = 0; v < 4; v++) sb = sbs[v] > sb ? sbs[v] : sb;
    void *scratch = dalloc_guarded(sb);
    void *gq = dnan(dt, nqkv);
    const char *sb_names[4] = {"min scratch", "1-pair chunks", "32 MiB scratch", "planned scratch"};
    int widths[3] = {NH * hs, NKV * hs, NKV * hs}, offs[3] = {0, NH * hs, (NH + NKV) * hs};
    for (int v = 0; v < 4; v++) {
        poison(dt, gq, nqkv);
        guard_set(scratch, sbs[v], sb);
        OK(att_bwd(dt, gq, dd, dq, dout_saved, lse, B, T, NH, NKV, hs, 0, scratch, sbs[v]));
        guard_check(sb_names[v], scratch, sbs[v], sb);
        // per part (q, k, v) so that a failure says which
        float *g = down(dt, gq, nqkv);
        const char *names[3] = {"attention_bwd dq", "attention_bwd dk", "attention_bwd dv"};
        // with T = 1 the one probability is 1, so dq = dk = 0 exactly and only rounding noise is left:
        // no relative error to measure
        for (int part = T == 1 ? 2 : 0; part < 3; part++) {
            size_t np = (size_t)B * T * widths[part];
            float *a = hzero(np), *r = hzero(np);
            for (size_t bt = 0; bt < (size_t)B * T; bt++) {
                memcpy(a + bt * widths[part], g + bt * W + offs[part], (size_t)widths[part] * 4);
                memcpy(r + bt * widths[part], rdq + bt * W + offs[part], (size_t)widths[part] * 4);
            }
            double e = relerr(a, r, np);
            print_message("    %-30s %-14s %-4s n=%-10zu rel err %.2e (tol %.0e)\n", names[part], sb_names[v],
                          vr_cuda_dtype_name(dt), np, e, tol);
            if (!(e <= tol))
                fail_msg("%s NH%d NKV%d (%s, %s): rel err %.3e > %.0e", names[part], NH, NKV, sb_names[v],
                         vr_cuda_dtype_name(dt), e, tol);
            free(a), free(r);
        }
        free(g);
    }
    float *prior = hrand(nqkv, -1, 1);
    void *ap = up(dt, prior, nqkv);
    OK(att_bwd(dt, ap, dd, dq, dout_saved, lse, B, T, NH, NKV, hs, 1, scratch, sb));
    float *fresh = down(dt, gq, nqkv);
    expect_acc("attention_bwd dqkv", dt, ap, prior, fresh, nqkv);
    cudaFree(ap);
    ap = up(dt, prior, nqkv);
    OK(att_bwd(dt, ap, dd, dq, dout_saved, lse, B, T, NH, NKV, hs, 1, scratch, sb_min));
    expect_acc("attention_bwd dqkv (min scratch)", dt, ap, prior, fresh, nqkv);
    free(qkv), free(dout), free(ref), free(rl), free(ref_out), free(rdq), free(prior), free(fresh);
    cudaFree(dq), cudaFree(dd), cudaFree(out), cudaFree(lse), cudaFree(dout_saved), cudaFree(scratch);
    cudaFree(gq), cudaFree(ap);
}

/* vr_cuda_qkv_bias_bwd against the attention it stands for: GPT's attention (B,T,NH heads of hs) forward and
 * backward on the device, then the bias gradient of its q|k|v projection by the identities, with the output
 * projection's weight the identity (dbp = the column sums of dout) and a random one: q's third the column sums
 * of dq, k's 0 where the column sums of dk are 0 to rounding, v's the column sums of dv; acc = 1 adds to q's,
 * leaves k's and writes v's. */
static void run_qkv_bias(vr_cuda_dtype dt, int B, int T, int NH, int hs)
{
    int C = NH * hs, W = 3 * C, N = B * T;
    size_t nqkv = (size_t)N * W, nout = (size_t)N * C;
    float *qkv = hrand(nqkv, -1.5f, 1.5f), *dout = hrand(nout, -1, 1);
    void *dq = up(dt, qkv, nqkv), *dd = up(dt, dout, nout), *out = dnan(dt, nout), *gq = dnan(dt, nqkv);
    float *lse = (float *)dnan(VR_CUDA_F32, (size_t)B * NH * T);
    size_t sb = vr_cuda_attention_scratch_bytes(B, T, C, NH);
    void *scratch = dalloc(sb);
    OK(vr_cuda_attention_fwd(&ctx, dt, out, lse, dq, B, T, C, NH));
    OK(vr_cuda_attention_bwd(&ctx, dt, gq, dd, dq, out, lse, B, T, C, NH, 0, scratch, sb));
    float *g = down(dt, gq, nqkv), *sums = hzero(W), *mags = hzero(W), *dbp = hzero(C), *eye = hzero((size_t)C * C);
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < W; c++) sums[c] += g[(size_t)n * W + c], mags[c] += fabsf(g[(size_t)n * W + c]);
        for (int c = 0; c < C; c++) dbp[c] += dout[(size_t)n * C + c];
    }
    for (int c = 0; c < C; c++) eye[(size_t)c * C + c] = 1.0f;
    double tol = tol_for(dt, TOL_F32_LONG), ksum = 0, kmag = 0;
    for (int c = C; c < 2 * C; c++) ksum += (double)sums[c] * sums[c], kmag += (double)mags[c] * mags[c];
    print_message("    qkv bias identities B%d T%d NH%d hs%d %-4s: |colsum dk| %.2e of |dk| sums %.2e\n", B, T, NH,
                  hs, vr_cuda_dtype_name(dt), sqrt(ksum), sqrt(kmag));
    assert_true(sqrt(ksum) <= tol * sqrt(kmag));
    void *ddbp = up(dt, dbp, C), *dwp = up(dt, eye, (size_t)C * C), *db = dnan(dt, W);
    float *want = hzero(W);
    memcpy(want, sums, (size_t)C * 4);
    memcpy(want + 2 * C, dbp, (size_t)C * 4);
    OK(vr_cuda_qkv_bias_bwd(&ctx, dt, db, gq, ddbp, dwp, N, C, 0));
    expect_close("qkv bias (wp = I) = column sums of dq|0|dout", dt, db, want, W, tol);
    expect_close("qkv bias (wp = I): v's = column sums of dv", dt, (char *)db + 2 * (size_t)C * vr_cuda_dtype_size(dt),
                 sums + 2 * C, C, tol);
    float *hb = down(dt, db, W);
    for (int c = C; c < 2 * C; c++) assert_true(hb[c] == 0.0f);
    free(hb);
    /* a random output projection, then acc = 1 over a prior */
    float *wp = hrand((size_t)C * C, -0.5f, 0.5f), *prior = hrand(W, -1, 1);
    void *dwr = up(dt, wp, (size_t)C * C), *dpr = up(dt, prior, W);
    float *hdbp = down(dt, ddbp, C);
    for (int c = 0; c < C; c++) {
        double v = 0;
        for (int o = 0; o < C; o++) v += (double)hdbp[o] * wp[(size_t)o * C + c];
        want[2 * C + c] = (float)v;
    }
    OK(vr_cuda_qkv_bias_bwd(&ctx, dt, db, gq, ddbp, dwr, N, C, 0));
    expect_close("qkv bias, random wp", dt, db, want, W, tol);
    for (int c = 0; c < C; c++) want[c] += prior[c], want[C + c] = prior[C + c];
    OK(vr_cuda_qkv_bias_bwd(&ctx, dt, dpr, gq, ddbp, dwr, N, C, 1));
    expect_close("qkv bias, random wp, acc=1", dt, dpr, want, W, tol);
    free(qkv), free(dout), free(g), free(sums), free(mags), free(dbp), free(eye), free(want), free(wp), free(prior);
    free(hdbp);
    cudaFree(dq), cudaFree(dd), cudaFree(out), cudaFree(gq), cudaFree(lse), cudaFree(scratch), cudaFree(ddbp);
    cudaFree(dwp), cudaFree(db), cudaFree(dwr), cudaFree(dpr);
}

static void test_attention(void **state)
{
    (void)state;
    NEED_GPU();
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        run_attention(dt, 1, 1, 1, 1, 64);
        run_attention(dt, 2, 65, 2, 2, 64);   // one key block plus one row
        run_attention(dt, 2, 200, 3, 3, 64);  // T not a multiple of 64
        run_attention(dt, 1, 77, 3, 3, 32);   // head size 32: scalar path in every dtype
        run_attention(dt, 2, 130, 4, 2, 64);  // grouped-query: 2 query heads per kv head
        run_attention(dt, 1, 200, 6, 1, 64);  // one kv head for 6 query heads (multi-query)
        run_attention(dt, 1, 70, 4, 2, 128);  // grouped-query, head size 128 (scalar)
        if (dt == VR_CUDA_F16) continue;
        run_attention(dt, 4, 1024, 12, 12, 64);
        run_attention(dt, 2, 1024, 32, 8, 64); // llama3.2-1b's heads
    }
    for (int di = 0; di < 3; di++) {
        run_qkv_bias(DTS[di], 2, 65, 2, 64);
        run_qkv_bias(DTS[di], 2, 200, 3, 32);
    }
}

/* ------------------------------------------------------------------ rmsnorm, rope, swiglu */

static void run_rmsnorm(vr_cuda_dtype dt, int N, int C)
{
    size_t n = (size_t)N * C;
    float *inp = hrand(n, -2, 2), *w = hrand(C, 0.5f, 1.5f), *dout = hrand(n, -1, 1);
    void *di = up(dt, inp, n), *dw = up(dt, w, C), *dd = up(dt, dout, n);
    void *out = dnan(dt, n);
    float *rstd = dnan(VR_CUDA_F32, N), *ref = hzero(n), *rr = hzero(N);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm_fwd N%d C%d", N, C);
    OK(vr_cuda_rmsnorm_fwd(&ctx, dt, out, rstd, di, dw, N, C, 1e-5f));
    vr_cpu_rmsnorm_fwd(ref, rr, inp, w, N, C, 1e-5f);
    expect_close(what, dt, out, ref, n, tol_for(dt, TOL_F32));
    expect_close("rmsnorm_fwd rstd", VR_CUDA_F32, rstd, rr, N, TOL_F32);
    float *rdi = hzero(n), *rdw = hzero(C);
    vr_cpu_rmsnorm_bwd(rdi, rdw, dout, inp, w, rr, N, C, 0, 0);
    size_t sb = vr_cuda_rmsnorm_bwd_scratch_bytes(N, C);
    void *scratch = dalloc_guarded(sb);
    guard_set(scratch, sb, sb);
    void *gdi = dnan(dt, n), *gdw = dnan(dt, C);
    OK(vr_cuda_rmsnorm_bwd(&ctx, dt, gdi, gdw, dd, di, dw, rstd, N, C, 0, 0, scratch, sb));
    expect_close("rmsnorm_bwd dinp", dt, gdi, rdi, n, tol_for(dt, TOL_F32_LONG));
    expect_close("rmsnorm_bwd dw", dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
    float *p1 = hrand(n, -1, 1), *p2 = hrand(C, -1, 1);
    void *a1 = up(dt, p1, n), *a2 = up(dt, p2, C);
    OK(vr_cuda_rmsnorm_bwd(&ctx, dt, a1, a2, dd, di, dw, rstd, N, C, 1, 1, scratch, sb));
    expect_acc("rmsnorm_bwd dinp", dt, a1, p1, rdi, n);
    expect_acc("rmsnorm_bwd dw", dt, a2, p2, rdw, C);
    /* one of the two alone: the two-kernel path (where both went through the one-pass kernel above) */
    poison(dt, gdi, n);
    poison(dt, gdw, C);
    OK(vr_cuda_rmsnorm_bwd(&ctx, dt, gdi, NULL, dd, di, dw, rstd, N, C, 0, 0, scratch, sb));
    OK(vr_cuda_rmsnorm_bwd(&ctx, dt, NULL, gdw, dd, di, dw, rstd, N, C, 0, 0, scratch, sb));
    expect_close("rmsnorm_bwd dinp alone", dt, gdi, rdi, n, tol_for(dt, TOL_F32_LONG));
    expect_close("rmsnorm_bwd dw alone", dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
    guard_check("rmsnorm_bwd", scratch, sb, sb);
    /* add + rmsnorm in one call: the bytes of the add then the rmsnorm (also in place, the sum over a) */
    size_t es = vr_cuda_dtype_size(dt);
    void *res = dnan(dt, n), *res2 = dnan(dt, n), *out2 = dnan(dt, n);
    float *rstd2 = dnan(VR_CUDA_F32, N);
    OK(vr_cuda_add_rmsnorm_fwd(&ctx, dt, res, out, rstd, di, dd, dw, N, C, 1e-5f));
    OK(vr_cuda_add_fwd(&ctx, dt, res2, di, dd, n));
    OK(vr_cuda_rmsnorm_fwd(&ctx, dt, out2, rstd2, res2, dw, N, C, 1e-5f));
    CU(cudaDeviceSynchronize());
    if (!kc_same_bytes(res, res2, n * es) || !kc_same_bytes(out, out2, n * es) || !kc_same_bytes(rstd, rstd2, N * 4))
        fail_msg("add_rmsnorm_fwd N%d C%d (%s): not the bytes of add then rmsnorm", N, C, vr_cuda_dtype_name(dt));
    poison(dt, out, n);
    OK(vr_cuda_add_rmsnorm_fwd(&ctx, dt, di, out, rstd, di, dd, dw, N, C, 1e-5f));
    CU(cudaDeviceSynchronize());
    if (!kc_same_bytes(di, res2, n * es) || !kc_same_bytes(out, out2, n * es))
        fail_msg("add_rmsnorm_fwd N%d C%d (%s): in place differs", N, C, vr_cuda_dtype_name(dt));
    print_message("    add_rmsnorm_fwd N%d C%d %s: bitwise add + rmsnorm (also in place)\n", N, C,
                  vr_cuda_dtype_name(dt));
    cudaFree(res), cudaFree(res2), cudaFree(out2), cudaFree(rstd2);
    free(inp), free(w), free(dout), free(ref), free(rr), free(rdi), free(rdw), free(p1), free(p2);
    cudaFree(di), cudaFree(dw), cudaFree(dd), cudaFree(out), cudaFree(rstd), cudaFree(scratch), cudaFree(gdi);
    cudaFree(gdw), cudaFree(a1), cudaFree(a2);
}

static void run_rope(vr_cuda_dtype dt, int B, int T, int NH, int NKV, int hd, int llama3)
{
    vr_rope_params p = {500000.0, llama3, 32.0, 1.0, 4.0, 8192.0};
    size_t n = (size_t)B * T * (NH + 2 * NKV) * hd;
    float *x = hrand(n, -1, 1), *ref = hzero(n), *rb = hzero(n);
    float inv[VR_CUDA_ROPE_MAX_HD / 2];
    vr_rope_inv_freq(inv, hd, &p);
    void *dx = up(dt, x, n), *out = dnan(dt, n);
    char what[96];
    snprintf(what, sizeof what, "rope B%d T%d NH%d NKV%d hd%d%s", B, T, NH, NKV, hd, llama3 ? " llama3" : "");
    OK(vr_cuda_rope(&ctx, dt, out, dx, B, T, NH, NKV, hd, inv, 1.0f, 0));
    vr_cpu_rope_fwd(ref, x, B, T, NH, NKV, hd, &p);
    expect_close(what, dt, out, ref, n, tol_for(dt, TOL_F32));
    vr_cpu_rope_bwd(rb, x, B, T, NH, NKV, hd, &p, 0);
    OK(vr_cuda_rope(&ctx, dt, out, dx, B, T, NH, NKV, hd, inv, -1.0f, 0));
    expect_close("rope backward", dt, out, rb, n, tol_for(dt, TOL_F32));
    float *prior = hrand(n, -1, 1);
    void *ap = up(dt, prior, n);
    OK(vr_cuda_rope(&ctx, dt, ap, dx, B, T, NH, NKV, hd, inv, -1.0f, 1));
    expect_acc("rope backward", dt, ap, prior, rb, n);
    OK(vr_cuda_rope(&ctx, dt, dx, dx, B, T, NH, NKV, hd, inv, 1.0f, 0)); // in place
    expect_close("rope in place", dt, dx, ref, n, tol_for(dt, TOL_F32));
    free(x), free(ref), free(rb), free(prior);
    cudaFree(dx), cudaFree(out), cudaFree(ap);
}

static void run_swiglu(vr_cuda_dtype dt, int N, int HI)
{
    size_t n = (size_t)N * HI;
    float *x = hrand(2 * n, -4, 4), *dout = hrand(n, -1, 1), *ref = hzero(n), *rdx = hzero(2 * n);
    void *dx = up(dt, x, 2 * n), *dd = up(dt, dout, n), *out = dnan(dt, n), *gdx = dnan(dt, 2 * n);
    char what[96];
    snprintf(what, sizeof what, "swiglu_fwd N%d HI%d", N, HI);
    OK(vr_cuda_swiglu_fwd(&ctx, dt, out, dx, N, HI));
    vr_cpu_swiglu_fwd(ref, x, N, HI);
    expect_close(what, dt, out, ref, n, tol_for(dt, TOL_F32));
    vr_cpu_swiglu_bwd(rdx, dout, x, N, HI, 0);
    OK(vr_cuda_swiglu_bwd(&ctx, dt, gdx, dd, dx, N, HI, 0));
    expect_close("swiglu_bwd", dt, gdx, rdx, 2 * n, tol_for(dt, TOL_F32));
    float *prior = hrand(2 * n, -1, 1);
    void *ap = up(dt, prior, 2 * n);
    OK(vr_cuda_swiglu_bwd(&ctx, dt, ap, dd, dx, N, HI, 1));
    expect_acc("swiglu_bwd", dt, ap, prior, rdx, 2 * n);
    free(x), free(dout), free(ref), free(rdx), free(prior);
    cudaFree(dx), cudaFree(dd), cudaFree(out), cudaFree(gdx), cudaFree(ap);
}

/* The norms' backward from their output (vr_cuda_layernorm_bwd_out, vr_cuda_rmsnorm_bwd_out): against the CPU's
 * from the same output y (as the forward wrote it) and rstd; in fp32 also against the backward from the input;
 * acc = 1; dw | db alone; LayerNorm's bias gradient of the next Linear (dsum) where the one-pass kernel runs; no
 * bias; and a weight of 0 at column 1 (no NaN anywhere, its dw 0). Weights of both signs. */
static void run_norm_from_out(vr_cuda_dtype dt, int N, int C, int rms)
{
    size_t n = (size_t)N * C;
    float *inp = hrand(n, -2, 2), *w = hrand(C, 0.5f, 1.5f), *b = hrand(C, -0.5f, 0.5f), *dout = hrand(n, -1, 1);
    for (int c = 0; c < C; c += 3) w[c] = -w[c];
    void *di = up(dt, inp, n), *dw = up(dt, w, C), *dbb = up(dt, b, C), *dd = up(dt, dout, n), *y = dnan(dt, n);
    float *mean = dnan(VR_CUDA_F32, N), *rstd = dnan(VR_CUDA_F32, N);
    if (rms)
        OK(vr_cuda_rmsnorm_fwd(&ctx, dt, y, rstd, di, dw, N, C, 1e-5f));
    else
        OK(vr_cuda_layernorm_fwd(&ctx, dt, y, mean, rstd, di, dw, dbb, N, C));
    CU(cudaDeviceSynchronize());
    float *hy = down(dt, y, n), *hr = down(VR_CUDA_F32, rstd, N), *hm = rms ? NULL : down(VR_CUDA_F32, mean, N);
    float *hw = down(dt, dw, C), *hb = down(dt, dbb, C), *hx = down(dt, di, n), *hg = down(dt, dd, n);
    float *rdi = hzero(n), *rdw = hzero(C), *rdb = hzero(C), *idi = hzero(n), *idw = hzero(C), *idb = hzero(C);
    if (rms) {
        vr_cpu_rmsnorm_bwd_out(rdi, rdw, hg, hy, hw, hr, N, C, 0, 0);
        vr_cpu_rmsnorm_bwd(idi, idw, hg, hx, hw, hr, N, C, 0, 0);
    } else {
        vr_cpu_layernorm_bwd_out(rdi, rdw, rdb, hg, hy, hw, hb, hr, N, C, 0, 0);
        vr_cpu_layernorm_bwd(idi, idw, idb, hg, hx, hw, hm, hr, N, C, 0, 0);
    }
    char what[96];
    if (dt == VR_CUDA_F32) { /* the recovered x-hat is the input's to fp32 rounding */
        snprintf(what, sizeof what, "%s from out = from inp (cpu) N%d C%d", rms ? "rmsnorm" : "layernorm", N, C);
        assert_true(relerr(rdi, idi, n) < 1e-4 && relerr(rdw, idw, C) < 1e-4 && (rms || relerr(rdb, idb, C) < 1e-5));
        print_message("    %-44s dinp %.1e dw %.1e\n", what, relerr(rdi, idi, n), relerr(rdw, idw, C));
    }
    size_t sb = rms ? vr_cuda_rmsnorm_bwd_scratch_bytes(N, C) : vr_cuda_layernorm_bwd_scratch_bytes(N, C);
    void *scratch = dalloc_guarded(sb);
    guard_set(scratch, sb, sb);
    void *gdi = dnan(dt, n), *gdw = dnan(dt, C), *gdb = dnan(dt, C);
    float *p1 = hrand(n, -1, 1), *p2 = hrand(C, -1, 1), *p3 = hrand(C, -1, 1);
    for (int acc = 0; acc < 2; acc++) {
        if (acc) {
            cudaFree(gdi), cudaFree(gdw), cudaFree(gdb);
            gdi = up(dt, p1, n), gdw = up(dt, p2, C), gdb = up(dt, p3, C);
        }
        if (rms)
            OK(vr_cuda_rmsnorm_bwd_out(&ctx, dt, gdi, gdw, dd, y, dw, rstd, N, C, acc, acc, scratch, sb));
        else
            OK(vr_cuda_layernorm_bwd_out(&ctx, dt, gdi, gdw, gdb, NULL, dd, y, dw, dbb, rstd, N, C, acc, acc, 0, scratch,
                                         sb));
        snprintf(what, sizeof what, "%s_bwd_out N%d C%d", rms ? "rmsnorm" : "layernorm", N, C);
        if (!acc) {
            expect_close(what, dt, gdi, rdi, n, tol_for(dt, TOL_F32_LONG));
            expect_close(what, dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
            if (!rms) expect_close(what, dt, gdb, rdb, C, tol_for(dt, TOL_F32_LONG));
        } else {
            expect_acc(what, dt, gdi, p1, rdi, n);
            expect_acc(what, dt, gdw, p2, rdw, C);
            if (!rms) expect_acc(what, dt, gdb, p3, rdb, C);
        }
    }
    /* dw alone (a frozen bias, or RMSNorm's two-kernel path) */
    poison(dt, gdw, C);
    if (rms)
        OK(vr_cuda_rmsnorm_bwd_out(&ctx, dt, NULL, gdw, dd, y, dw, rstd, N, C, 0, 0, scratch, sb));
    else
        OK(vr_cuda_layernorm_bwd_out(&ctx, dt, NULL, gdw, NULL, NULL, dd, y, dw, dbb, rstd, N, C, 0, 0, 0, scratch, sb));
    expect_close("  dw alone", dt, gdw, rdw, C, tol_for(dt, TOL_F32_LONG));
    if (!rms) { /* dsum where the one-pass kernel takes the rows (else VR_ERR_UNSUPPORTED, nothing queued) */
        void *ds = dnan(dt, C);
        vr_status st = vr_cuda_layernorm_bwd_out(&ctx, dt, gdi, gdw, gdb, ds, dd, y, dw, dbb, rstd, N, C, 0, 0, 0,
                                                 scratch, sb);
        assert_true(st == VR_OK || st == VR_ERR_UNSUPPORTED);
        if (st == VR_OK) {
            float *h = down(dt, gdi, n), *ref = hzero(C);
            for (int c = 0; c < C; c++) {
                double t = 0.0;
                for (int r = 0; r < N; r++) t += h[(size_t)r * C + c];
                ref[c] = (float)t;
            }
            expect_close("  dsum", dt, ds, ref, C, tol_for(dt, TOL_F32_LONG));
            expect_close("  dinp with dsum", dt, gdi, rdi, n, tol_for(dt, TOL_F32_LONG));
            free(h), free(ref);
        }
        cudaFree(ds);
        /* no bias: y = w xhat */
        float *rdi0 = hzero(n), *rdw0 = hzero(C), *y0 = hzero(n);
        for (size_t i = 0; i < n; i++) y0[i] = hy[i] - hb[i % (size_t)C];
        void *dy0 = up(dt, y0, n);
        float *hy0 = down(dt, dy0, n);
        vr_cpu_layernorm_bwd_out(rdi0, rdw0, NULL, hg, hy0, hw, NULL, hr, N, C, 0, 0);
        OK(vr_cuda_layernorm_bwd_out(&ctx, dt, gdi, gdw, NULL, NULL, dd, dy0, dw, NULL, rstd, N, C, 0, 0, 0, scratch,
                                     sb));
        expect_close("  no bias dinp", dt, gdi, rdi0, n, tol_for(dt, TOL_F32_LONG));
        expect_close("  no bias dw", dt, gdw, rdw0, C, tol_for(dt, TOL_F32_LONG));
        free(rdi0), free(rdw0), free(y0), free(hy0);
        cudaFree(dy0);
    }
    /* a weight of 0 (its output is the bias whatever the input): finite everywhere, that weight's gradient 0 */
    if (C > 1) {
        float zero = 0.0f;
        void *z = up(dt, &zero, 1);
        CU(cudaMemcpy((char *)dw + vr_cuda_dtype_size(dt), z, vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice));
        cudaFree(z);
        if (rms) /* the forward again with it */
            OK(vr_cuda_rmsnorm_fwd(&ctx, dt, y, rstd, di, dw, N, C, 1e-5f));
        else
            OK(vr_cuda_layernorm_fwd(&ctx, dt, y, mean, rstd, di, dw, dbb, N, C));
        if (rms)
            OK(vr_cuda_rmsnorm_bwd_out(&ctx, dt, gdi, gdw, dd, y, dw, rstd, N, C, 0, 0, scratch, sb));
        else
            OK(vr_cuda_layernorm_bwd_out(&ctx, dt, gdi, gdw, gdb, NULL, dd, y, dw, dbb, rstd, N, C, 0, 0, 0, scratch,
                                         sb));
        CU(cudaDeviceSynchronize());
        float *h = down(dt, gdi, n), *hdw = down(dt, gdw, C);
        for (size_t i = 0; i < n; i++) assert_true(isfinite(h[i]));
        for (int c = 0; c < C; c++) assert_true(isfinite(hdw[c]));
        assert_true(hdw[1] == 0.0f);
        free(h), free(hdw);
    }
    guard_check("norm_bwd_out", scratch, sb, sb);
    free(inp), free(w), free(b), free(dout), free(hy), free(hr), free(hm), free(hw), free(hb), free(hx), free(hg);
    free(rdi), free(rdw), free(rdb), free(idi), free(idw), free(idb), free(p1), free(p2), free(p3);
    cudaFree(di), cudaFree(dw), cudaFree(dbb), cudaFree(dd), cudaFree(y), cudaFree(mean), cudaFree(rstd);
    cudaFree(scratch), cudaFree(gdi), cudaFree(gdw), cudaFree(gdb);
}

static void test_norm_from_out(void **state)
{
    (void)state;
    NEED_GPU();
    static const int shapes[][2] = {{37, 100}, {4096, 768}, {8192, 1024}, {129, 1600}, {513, 200}, {33, 2048},
                                    {1000, 576}, {65, 4096}};
    for (int di = 0; di < 3; di++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int N = shapes[k][0], C = shapes[k][1];
            if (DTS[di] == VR_CUDA_F16 && N > 600) continue;
            run_norm_from_out(DTS[di], N, C, 0);
            run_norm_from_out(DTS[di], N, C, 1);
        }
    vr__cuda_layernorm_generic(1); /* LayerNorm's generic kernels */
    run_norm_from_out(VR_CUDA_BF16, 4096, 768, 0);
    run_norm_from_out(VR_CUDA_F32, 129, 768, 0);
    vr__cuda_layernorm_generic(0);
}

static void test_llama_ops(void **state)
{
    (void)state;
    NEED_GPU();
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        run_rmsnorm(dt, 1, 5);
        run_rmsnorm(dt, 37, 100);
        run_rmsnorm(dt, 4096, 2048);
        run_rmsnorm(dt, 1000, 576); /* smollm2-135m's width */
        run_rmsnorm(dt, 513, 960);  /* smollm2-360m's, a ragged last tile */
        run_rope(dt, 2, 33, 4, 2, 64, 0);
        run_rope(dt, 1, 300, 32, 8, 64, 1);
        run_rope(dt, 1, 17, 2, 1, 128, 1);
        run_swiglu(dt, 7, 33);
        run_swiglu(dt, 2048, 8192);
    }
}

/* ------------------------------------------------------------------ classifier */

/* wte has Vw >= V rows; the padded rows are random (not 0) to show that they change no loss or dx, and
 * their dwte must be 0. */
static void run_classifier(vr_cuda_dtype dt, int N, int C, int V, int Vw, size_t chunk_rows, int ignore_some)
{
    float *x = hrand((size_t)N * C, -1, 1), *wte = hrand((size_t)Vw * C, -0.3f, 0.3f);
    int32_t *tg = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) tg[i] = (ignore_some && i % 7 == 3) ? -1 : (int32_t)(urand(0, 1) * V) % V;
    void *dx_in = up(dt, x, (size_t)N * C), *dwte_in = up(dt, wte, (size_t)Vw * C);
    int32_t *dtg = dalloc((size_t)N * 4);
    CU(cudaMemcpy(dtg, tg, (size_t)N * 4, cudaMemcpyHostToDevice));
    float scale = 1.0f / N;
    float *rl = hzero(N), *rdx = hzero((size_t)N * C), *rdw = hzero((size_t)Vw * C); /* rows >= V stay 0 */
    size_t cs = vr_cpu_classifier_scratch_bytes(N, V);
    float *cscratch = hzero(cs / 4);
    vr_cpu_classifier(rl, rdx, rdw, x, wte, tg, N, C, V, scale, cscratch, cs, 0, 0);
    size_t esz = vr_cuda_dtype_size(dt);
    size_t sb = vr_cuda_classifier_scratch_bytes((int)chunk_rows, Vw, dt);
    void *scratch = dalloc_guarded(sb);
    guard_set(scratch, sb, sb);
    assert_int_equal(vr_cuda_classifier_chunk_rows(sb, Vw, dt), (int)chunk_rows);
    float *losses = dnan(VR_CUDA_F32, N);
    void *gdx = dnan(dt, (size_t)N * C), *gdw = dnan(dt, (size_t)Vw * C);
    double tol = tol_for(dt, TOL_F32_LONG);
    char what[96];
    snprintf(what, sizeof what, "classifier losses N%d C%d V%d Vw%d chunk %zu", N, C, V, Vw, chunk_rows);
    OK(vr_cuda_classifier(&ctx, dt, losses, gdx, gdw, dx_in, dwte_in, dtg, N, C, V, Vw, scale, scratch, sb, 0, 0));
    { // the first rows in double precision, to tell which side is off if the comparison fails
        float *gl = down(VR_CUDA_F32, losses, N);
        for (int i = 0; i < 3 && i < N; i++) {
            if (tg[i] < 0) continue;
            double mx = -1e300, sum = 0.0, zt = 0.0;
            double *z = malloc((size_t)V * sizeof(double));
            for (int v = 0; v < V; v++) {
                double d = 0.0;
                for (int c = 0; c < C; c++) d += (double)x[(size_t)i * C + c] * wte[(size_t)v * C + c];
                z[v] = d;
                if (d > mx) mx = d;
            }
            for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
            zt = z[tg[i]];
            print_message("      row %d: loss gpu %.7g cpu %.7g double %.7g\n", i, gl[i], rl[i], log(sum) + mx - zt);
            free(z);
        }
        free(gl);
    }
    expect_close(what, VR_CUDA_F32, losses, rl, N, dt == VR_CUDA_F32 ? TOL_F32_LONG : 1e-3);
    expect_close("classifier dx", dt, gdx, rdx, (size_t)N * C, tol);
    expect_close("classifier dwte", dt, gdw, rdw, (size_t)Vw * C, tol);
    // evaluation: losses only
    poison(VR_CUDA_F32, losses, N);
    OK(vr_cuda_classifier(&ctx, dt, losses, NULL, NULL, dx_in, dwte_in, dtg, N, C, V, Vw, scale, scratch, sb, 0, 0));
    expect_close("classifier losses (no grad)", VR_CUDA_F32, losses, rl, N, dt == VR_CUDA_F32 ? TOL_F32_LONG : 1e-3);
    // acc = 1
    float *p1 = hrand((size_t)N * C, -1, 1), *p2 = hrand((size_t)Vw * C, -1, 1);
    void *a1 = up(dt, p1, (size_t)N * C), *a2 = up(dt, p2, (size_t)Vw * C);
    OK(vr_cuda_classifier(&ctx, dt, losses, a1, a2, dx_in, dwte_in, dtg, N, C, V, Vw, scale, scratch, sb, 1, 1));
    float *f1 = down(dt, gdx, (size_t)N * C), *f2 = down(dt, gdw, (size_t)Vw * C);
    expect_acc("classifier dx", dt, a1, p1, f1, (size_t)N * C);
    expect_acc("classifier dwte", dt, a2, p2, f2, (size_t)Vw * C);
    guard_check("classifier", scratch, sb, sb);
    (void)esz;
    free(x), free(wte), free(tg), free(rl), free(rdx), free(rdw), free(cscratch), free(p1), free(p2), free(f1), free(f2);
    cudaFree(dx_in), cudaFree(dwte_in), cudaFree(dtg), cudaFree(scratch), cudaFree(losses), cudaFree(gdx);
    cudaFree(gdw), cudaFree(a1), cudaFree(a2);
}

static void test_classifier(void **state)
{
    (void)state;
    NEED_GPU();
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        run_classifier(dt, 1, 8, 5, 5, 1, 0);
        run_classifier(dt, 37, 48, 103, 103, 10, 1);
        run_classifier(dt, 37, 48, 300, 300, 10, 1); // vocabulary split into 256 + 44
        run_classifier(dt, 37, 48, 300, 320, 10, 1); // padded: one product over 320, softmax over 300
        if (dt == VR_CUDA_F16) continue;
        run_classifier(dt, 1024, 768, 50257, 50257, 300, 1);
        run_classifier(dt, 1024, 768, 50257, 50304, 300, 1); // GPT-2's padded vocabulary
    }
}

static void test_softmax_xent(void **state)
{
    (void)state;
    NEED_GPU();
    int shapes[][2] = {{1, 3}, {37, 10}, {64, 2000}};
    for (int di = 0; di < 3; di++) {
        vr_cuda_dtype dt = DTS[di];
        for (int s = 0; s < 3; s++) {
            int N = shapes[s][0], V = shapes[s][1];
            float *z = hrand((size_t)N * V, -4, 4), *dl = hrand(N, 0.5f, 1.5f);
            int32_t *tg = malloc((size_t)N * 4);
            for (int i = 0; i < N; i++) tg[i] = i % 5 == 2 ? -1 : (int32_t)(urand(0, 1) * V) % V;
            void *dz = up(dt, z, (size_t)N * V);
            float *ddl = up(VR_CUDA_F32, dl, N);
            int32_t *dtg = dalloc((size_t)N * 4);
            CU(cudaMemcpy(dtg, tg, (size_t)N * 4, cudaMemcpyHostToDevice));
            float *rl = hzero(N), *rp = hzero((size_t)N * V), *rd = hzero((size_t)N * V);
            vr_cpu_softmax_xent_fwd(rl, rp, z, tg, N, V);
            float *losses = dnan(VR_CUDA_F32, N);
            void *probs = dnan(dt, (size_t)N * V);
            OK(vr_cuda_softmax_xent_fwd(&ctx, dt, losses, probs, dz, dtg, N, V));
            /* a small loss is log(S) + M - z[t] with cancellation: __expf's ~1e-6 error is relatively
             * larger there (0.0094519 vs 0.0094521 seen) */
            expect_close("softmax_xent_fwd losses", VR_CUDA_F32, losses, rl, N, dt == VR_CUDA_F32 ? 1e-4 : 1e-3);
            expect_close("softmax_xent_fwd probs", dt, probs, rp, (size_t)N * V, tol_for(dt, TOL_F32));
            // backward from the CPU probs rounded to dt
            void *dp = up(dt, rp, (size_t)N * V);
            vr_cpu_softmax_xent_bwd(rd, dl, 0.1f, rp, tg, N, V, 0);
            void *gd = dnan(dt, (size_t)N * V);
            OK(vr_cuda_softmax_xent_bwd(&ctx, dt, gd, ddl, 0.1f, dp, dtg, N, V, 0));
            expect_close("softmax_xent_bwd", dt, gd, rd, (size_t)N * V, tol_for(dt, TOL_F32));
            float *prior = hrand((size_t)N * V, -1, 1);
            void *ap = up(dt, prior, (size_t)N * V);
            OK(vr_cuda_softmax_xent_bwd(&ctx, dt, ap, ddl, 0.1f, dp, dtg, N, V, 1));
            expect_acc("softmax_xent_bwd", dt, ap, prior, rd, (size_t)N * V);
            free(z), free(dl), free(tg), free(rl), free(rp), free(rd), free(prior);
            cudaFree(dz), cudaFree(ddl), cudaFree(dtg), cudaFree(losses), cudaFree(probs), cudaFree(dp), cudaFree(gd);
            cudaFree(ap);
        }
    }
}

/* ------------------------------------------------------------------ optimizers */

enum { O_SGD, O_MOM, O_ADAM, O_ADAMW };

static void run_optim(int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt, size_t n, int use_dev_scale)
{
    const char *names[] = {"sgd", "sgd_momentum", "adam", "adamw"};
    float *p = hrand(n, -1, 1), *g = hrand(n, -1, 1), *m = hzero(n), *v = hzero(n);
    // gradient as stored in gdt
    void *dg = up(gdt, g, n);
    float *master = up(VR_CUDA_F32, p, n);
    void *dp = pdt == VR_CUDA_F32 ? (void *)master : up(pdt, hcopy(p, n), n);
    float *useMaster = pdt == VR_CUDA_F32 ? NULL : master;
    float *dm = up(VR_CUDA_F32, m, n), *dv = up(VR_CUDA_F32, v, n);
    float *dscale = NULL, hscale = 0.5f;
    if (use_dev_scale) dscale = up(VR_CUDA_F32, &hscale, 1);
    float gs = 0.8f, eff = gs * (use_dev_scale ? hscale : 1.0f);
    for (int step = 1; step <= 3; step++) {
        switch (kind) {
        case O_SGD:
            OK(vr_cuda_sgd(&ctx, pdt, dp, useMaster, gdt, dg, n, 0.1f, 0.01f, gs, dscale, NULL));
            vr_cpu_sgd(p, g, n, 0.1f, 0.01f, eff);
            break;
        case O_MOM:
            OK(vr_cuda_sgd_momentum(&ctx, pdt, dp, useMaster, gdt, dg, dm, n, 0.1f, 0.9f, 0.1f, 0.01f, step == 2, step,
                                    gs, dscale, NULL));
            vr_cpu_sgd_momentum(p, g, m, n, 0.1f, 0.9f, 0.1f, 0.01f, step == 2, step, eff);
            break;
        case O_ADAM:
            OK(vr_cuda_adam(&ctx, pdt, dp, useMaster, gdt, dg, dm, dv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, gs,
                            dscale, NULL));
            vr_cpu_adam(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, eff);
            break;
        default:
            OK(vr_cuda_adamw(&ctx, pdt, dp, useMaster, gdt, dg, dm, dv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, gs,
                             dscale, NULL));
            vr_cpu_adamw(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, eff);
            break;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s param %s grad %s master", names[kind], vr_cuda_dtype_name(pdt),
             vr_cuda_dtype_name(gdt));
    expect_close(what, VR_CUDA_F32, master, p, n, TOL_F32);
    if (pdt != VR_CUDA_F32) expect_close("  rounded param", pdt, dp, p, n, TOL_LOW);
    if (kind != O_SGD) expect_close("  state m", VR_CUDA_F32, dm, m, n, TOL_F32);
    if (kind >= O_ADAM) expect_close("  state v", VR_CUDA_F32, dv, v, n, TOL_F32);
    // dev_skip set: nothing moves
    int32_t one = 1, *dskip = dalloc(4);
    CU(cudaMemcpy(dskip, &one, 4, cudaMemcpyHostToDevice));
    OK(vr_cuda_adamw(&ctx, pdt, dp, useMaster, gdt, dg, dm, dv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, gs, dscale,
                     dskip));
    expect_close("  skipped step leaves master", VR_CUDA_F32, master, p, n, TOL_F32);
    free(p), free(g), free(m), free(v);
    if (dp != master) cudaFree(dp);
    cudaFree(dg), cudaFree(master), cudaFree(dm), cudaFree(dv), cudaFree(dscale), cudaFree(dskip);
}

static void test_optimizers(void **state)
{
    (void)state;
    NEED_GPU();
    for (int kind = 0; kind < 4; kind++) {
        run_optim(kind, VR_CUDA_F32, VR_CUDA_F32, 1001, 0);
        run_optim(kind, VR_CUDA_BF16, VR_CUDA_BF16, 100003, 1);
        run_optim(kind, VR_CUDA_F16, VR_CUDA_F16, 1001, 1);
    }
    run_optim(O_ADAMW, VR_CUDA_BF16, VR_CUDA_BF16, 124439808, 1); // GPT-2 124M parameter count
}

/* ------------------------------------------------------------------ argument checks */

static void test_bad_arguments(void **state)
{
    (void)state;
    NEED_GPU();
    assert_int_equal(vr_cuda_attention_fwd(&ctx, VR_CUDA_BF16, (void *)16, (float *)16, (void *)16, 1, 4, 100, 3),
                     VR_ERR_INVALID);
    print_message("    (%s)\n", vr_last_error());
    assert_int_equal(vr_cuda_layernorm_bwd(&ctx, VR_CUDA_F32, NULL, (void *)16, (void *)16, (void *)16, (void *)16,
                                           (void *)16, (float *)16, (float *)16, 100, 8, 0, 0, NULL, 0),
                     VR_ERR_INVALID);
    print_message("    (%s)\n", vr_last_error());
    assert_int_equal(vr_cuda_classifier(&ctx, VR_CUDA_F32, (float *)16, NULL, NULL, (void *)16, (void *)16,
                                        (int32_t *)16, 4, 8, 1000, 1000, 1.0f, (void *)16, 100, 0, 0),
                     VR_ERR_INVALID);
    print_message("    (%s)\n", vr_last_error());
    assert_int_equal(vr_cuda_adamw(&ctx, VR_CUDA_BF16, (void *)16, NULL, VR_CUDA_BF16, (void *)16, (float *)16,
                                   (float *)16, 10, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f, NULL, NULL),
                     VR_ERR_INVALID);
    print_message("    (%s)\n", vr_last_error());
    assert_int_equal(vr_cuda_add_fwd(&ctx, (vr_cuda_dtype)7, (void *)16, (void *)16, (void *)16, 4), VR_ERR_INVALID);
}

/* VRAM_KCUDA_TEST=pattern runs only the tests whose names match (cmocka's filter). */
int main(void)
{
    const char *filter = getenv("VRAM_KCUDA_TEST");
    if (filter && *filter) cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),  cmocka_unit_test(test_convert),
        cmocka_unit_test(test_reductions),   cmocka_unit_test(test_loss_scaling),
        cmocka_unit_test(test_embedding),    cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_layernorm),    cmocka_unit_test(test_layernorm_bench), cmocka_unit_test(test_colsum_bench), cmocka_unit_test(test_attention), cmocka_unit_test(test_llama_ops),
        cmocka_unit_test(test_norm_from_out),
        cmocka_unit_test(test_classifier),   cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_optimizers),   cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
