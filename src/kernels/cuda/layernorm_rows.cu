/* vram — layer normalization at memory bandwidth: one warp per row, the row held in registers.
 *
 * A lane holds the K 16-byte vectors lane, lane + 32, ... of its row (V = 16 / sizeof(T) columns
 * each), so a row of C <= 32 K V columns is read from memory once; all arithmetic is fp32.
 * Forward: mean, then the variance about it from the registers (the weights come from L1/L2). With a second input the residual add runs first (x = inp + inp2, rounded to the
 * dtype as the add kernel does, and written out), so add + layernorm is one pass.
 * Backward: a block of 16 warps per row slice (kernels/scratch.h: slices of rows_per_slice rows); each warp
 * computes dinp of its rows and keeps its columns' sums of dout xhat and dout (in registers, or for wide rows
 * in its own region of shared memory); at the end the block adds the warps' sums in warp order (a fixed order,
 * no atomics) and writes the slice's fp32 partial sums, which layernorm.cu's final kernel adds in slice order. */
#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/cuda/layernorm_rows.cuh"


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

template <typename T, int K, bool ADD>
__global__ void __launch_bounds__(256) k_ln_rows_fwd(T *out, float *mean, float *rstd, T *res, const T *inp,
                                                     const T *inp2, const T *w, const T *b, int N, int C,
                                                     int rows_per_warp)
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
        float m = vr_warp_sum(s) * inv_c;
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
        float rs = rsqrtf(vr_warp_sum(v) * inv_c + VR_LN_EPS);
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = lane + 32 * k;
            if (i < nv) {
                vr_vec<T> wv = vr_ld16_nc(w + i * V), bv = vr_ld16_nc(b + i * V), o;
#pragma unroll
                for (int j = 0; j < V; j++)
                    o.v[j] = vr_fromf<T>((vr_tof(xv[k].v[j]) - m) * rs * vr_tof(wv.v[j]) + vr_tof(bv.v[j]));
                vr_st16(out + off + i * V, o);
            }
        }
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

