/* vram — CUDA matrix products through cuBLASLt: Linear forward (bias and GELU epilogues), Linear
 * backward (the bias gradient by column sums; DGELU: a dinp product fused with the backward of the
 * GELU that fed the Linear, vr_cuda_matmul_dgelu_bwd), a general row-major gemm.
 *
 * Row-major tensors are cuBLASLt's column-major matrices transposed, so out(N,OC) = inp(N,C) w(OC,C)^T
 * is computed as out^T(OC,N) = op_T(w)(OC,C) inp^T(C,N): A = w (transposed), B = inp.
 *
 * Algorithms come from cublasLtMatmulAlgoGetHeuristic (large products: the fastest of its first candidates
 * when clearly faster, lt_measure), cached per shape/epilogue/alignment (a small table under a mutex), so a
 * training step pays the choice once per distinct product. cuBLASLt
 * uses the ctx workspace except its last VR_LT_RESERVE bytes, which hold the column sums' partials. */
#include <cublasLt.h>
#include <mutex>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define VR_LT_RESERVE ((size_t)256 << 10)
#define VR_LT_CACHE 128

static size_t lt_ws_bytes(const vr_cuda_ctx *ctx)
{
    return ctx->workspace_bytes >= 4 * VR_LT_RESERVE ? ctx->workspace_bytes - VR_LT_RESERVE
                                                      : ctx->workspace_bytes;
}

/* The reserved tail of the workspace (NULL when the workspace is too small to have one). */
static void *lt_reserve(const vr_cuda_ctx *ctx)
{
    if (ctx->workspace_bytes < 4 * VR_LT_RESERVE) return NULL;
    return (char *)ctx->workspace + lt_ws_bytes(ctx);
}

static vr_status lt_status(cublasStatus_t s, const char *op, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS) return VR_OK;
    return vr_error(VR_ERR_DEVICE, "cuda kernels: %s: %s failed: %s", op, what,
                    cublasLtGetStatusString(s));
}
#define LT_CHECK(call, op)                                          \
    do {                                                            \
        vr_status lt__s = lt_status((call), (op), #call);           \
        if (lt__s != VR_OK) { st = lt__s; goto done; }              \
    } while (0)

static int align_class(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int c = 256;
    while (c > 1 && (a % (uintptr_t)c)) c >>= 1;
    return c;
}

struct lt_key {
    int dt, m, n, k, lda, ldb, ldd, ta, tb, epi, tf32, ldaux, device;
    int al_a, al_b, al_d, al_bias, al_aux, tune;
    size_t ws;
};
struct lt_entry {
    lt_key key;
    int ok; /* 1: algo valid; 0: cuBLASLt offered none */
    cublasLtMatmulAlgo_t algo;
};
static lt_entry lt_cache[VR_LT_CACHE];
static int lt_cache_n, lt_cache_next;
static std::mutex lt_mu;

static cudaDataType_t lt_type(vr_cuda_dtype dt)
{
    return dt == VR_CUDA_F32 ? CUDA_R_32F : dt == VR_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The algorithm of a product, measured (ctx->matmul_tune; off by default): cuBLASLt's heuristic ranks its
 * candidates by a model, and on the H100 its first choice for the classifier's logits (m = the vocabulary)
 * is 12-17% slower than another of its first 8 (bench/gpu/lt_algos.cu). The pick comes from timings, so
 * two runs may pick differently where candidates are close, and then round differently: off by default,
 * for runs that repeat bit for bit. A product of at least LT_TUNE_FLOP whose output overwrites
 * (beta 0) and aliases no input is run with each candidate (one warm-up, LT_TUNE_REPS timed) on its own
 * buffers, the first time its key is seen; the fastest is kept only when it beats the first by
 * LT_TUNE_GAIN, so a near tie keeps the heuristic's choice and the pick does not change from run to run
 * with timing noise. Never while the stream is being captured into a CUDA graph. Returns the index. */
#define LT_CANDIDATES 8
#define LT_TUNE_FLOP 2e9
#define LT_TUNE_REPS 3
#define LT_TUNE_GAIN 0.92f

static int lt_measure(const vr_cuda_ctx *ctx, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, const void *A, const void *B, void *D,
                      const cublasLtMatmulHeuristicResult_t *h, int got, size_t ws)
{
    cudaStream_t s = VR_STREAM(ctx);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return 0;
    }
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        cudaGetLastError();
        if (e0) cudaEventDestroy(e0);
        return 0;
    }
    float alpha = 1.0f, beta = 0.0f, t[LT_CANDIDATES];
    for (int i = 0; i < got; i++) {
        t[i] = -1.0f;
        bool ok = cublasLtMatmul((cublasLtHandle_t)ctx->lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld,
                                 &h[i].algo, ws ? ctx->workspace : NULL, ws, s) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e0, s) == cudaSuccess;
        for (int r = 0; ok && r < LT_TUNE_REPS; r++)
            ok = cublasLtMatmul((cublasLtHandle_t)ctx->lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld,
                                &h[i].algo, ws ? ctx->workspace : NULL, ws, s) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e1, s) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
        if (ok && cudaEventElapsedTime(&t[i], e0, e1) != cudaSuccess) t[i] = -1.0f;
        cudaGetLastError();
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    int best = 0;
    for (int i = 1; i < got; i++)
        if (t[i] > 0.0f && (t[best] <= 0.0f || t[i] < t[best])) best = i;
    return t[0] <= 0.0f || (t[best] > 0.0f && t[best] < LT_TUNE_GAIN * t[0]) ? best : 0;
}

