/* vram — layer normalization at memory bandwidth: one warp per row, the row held in registers.
 *
 * A lane holds the K 16-byte vectors lane, lane + 32, ... of its row (V = 16 / sizeof(T) columns
 * each), so a row of C <= 32 K V columns is read from memory once; all arithmetic is fp32.
 * Forward: mean, then the variance about it from the registers (the weights come from L1/L2). With a second
 * input the residual add runs first (x = inp + inp2, rounded to the dtype as the add kernel does, and written
 * out), so add + layernorm is one pass.
 * Backward: tiles of rows, a row per warp, then the tile's column sums by the block's threads (below). */
#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/cuda/layernorm_rows.cuh"
#include "kernels/norm_math.h"


/* The K (vectors per lane) that a row of nv vectors needs, rounded up to an instantiated one; 0: more
 * than kmax (too wide for registers). The forward holds a row (kmax 8: 1024 fp32 or 2048 16-bit
 * columns), the backward two rows and two sums per column (kmax 6 for fp32: 768 columns, 4 for 16-bit:
 * 1024); wider rows run the generic kernels of layernorm.cu. */
static int ln_k(int nv, int kmax)
{
    int k = (nv + 31) / 32;
    if (k > kmax) return 0;
    return k <= 4 ? k : k <= 6 ? 6 : 8;
}

template <typename T, int K, bool ADD, bool RMS>
__global__ void __launch_bounds__(256) k_ln_rows_fwd(T *out, float *mean, float *rstd, T *res, const T *inp,
                                                     const T *inp2, const T *w, const T *b, int N, int C,
                                                     int rows_per_warp, float eps)
{
    constexpr int V = vr_vec<T>::N;
    int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    int nv = C / V, r0 = warp * rows_per_warp, r1 = min(N, r0 + rows_per_warp);
    if (r0 >= N) return;
    float inv_c = 1.0f / C;
    for (int r = r0; r < r1; r++) {
        size_t off = (size_t)r * C;
        vr_vec<T> xv[K];
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = lane + 32 * k;
            if (i < nv) {
                xv[k] = vr_ld16(inp + off + i * V);
                if (ADD) {
                    vr_vec<T> yv = vr_ld16(inp2 + off + i * V);
#pragma unroll
                    for (int j = 0; j < V; j++) xv[k].v[j] = vr_fromf<T>(vr_tof(xv[k].v[j]) + vr_tof(yv.v[j]));
                    vr_st16(res + off + i * V, xv[k]);
                }
#pragma unroll
                for (int j = 0; j < V; j++) s += vr_tof(xv[k].v[j]);
            }
        }
        float m = RMS ? 0.0f : vr_warp_sum(s) * inv_c; /* RMSNorm: the mean square about 0 */
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++)
            if (lane + 32 * k < nv) {
#pragma unroll
                for (int j = 0; j < V; j++) {
                    float d = vr_tof(xv[k].v[j]) - m;
                    v += d * d;
                }
            }
        v = vr_warp_sum(v);
        float rs = rsqrtf((RMS ? v / C : v * inv_c) + eps); /* RMSNorm's as vr_cuda_rmsnorm_fwd rounds it */
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = lane + 32 * k;
            if (i < nv) {
                vr_vec<T> wv = vr_ld16_nc(w + i * V), o;
                if (RMS) {
#pragma unroll
                    for (int j = 0; j < V; j++) o.v[j] = vr_fromf<T>(vr_tof(xv[k].v[j]) * rs * vr_tof(wv.v[j]));
                } else {
                    vr_vec<T> bv = vr_ld16_nc(b + i * V);
#pragma unroll
                    for (int j = 0; j < V; j++)
                        o.v[j] = vr_fromf<T>((vr_tof(xv[k].v[j]) - m) * rs * vr_tof(wv.v[j]) + vr_tof(bv.v[j]));
                }
                vr_st16(out + off + i * V, o);
            }
        }
        if (lane == 0) {
            if (!RMS) mean[r] = m;
            rstd[r] = rs;
        }
    }
}