__device__ __forceinline__ void ln_prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* The backward's column sums, (dw | db) x K V 32 floats per warp, lane-minor so that a warp's accesses do not
 * conflict: column (lane + 32 k) V + j at (k V + j) 32 + lane. Narrow rows (K V <= 24 values per lane: GPT-2's
 * 768 bf16 columns) keep a warp's sums in registers and add them into one shared region at the end, warp after
 * warp; wider rows (GPT-2 medium's 1024 bf16 columns) spilled them (128 registers), so there each warp keeps its
 * own region of shared memory, added in warp order at the end (the same order: deterministic). 16 warps per
 * block either way (32 warps with the sums in shared memory ran slower at 768 columns: 63 against 48 us). */
template <int K, int V>
__device__ __forceinline__ int ln_sh(int k, int j, int lane) { return (k * V + j) * 32 + lane; }

#define VR_LN_BWD_WARPS 16

/* SUM: also the column sums of dinp as written (the bias gradient of the Linear whose output dinp is the
 * gradient of), in a region of S floats per warp after the others, added in warp order at the end. */
template <typename T, int K, bool SUM>
struct ln_bwd_geom {
    static constexpr int V = vr_vec<T>::N, S = K * V * 32;
    static constexpr bool SH = K * V > 24; /* the sums in shared memory */
    static constexpr size_t BASE = (SH ? VR_LN_BWD_WARPS : 1) * 2 * (size_t)S; /* floats before the SUM regions */
    static constexpr size_t SMEM = (BASE + (SUM ? VR_LN_BWD_WARPS * (size_t)S : 0)) * sizeof(float);
};

template <typename T, int K, bool SUM>
__global__ void __launch_bounds__(VR_LN_BWD_WARPS * 32) k_ln_rows_bwd(T *dinp, float *part, float *part_sum,
                                                                     const T *dout, const T *inp, const T *w,
                                                                     const float *mean, const float *rstd, int N,
                                                                     int C, int rows_per_slice, int acc)
{
    typedef ln_bwd_geom<T, K, SUM> G;
    constexpr int V = G::V, S = G::S, RK = G::SH ? 1 : K, RV = G::SH ? 1 : V, DK = G::SH ? K : 1;
    extern __shared__ float sh[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int nv = C / V, r0 = blockIdx.x * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
    float aw[RK][RV], ab[RK][RV];                      /* narrow rows: the sums in registers */
    float *sw = sh + (size_t)warp * 2 * S, *sb = sw + S; /* wide rows: this warp's region */
    float *so = sh + G::BASE + (size_t)warp * S;         /* SUM: this warp's sums of dinp */
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (G::SH) sw[ln_sh<K, V>(k, j, lane)] = sb[ln_sh<K, V>(k, j, lane)] = 0.0f;
            else aw[k % RK][j % RV] = ab[k % RK][j % RV] = 0.0f;
            if (SUM) so[ln_sh<K, V>(k, j, lane)] = 0.0f;
        }
    float inv_c = 1.0f / C;
    for (int r = r0 + warp; r < r1; r += VR_LN_BWD_WARPS) {
        size_t off = (size_t)r * C;
        float m = mean[r], rs = rstd[r];
        /* wide rows (sums in shared memory, registers to spare) read the gradient dinp adds to with the rest:
         * one round trip to memory per row instead of two; narrow rows read it late (early, they spill) */
        vr_vec<T> xv[K], gv[K], dv[G::SH ? K : 1];
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = lane + 32 * k;
            if (i < nv) {
                xv[k] = vr_ld16(inp + off + i * V);
                gv[k] = vr_ld16(dout + off + i * V);
                if (G::SH && dinp && acc) dv[k % DK] = vr_ld16(dinp + off + i * V);
            }
        }
        if (r + VR_LN_BWD_WARPS < r1) { /* the warp's next row on its way to L2 while this one computes */
            size_t nx = off + (size_t)VR_LN_BWD_WARPS * C;
#pragma unroll
            for (int k = 0; k < K; k++) {
                int i = lane + 32 * k;
                if (i < nv) {
                    ln_prefetch_l2(inp + nx + i * V);
                    ln_prefetch_l2(dout + nx + i * V);
                }
            }
        }
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = lane + 32 * k;
            if (i < nv) {
                vr_vec<T> wv;
                if (dinp) wv = vr_ld16_nc(w + i * V);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    float g = vr_tof(gv[k].v[j]), xh = (vr_tof(xv[k].v[j]) - m) * rs;
                    if (dinp) {
                        float wg = g * vr_tof(wv.v[j]);
                        sg += wg;
                        sgx += wg * xh;
                    }
                    if (part && G::SH) {
                        sw[ln_sh<K, V>(k, j, lane)] += g * xh;
                        sb[ln_sh<K, V>(k, j, lane)] += g;
                    } else if (part) {
                        aw[k % RK][j % RV] += g * xh;
                        ab[k % RK][j % RV] += g;
                    }
                }
            }
        }
        if (!dinp) continue;
        sg = vr_warp_sum(sg) * inv_c;
        sgx = vr_warp_sum(sgx) * inv_c;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = lane + 32 * k;
            if (i < nv) {
                vr_vec<T> wv = vr_ld16_nc(w + i * V), o;
                if (!G::SH && acc) dv[0] = vr_ld16(dinp + off + i * V);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    float xh = (vr_tof(xv[k].v[j]) - m) * rs;
                    float d = rs * (vr_tof(gv[k].v[j]) * vr_tof(wv.v[j]) - sg - xh * sgx);
                    o.v[j] = vr_fromf<T>(acc ? vr_tof(dv[k % DK].v[j]) + d : d);
                    if (SUM) so[ln_sh<K, V>(k, j, lane)] += vr_tof(o.v[j]);
                }
                vr_st16(dinp + off + i * V, o);
            }
        }
    }
    if (!part) return; /* uniform over the block */
    /* the warps' sums, warp 0 first, then 1, ...: the same order every run */
    if (!G::SH) {
        for (int t = 0; t < VR_LN_BWD_WARPS; t++) {
            if (warp == t) {
#pragma unroll
                for (int k = 0; k < K; k++)
#pragma unroll
                    for (int j = 0; j < V; j++) {
                        int q = ln_sh<K, V>(k, j, lane);
                        sh[q] = t == 0 ? aw[k % RK][j % RV] : sh[q] + aw[k % RK][j % RV];
                        sh[S + q] = t == 0 ? ab[k % RK][j % RV] : sh[S + q] + ab[k % RK][j % RV];
                    }
            }
            __syncthreads();
        }
    } else {
        __syncthreads();
    }
    float *p = part + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int i = c / V, j = c - i * V;
        int q = ln_sh<K, V>(i / 32, j, i & 31);
        float a = sh[q], b = sh[S + q];
        for (int t = 1; G::SH && t < VR_LN_BWD_WARPS; t++) {
            a += sh[(size_t)t * 2 * S + q];
            b += sh[(size_t)t * 2 * S + S + q];
        }
        p[c] = a;
        p[C + c] = b;
        if (SUM) {
            float o = 0.0f;
            for (int t = 0; t < VR_LN_BWD_WARPS; t++) o += sh[G::BASE + (size_t)t * S + q];
            part_sum[(size_t)blockIdx.x * C + c] = o;
        }
    }
}