vr_status vr_cu_lt_matmul(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *D, const void *A,
                                       const void *Bm, int m, int n, int k, int lda, int ldb, int ldd,
                                       int transa, int transb, float alpha, float beta, int epilogue,
                                       const void *bias, void *aux, int ldaux, const char *op)
{
    vr_status st = VR_OK;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cudaDataType_t ty = lt_type(dt);
    int tf32 = dt == VR_CUDA_F32 && ctx->allow_tf32;
    cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    // 0 is not a cuBLASLt epilogue (DEFAULT is 1): callers may pass 0 for "none"
    cublasLtEpilogue_t epi = epilogue ? (cublasLtEpilogue_t)epilogue : CUBLASLT_EPILOGUE_DEFAULT;
    cudaDataType_t scale_ty = CUDA_R_32F;
    size_t ws = lt_ws_bytes(ctx);
    lt_key key;
    memset(&key, 0, sizeof key);
    key.dt = dt, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.ta = transa, key.tb = transb, key.epi = (int)epi, key.tf32 = tf32, key.ldaux = aux ? ldaux : 0;
    key.device = ctx->device;
    key.al_a = align_class(A), key.al_b = align_class(Bm), key.al_d = align_class(D);
    key.al_bias = bias ? align_class(bias) : 0;
    key.al_aux = aux ? align_class(aux) : 0; /* the heuristic reads the aux pointer's alignment */
    key.ws = ws;
    key.tune = ctx->matmul_tune != 0;
    int found = -1;
    cublasLtMatmulAlgo_t algo;

    if (m <= 0 || n <= 0 || k <= 0) return vr_cu_bad(op, "matmul with a zero or negative dimension");
    LT_CHECK(cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F), op);
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale_ty, sizeof scale_ty), op);
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), op);
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), op);
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op);
    if (bias) {
        cudaDataType_t bty = ty;
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bty, sizeof bty), op);
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
    }
    if (aux) {
        int64_t l = ldaux;
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux), op);
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &l, sizeof l), op);
    }
    LT_CHECK(cublasLtMatrixLayoutCreate(&la, ty, transa ? k : m, transa ? m : k, lda), op);
    LT_CHECK(cublasLtMatrixLayoutCreate(&lb, ty, transb ? n : k, transb ? k : n, ldb), op);
    LT_CHECK(cublasLtMatrixLayoutCreate(&ld, ty, m, n, ldd), op);

    {
        std::lock_guard<std::mutex> g(lt_mu);
        for (int i = 0; i < lt_cache_n; i++)
            if (!memcmp(&lt_cache[i].key, &key, sizeof key)) {
                found = lt_cache[i].ok;
                algo = lt_cache[i].algo;
                break;
            }
    }
    if (found < 0) {
        uint32_t ala = (uint32_t)key.al_a, alb = (uint32_t)key.al_b, ald = (uint32_t)key.al_d;
        LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), op);
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), op);
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ala, sizeof ala), op);
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alb, sizeof alb), op);
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ald, sizeof ald), op);
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ald, sizeof ald), op);
        cublasLtMatmulHeuristicResult_t h[LT_CANDIDATES];
        int got = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt, desc, la, lb, ld, ld,
                                                           pref, LT_CANDIDATES, h, &got);
        found = (hs == CUBLAS_STATUS_SUCCESS && got > 0) ? 1 : 0;
        if (found) {
            int pick = 0;
            if (ctx->matmul_tune && got > 1 && beta == 0.0f && D != A && D != Bm && epi != CUBLASLT_EPILOGUE_BGRADA &&
                epi != CUBLASLT_EPILOGUE_BGRADB && 2.0 * m * n * k >= LT_TUNE_FLOP)
                pick = lt_measure(ctx, desc, la, lb, ld, A, Bm, D, h, got, ws);
            algo = h[pick].algo;
        }
        std::lock_guard<std::mutex> g(lt_mu);
        int slot = lt_cache_n < VR_LT_CACHE ? lt_cache_n++ : (lt_cache_next++ % VR_LT_CACHE);
        lt_cache[slot].key = key;
        lt_cache[slot].ok = found;
        if (found) lt_cache[slot].algo = algo;
    }
    if (!found) {
        st = vr_error(VR_ERR_UNSUPPORTED,
                      "cuda kernels: %s: cuBLASLt has no algorithm for m %d n %d k %d (%s, epilogue %d)",
                      op, m, n, k, vr_cuda_dtype_name(dt), epilogue);
        goto done;
    }
    LT_CHECK(cublasLtMatmul((cublasLtHandle_t)ctx->lt, desc, &alpha, A, la, Bm, lb, &beta, D, ld, D, ld, &algo,
                            ws ? ctx->workspace : NULL, ws, VR_STREAM(ctx)),
             op);
