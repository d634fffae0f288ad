/* cuDNN's fused flash attention (src/kernels/cuda/attention_cudnn_cuda.c) against vram's own kernels.
 *
 * Exit 77 (ctest: skipped) without a GPU, or when libcudnn.so.9 does not load (unless VRAM_REQUIRE_CUDNN=1:
 * then that fails). Per shape, on random inputs in the activations' dtype:
 *   - the reference: vram's fp32 kernels on the same (rounded) inputs;
 *   - out, lse, dq, dk, dv of cuDNN and of vram's 16-bit kernels, each against the reference: relative L2
 *     error within TOL (1e-2; lse: absolute 2e-2 on values of order log T); every error printed;
 *   - cuDNN's backward fed vram's forward (out, lse): the executor may mix the paths, the saved tensors
 *     being the same;
 *   - memory: the backward's scratch is exactly vr_cuda_attention_cudnn_scratch_bytes, the size the plan
 *     reserves (kernels/scratch.h: vr_scratch_cudnn_attention_bwd, vr_scratch_cuda_attention_bwd_for), and
 *     the plans' own workspace fits the ctx's (the step's 32 MiB cuBLASLt workspace); both buffers are
 *     followed by 64 KiB of guard bytes that must be untouched afterwards; outputs start as NaN;
 *   - times of both paths (median of 5 after a warm-up), printed.
 * VRAM_CUDNN_SHAPES=quick runs the first three shapes only. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/scratch.h"

#define TOL 1e-2
#define TOL_LSE 2e-2
#define GUARD (64u << 10)

static int failures;
static vr_cuda_ctx ctx;
static unsigned char *ws;   /* ctx workspace + guard */
static size_t ws_bytes;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL: " __VA_ARGS__);               \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

