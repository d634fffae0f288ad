/* Per-kernel profile of the CUDA kernels at GPT-2 124M training shapes (B=16, T=1024, C=768, NH=12,
 * V=50257, bf16 activations/params, fp32 master and AdamW state). Not a claim against a peer: a
 * profile. Each op: 3 warm-up runs, then REPS timed runs (cudaEvent around each), the median printed
 * with the achieved TFLOP/s (matrix work) or GB/s (memory-bound work, bytes = the minimum each op
 * must read and write).
 *
 * Usage: bench_kernels_cuda [B] [T]   (defaults 16 1024) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/kernels_cuda.h"

#define REPS 20

static vr_cuda_ctx ctx;
static cudaEvent_t ev0, ev1;

#define CHECK(expr)                                                                        \
    do {                                                                                   \
        vr_status s_ = (expr);                                                             \
        if (s_ != VR_OK) {                                                                 \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #expr, vr_last_error()); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void *dmalloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef void (*op_fn)(void *arg);

/* Median milliseconds of REPS runs of fn(arg). */
static float time_op(op_fn fn, void *arg)
{
    float t[REPS];
    for (int i = 0; i < 3; i++) fn(arg);
    cudaDeviceSynchronize();
    for (int i = 0; i < REPS; i++) {
        cudaEventRecord(ev0, 0);
        fn(arg);
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&t[i], ev0, ev1);
    }
    qsort(t, REPS, sizeof t[0], cmpf);
    return t[REPS / 2];
}

static double total_ms;

static void report(const char *name, float ms, double flops, double bytes, int per_step)
{
    if (flops > 0)
        printf("  %-40s %9.3f ms  %8.1f TFLOP/s", name, ms, flops / (ms * 1e-3) / 1e12);
    else
        printf("  %-40s %9.3f ms  %8.1f GB/s   ", name, ms, bytes / (ms * 1e-3) / 1e9);
    printf("   x%-3d per step\n", per_step);
    total_ms += ms * per_step;
}

/* ------------------------------------------------------------------ shapes and buffers */

static int B = 16, T = 1024;
enum { C = 768, NH = 12, V = 50257, L = 12 };
static size_t N; /* B*T */

typedef struct {
    void *x, *y, *z, *w, *bias, *qkv, *att, *big, *big2, *dqkv, *scratch, *wte, *wpe, *dwte, *grad, *param;
    float *mean, *rstd, *lse, *losses, *master, *m, *v, *sumsq;
    int32_t *tok;
    size_t scratch_bytes, nparams;
    int oc, ic;
} bufs;
static bufs b;