#ifdef VRAM_CUDA_SYNC_CHECK
    st = vr_cu_status(cudaStreamSynchronize(VR_STREAM(ctx)), op, "cublasLtMatmul (debug sync)");
#endif
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

/* ---------------------------------------------------------------- column sums (bias gradient) */

/* Block: 32 lanes x 32 row lanes; each lane owns 2 adjacent columns of the block's 64. One block per
 * 64 columns walks all rows: no atomics, a fixed order. */
template <typename T>
__global__ void k_colsum(T *dbias, const T *dout, int N, int OC, int ld, int acc)
{
    __shared__ float sh[32][65];
    int lane = threadIdx.x, ry = threadIdx.y;
    int c = blockIdx.x * 64 + lane * 2;
    float s0 = 0.0f, s1 = 0.0f;
    for (int r = ry; r < N; r += 32) {
        const T *row = dout + (size_t)r * ld;
        if (c < OC) s0 += vr_tof(row[c]);
        if (c + 1 < OC) s1 += vr_tof(row[c + 1]);
    }
    sh[ry][lane * 2] = s0;
    sh[ry][lane * 2 + 1] = s1;
    __syncthreads();
    if (ry == 0) {
        for (int j = 0; j < 2; j++) {
            int col = lane * 2 + j;
            float s = 0.0f;
            for (int y = 0; y < 32; y++) s += sh[y][col];
            int gc = blockIdx.x * 64 + col;
            if (gc < OC) dbias[gc] = vr_fromf<T>(acc ? vr_tof(dbias[gc]) + s : s);
        }
    }
}