__device__ __forceinline__ void ln_prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* The backward in tiles of VR_LN_TILE rows, a block's warps a row each. Row pass: each warp computes its row's
 * dinp from registers (one read of x, dout and the dinp it adds to) and leaves the row's x, dout and (SUM) dinp
 * as written in shared memory, with its mean and rstd. Column pass: each thread adds four columns of the tile's
 * rows, in row order, into its registers: dw += dout xhat, db += dout, (SUM) the column sums of dinp. A block
 * takes tiles blockIdx.x, + gridDim.x, ...; at the end it writes its sums as slice blockIdx.x's fp32 partials,
 * which layernorm.cu's final kernel adds in slice order: a fixed order, no atomics. (Before, each warp kept its
 * own columns' sums: 192 KiB of shared memory a block at 1024 16-bit columns, one block of 16 warps a
 * multiprocessor; H100, with the sums of dinp, adding into dinp: 8192 x 1024 bf16 42.8 -> 33.5-34.6 us,
 * 16384 x 768 55.4 -> 46.0-47.5; `VRAM_KCUDA_BENCH=1 test_kernels_cuda`.) */
#define VR_LN_TILE 8

template <typename T> struct alignas(4 * sizeof(T)) ln_q4 {
    T v[4];
};

/* Shared memory of a block: mean and rstd of the tile's rows, then its x, dout and (SUM) dinp rows. */
static size_t ln_tile_smem(size_t C, size_t es, bool sum)
{
    return 2 * VR_LN_TILE * sizeof(float) + (sum ? 3 : 2) * (size_t)VR_LN_TILE * C * es;
}

/* OUT: inp is the forward's output y and x-hat is (y - b) / w (kernels/norm_math.h; b NULL or RMS: no bias),
 * mean unused. u = y - b, rounded to the dtype (the precision y has), takes x's registers and shared memory once
 * the row's loads are on their way (one load of b; x-hat = u / w in the dinp pass); the column pass sums dout u
 * and scales by 1 / w at the end. This kernel is bound by its instruction rate: GPT-2 medium's steps (H100,
 * three rounds, the input's backward first) 40.71 / 40.87 / 40.75 ms against 40.76 / 40.77 / 40.74 from the
 * output; u computed as each vector arrives (its loads waiting on one another), b loaded twice, an IEEE
 * reciprocal, or 1 / w and -b / w tables in shared memory each cost more (bench/gpu/README.md). */
