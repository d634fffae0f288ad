// Two ways to take a Linear's bias gradient (the column sums of dout) out of the step's serial time, measured on
// GPT-2's qkv and fch shapes (124M: N 16384, C 768; medium: N 8192, C 1024), bf16, cuBLASLt's heuristic 0:
//  1. overlap: the column sums on a second stream beside the dinp and dw products of the same node (forked at
//     the node's start, joined at its end), against the three in turn on one stream;
//  2. a column of ones: the input stored N x (C+8) with a column of ones (and 7 of zeros), the weight OC x (C+8)
//     with the bias as its column C: the forward product needs no bias epilogue (k = C+8) and the dw product
//     (m = C+8) writes the bias gradient as its row C. Against the forward with its bias epilogue (k = C) and the
//     dw product (m = C) plus the column sums.
// The column sums here are a plain two-pass kernel, slower than vram's (src/kernels/cuda/matmul.cu: medium's qkv
// 25 us against ~43 here), so "minus the sums" overstates what the column of ones would save; results and what
// was decided: bench/gpu/README.md (twelfth session).
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 bench/gpu/lt_bias.cu -lcublasLt -o /tmp/lt_bias && /tmp/lt_bias
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
#define CK(x) do { auto r_ = (x); if ((int)r_) { printf("%s:%d error %d\n", __FILE__, __LINE__, (int)r_); exit(1); } } while (0)

static cublasLtHandle_t lt;
static void *ws;
static const size_t wsb = 32u << 20;

// Column-major D(m,n) = op(A) op(B) (+ bias along m when bias != NULL), bf16 in and out, fp32 compute.
struct Mm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    const void *A, *B; void *D;
};
static Mm make(int m, int n, int k, int ta, int tb, int lda, int ldb, int ldd, const void *A, const void *B, void *D,
               const void *bias)
{
    Mm x; x.A = A; x.B = B; x.D = D;
    cudaDataType_t ty = CUDA_R_16BF, sty = CUDA_R_32F;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescCreate(&x.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &sty, sizeof sty));
    CK(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    CK(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    if (bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        CK(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CK(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ty, sizeof ty));
        CK(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    CK(cublasLtMatrixLayoutCreate(&x.la, ty, ta ? k : m, ta ? m : k, lda));
    CK(cublasLtMatrixLayoutCreate(&x.lb, ty, tb ? n : k, tb ? k : n, ldb));
    CK(cublasLtMatrixLayoutCreate(&x.ld, ty, m, n, ldd));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h; int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, x.desc, x.la, x.lb, x.ld, x.ld, pref, 1, &h, &got));
    if (!got) { printf("no algorithm\n"); exit(1); }
    x.algo = h.algo;
    cublasLtMatmulPreferenceDestroy(pref);
    return x;
}
static void run(const Mm &x, cudaStream_t st)
{
    float a = 1, b = 0;
    CK(cublasLtMatmul(lt, x.desc, &a, x.A, x.la, x.B, x.lb, &b, x.D, x.ld, x.D, x.ld, &x.algo, ws, wsb, st));
}

// Column sums of dout (N x OC, row-major) into fp32 partials[R][OC], then bias[OC] (bf16).
__global__ void colsum1(const __nv_bfloat16 *d, float *part, int N, int OC, int rows)
{
    int c = (blockIdx.x * 32 + threadIdx.x) * 2;
    int r0 = blockIdx.y * rows;
    float s0 = 0, s1 = 0;
    if (c < OC)
        for (int r = r0 + threadIdx.y; r < r0 + rows && r < N; r += blockDim.y) {
            __nv_bfloat162 v = *(const __nv_bfloat162 *)(d + (size_t)r * OC + c);
            s0 += __bfloat162float(v.x); s1 += __bfloat162float(v.y);
        }
    __shared__ float sh[32][32][2];
    sh[threadIdx.y][threadIdx.x][0] = s0; sh[threadIdx.y][threadIdx.x][1] = s1;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        for (int y = 1; y < blockDim.y; y++) s0 += sh[y][threadIdx.x][0], s1 += sh[y][threadIdx.x][1];
        part[(size_t)blockIdx.y * OC + c] = s0; part[(size_t)blockIdx.y * OC + c + 1] = s1;
    }
}
__global__ void colsum2(const float *part, __nv_bfloat16 *bias, int R, int OC)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float s = 0;
    for (int r = 0; r < R; r++) s += part[(size_t)r * OC + c];
    bias[c] = __float2bfloat16(s);
}
static float *part;
static void colsum(const void *d, void *bias, int N, int OC, cudaStream_t st)
{
    int R = 64, rows = (N + R - 1) / R;
    colsum1<<<dim3((OC / 2 + 31) / 32, R), dim3(32, 32), 0, st>>>((const __nv_bfloat16 *)d, part, N, OC, rows);
    colsum2<<<(OC + 255) / 256, 256, 0, st>>>(part, (__nv_bfloat16 *)bias, R, OC);
}

