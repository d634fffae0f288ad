/* vram — CUDA reductions: sum of squares (global gradient norm), sum, mean and its backward, and the
 * device-side clipping factor. Sums are in fp32: per thread, then a tree over the block, then one
 * fp32 atomic per block into the result. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

template <typename T, int SQ>
__global__ void k_sum(float *out, const T *x, size_t n)
{
    __shared__ float sh[32];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float s = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = vr_tof(x[i]);
        s += SQ ? v * v : v;
    }
    s = vr_block_sum(s, sh);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

template <typename T, int SQ>
static vr_status sum_t(const vr_cuda_ctx *ctx, float *out, const void *x, size_t n)
{
    size_t blocks = (n + 511) / 512, cap = (size_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 4;
    k_sum<T, SQ><<<(unsigned)(blocks < cap ? blocks : cap), 512, 0, VR_STREAM(ctx)>>>(out, (const T *)x, n);
    return vr_cu_launched(ctx, SQ ? "sumsq" : "sum");
}
template <typename T>
static vr_status sumsq_t(const vr_cuda_ctx *ctx, float *out, const void *x, size_t n)
{
    return sum_t<T, 1>(ctx, out, x, n);
}
template <typename T>
static vr_status sum1_t(const vr_cuda_ctx *ctx, float *out, const void *x, size_t n)
{
    return sum_t<T, 0>(ctx, out, x, n);
}

static vr_status sum_any(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *out, const void *x, size_t n,
                         int acc, int sq)
{
    const char *op = sq ? "sumsq" : "sum";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (!out || (n && !x)) return vr_cu_bad(op, "NULL pointer");
    if (!acc) VR_CU_CHECK(cudaMemsetAsync(out, 0, sizeof(float), VR_STREAM(ctx)), op);
    if (n == 0) return VR_OK;
    if (sq) return VR_CU_DISPATCH(dt, sumsq_t, ctx, out, x, n);
    return VR_CU_DISPATCH(dt, sum1_t, ctx, out, x, n);
}

extern "C" vr_status vr_cuda_sumsq(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *out, const void *x,
                                   size_t n, int acc)
{
    return sum_any(ctx, dt, out, x, n, acc, 1);
}

extern "C" vr_status vr_cuda_sum(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *out, const void *x,
                                 size_t n, int acc)
{
    return sum_any(ctx, dt, out, x, n, acc, 0);
}

/* One block: deterministic. */
template <typename T>
__global__ void k_mean(T *out, const T *x, size_t n)
{
    __shared__ float sh[32];
    float s = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += vr_tof(x[i]);
    s = vr_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = vr_fromf<T>(s / (float)n);
}

template <typename T>
static vr_status mean_t(const vr_cuda_ctx *ctx, void *out, const void *x, size_t n)
{
    k_mean<<<1, 1024, 0, VR_STREAM(ctx)>>>((T *)out, (const T *)x, n);
    return vr_cu_launched(ctx, "mean_fwd");
}

extern "C" vr_status vr_cuda_mean_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                      const void *inp, size_t n)
{
    VR_CU_CTX_OK(ctx, "mean_fwd");
    VR_CU_DT_OK(dt, "mean_fwd");
    if (!out || !inp) return vr_cu_bad("mean_fwd", "NULL pointer");
    if (n == 0) return vr_cu_bad("mean_fwd", "mean of 0 elements");
    return VR_CU_DISPATCH(dt, mean_t, ctx, out, inp, n);
}

template <typename T>
__global__ void k_mean_bwd(T *dinp, const T *dout, size_t n, int acc)
{
    float g = vr_tof(dout[0]) / (float)n;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dinp[i] = vr_fromf<T>(acc ? vr_tof(dinp[i]) + g : g);
}

template <typename T>
static vr_status mean_bwd_t(const vr_cuda_ctx *ctx, void *dinp, const void *dout, size_t n, int acc)
{
    k_mean_bwd<<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)dinp, (const T *)dout, n, acc);
    return vr_cu_launched(ctx, "mean_bwd");
}

extern "C" vr_status vr_cuda_mean_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp,
                                      const void *dout, size_t n, int acc)
{
    VR_CU_CTX_OK(ctx, "mean_bwd");
    VR_CU_DT_OK(dt, "mean_bwd");
    if (n == 0) return VR_OK;
    if (!dinp || !dout) return vr_cu_bad("mean_bwd", "NULL pointer");
    return VR_CU_DISPATCH(dt, mean_bwd_t, ctx, dinp, dout, n, acc);
}

/* The clip factor from a squared norm (one thread): see vr_cuda_clip_scale. */
__device__ void clip_finish(float sumsq, float *scale, float *norm, int32_t *skip, float max_norm, float extra,
                            float unscale)
{
    float nrm = sqrtf(sumsq) * unscale;
    if (norm) *norm = nrm;
    if (skip) *skip = isfinite(nrm) ? 0 : 1;
    float c = 1.0f;
    if (max_norm > 0.0f) {
        c = max_norm / (nrm + 1e-6f);
        c = c < 1.0f ? c : 1.0f;
    }
    *scale = extra * unscale * c;
}