template <typename T>
static int rows_fwd_t(const vr_cuda_ctx *ctx, void *out, float *mean, float *rstd, void *res, const void *inp,
                      const void *inp2, const void *w, const void *b, int N, int C, vr_status *st)
{
    constexpr int V = vr_vec<T>::N;
    if (C % V || !vr_aligned16(out) || !vr_aligned16(inp) || !vr_aligned16(w) || !vr_aligned16(b) ||
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
        if (inp2)                                                                                            \
            k_ln_rows_fwd<T, KK, true><<<grid, 256, 0, s>>>(o, mean, rstd, rp, x, x2, wp, bp, N, C, rpw);    \
        else                                                                                                 \
            k_ln_rows_fwd<T, KK, false><<<grid, 256, 0, s>>>(o, mean, rstd, rp, x, x2, wp, bp, N, C, rpw);   \
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
    *st = vr_cu_launched(ctx, inp2 ? "add_layernorm_fwd" : "layernorm_fwd");
    return 1;
}

/* One backward launch: its shared memory (above the 48 KiB default: allowed once per kernel). The sums of dinp
 * need more (192 KiB at 1024 16-bit columns): where the GPU does not have it (an A100 has 163 KiB), the launch
 * with them is VR_ERR_UNSUPPORTED, nothing queued, and the caller does without. */
template <typename T, int K, bool SUM>
static vr_status ln_bwd_launch_t(int slices, cudaStream_t s, T *d, float *part, float *psum, const T *g, const T *x,
                                 const T *wp, const float *mean, const float *rstd, int N, int C, int rps, int acc)
{
    typedef ln_bwd_geom<T, K, SUM> G;
    static int opted; /* once per kernel, 1: allowed, -1: refused (a race asks twice, harmlessly) */
    if (G::SMEM > (48u << 10) && opted <= 0) {
        if (opted < 0)
            return VR_ERR_UNSUPPORTED;
        cudaError_t e = cudaFuncSetAttribute(k_ln_rows_bwd<T, K, SUM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)G::SMEM);
        if (e != cudaSuccess && SUM) {
            cudaGetLastError();
            opted = -1;
            return VR_ERR_UNSUPPORTED;
        }
        VR_CU_TRY(vr_cu_status(e, "layernorm_bwd", "cudaFuncSetAttribute"));
        opted = 1;
    }
    k_ln_rows_bwd<T, K, SUM><<<slices, VR_LN_BWD_WARPS * 32, G::SMEM, s>>>(d, part, psum, g, x, wp, mean, rstd, N, C,
                                                                           rps, acc);
    return VR_OK;
}

template <typename T, int K>
static vr_status ln_bwd_launch(int slices, cudaStream_t s, T *d, float *part, float *psum, const T *g, const T *x,
                               const T *wp, const float *mean, const float *rstd, int N, int C, int rps, int acc)
{
    return psum ? ln_bwd_launch_t<T, K, true>(slices, s, d, part, psum, g, x, wp, mean, rstd, N, C, rps, acc)
                : ln_bwd_launch_t<T, K, false>(slices, s, d, part, psum, g, x, wp, mean, rstd, N, C, rps, acc);
}

template <typename T>
static int rows_bwd_t(const vr_cuda_ctx *ctx, void *dinp, float *part, float *part_sum, const void *dout,
                      const void *inp, const void *w, const float *mean, const float *rstd, int N, int C, int slices,
                      int rps, int acc, vr_status *st)
{
    constexpr int V = vr_vec<T>::N;
    if (C % V || !vr_aligned16(dout) || !vr_aligned16(inp) || (dinp && (!vr_aligned16(dinp) || !vr_aligned16(w))))
        return 0;
    if (part_sum && (!dinp || !part)) /* the sums of dinp ride on the partial sums of dw | db */
        return 0;
    int K = ln_k(C / V, sizeof(T) == 4 ? 6 : 4);
    if (!K) return 0;
    cudaStream_t s = VR_STREAM(ctx);
    T *d = (T *)dinp;
    const T *g = (const T *)dout, *x = (const T *)inp, *wp = (const T *)w;
#define VR_LN_BWD(KK)                                                                                        \
    case KK:                                                                                                 \
        *st = ln_bwd_launch<T, KK>(slices, s, d, part, part_sum, g, x, wp, mean, rstd, N, C, rps, acc);      \
        if (*st) return 1;                                                                                   \
        break
    switch (K) {
        VR_LN_BWD(1);
        VR_LN_BWD(2);
        VR_LN_BWD(3);
        VR_LN_BWD(4);
        VR_LN_BWD(6);
    }
#undef VR_LN_BWD
    *st = vr_cu_launched(ctx, "layernorm_bwd");
    return 1;
}

int vr__ln_rows_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *mean, float *rstd, void *res,
                    const void *inp, const void *inp2, const void *w, const void *b, int N, int C, vr_status *st)
{
    return VR_CU_DISPATCH(dt, rows_fwd_t, ctx, out, mean, rstd, res, inp, inp2, w, b, N, C, st);
}

int vr__ln_rows_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, float *part, float *part_sum,
                    const void *dout, const void *inp, const void *w, const float *mean, const float *rstd, int N,
                    int C, int slices, int rows_per_slice, int acc_dinp, vr_status *st)
{
    return VR_CU_DISPATCH(dt, rows_bwd_t, ctx, dinp, part, part_sum, dout, inp, w, mean, rstd, N, C, slices,
                          rows_per_slice, acc_dinp, st);
}