static void op_emb_fwd(void *a) { (void)a; CHECK(vr_cuda_embedding_fwd(&ctx, VR_CUDA_BF16, b.x, b.tok, b.wte, b.wpe, B, T, C)); }
static void op_emb_bwd(void *a)
{
    (void)a;
    CHECK(vr_cuda_embedding_bwd(&ctx, VR_CUDA_BF16, b.dwte, b.wpe, b.x, b.tok, B, T, C, V, 1, b.scratch, b.scratch_bytes));
}
static void op_ln_fwd(void *a) { (void)a; CHECK(vr_cuda_layernorm_fwd(&ctx, VR_CUDA_BF16, b.y, b.mean, b.rstd, b.x, b.w, b.bias, (int)N, C)); }
static void op_ln_bwd(void *a)
{
    (void)a;
    CHECK(vr_cuda_layernorm_bwd(&ctx, VR_CUDA_BF16, b.z, b.w, b.bias, b.y, b.x, b.w, b.mean, b.rstd, (int)N, C, 1, 1,
                                b.scratch, b.scratch_bytes));
}
/* Linear layers: input (N,ic) and output (N,oc); the wide side (3072 or 2304 channels) lives in big/big2. */
static void *mm_in(void) { return b.ic > C ? b.big2 : b.x; }
static void *mm_out(void) { return b.oc > C ? b.big : b.y; }
static void op_mm_fwd(void *a) { (void)a; CHECK(vr_cuda_matmul_fwd(&ctx, VR_CUDA_BF16, mm_out(), mm_in(), b.w, b.bias, (int)N, b.ic, b.oc)); }
static void op_mm_gelu(void *a) { (void)a; CHECK(vr_cuda_matmul_gelu_fwd(&ctx, VR_CUDA_BF16, b.big, b.qkv, b.x, b.w, b.bias, (int)N, b.ic, b.oc)); }
static void op_mm_bwd(void *a)
{
    (void)a;
    // dinp goes to z (N,768) or big (N,3072); dout is the output-shaped buffer
    void *dinp = b.ic > C ? b.big : b.z, *dout = b.oc > C ? b.big2 : b.y;
    CHECK(vr_cuda_matmul_bwd(&ctx, VR_CUDA_BF16, dinp, b.grad, b.dwte, dout, mm_in(), b.w, (int)N, b.ic, b.oc, 0, 1));
}
static void op_att_fwd(void *a) { (void)a; CHECK(vr_cuda_attention_fwd(&ctx, VR_CUDA_BF16, b.att, b.lse, b.qkv, B, T, C, NH)); }
static void op_att_bwd(void *a)
{
    (void)a;
    CHECK(vr_cuda_attention_bwd(&ctx, VR_CUDA_BF16, b.dqkv, b.x, b.qkv, b.att, b.lse, B, T, C, NH, 0, b.scratch,
                                b.scratch_bytes));
}
static void op_gelu_fwd(void *a) { (void)a; CHECK(vr_cuda_gelu_fwd(&ctx, VR_CUDA_BF16, b.big, b.big2, N * 4 * C)); }
static void op_gelu_bwd(void *a) { (void)a; CHECK(vr_cuda_gelu_bwd(&ctx, VR_CUDA_BF16, b.big, b.big2, b.big, N * 4 * C, 0)); }
static void op_add(void *a) { (void)a; CHECK(vr_cuda_add_fwd(&ctx, VR_CUDA_BF16, b.z, b.x, b.y, N * C)); }
static void op_acc(void *a) { (void)a; CHECK(vr_cuda_acc(&ctx, VR_CUDA_BF16, b.z, b.x, N * C, 1)); }
static void op_cls(void *a)
{
    (void)a;
    CHECK(vr_cuda_classifier(&ctx, VR_CUDA_BF16, b.losses, b.y, b.dwte, b.x, b.wte, b.tok, (int)N, C, V, 50304, 1.0f / N,
                             b.big, (size_t)N * 4 * C * 2, 0, 1));
}
static void op_cls_eval(void *a)
{
    (void)a;
    CHECK(vr_cuda_classifier(&ctx, VR_CUDA_BF16, b.losses, NULL, NULL, b.x, b.wte, b.tok, (int)N, C, V, 50304, 1.0f / N,
                             b.big, (size_t)N * 4 * C * 2, 0, 0));
}
/* The logits product alone at a padded, aligned vocabulary (50304 = 393 * 128): what cuBLASLt does
 * without the odd dimension. */
static void op_logits_padded(void *a)
{
    (void)a;
    CHECK(vr_cuda_gemm(&ctx, VR_CUDA_BF16, b.big, b.x, b.wte, 1024, 50304, C, C, C, 50304, 0, 1, 1.0f, 0));
}
static void op_logits_odd(void *a)
{
    (void)a;
    CHECK(vr_cuda_gemm(&ctx, VR_CUDA_BF16, b.big, b.x, b.wte, 1024, V, C, C, C, 50304, 0, 1, 1.0f, 0));
}
static void op_sumsq(void *a) { (void)a; CHECK(vr_cuda_sumsq(&ctx, VR_CUDA_BF16, b.sumsq, b.grad, b.nparams, 0)); }
static void op_adamw(void *a)
{
    (void)a;
    CHECK(vr_cuda_adamw(&ctx, VR_CUDA_BF16, b.param, b.master, VR_CUDA_BF16, b.grad, b.m, b.v, b.nparams, 6e-4f, 0.9f,
                        0.95f, 1e-8f, 0.1f, 10, 1.0f, b.sumsq, NULL));
}