#define OKS(expr)                                                                                   \
    do {                                                                                            \
        vr_status s_ = (expr);                                                                      \
        if (s_ != VR_OK) {                                                                          \
            printf("FAIL: %s -> %s: %s\n", #expr, vr_status_name(s_), vr_last_error());             \
            failures++;                                                                             \
            return;                                                                                 \
        }                                                                                           \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void *dmalloc(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        printf("FAIL: cudaMalloc(%zu)\n", n);
        exit(1);
    }
    return p;
}

/* A device buffer of n fp32 values from the host's random numbers (scaled), also in dt. */
static void rand_dev(float *h, size_t n, float scale, float **f32, void **low, vr_cuda_dtype dt)
{
    for (size_t i = 0; i < n; i++) h[i] = urand() * scale;
    *f32 = dmalloc(n * 4);
    *low = dmalloc(n * 2);
    cudaMemcpy(*f32, h, n * 4, cudaMemcpyHostToDevice);
    vr_cuda_convert(&ctx, dt, *low, VR_CUDA_F32, *f32, n);
    vr_cuda_convert(&ctx, VR_CUDA_F32, *f32, dt, *low, n); /* the reference sees the rounded values */
}

/* Relative L2 error of x (n values of dt, device, elements [off + r*ld + j] for j < w) against ref (fp32). */
static double rel_err(const void *x, vr_cuda_dtype dt, const float *ref, size_t rows, size_t ld, size_t off, size_t w)
{
    size_t n = rows * ld;
    float *xf = dmalloc(n * 4);
    if (dt == VR_CUDA_F32) cudaMemcpy(xf, x, n * 4, cudaMemcpyDeviceToDevice);
    else vr_cuda_convert(&ctx, VR_CUDA_F32, xf, dt, x, n);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    cudaMemcpy(a, xf, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(b, ref, n * 4, cudaMemcpyDeviceToHost);
    double num = 0, den = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < w; j++) {
            double d = (double)a[off + r * ld + j] - b[off + r * ld + j];
            num += d * d;
            den += (double)b[off + r * ld + j] * b[off + r * ld + j];
        }
    free(a), free(b);
    cudaFree(xf);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double max_abs_diff(const float *x, const float *ref, size_t n)
{
    float *a = malloc(n * 4), *b = malloc(n * 4);
    cudaMemcpy(a, x, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(b, ref, n * 4, cudaMemcpyDeviceToHost);
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    free(a), free(b);
    return m;
}

static void guard_set(unsigned char *p) { cudaMemset(p, 0xA5, GUARD); }
static int guard_ok(const unsigned char *p)
{
    unsigned char *h = malloc(GUARD);
    cudaMemcpy(h, p, GUARD, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (unsigned i = 0; i < GUARD; i++) ok &= h[i] == 0xA5;
    free(h);
    return ok;
}

typedef struct times { float fwd, bwd; } times;

static float median5(float *v)
{
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (v[j] < v[i]) { float t = v[i]; v[i] = v[j]; v[j] = t; }
    return v[2];
}

static void run_shape(vr_cuda_dtype dt, int B, int T, int NH, int NKV, int hs, int timed)
{
    const char *dn = vr_cuda_dtype_name(dt);
    printf("== %s B=%d T=%d NH=%d NKV=%d hs=%d\n", dn, B, T, NH, NKV, hs);
    int W = NH + 2 * NKV;
    size_t nqkv = (size_t)B * T * W * hs, nout = (size_t)B * T * NH * hs, nl = (size_t)B * NH * T;
    float *h = malloc((nqkv > nout ? nqkv : nout) * 4);
    float *qkv32, *dout32;
    void *qkv, *dout;
    rand_dev(h, nqkv, 1.0f, &qkv32, &qkv, dt);
    rand_dev(h, nout, 1.0f, &dout32, &dout, dt);
    free(h);

    /* memory: what the plan reserves for the node, and what cuDNN's plans ask */
    size_t need = vr_cuda_attention_cudnn_scratch_bytes(B, T, NH, NKV, hs);
    uint64_t planned_cudnn = vr_scratch_cuda_attention_bwd_for(B, T, NH, NKV, hs, 2, VR_SCRATCH_ATTN_CUDNN);
    uint64_t planned_auto = vr_scratch_cuda_attention_bwd_for(B, T, NH, NKV, hs, 2, VR_SCRATCH_ATTN_AUTO);
    CHECK(need == planned_cudnn && need <= planned_auto,
          "scratch: cuDNN's backward takes %zu, the plan reserves %llu (cudnn) / %llu (auto)", need,
          (unsigned long long)planned_cudnn, (unsigned long long)planned_auto);
    size_t fws = 0, bws = 0;
    OKS(vr_cuda_attention_cudnn_prepare(&ctx, dt, B, T, NH, NKV, hs, &fws, &bws));
    printf("   scratch %zu bytes (planned: cudnn %llu, auto %llu); plan workspace fwd %zu, bwd %zu (ctx's: %zu)\n",
           need, (unsigned long long)planned_cudnn, (unsigned long long)planned_auto, fws, bws, ctx.workspace_bytes);
    uint64_t own_ws = vr_scratch_cudnn_attention_plan_ws(B, T, NH, NKV, hs);
    CHECK(fws <= ctx.workspace_bytes && (bws <= ctx.workspace_bytes || bws <= own_ws),
          "plan workspace above the ctx's and the planned %llu", (unsigned long long)own_ws);
    CHECK(NKV == NH || bws == own_ws, "GQA backward: the plan asks %zu, the formula says %llu", bws,
          (unsigned long long)own_ws);

    /* reference: vram's fp32 kernels */
    float *rout = dmalloc(nout * 4), *rlse = dmalloc(nl * 4), *rdq = dmalloc(nqkv * 4);
    size_t rsb = vr_cuda_attention_scratch_bytes(B, T, NH * hs, NH);
    void *rscr = dmalloc(rsb);
    OKS(vr_cuda_attention_gqa_fwd(&ctx, VR_CUDA_F32, rout, rlse, qkv32, B, T, NH, NKV, hs));
    OKS(vr_cuda_attention_gqa_bwd(&ctx, VR_CUDA_F32, rdq, dout32, qkv32, rout, rlse, B, T, NH, NKV, hs, 0, rscr, rsb));

    /* vram's 16-bit kernels (the fused backward's scratch) */
    void *vout = dmalloc(nout * 2), *vdq = dmalloc(nqkv * 2);
    float *vlse = dmalloc(nl * 4);
    size_t vsb = (size_t)vr_scratch_cuda_attention_bwd(B, T, NH, hs, 2);
    void *vscr = dmalloc(vsb);
    cudaMemset(vout, 0xFF, nout * 2), cudaMemset(vdq, 0xFF, nqkv * 2), cudaMemset(vlse, 0xFF, nl * 4);
    OKS(vr_cuda_attention_gqa_fwd(&ctx, dt, vout, vlse, qkv, B, T, NH, NKV, hs));
    OKS(vr_cuda_attention_gqa_bwd(&ctx, dt, vdq, dout, qkv, vout, vlse, B, T, NH, NKV, hs, 0, vscr, vsb));

    /* cuDNN: scratch of exactly `need`, then guard bytes; the ctx workspace's guard */
    void *cout_ = dmalloc(nout * 2), *cdq = dmalloc(nqkv * 2), *cdq2 = dmalloc(nqkv * 2);
    float *clse = dmalloc(nl * 4);
    unsigned char *cscr = dmalloc(need + GUARD);
    guard_set(cscr + need);
    guard_set(ws + ws_bytes);
    cudaMemset(cout_, 0xFF, nout * 2), cudaMemset(cdq, 0xFF, nqkv * 2), cudaMemset(cdq2, 0xFF, nqkv * 2);
    cudaMemset(clse, 0xFF, nl * 4);
    OKS(vr_cuda_attention_cudnn_fwd(&ctx, dt, cout_, clse, qkv, B, T, NH, NKV, hs));
    OKS(vr_cuda_attention_cudnn_bwd(&ctx, dt, cdq, dout, qkv, cout_, clse, B, T, NH, NKV, hs, cscr, need));
    /* mixed: cuDNN's backward from vram's forward */
    OKS(vr_cuda_attention_cudnn_bwd(&ctx, dt, cdq2, dout, qkv, vout, vlse, B, T, NH, NKV, hs, cscr, need));
    OKS(vr_cuda_sync(&ctx));
    CHECK(guard_ok(cscr + need), "cuDNN's backward wrote past its %zu bytes of scratch", need);
    CHECK(guard_ok(ws + ws_bytes), "cuDNN wrote past the ctx's workspace");

    size_t rows = (size_t)B * T, ld = (size_t)W * hs, hq = (size_t)NH * hs, hk = (size_t)NKV * hs;
    double e_out[2] = {rel_err(vout, dt, rout, rows, hq, 0, hq), rel_err(cout_, dt, rout, rows, hq, 0, hq)};
    double e_lse[2] = {max_abs_diff(vlse, rlse, nl), max_abs_diff(clse, rlse, nl)};
    const char *names[3] = {"dq", "dk", "dv"};
    size_t offs[3] = {0, hq, hq + hk}, widths[3] = {hq, hk, hk};
    printf("   %-6s %10s %10s %10s\n", "", "vram", "cudnn", "cudnn<-vram fwd");
    printf("   %-6s %10.2e %10.2e\n", "out", e_out[0], e_out[1]);
    printf("   %-6s %10.2e %10.2e   (max abs)\n", "lse", e_lse[0], e_lse[1]);
    CHECK(e_out[0] <= TOL && e_out[1] <= TOL, "%s out: relative error vram %.2e, cudnn %.2e (tolerance %.0e)", dn,
          e_out[0], e_out[1], TOL);
    CHECK(e_lse[0] <= TOL_LSE && e_lse[1] <= TOL_LSE, "%s lse: max abs error vram %.2e, cudnn %.2e", dn, e_lse[0],
          e_lse[1]);
    for (int k = 0; k < 3; k++) {
        double ev = rel_err(vdq, dt, rdq, rows, ld, offs[k], widths[k]);
        double ec = rel_err(cdq, dt, rdq, rows, ld, offs[k], widths[k]);
        double em = rel_err(cdq2, dt, rdq, rows, ld, offs[k], widths[k]);
        printf("   %-6s %10.2e %10.2e %10.2e\n", names[k], ev, ec, em);
        CHECK(ev <= TOL && ec <= TOL && em <= TOL, "%s %s: relative error vram %.2e, cudnn %.2e, mixed %.2e", dn,
              names[k], ev, ec, em);
    }

    if (timed) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        float t[4][5];
        for (int path = 0; path < 2; path++)
            for (int dir = 0; dir < 2; dir++)
                for (int it = -1; it < 5; it++) {
                    cudaEventRecord(e0, 0);
                    if (path == 0 && dir == 0) vr_cuda_attention_gqa_fwd(&ctx, dt, vout, vlse, qkv, B, T, NH, NKV, hs);
                    if (path == 0 && dir == 1)
                        vr_cuda_attention_gqa_bwd(&ctx, dt, vdq, dout, qkv, vout, vlse, B, T, NH, NKV, hs, 0, vscr, vsb);
                    if (path == 1 && dir == 0) vr_cuda_attention_cudnn_fwd(&ctx, dt, cout_, clse, qkv, B, T, NH, NKV, hs);
                    if (path == 1 && dir == 1)
                        vr_cuda_attention_cudnn_bwd(&ctx, dt, cdq, dout, qkv, cout_, clse, B, T, NH, NKV, hs, cscr, need);
                    cudaEventRecord(e1, 0);
                    cudaEventSynchronize(e1);
                    if (it >= 0) cudaEventElapsedTime(&t[path * 2 + dir][it], e0, e1);
                }
        printf("   time (ms, median of 5): vram fwd %.3f bwd %.3f | cudnn fwd %.3f bwd %.3f\n", median5(t[0]),
               median5(t[1]), median5(t[2]), median5(t[3]));
        cudaEventDestroy(e0), cudaEventDestroy(e1);
    }

    void *bufs[] = {qkv32, qkv, dout32, dout, rout, rlse, rdq, rscr, vout, vdq, vlse, vscr, cout_, cdq, cdq2, clse, cscr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

/* VRAM_CUDNN_CONFIGS=1: each engine config cuDNN's heuristics offer (that finalizes), timed fwd and bwd at shape. */
static void time_configs(int B, int T, int NH, int NKV, int hs)
{
    vr_cuda_dtype dt = VR_CUDA_BF16;
    int W = NH + 2 * NKV;
    size_t nqkv = (size_t)B * T * W * hs, nout = (size_t)B * T * NH * hs, nl = (size_t)B * NH * T;
    float *h = malloc((nqkv > nout ? nqkv : nout) * 4), *f32;
    void *qkv, *dout;
    rand_dev(h, nqkv, 1.0f, &f32, &qkv, dt);
    cudaFree(f32);
    rand_dev(h, nout, 1.0f, &f32, &dout, dt);
    cudaFree(f32);
    free(h);
    size_t sb = vr_cuda_attention_cudnn_scratch_bytes(B, T, NH, NKV, hs);
    void *out = dmalloc(nout * 2), *dq = dmalloc(nqkv * 2), *scr = dmalloc(sb);
    float *lse = dmalloc(nl * 4);
    /* a workspace for the configs that ask more than the planned scratch holds */
    void *saved_ws = ctx.workspace;
    size_t saved_wsb = ctx.workspace_bytes;
    ctx.workspace_bytes = (size_t)1 << 30;
    ctx.workspace = dmalloc(ctx.workspace_bytes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    for (int pick = 0; pick < 8; pick++) {
        vr_cuda_attention_cudnn_release();
        vr__cudnn_attention_pick(pick);
        size_t fws = 0, bws = 0;
        vr_status st = vr_cuda_attention_cudnn_prepare(&ctx, dt, B, T, NH, NKV, hs, &fws, &bws);
        if (st) {
            printf("   config %d: %s\n", pick, vr_last_error());
            break;
        }
        float t[2][5];
        for (int dir = 0; dir < 2; dir++)
            for (int it = -1; it < 5; it++) {
                cudaEventRecord(e0, 0);
                st = dir ? vr_cuda_attention_cudnn_bwd(&ctx, dt, dq, dout, qkv, out, lse, B, T, NH, NKV, hs, scr, sb)
                         : vr_cuda_attention_cudnn_fwd(&ctx, dt, out, lse, qkv, B, T, NH, NKV, hs);
                cudaEventRecord(e1, 0);
                cudaEventSynchronize(e1);
                if (st) t[dir][it < 0 ? 0 : it] = -1.0f;
                else if (it >= 0) cudaEventElapsedTime(&t[dir][it], e0, e1);
            }
        printf("   config %d: workspace fwd %zu bwd %zu; ms fwd %.3f bwd %.3f%s\n", pick, fws, bws, median5(t[0]),
               median5(t[1]), st ? " (a run failed)" : "");
    }
    vr_cuda_attention_cudnn_release();
    vr__cudnn_attention_pick(0);
    cudaFree(ctx.workspace);
    ctx.workspace = saved_ws, ctx.workspace_bytes = saved_wsb;
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    void *bufs[] = {qkv, dout, out, dq, scr, lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    const char *req = getenv("VRAM_REQUIRE_CUDNN");
    if (!vr_cuda_cudnn_version()) {
        printf("%s: cuDNN not available: %s\n", req && !strcmp(req, "1") ? "FAIL" : "SKIP", vr_cuda_cudnn_why());
        return req && !strcmp(req, "1") ? 1 : 77;
    }
    ws_bytes = vr_cuda_matmul_workspace_bytes();
    ws = dmalloc(ws_bytes + GUARD);
    if (vr_cuda_ctx_init(&ctx, NULL, ws, ws_bytes) != VR_OK) {
        printf("FAIL: vr_cuda_ctx_init: %s\n", vr_last_error());
        return 1;
    }
    struct cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("GPU: %s (compute %d.%d); cuDNN %d\n", p.name, p.major, p.minor, vr_cuda_cudnn_version());
    const char *cf = getenv("VRAM_CUDNN_CONFIGS");
    if (cf && !strcmp(cf, "1")) {
        printf("== engine configs, GPT-2 124M B=16 (T 1024, 12 heads of 64)\n");
        time_configs(16, 1024, 12, 12, 64);
        printf("== engine configs, GPT-2 medium B=8 (T 1024, 16 heads of 64)\n");
        time_configs(8, 1024, 16, 16, 64);
        printf("== engine configs, llama3.2-1b B=8 (T 2048, 32 heads of 64, 8 kv heads)\n");
        time_configs(8, 2048, 32, 8, 64);
    }
    const char *sh = getenv("VRAM_CUDNN_SHAPES");
    int quick = sh && !strcmp(sh, "quick");
    struct { vr_cuda_dtype dt; int B, T, NH, NKV, hs, timed; } shapes[] = {
        {VR_CUDA_BF16, 2, 64, 12, 12, 64, 0},
        {VR_CUDA_BF16, 2, 1024, 12, 12, 64, 0},
        {VR_CUDA_BF16, 2, 1024, 8, 2, 64, 0},   /* grouped-query */
        {VR_CUDA_BF16, 2, 2048, 12, 12, 64, 0},
        {VR_CUDA_BF16, 2, 64, 12, 12, 128, 0},
        {VR_CUDA_BF16, 2, 1024, 12, 12, 128, 0},
        {VR_CUDA_BF16, 2, 2048, 12, 12, 128, 0},
        {VR_CUDA_BF16, 2, 2048, 8, 2, 128, 0},  /* grouped-query, head size 128 */
        {VR_CUDA_BF16, 2, 200, 4, 1, 64, 0},    /* T not a multiple of 64; multi-query */
        {VR_CUDA_F16, 2, 1024, 12, 12, 64, 0},
        {VR_CUDA_BF16, 16, 1024, 12, 12, 64, 1}, /* GPT-2 124M's step: timed */
        {VR_CUDA_BF16, 4, 2048, 32, 8, 64, 1},   /* llama3.2-1b's: timed */
    };
    int ns = quick ? 3 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < ns; i++)
        run_shape(shapes[i].dt, shapes[i].B, shapes[i].T, shapes[i].NH, shapes[i].NKV, shapes[i].hs, shapes[i].timed);
    /* an unsupported shape is refused with a reason, not run */
    size_t a, b;
    vr_status st = vr_cuda_attention_cudnn_prepare(&ctx, VR_CUDA_F32, 2, 64, 4, 4, 64, &a, &b);
    CHECK(st == VR_ERR_UNSUPPORTED, "fp32 must be refused (got %s)", vr_status_name(st));
    vr_cuda_attention_cudnn_release();
    vr_cuda_ctx_destroy(&ctx);
    cudaFree(ws);
    printf(failures ? "FAILED: %d check(s)\n" : "PASSED\n", failures);
    return failures ? 1 : 0;
}