template <typename T, int K, bool SUM, bool RMS, bool OUT>
__global__ void __launch_bounds__(VR_LN_TILE * 32) k_ln_tile_bwd(T *dinp, float *part, float *part_sum,
                                                                 const T *dout, const T *inp, const T *w,
                                                                 const T *bias, const float *mean,
                                                                 const float *rstd, int N, int C, int acc)
{
    constexpr int V = vr_vec<T>::N, NT = VR_LN_TILE * 32, QB = (K * V * 8 + NT - 1) / NT; /* quads a thread */
    extern __shared__ __align__(16) unsigned char ln_sm[];
    float *st = (float *)ln_sm; /* mean, rstd of row q at 2q, 2q + 1 */
    T *sx = (T *)(st + 2 * VR_LN_TILE), *sg = sx + (size_t)VR_LN_TILE * C, *so = sg + (size_t)VR_LN_TILE * C;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nv = C / V, nq = C / 4;
    int tiles = (N + VR_LN_TILE - 1) / VR_LN_TILE;
    float aw[QB][4], ab[QB][4], as[QB][4];
#pragma unroll
    for (int q = 0; q < QB; q++)
#pragma unroll
        for (int j = 0; j < 4; j++) aw[q][j] = ab[q][j] = as[q][j] = 0.0f;
    float inv_c = 1.0f / C;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int r = t * VR_LN_TILE + warp;
        if (r < N) {
            size_t off = (size_t)r * C;
            float m = RMS || OUT ? 0.0f : mean[r], rs = rstd[r];
            vr_vec<T> xv[K], gv[K], dv[K];
#pragma unroll
            for (int k = 0; k < K; k++) {
                int i = lane + 32 * k;
                if (i < nv) {
                    xv[k] = vr_ld16(inp + off + i * V);
                    gv[k] = vr_ld16(dout + off + i * V);
                    if (dinp && acc) dv[k] = vr_ld16(dinp + off + i * V);
                }
            }
            if (r + gridDim.x * VR_LN_TILE < N) { /* the warp's next row on its way to L2 while this one computes */
                size_t nx = off + (size_t)gridDim.x * VR_LN_TILE * C;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    int i = lane + 32 * k;
                    if (i < nv) {
                        ln_prefetch_l2(inp + nx + i * V);
                        ln_prefetch_l2(dout + nx + i * V);
                    }
                }
            }
            /* u = y - b, once the row's loads are all on their way; the row's x (u) and dout left for the column pass */
            constexpr bool U = OUT && !RMS;
            if ((U && bias) || part) {
#pragma unroll
                for (int k = 0; k < K; k++) {
                    int i = lane + 32 * k;
                    if (i < nv) {
                        if (U && bias) {
                            vr_vec<T> bv = vr_ld16_nc(bias + i * V);
#pragma unroll
                            for (int j = 0; j < V; j++)
                                xv[k].v[j] = vr_fromf<T>(vr_tof(xv[k].v[j]) - vr_tof(bv.v[j]));
                        }
                        if (part) {
                            vr_st16(sx + (size_t)warp * C + i * V, xv[k]);
                            vr_st16(sg + (size_t)warp * C + i * V, gv[k]);
                        }
                    }
                }
                if (part && lane == 0) st[2 * warp] = m, st[2 * warp + 1] = rs;
            }
            if (dinp) {
                float sgs = 0.0f, sgx = 0.0f;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    int i = lane + 32 * k;
                    if (i < nv) {
                        vr_vec<T> wv = vr_ld16_nc(w + i * V);
#pragma unroll
                        for (int j = 0; j < V; j++) {
                            float wg = vr_tof(gv[k].v[j]) * vr_tof(wv.v[j]);
                            sgs += wg;
                            if (OUT) /* dout w xhat = dout u */
                                sgx += vr_tof(gv[k].v[j]) * vr_tof(xv[k].v[j]);
                            else
                                sgx += wg * ((vr_tof(xv[k].v[j]) - m) * rs);
                        }
                    }
                }
                sgs = RMS ? 0.0f : vr_warp_sum(sgs) * inv_c; /* RMSNorm: no mean, so no term for it */
                sgx = vr_warp_sum(sgx) * inv_c;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    int i = lane + 32 * k;
                    if (i < nv) {
                        vr_vec<T> wv = vr_ld16_nc(w + i * V), o;
#pragma unroll
                        for (int j = 0; j < V; j++) {
                            float xh = OUT ? vr_tof(xv[k].v[j]) * vr_norm_inv_w(vr_tof(wv.v[j]))
                                           : (vr_tof(xv[k].v[j]) - m) * rs;
                            float d = rs * (vr_tof(gv[k].v[j]) * vr_tof(wv.v[j]) - sgs - xh * sgx);
                            o.v[j] = vr_fromf<T>(acc ? vr_tof(dv[k].v[j]) + d : d);
                        }
                        vr_st16(dinp + off + i * V, o);
                        if (SUM) vr_st16(so + (size_t)warp * C + i * V, o);
                    }
                }
            }
        }
        if (!part) continue; /* uniform over the grid */
        __syncthreads();
        int rows = min(VR_LN_TILE, N - t * VR_LN_TILE);