int main(int argc, char **argv)
{
    if (argc > 1) B = atoi(argv[1]);
    if (argc > 2) T = atoi(argv[2]);
    N = (size_t)B * T;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: nothing to bench\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    void *ws = dmalloc(vr_cuda_matmul_workspace_bytes());
    CHECK(vr_cuda_ctx_init(&ctx, NULL, ws, vr_cuda_matmul_workspace_bytes()));
    {   // VRAM_ATTN_V1 (this bench's switch): "1" both directions on the v1 kernels, "fwd"/"bwd" one of them
        const char *e = getenv("VRAM_ATTN_V1");
        ctx.attention_v1 = !e || !e[0] || !strcmp(e, "0") ? 0 : !strcmp(e, "fwd") ? 1 : !strcmp(e, "bwd") ? 2 : 3;
    }
    cudaEventCreate(&ev0);
    cudaEventCreate(&ev1);
    printf("vram CUDA kernels, GPT-2 124M shapes: B=%d T=%d C=%d NH=%d V=%d, bf16; %s (%d SMs)\n", B, T, C, NH, V,
           prop.name, ctx.sm_count);
    printf("median of %d runs after 3 warm-up runs; 'per step' = calls in one training step of 12 layers\n", REPS);

    size_t e2 = 2;
    b.nparams = 124439808;
    b.x = dmalloc(N * C * e2), b.y = dmalloc(N * C * e2), b.z = dmalloc(N * C * e2);
    b.w = dmalloc((size_t)4 * C * C * e2), b.bias = dmalloc((size_t)4 * C * e2);
    b.qkv = dmalloc(N * 4 * C * e2), b.att = dmalloc(N * C * e2), b.dqkv = dmalloc(N * 3 * C * e2);
    b.big = dmalloc(N * 4 * C * e2), b.big2 = dmalloc(N * 4 * C * e2);
    b.wte = dmalloc((size_t)50304 * C * e2), b.wpe = dmalloc((size_t)T * C * e2), b.dwte = dmalloc((size_t)50304 * C * e2);
    b.grad = dmalloc(b.nparams * e2), b.param = dmalloc(b.nparams * e2);
    b.master = dmalloc(b.nparams * 4), b.m = dmalloc(b.nparams * 4), b.v = dmalloc(b.nparams * 4);
    b.mean = dmalloc(N * 4), b.rstd = dmalloc(N * 4), b.lse = dmalloc((size_t)B * NH * T * 4), b.losses = dmalloc(N * 4);
    b.sumsq = dmalloc(4);
    b.tok = dmalloc(N * 4);
    b.scratch_bytes = vr_cuda_embedding_bwd_scratch_bytes(B, T, V);
    size_t s2 = vr_cuda_layernorm_bwd_scratch_bytes((int)N, C), s3 = vr_cuda_attention_scratch_bytes(B, T, C, NH);
    if (s2 > b.scratch_bytes) b.scratch_bytes = s2;
    if (s3 > b.scratch_bytes) b.scratch_bytes = s3;
    // the training step passes its whole 32 MiB workspace as scratch; attention_bwd uses the room
    // beyond its minimum for the fused backward's fp32 dq (VRAM_ATTN_V1=1: the two-kernel backward)
    if (b.scratch_bytes < ((size_t)32 << 20)) b.scratch_bytes = (size_t)32 << 20;
    b.scratch = dmalloc(b.scratch_bytes);
    // inputs: small random-ish values (fill), tokens in range
    int32_t *htok = malloc(N * 4);
    uint64_t r = 88172645463325252ULL;
    for (size_t i = 0; i < N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        htok[i] = (int32_t)(r % V);
    }
    cudaMemcpy(b.tok, htok, N * 4, cudaMemcpyHostToDevice);
    free(htok);
    void *all[] = {b.x, b.y, b.z, b.w, b.bias, b.qkv, b.att, b.dqkv, b.big, b.big2, b.wte, b.wpe, b.dwte, b.grad, b.param};
    size_t alln[] = {N * C, N * C, N * C, (size_t)4 * C * C, (size_t)4 * C, N * 3 * C, N * C, N * 3 * C, N * 4 * C,
                     N * 4 * C, (size_t)V * C, (size_t)T * C, (size_t)V * C, b.nparams, b.nparams};
    for (int i = 0; i < 15; i++) CHECK(vr_cuda_fill(&ctx, VR_CUDA_BF16, all[i], alln[i], 0.01f * (float)(i + 1)));
    CHECK(vr_cuda_fill(&ctx, VR_CUDA_F32, b.master, b.nparams, 0.02f));
    CHECK(vr_cuda_zero(&ctx, VR_CUDA_F32, b.m, b.nparams));
    CHECK(vr_cuda_zero(&ctx, VR_CUDA_F32, b.v, b.nparams));
    CHECK(vr_cuda_fill(&ctx, VR_CUDA_F32, b.sumsq, 1, 1.0f));
    // attention input with some spread so the softmax is not flat
    CHECK(vr_cuda_fill(&ctx, VR_CUDA_BF16, b.qkv, N * 3 * C, 0.5f));
    cudaDeviceSynchronize();

    double NC = (double)N * C;
    printf("\nforward\n");
    report("embedding_fwd", time_op(op_emb_fwd, NULL), 0, NC * 2 * 3, 1);
    report("layernorm_fwd (N,768)", time_op(op_ln_fwd, NULL), 0, NC * 2 * 2 + N * 8, 2 * L + 1);
    b.ic = C, b.oc = 3 * C;
    report("matmul_fwd qkv 768->2304 +bias", time_op(op_mm_fwd, NULL), 2.0 * N * C * 3 * C, 0, L);
    int v1f = ctx.attention_v1 & 1, v1b = (ctx.attention_v1 >> 1) & 1;
    char att_fwd_name[64], att_bwd_name[64];
    snprintf(att_fwd_name, sizeof att_fwd_name, "attention_fwd (tensor cores, %s)", v1f ? "v1" : "v2");
    snprintf(att_bwd_name, sizeof att_bwd_name, "%s", v1b ? "attention_bwd v1 (delta+dkv+dq)" : "attention_bwd v2 (fused, atomic dq)");
    report(att_fwd_name, time_op(op_att_fwd, NULL), 4.0 * B * NH * ((double)T * (T + 1) / 2) * 64, 0, L);
    b.ic = C, b.oc = C;
    report("matmul_fwd attproj 768->768 +bias", time_op(op_mm_fwd, NULL), 2.0 * N * C * C, 0, L);
    report("add_fwd residual (N,768)", time_op(op_add, NULL), 0, NC * 2 * 3, 2 * L);
    b.ic = C, b.oc = 4 * C;
    report("matmul_gelu_fwd fc 768->3072 +bias+gelu", time_op(op_mm_gelu, NULL), 2.0 * N * C * 4 * C, 0, L);
    report("matmul_fwd fc 768->3072 +bias (no gelu)", time_op(op_mm_fwd, NULL), 2.0 * N * C * 4 * C, 0, 0);
    report("gelu_fwd (N,3072) (unfused)", time_op(op_gelu_fwd, NULL), 0, NC * 4 * 2 * 2, 0);
    b.ic = 4 * C, b.oc = C;
    report("matmul_fwd fcproj 3072->768 +bias", time_op(op_mm_fwd, NULL), 2.0 * N * C * 4 * C, 0, L);
    report("classifier eval (losses only, 1024-row chunks)", time_op(op_cls_eval, NULL), 2.0 * N * C * V, 0, 0);

    report("gemm logits 1024 x 50304 x 768 (padded V)", time_op(op_logits_padded, NULL), 2.0 * 1024 * 50304 * C, 0, 0);
    report("gemm logits 1024 x 50257 x 768 (odd V)", time_op(op_logits_odd, NULL), 2.0 * 1024 * V * C, 0, 0);

    printf("\nbackward\n");
    report("classifier fwd+bwd (1024-row chunks)", time_op(op_cls, NULL), 6.0 * N * C * V, 0, 1);
    report("matmul_bwd fcproj (dinp, dw acc, dbias)", time_op(op_mm_bwd, NULL), 4.0 * N * C * 4 * C, 0, L);
    report("gelu_bwd (N,3072) in place", time_op(op_gelu_bwd, NULL), 0, NC * 4 * 2 * 3, L);
    b.ic = C, b.oc = 4 * C;
    report("matmul_bwd fc", time_op(op_mm_bwd, NULL), 4.0 * N * C * 4 * C, 0, L);
    b.ic = C, b.oc = C;
    report("matmul_bwd attproj", time_op(op_mm_bwd, NULL), 4.0 * N * C * C, 0, L);
    report(att_bwd_name, time_op(op_att_bwd, NULL),
           2.5 * 4.0 * B * NH * ((double)T * (T + 1) / 2) * 64, 0, L);
    b.ic = C, b.oc = 3 * C;
    report("matmul_bwd qkv", time_op(op_mm_bwd, NULL), 4.0 * N * C * 3 * C, 0, L);
    report("layernorm_bwd (dinp acc, dw/db acc)", time_op(op_ln_bwd, NULL), 0, NC * 2 * 4 + N * 8, 2 * L + 1);
    report("acc residual grad (N,768)", time_op(op_acc, NULL), 0, NC * 2 * 3, 2 * L);
    report("embedding_bwd (sorted, deterministic)", time_op(op_emb_bwd, NULL), 0, NC * 2 + (double)V * C * 2 * 2, 1);

    printf("\noptimizer (124.4M params)\n");
    report("sumsq (global norm) bf16 grads", time_op(op_sumsq, NULL), 0, (double)b.nparams * 2, 1);
    report("adamw bf16 param + fp32 master/m/v", time_op(op_adamw, NULL), 0, (double)b.nparams * 28, 1);

    printf("\nsum over one training step (kernels above x per step): %.2f ms  ->  %.0f tokens/s upper bound "
           "from these kernels alone\n", total_ms, (double)N / (total_ms * 1e-3));
    vr_cuda_ctx_destroy(&ctx);
    return 0;
}