__global__ void k_clip_scale(float *scale, float *norm, int32_t *skip, const float *sumsq, float max_norm,
                             float extra, float unscale)
{
    clip_finish(*sumsq, scale, norm, skip, max_norm, extra, unscale);
}

extern "C" vr_status vr_cuda_clip_scale(const vr_cuda_ctx *ctx, float *scale, float *norm, int32_t *skip,
                                        const float *sumsq, float max_norm, float extra, float unscale)
{
    VR_CU_CTX_OK(ctx, "clip_scale");
    if (!scale || !sumsq) return vr_cu_bad("clip_scale", "NULL pointer");
    k_clip_scale<<<1, 1, 0, VR_STREAM(ctx)>>>(scale, norm, skip, sumsq, max_norm, extra, unscale);
    return vr_cu_launched(ctx, "clip_scale");
}

/* ---------------------------------------------------------------- multi-tensor sum of squares */

/* Block b sums the squares of chunks b, b + gridDim.x, ... (in order; the table entry only moves
 * forward) into partials[b]: a fixed grid gives a fixed order, deterministic. */
#define VR_MT_SUMSQ_THREADS 256

template <typename T>
__global__ void __launch_bounds__(VR_MT_SUMSQ_THREADS) k_mt_sumsq(float *partials, const vr_cuda_mt_tensor *tab, int nt,
                                                  int64_t n_chunks)
{
    __shared__ float sh[32];
    float s = 0.0f;
    int k = 0;
    constexpr int VEC = 16 / sizeof(T); /* elements per 16-byte load */
    for (int64_t c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        while (k + 1 < nt && tab[k + 1].chunk0 <= c) k++;
        const T *x = (const T *)tab[k].grad;
        size_t lo = (size_t)(c - tab[k].chunk0) * VR_CUDA_MT_CHUNK, n = (size_t)tab[k].n;
        size_t hi = lo + VR_CUDA_MT_CHUNK < n ? lo + VR_CUDA_MT_CHUNK : n;
        if (hi - lo == VR_CUDA_MT_CHUNK && (uintptr_t)(x + lo) % 16 == 0 && blockDim.x == VR_MT_SUMSQ_THREADS) {
            const uint4 *xv = (const uint4 *)(x + lo);
            uint4 u[VR_CUDA_MT_CHUNK / VEC / VR_MT_SUMSQ_THREADS];
#pragma unroll
            for (int j = 0; j < VR_CUDA_MT_CHUNK / VEC / VR_MT_SUMSQ_THREADS; j++) u[j] = xv[threadIdx.x + j * VR_MT_SUMSQ_THREADS];
#pragma unroll
            for (int j = 0; j < VR_CUDA_MT_CHUNK / VEC / VR_MT_SUMSQ_THREADS; j++) {
                const T *e = (const T *)&u[j];
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    float v = vr_tof(e[q]);
                    s += v * v;
                }
            }
            continue;
        }
#pragma unroll 4
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            float v = vr_tof(x[i]);
            s += v * v;
        }
    }
    s = vr_block_sum(s, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

/* One block: the partials in a fixed order, then the clipping factor as k_clip_scale. */
__global__ void k_mt_sumsq_finish(float *normsq, float *scale, float *norm, int32_t *skip, const float *partials,
                                  int np, float max_norm, float extra, float unscale)
{
    __shared__ float sh[32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < np; i += blockDim.x) s += partials[i];
    s = vr_block_sum(s, sh);
    if (threadIdx.x == 0) {
        *normsq = s;
        if (scale) clip_finish(s, scale, norm, skip, max_norm, extra, unscale);
    }
}

extern "C" vr_status vr_cuda_mt_sumsq(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, const vr_cuda_mt_tensor *tab,
                                      int n_tensors, int64_t n_chunks, float *partials, float *normsq, float *scale,
                                      float *norm, int32_t *skip, float max_norm, float extra, float unscale)
{
    const char *op = "multi_tensor_sumsq";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (!partials || !normsq || (n_chunks > 0 && !tab)) return vr_cu_bad(op, "NULL pointer");
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    if (cap > VR_CUDA_MT_MAX_PARTIALS) cap = VR_CUDA_MT_MAX_PARTIALS;
    int blocks = (int)(n_chunks < cap ? n_chunks : cap);
    cudaStream_t st = VR_STREAM(ctx);
    if (blocks > 0) {
        if (dt == VR_CUDA_F32) k_mt_sumsq<float><<<blocks, VR_MT_SUMSQ_THREADS, 0, st>>>(partials, tab, n_tensors, n_chunks);
        else if (dt == VR_CUDA_BF16)
            k_mt_sumsq<__nv_bfloat16><<<blocks, VR_MT_SUMSQ_THREADS, 0, st>>>(partials, tab, n_tensors, n_chunks);
        else k_mt_sumsq<__half><<<blocks, VR_MT_SUMSQ_THREADS, 0, st>>>(partials, tab, n_tensors, n_chunks);
        VR_CU_LAUNCHED(ctx, op);
    }
    k_mt_sumsq_finish<<<1, 1024, 0, st>>>(normsq, scale, norm, skip, partials, blocks, max_norm, extra, unscale);
    return vr_cu_launched(ctx, op);
}