template <class F> static float timed(cudaStream_t st, F f)
{
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int w = 0; w < 5; w++) f();
    cudaEventRecord(e0, st);
    for (int r = 0; r < 50; r++) f();
    cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return ms / 50 * 1000;
}

int main()
{
    CK(cublasLtCreate(&lt));
    size_t big = (size_t)16384 * 4 * 1032 * 2;
    void *inp, *w, *dout, *dinp, *dw, *out, *bias;
    CK(cudaMalloc(&inp, big)); CK(cudaMalloc(&w, big)); CK(cudaMalloc(&dout, big)); CK(cudaMalloc(&dinp, big));
    CK(cudaMalloc(&dw, big)); CK(cudaMalloc(&out, big)); CK(cudaMalloc(&bias, 1 << 20)); CK(cudaMalloc(&ws, wsb));
    CK(cudaMalloc(&part, 64 * 8192 * 4));
    std::vector<uint16_t> hb(big / 2);
    uint32_t s = 12345;
    for (size_t i = 0; i < hb.size(); i++) { s = s * 1664525u + 1013904223u; hb[i] = 0x3c00 | (s >> 25); }
    for (void *p : {inp, w, dout}) CK(cudaMemcpy(p, hb.data(), big, cudaMemcpyHostToDevice));
    cudaStream_t st, side; CK(cudaStreamCreate(&st)); CK(cudaStreamCreate(&side));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    struct Shape { const char *name; int N, C, OC; } shapes[] = {
        {"124M qkv", 16384, 768, 2304}, {"124M fch", 16384, 768, 3072},
        {"medium qkv", 8192, 1024, 3072}, {"medium fch", 8192, 1024, 4096}};
    for (auto sh : shapes) {
        int N = sh.N, C = sh.C, OC = sh.OC, Cp = C + 8;
        Mm dinp_mm = make(C, N, OC, 0, 0, C, OC, C, w, dout, dinp, NULL);
        Mm dw_mm = make(C, OC, N, 0, 1, C, OC, C, inp, dout, dw, NULL);
        Mm dw1_mm = make(Cp, OC, N, 0, 1, Cp, OC, Cp, inp, dout, dw, NULL);
        Mm fwd_mm = make(OC, N, C, 1, 0, C, C, OC, w, inp, out, bias);
        Mm fwd1_mm = make(OC, N, Cp, 1, 0, Cp, Cp, OC, w, inp, out, NULL);
        float t_cs = timed(st, [&] { colsum(dout, bias, N, OC, st); });
        float t_dinp = timed(st, [&] { run(dinp_mm, st); });
        float t_dw = timed(st, [&] { run(dw_mm, st); });
        float t_dw1 = timed(st, [&] { run(dw1_mm, st); });
        float t_fwd = timed(st, [&] { run(fwd_mm, st); });
        float t_fwd1 = timed(st, [&] { run(fwd1_mm, st); });
        float serial = timed(st, [&] { run(dinp_mm, st); run(dw_mm, st); colsum(dout, bias, N, OC, st); });
        float over = timed(st, [&] {
            cudaEventRecord(fork, st); cudaStreamWaitEvent(side, fork, 0);
            colsum(dout, bias, N, OC, side);
            run(dinp_mm, st); run(dw_mm, st);
            cudaEventRecord(join, side); cudaStreamWaitEvent(st, join, 0);
        });
        float over_late = timed(st, [&] { // the sums beside the dw product only
            run(dinp_mm, st);
            cudaEventRecord(fork, st); cudaStreamWaitEvent(side, fork, 0);
            colsum(dout, bias, N, OC, side);
            run(dw_mm, st);
            cudaEventRecord(join, side); cudaStreamWaitEvent(st, join, 0);
        });
        printf("%-10s colsum %6.1f us | dinp %6.1f dw %6.1f | serial %6.1f, sums on a side stream %6.1f (beside dw only "
               "%6.1f): %+6.1f us\n", sh.name, t_cs, t_dinp, t_dw, serial, over, over_late, over - serial);
        printf("%-10s ones column: fwd %6.1f -> %6.1f, dw %6.1f -> %6.1f, minus the sums: %+6.1f us\n", sh.name,
               t_fwd, t_fwd1, t_dw, t_dw1, (t_fwd1 - t_fwd) + (t_dw1 - t_dw) - t_cs);
    }
    return 0;
}