#pragma unroll
        for (int q = 0; q < QB; q++) {
            int u = threadIdx.x + q * NT;
            if (u >= nq) continue;
            for (int rr = 0; rr < rows; rr++) {
                float m = st[2 * rr], rs = st[2 * rr + 1];
                ln_q4<T> x4 = *(const ln_q4<T> *)(sx + (size_t)rr * C + 4 * u);
                ln_q4<T> g4 = *(const ln_q4<T> *)(sg + (size_t)rr * C + 4 * u), o4;
                if (SUM) o4 = *(const ln_q4<T> *)(so + (size_t)rr * C + 4 * u);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float g = vr_tof(g4.v[j]);
                    aw[q][j] += g * (OUT ? vr_tof(x4.v[j]) : (vr_tof(x4.v[j]) - m) * rs);
                    if (!RMS) ab[q][j] += g;
                    if (SUM) as[q][j] += vr_tof(o4.v[j]);
                }
            }
        }
        __syncthreads();
    }
    if (!part) return;
    float *p = part + (size_t)blockIdx.x * (RMS ? 1 : 2) * C;
#pragma unroll
    for (int q = 0; q < QB; q++) {
        int u = threadIdx.x + q * NT;
        if (u >= nq) continue;
        if (OUT) /* dw = (1 / w) sum dout (y - b) */
#pragma unroll
            for (int j = 0; j < 4; j++) aw[q][j] *= vr_norm_inv_w(vr_tof(w[4 * u + j]));
        *(float4 *)(p + 4 * u) = make_float4(aw[q][0], aw[q][1], aw[q][2], aw[q][3]);
        if (!RMS) *(float4 *)(p + C + 4 * u) = make_float4(ab[q][0], ab[q][1], ab[q][2], ab[q][3]);
        if (SUM) {
            float *ps = part_sum + (size_t)blockIdx.x * C;
            *(float4 *)(ps + 4 * u) = make_float4(as[q][0], as[q][1], as[q][2], as[q][3]);
        }
    }
}

/* RMSNorm where b is NULL (no mean: rstd about 0, eps its own), else LayerNorm (VR_LN_EPS). */
template <typename T>
static int rows_fwd_t(const vr_cuda_ctx *ctx, void *out, float *mean, float *rstd, void *res, const void *inp,
                      const void *inp2, const void *w, const void *b, int N, int C, float eps, vr_status *st)
{
    constexpr int V = vr_vec<T>::N;
    if (C % V || !vr_aligned16(out) || !vr_aligned16(inp) || !vr_aligned16(w) || (b && !vr_aligned16(b)) ||
        (inp2 && (!vr_aligned16(inp2) || !vr_aligned16(res))))
        return 0;
    int K = ln_k(C / V, 8);
    if (!K) return 0;
    int rpw = 1; /* rows per warp (more saves nothing now that the weights are not held) */
    int warps = (N + rpw - 1) / rpw, grid = (warps + 7) / 8;
    cudaStream_t s = VR_STREAM(ctx);
    T *o = (T *)out, *rp = (T *)res;
    const T *x = (const T *)inp, *x2 = (const T *)inp2, *wp = (const T *)w, *bp = (const T *)b;
#define VR_LN_FWD(KK)                                                                                        \
    case KK:                                                                                                 \
        if (!b)                                                                                              \
            k_ln_rows_fwd<T, KK, true, true><<<grid, 256, 0, s>>>(o, mean, rstd, rp, x, x2, wp, bp, N, C, rpw, \
                                                                  eps);                                      \
        else if (inp2)                                                                                       \
            k_ln_rows_fwd<T, KK, true, false><<<grid, 256, 0, s>>>(o, mean, rstd, rp, x, x2, wp, bp, N, C, rpw, \
                                                                   VR_LN_EPS);                               \
        else                                                                                                 \
            k_ln_rows_fwd<T, KK, false, false><<<grid, 256, 0, s>>>(o, mean, rstd, rp, x, x2, wp, bp, N, C,    \
                                                                    rpw, VR_LN_EPS);                         \
        break
    switch (K) {
        VR_LN_FWD(1);
        VR_LN_FWD(2);
        VR_LN_FWD(3);
        VR_LN_FWD(4);
        VR_LN_FWD(6);
        VR_LN_FWD(8);
    }
#undef VR_LN_FWD
    *st = vr_cu_launched(ctx, !b ? "add_rmsnorm_fwd" : inp2 ? "add_layernorm_fwd" : "layernorm_fwd");
    return 1;
}