/* Column sums in two passes, for every shape with a workspace: pass 1, a grid of column tiles (256 columns:
 * 32 lanes x 8 adjacent columns) by row chunks, each block (32 row groups: 1,024 threads) summing its chunk's
 * rows into fp32 partials in the workspace's reserved tail, each thread four rows' loads at a time; pass 2 adds
 * a column's partials (vr_cu_sum_partials). The chunking depends on N and OC only, so the sums are the same run
 * to run; enough blocks to fill the GPU where one block per 64 columns (k_colsum: 12 blocks at OC 768) leaves
 * most of it idle, and no more than it holds at once (2 blocks of 1,024 threads a multiprocessor at 32 registers:
 * one wave; 44 registers had made it 1 block, two waves, 0.4-0.8 us slower a call on the H100). */
#define CS_COLS 256
#define CS_ROWG 32

/* e[0..8) = the 8 elements at p (16 bytes of bf16/fp16, 32 of fp32), as fp32 */
template <typename T>
__device__ __forceinline__ void cs_load8(const T *p, float e[8])
{
    if (sizeof(T) == 2) {
        uint4 u = *(const uint4 *)p;
        const T *h = (const T *)&u;
#pragma unroll
        for (int j = 0; j < 8; j++) e[j] = vr_tof(h[j]);
    } else {
        float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        e[0] = a.x, e[1] = a.y, e[2] = a.z, e[3] = a.w, e[4] = b.x, e[5] = b.y, e[6] = b.z, e[7] = b.w;
    }
}

template <typename T>
__global__ void __launch_bounds__(32 * CS_ROWG, 2) k_colsum_part(float *part, const T *dout, int N, int OC,
                                                             int ld, int rows_per_chunk, int vec)
{
    __shared__ float sh[CS_ROWG][CS_COLS + 1];
    int lane = threadIdx.x, rg = threadIdx.y;
    int c0 = blockIdx.x * CS_COLS + lane * 8;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (vec && c0 + 8 <= OC) { /* rows r, r + G, r + 2G, r + 3G loaded together, then added in that order */
        const T *p = dout + c0;
        int r = r0 + rg;
        for (; r + 3 * CS_ROWG < r1; r += 4 * CS_ROWG) {
            float e[4][8];
#pragma unroll
            for (int q = 0; q < 4; q++) cs_load8(p + (size_t)(r + q * CS_ROWG) * ld, e[q]);
#pragma unroll
            for (int q = 0; q < 4; q++)
#pragma unroll
                for (int j = 0; j < 8; j++) s[j] += e[q][j];
        }
        for (; r < r1; r += CS_ROWG) {
            float e[8];
            cs_load8(p + (size_t)r * ld, e);
#pragma unroll
            for (int j = 0; j < 8; j++) s[j] += e[j];
        }
    } else {
        for (int r = r0 + rg; r < r1; r += CS_ROWG)
            for (int j = 0; j < 8; j++)
                if (c0 + j < OC) s[j] += vr_tof(dout[(size_t)r * ld + c0 + j]);
    }
#pragma unroll
    for (int j = 0; j < 8; j++) sh[rg][lane * 8 + j] = s[j];
    __syncthreads();
    for (int c = rg * 32 + lane; c < CS_COLS; c += CS_ROWG * 32) {
        float t = 0.0f;
        for (int y = 0; y < CS_ROWG; y++) t += sh[y][c];
        int gc = blockIdx.x * CS_COLS + c;
        if (gc < OC) part[(size_t)blockIdx.y * OC + gc] = t;
    }
}

