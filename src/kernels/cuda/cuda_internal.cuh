/* vram — helpers shared by the CUDA kernels (private to src/kernels/cuda): error checks, dtype
 * dispatch, loads/stores that convert to and from fp32, warp and block reductions. */
#ifndef VRAM_KERNELS_CUDA_INTERNAL_CUH
#define VRAM_KERNELS_CUDA_INTERNAL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kernels_cuda.h"

#if !defined(NDEBUG) && !defined(VRAM_CUDA_SYNC_CHECK)
#define VRAM_CUDA_SYNC_CHECK 1
#endif

#define VR_STREAM(ctx) ((cudaStream_t)(ctx)->stream)

/* Turns a failed CUDA runtime call into VR_ERR_DEVICE naming the op. */
static inline vr_status vr_cu_status(cudaError_t e, const char *op, const char *what)
{
    if (e == cudaSuccess) return VR_OK;
    return vr_error(VR_ERR_DEVICE, "cuda kernels: %s: %s failed: %s (%s)", op, what,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

/* After a launch: the launch error (always); in debug builds also a stream sync so that faults are
 * reported by the op that caused them. */
static inline vr_status vr_cu_launched(const vr_cuda_ctx *ctx, const char *op)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return vr_cu_status(e, op, "kernel launch");
#ifdef VRAM_CUDA_SYNC_CHECK
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (VR_STREAM(ctx) && cudaStreamIsCapturing(VR_STREAM(ctx), &cs) == cudaSuccess &&
        cs != cudaStreamCaptureStatusNone)
        return VR_OK; /* capturing: nothing runs yet */
    e = cudaStreamSynchronize(VR_STREAM(ctx));
    if (e != cudaSuccess) return vr_cu_status(e, op, "kernel (debug sync)");
#else
    (void)ctx;
#endif
    return VR_OK;
}

#define VR_CU_TRY(expr)                  \
    do {                                 \
        vr_status vr__s = (expr);        \
        if (vr__s != VR_OK) return vr__s; \
    } while (0)

#define VR_CU_CHECK(call, op) VR_CU_TRY(vr_cu_status((call), (op), #call))
#define VR_CU_LAUNCHED(ctx, op) VR_CU_TRY(vr_cu_launched((ctx), (op)))

static inline vr_status vr_cu_bad(const char *op, const char *why)
{
    return vr_error(VR_ERR_INVALID, "cuda kernels: %s: %s", op, why);
}

static inline int vr_cu_dt_ok(vr_cuda_dtype dt)
{
    return dt == VR_CUDA_F32 || dt == VR_CUDA_BF16 || dt == VR_CUDA_F16;
}

#define VR_CU_CTX_OK(ctx, op) \
    do { if (!(ctx)) return vr_cu_bad((op), "ctx is NULL"); } while (0)
#define VR_CU_DT_OK(dt, op) \
    do { if (!vr_cu_dt_ok(dt)) return vr_cu_bad((op), "unknown dtype"); } while (0)

/* Calls F<T>(args...) with T the storage type of dt. */
#define VR_CU_DISPATCH(dt, F, ...)                                      \
    ((dt) == VR_CUDA_F32    ? F<float>(__VA_ARGS__)                     \
     : (dt) == VR_CUDA_BF16 ? F<__nv_bfloat16>(__VA_ARGS__)             \
                            : F<__half>(__VA_ARGS__))

/* ---------------------------------------------------------------- conversions */

__device__ __forceinline__ float vr_tof(float x) { return x; }
__device__ __forceinline__ float vr_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float vr_tof(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T vr_fromf(float x);
template <> __device__ __forceinline__ float vr_fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 vr_fromf<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half vr_fromf<__half>(float x) { return __float2half_rn(x); }

/* 16-byte vectors of T: VEC elements. */
template <typename T> struct vr_vec {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};

template <typename T>
__device__ __forceinline__ vr_vec<T> vr_ld16(const T *p)
{
    vr_vec<T> r;
    *reinterpret_cast<int4 *>(r.v) = *reinterpret_cast<const int4 *>(p);
    return r;
}
template <typename T>
__device__ __forceinline__ vr_vec<T> vr_ld16_nc(const T *p)
{
    vr_vec<T> r;
    *reinterpret_cast<int4 *>(r.v) = __ldg(reinterpret_cast<const int4 *>(p));
    return r;
}
template <typename T>
__device__ __forceinline__ void vr_st16(T *p, const vr_vec<T> &r)
{
    *reinterpret_cast<int4 *>(p) = *reinterpret_cast<const int4 *>(r.v);
}

static inline int vr_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---------------------------------------------------------------- reductions */

__device__ __forceinline__ float vr_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float vr_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
 * shared must hold 32 floats; the function syncs before it returns so shared can be reused. */
__device__ __forceinline__ float vr_block_sum(float v, float *shared)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = vr_warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < nw ? shared[lane] : 0.0f;
    r = vr_warp_sum(r);
    __syncthreads();
    return r;
}
__device__ __forceinline__ float vr_block_max(float v, float *shared)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = vr_warp_max(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < nw ? shared[lane] : -INFINITY;
    r = vr_warp_max(r);
    __syncthreads();
    return r;
}

/* Grid size for a grid-stride elementwise loop over n items with 256-thread blocks. */
static inline unsigned vr_grid_for(size_t n, int threads, const vr_cuda_ctx *ctx)
{
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

/* cuBLASLt wrapper (matmul.cu), used by the classifier too. Column-major view (cuBLASLt's): D(m,n) =
 * alpha op(A) op(B) + beta D; lda/ldb/ldd column strides. epilogue: a cublasLtEpilogue_t, or 0 for none; bias/aux as
 * cuBLASLt's. */
vr_status vr_cu_lt_matmul(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *D, const void *A,
                          const void *Bm, int m, int n, int k, int lda, int ldb, int ldd, int transa,
                          int transb, float alpha, float beta, int epilogue, const void *bias,
                          void *aux, int ldaux, const char *op);

/* Column sums: dbias(OC) (=|+=) sum over N rows of dout(N,OC), rows ld >= OC elements apart, fp32
 * accumulation (matmul.cu). */
vr_status vr_cu_colsum(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dbias, const void *dout, int N,
                       int OC, int ld, int acc, const char *op);

/* out(C) (=|+=) the sum over k = 0..n-1 of part(n,C) fp32: the second pass of column sums taken over fixed
 * slices of rows (the bias gradient, matmul.cu; RMSNorm's weight gradient, llama.cu). A block per 32 columns,
 * 16 lanes a column: lane y adds k = y, y + 16, ... in order (their loads in flight side by side), then the
 * lanes' sums are added in lane order: a fixed order, deterministic. Launch with vr_cu_sum_partials. */
#define VR_SUM_PARTIALS_Y 16
template <typename T>
__global__ void vr_k_sum_partials(T *out, const float *part, int n, int C, int acc)
{
    __shared__ float sh[VR_SUM_PARTIALS_Y][33];
    int x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * 32 + x;
    float t = 0.0f;
    if (c < C)
        for (int k = y; k < n; k += VR_SUM_PARTIALS_Y) t += part[(size_t)k * C + c];
    sh[y][x] = t;
    __syncthreads();
    if (y || c >= C) return;
    t = 0.0f;
    for (int k = 0; k < VR_SUM_PARTIALS_Y; k++) t += sh[k][x];
    out[c] = vr_fromf<T>(acc ? vr_tof(out[c]) + t : t);
}

template <typename T>
static inline void vr_cu_sum_partials(cudaStream_t s, T *out, const float *part, int n, int C, int acc)
{
    vr_k_sum_partials<T><<<(C + 31) / 32, dim3(32, VR_SUM_PARTIALS_Y), 0, s>>>(out, part, n, C, acc);
}

#endif