/* One backward launch: its shared memory (above the 48 KiB default: allowed once per kernel and size; where the
 * GPU does not have it the launch is VR_ERR_UNSUPPORTED, nothing queued, and the caller does without) and its
 * grid: as many blocks as fit the multiprocessors at once, at most *slices; *slices: the blocks launched. */
template <typename T, int K, bool SUM, bool RMS, bool OUT>
static vr_status ln_bwd_launch_t(const vr_cuda_ctx *ctx, int *slices, T *d, float *part, float *psum, const T *g,
                                 const T *x, const T *wp, const T *bp, const float *mean, const float *rstd, int N,
                                 int C, int acc)
{
    static size_t opted;   /* the largest size allowed so far (a race asks twice, harmlessly) */
    static int fit, fit_c; /* blocks a multiprocessor holds at fit_c columns */
    size_t smem = ln_tile_smem((size_t)C, sizeof(T), SUM);
    if (smem > (48u << 10) && smem > opted) {
        cudaError_t e = cudaFuncSetAttribute(k_ln_tile_bwd<T, K, SUM, RMS, OUT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return VR_ERR_UNSUPPORTED;
        }
        opted = smem;
    }
    if (fit_c != C) {
        int n = 0;
        VR_CU_TRY(vr_cu_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_ln_tile_bwd<T, K, SUM, RMS, OUT>,
                                                                             VR_LN_TILE * 32, smem),
                               "layernorm_bwd", "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
        fit = n > 0 ? n : 1, fit_c = C;
    }
    int tiles = (N + VR_LN_TILE - 1) / VR_LN_TILE, grid = fit * (ctx->sm_count > 0 ? ctx->sm_count : 132);
    grid = grid < *slices ? grid : *slices;
    grid = grid < tiles ? grid : tiles;
    *slices = grid;
    k_ln_tile_bwd<T, K, SUM, RMS, OUT><<<grid, VR_LN_TILE * 32, smem, VR_STREAM(ctx)>>>(d, part, psum, g, x, wp, bp,
                                                                                      mean, rstd, N, C, acc);
    return vr_cu_launched(ctx, RMS ? "rmsnorm_bwd" : "layernorm_bwd");
}

template <typename T, int K>
static vr_status ln_bwd_launch(const vr_cuda_ctx *ctx, int *slices, T *d, float *part, float *psum, const T *g,
                               const T *x, const T *wp, const T *bp, bool out, const float *mean,
                               const float *rstd, int N, int C, int acc)
{
#define VR_LN_GO(S, O) ln_bwd_launch_t<T, K, S, false, O>(ctx, slices, d, part, psum, g, x, wp, bp, mean, rstd, N, C, acc)
    return psum ? (out ? VR_LN_GO(true, true) : VR_LN_GO(true, false))
                : (out ? VR_LN_GO(false, true) : VR_LN_GO(false, false));
#undef VR_LN_GO
}

/* out: inp is the forward's output (the OUT kernels; bias b, NULL: none). */
template <typename T>
static int rows_bwd_t(const vr_cuda_ctx *ctx, void *dinp, float *part, float *part_sum, const void *dout,
                      const void *inp, const void *w, const void *b, bool out, const float *mean,
                      const float *rstd, int N, int C, int *slices, int acc, vr_status *st)
{
    constexpr int V = vr_vec<T>::N;
    if (C % V || !vr_aligned16(dout) || !vr_aligned16(inp) ||
        ((dinp || out) && (!vr_aligned16(w) || (b && !vr_aligned16(b)))) || (dinp && !vr_aligned16(dinp)) ||
        (part && !vr_aligned16(part)) || (part_sum && !vr_aligned16(part_sum)))
        return 0;
    if (part_sum && (!dinp || !part)) /* the sums of dinp ride on the partial sums of dw | db */
        return 0;
    int K = ln_k(C / V, sizeof(T) == 4 ? 6 : 4);
    if (!K) return 0;
    T *d = (T *)dinp;
    const T *g = (const T *)dout, *x = (const T *)inp, *wp = (const T *)w, *bp = out ? (const T *)b : NULL;
#define VR_LN_BWD(KK)                                                                                        \
    case KK:                                                                                                 \
        *st = ln_bwd_launch<T, KK>(ctx, slices, d, part, part_sum, g, x, wp, bp, out, mean, rstd, N, C, acc); \
        return *st != VR_ERR_UNSUPPORTED || part_sum; /* without the sums: the generic kernels instead */
    switch (K) {
        VR_LN_BWD(1);
        VR_LN_BWD(2);
        VR_LN_BWD(3);
        VR_LN_BWD(4);
        VR_LN_BWD(6);
    }
#undef VR_LN_BWD
    return 0;
}