template <typename T>
static vr_status colsum_t(const vr_cuda_ctx *ctx, void *dbias, const void *dout, int N, int OC, int ld, int acc,
                          const char *op)
{
    float *part = (float *)lt_reserve(ctx);
    int tiles = (OC + CS_COLS - 1) / CS_COLS;
    int cap = part ? (int)(VR_LT_RESERVE / sizeof(float) / (size_t)OC) : 0;   /* chunks the reserve holds */
    int want = 2 * (ctx->sm_count > 0 ? ctx->sm_count : 132) / tiles; /* 2 blocks per SM at once: one wave */
    int nchunk = min(min(cap, want), (N + CS_ROWG - 1) / CS_ROWG);
    if (nchunk < 2) { /* one block per 64 columns over all rows */
        dim3 block(32, 32);
        k_colsum<<<(OC + 63) / 64, block, 0, VR_STREAM(ctx)>>>((T *)dbias, (const T *)dout, N, OC, ld, acc);
        return vr_cu_launched(ctx, op);
    }
    int rows = (N + nchunk - 1) / nchunk;
    nchunk = (N + rows - 1) / rows;
    int vec = ((uintptr_t)dout % 16 == 0) && ((size_t)ld * sizeof(T)) % 16 == 0;
    k_colsum_part<T><<<dim3(tiles, nchunk), dim3(32, CS_ROWG), 0, VR_STREAM(ctx)>>>(part, (const T *)dout, N, OC,
                                                                                    ld, rows, vec);
    VR_CU_TRY(vr_cu_launched(ctx, op));
    vr_cu_sum_partials(VR_STREAM(ctx), (T *)dbias, part, nchunk, OC, acc);
    return vr_cu_launched(ctx, op);
}

vr_status vr_cu_colsum(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dbias, const void *dout, int N,
                       int OC, int ld, int acc, const char *op)
{
    return VR_CU_DISPATCH(dt, colsum_t, ctx, dbias, dout, N, OC, ld, acc, op);
}

/* The k and v thirds of a q|k|v bias gradient (vr_cuda_qkv_bias_bwd): dk(C) (=|+=) 0, dv(C) = dbp(C) wp(C,C),
 * i.e. dv[c] = sum over o of dbp[o] wp[o][c]. Blocks of 8 columns by 128 lanes (C / 8 blocks: the GPU full at
 * GPT-2's widths): lane y adds o = y, y + 128, ... of its column, then 16 lanes add 8 lanes' sums each and the
 * first the 16 (a fixed order). */
#define QKVB_X 8
#define QKVB_Y 128
template <typename T>
__global__ void __launch_bounds__(QKVB_X * QKVB_Y) k_qkv_bias_kv(T *dk, T *dv, const T *dbp, const T *wp, int C,
                                                                  int acc)
{
    __shared__ float sh[QKVB_Y][QKVB_X + 1];
    int x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * QKVB_X + x;
    float t = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (int o = y; o < C; o += QKVB_Y) t += vr_tof(dbp[o]) * vr_tof(wp[(size_t)o * C + c]);
    }
    sh[y][x] = t;
    __syncthreads();
    if (y < QKVB_Y / 8) {
        t = 0.0f;
        for (int k = 0; k < 8; k++) t += sh[8 * y + k][x];
    }
    __syncthreads();
    if (y < QKVB_Y / 8) sh[y][x] = t;
    __syncthreads();
    if (y || c >= C) return;
    t = 0.0f;
    for (int k = 0; k < QKVB_Y / 8; k++) t += sh[k][x];
    dv[c] = vr_fromf<T>(t);
    if (!acc) dk[c] = vr_fromf<T>(0.0f);
}

template <typename T>
static vr_status qkv_bias_kv_t(const vr_cuda_ctx *ctx, void *dbias, const void *dbp, const void *wp, int C, int acc)
{
    T *d = (T *)dbias;
    k_qkv_bias_kv<T><<<(C + QKVB_X - 1) / QKVB_X, dim3(QKVB_X, QKVB_Y), 0, VR_STREAM(ctx)>>>(d + C, d + 2 * (size_t)C,
                                                                                        (const T *)dbp,
                                                                                        (const T *)wp, C, acc);
    return vr_cu_launched(ctx, "matmul_bwd (q|k|v bias)");
}

/* out(N,OC) += bias(OC) per row: the fallback where cuBLASLt has no bias epilogue for a shape. */
template <typename T>
__global__ void k_add_bias(T *out, const T *bias, int N, int OC)
{
    size_t n = (size_t)N * OC, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = vr_fromf<T>(vr_tof(out[i]) + vr_tof(bias[i % (size_t)OC]));
}

template <typename T>
static vr_status add_bias_t(const vr_cuda_ctx *ctx, void *out, const void *bias, int N, int OC)
{
    k_add_bias<<<vr_grid_for((size_t)N * OC, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)out, (const T *)bias,
                                                                                N, OC);
    return vr_cu_launched(ctx, "matmul_fwd (bias)");
}

/* ---------------------------------------------------------------- entry points */

static vr_status check_mm(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int N, int C, int OC, const char *op)
{
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (!ctx->lt) return vr_cu_bad(op, "ctx has no cuBLASLt handle (vr_cuda_ctx_init)");
    if (N < 0 || C <= 0 || OC <= 0) return vr_cu_bad(op, "bad shape");
    return VR_OK;
}

extern "C" vr_status vr_cuda_matmul_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                        const void *inp, const void *w, const void *bias, int N, int C,
                                        int OC)
{
    VR_CU_TRY(check_mm(ctx, dt, N, C, OC, "matmul_fwd"));
    if (N == 0) return VR_OK;
    if (!out || !inp || !w) return vr_cu_bad("matmul_fwd", "NULL pointer");
    vr_status st = vr_cu_lt_matmul(ctx, dt, out, w, inp, OC, N, C, C, C, OC, 1, 0, 1.0f, 0.0f,
                                   bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, 0,
                                   "matmul_fwd");
    if (st != VR_ERR_UNSUPPORTED || !bias) return st;
    /* no bias epilogue for this shape: plain product, then add the bias row to every row */
    VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, out, w, inp, OC, N, C, C, C, OC, 1, 0, 1.0f, 0.0f,
                              CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, "matmul_fwd"));
    return VR_CU_DISPATCH(dt, add_bias_t, ctx, out, bias, N, OC);
}

extern "C" vr_status vr_cuda_matmul_gelu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                             void *pre, const void *inp, const void *w, const void *bias,
                                             int N, int C, int OC)
{
    VR_CU_TRY(check_mm(ctx, dt, N, C, OC, "matmul_gelu_fwd"));
    if (N == 0) return VR_OK;
    if (!out || !pre || !inp || !w) return vr_cu_bad("matmul_gelu_fwd", "NULL pointer");
    if (out == pre) return vr_cu_bad("matmul_gelu_fwd", "out aliases pre");
    vr_status st = VR_ERR_UNSUPPORTED;
    if (OC % 8 == 0)
        st = vr_cu_lt_matmul(ctx, dt, out, w, inp, OC, N, C, C, C, OC, 1, 0, 1.0f, 0.0f,
                             bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias, pre, OC,
                             "matmul_gelu_fwd");
    if (st != VR_ERR_UNSUPPORTED) return st;
    vr_clear_error();
    VR_CU_TRY(vr_cuda_matmul_fwd(ctx, dt, pre, inp, w, bias, N, C, OC));
    return vr_cuda_gelu_fwd(ctx, dt, out, pre, (size_t)N * OC);
}

/* dpre(N,C) = (dout(N,OC) w(OC,C)) * gelu'(pre(N,C)): the dinp product of a Linear whose input is
 * gelu(pre), with the DGELU epilogue reading pre as its aux matrix (ld C: the layout GELU_AUX writes).
 * No fallback here: VR_ERR_UNSUPPORTED (the error cleared) where cuBLASLt offers no algorithm, so that
 * the caller runs the two steps itself. */