/* RMSNorm's backward on the same tiles: dinp and dw's partials in one pass where both are wanted (rows up to K 8:
 * 2048 16-bit or 1024 fp32 columns, the weight gradient without a bias one). */
template <typename T>
static int rms_rows_bwd_t(const vr_cuda_ctx *ctx, void *dinp, float *part, const void *dout, const void *inp,
                          const void *w, bool out, const float *rstd, int N, int C, int *slices, int acc,
                          vr_status *st)
{
    constexpr int V = vr_vec<T>::N;
    if (!dinp || !part || C % V || !vr_aligned16(dout) || !vr_aligned16(inp) || !vr_aligned16(dinp) ||
        !vr_aligned16(w) || !vr_aligned16(part))
        return 0;
    int K = ln_k(C / V, 8);
    T *d = (T *)dinp;
    const T *g = (const T *)dout, *x = (const T *)inp, *wp = (const T *)w;
#define VR_RMS_BWD(KK)                                                                                       \
    case KK:                                                                                                 \
        *st = out ? ln_bwd_launch_t<T, KK, false, true, true>(ctx, slices, d, part, NULL, g, x, wp, NULL, NULL,  \
                                                              rstd, N, C, acc)                               \
                  : ln_bwd_launch_t<T, KK, false, true, false>(ctx, slices, d, part, NULL, g, x, wp, NULL, NULL, \
                                                               rstd, N, C, acc);                             \
        return *st != VR_ERR_UNSUPPORTED; /* without the shared memory: the generic kernels instead */
    switch (K) {
        VR_RMS_BWD(1);
        VR_RMS_BWD(2);
        VR_RMS_BWD(3);
        VR_RMS_BWD(4);
        VR_RMS_BWD(6);
        VR_RMS_BWD(8);
    }
#undef VR_RMS_BWD
    return 0;
}

int vr__rms_rows_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, float *part, const void *dout,
                     const void *inp, const void *w, bool out, const float *rstd, int N, int C, int *slices,
                     int acc_dinp, vr_status *st)
{
    return VR_CU_DISPATCH(dt, rms_rows_bwd_t, ctx, dinp, part, dout, inp, w, out, rstd, N, C, slices, acc_dinp, st);
}

int vr__ln_rows_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *mean, float *rstd, void *res,
                    const void *inp, const void *inp2, const void *w, const void *b, int N, int C, vr_status *st)
{
    if (!b) return 0; /* LayerNorm has its bias */
    return VR_CU_DISPATCH(dt, rows_fwd_t, ctx, out, mean, rstd, res, inp, inp2, w, b, N, C, VR_LN_EPS, st);
}

int vr__add_rms_rows_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *rstd, void *res, const void *a,
                         const void *b, const void *w, int N, int C, float eps, vr_status *st)
{
    if (!a || !b || !res) return 0;
    return VR_CU_DISPATCH(dt, rows_fwd_t, ctx, out, NULL, rstd, res, a, b, w, NULL, N, C, eps, st);
}

int vr__ln_rows_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, float *part, float *part_sum,
                    const void *dout, const void *inp, const void *w, const void *b, bool out, const float *mean,
                    const float *rstd, int N, int C, int *slices, int acc_dinp, vr_status *st)
{
    return VR_CU_DISPATCH(dt, rows_bwd_t, ctx, dinp, part, part_sum, dout, inp, w, b, out, mean, rstd, N, C, slices,
                          acc_dinp, st);
}