extern "C" vr_status vr_cuda_matmul_dgelu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dpre,
                                              const void *dout, const void *w, const void *pre, int N,
                                              int C, int OC)
{
    const char *op = "matmul_dgelu_bwd";
    VR_CU_TRY(check_mm(ctx, dt, N, C, OC, op));
    if (!dpre || !dout || !w || !pre) return vr_cu_bad(op, "NULL pointer");
    if (dpre == pre) return vr_cu_bad(op, "dpre aliases pre");
    if (N == 0) return VR_OK;
    if (C % 8) return VR_ERR_UNSUPPORTED; /* cuBLASLt: the aux ld is a multiple of 8 */
    // dpre^T(C,N) = w^T(C,OC) dout^T(OC,N), then the GELU gradient at pre^T(C,N)
    vr_status st = vr_cu_lt_matmul(ctx, dt, dpre, w, dout, C, N, OC, C, OC, C, 0, 0, 1.0f, 0.0f,
                                   CUBLASLT_EPILOGUE_DGELU, NULL, (void *)pre, C, op);
    if (st == VR_ERR_UNSUPPORTED) vr_clear_error();
    return st;
}

extern "C" vr_status vr_cuda_matmul_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                        void *dbias, const void *dout, const void *inp, const void *w,
                                        int N, int C, int OC, int acc_dinp, int acc_dparam)
{
    const char *op = "matmul_bwd";
    VR_CU_TRY(check_mm(ctx, dt, N, C, OC, op));
    if (!dout || (dinp && !w) || (dw && !inp)) return vr_cu_bad(op, "NULL pointer");
    if (N == 0) {
        if (dw && !acc_dparam) VR_CU_TRY(vr_cuda_zero(ctx, dt, dw, (size_t)OC * C));
        if (dbias && !acc_dparam) VR_CU_TRY(vr_cuda_zero(ctx, dt, dbias, (size_t)OC));
        if (dinp && !acc_dinp) VR_CU_TRY(vr_cuda_zero(ctx, dt, dinp, (size_t)N * C));
        return VR_OK;
    }
    if (dinp) // dinp^T(C,N) = w^T(C,OC) dout^T(OC,N)
        VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, dinp, w, dout, C, N, OC, C, OC, C, 0, 0, 1.0f,
                                  acc_dinp ? 1.0f : 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, op));
    if (dw) // dw^T(C,OC) = inp^T(C,N) dout(N,OC). No BGRADB epilogue: on the H100 it made GPT-2's dw products
            // 1.1-1.5x slower (bench/gpu/lt_algos.cu), more than the column sums below cost
        VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, dw, inp, dout, C, OC, N, C, OC, C, 0, 1, 1.0f,
                                  acc_dparam ? 1.0f : 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, op));
    if (dbias) VR_CU_TRY(vr_cu_colsum(ctx, dt, dbias, dout, N, OC, OC, acc_dparam, op));
    return VR_OK;
}

extern "C" vr_status vr_cuda_qkv_bias_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dbias, const void *dqkv,
                                          const void *dbp, const void *wp, int N, int C, int acc)
{
    const char *op = "matmul_bwd (q|k|v bias)";
    VR_CU_TRY(check_mm(ctx, dt, N, C, 3 * C, op));
    if (!dbias || !dqkv || !dbp || !wp) return vr_cu_bad(op, "NULL pointer");
    if (N > 0) VR_CU_TRY(vr_cu_colsum(ctx, dt, dbias, dqkv, N, C, 3 * C, acc, op));
    else if (!acc) VR_CU_TRY(vr_cuda_zero(ctx, dt, dbias, (size_t)C));
    if (C == 0) return VR_OK;
    return VR_CU_DISPATCH(dt, qkv_bias_kv_t, ctx, dbias, dbp, wp, C, acc);
}

extern "C" vr_status vr_cuda_gemm(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *D, const void *A,
                                  const void *Bm, int m, int n, int k, int lda, int ldb, int ldd, int transa,
                                  int transb, float alpha, int acc)
{
    const char *op = "gemm";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (!D || !A || !Bm) return vr_cu_bad(op, "NULL pointer");
    if (m == 0 || n == 0) return VR_OK;
    // row-major D(m,n) = op(A) op(B)  <=>  column-major D^T(n,m) = op(B)^T op(A)^T
    return vr_cu_lt_matmul(ctx, dt, D, Bm, A, n, m, k, ldb, lda, ldd, transb, transa, alpha,
                           acc ? 1.0f : 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, op);
}
