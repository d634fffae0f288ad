/* vram — CUDA elementwise kernels: copy/accumulate, residual add, scale, GELU, ReLU, fill, dtype
 * conversion, and the fp16 loss-scaling helpers.
 *
 * One grid-stride kernel (k_map) serves the maps: each thread reads 16-byte vectors (8 bf16 or
 * 4 fp32 elements) when every pointer is 16-byte aligned, converts to fp32, applies the functor and
 * rounds back; the tail (and misaligned buffers) take a scalar loop. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

/* out[i] = f(a[i], b[i], out[i]); b is read only when USE_B, out only when USE_O. */
template <typename T, int USE_B, int USE_O, typename F>
__global__ void k_map(T *out, const T *a, const T *b, size_t n, int vec_ok, F f)
{
    constexpr int V = vr_vec<T>::N;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t start = 0;
    if (vec_ok) {
        size_t nv = n / V;
        for (size_t i = tid; i < nv; i += stride) {
            vr_vec<T> va = vr_ld16(a + i * V), vb, vo, r;
            if (USE_B) vb = vr_ld16(b + i * V);
            if (USE_O) vo = vr_ld16(out + i * V);
#pragma unroll
            for (int k = 0; k < V; k++)
                r.v[k] = vr_fromf<T>(f(vr_tof(va.v[k]), USE_B ? vr_tof(vb.v[k]) : 0.0f,
                                       USE_O ? vr_tof(vo.v[k]) : 0.0f));
            vr_st16(out + i * V, r);
        }
        start = nv * V;
    }
    for (size_t i = start + tid; i < n; i += stride)
        out[i] = vr_fromf<T>(f(vr_tof(a[i]), USE_B ? vr_tof(b[i]) : 0.0f, USE_O ? vr_tof(out[i]) : 0.0f));
}

template <typename T, int USE_B, int USE_O, typename F>
static vr_status run_map(const vr_cuda_ctx *ctx, const char *op, void *out, const void *a,
                         const void *b, size_t n, F f)
{
    if (n == 0) return VR_OK;
    int vec_ok = vr_aligned16(out) && vr_aligned16(a) && (!USE_B || vr_aligned16(b));
    size_t work = vec_ok ? n / vr_vec<T>::N + 1 : n;
    k_map<T, USE_B, USE_O><<<vr_grid_for(work, 256, ctx), 256, 0, VR_STREAM(ctx)>>>(
        (T *)out, (const T *)a, (const T *)b, n, vec_ok, f);
    return vr_cu_launched(ctx, op);
}

#define VR_MAP(dt, USE_B, USE_O, ctx, op, out, a, b, n, f)                                     \
    ((dt) == VR_CUDA_F32    ? run_map<float, USE_B, USE_O>(ctx, op, out, a, b, n, f)           \
     : (dt) == VR_CUDA_BF16 ? run_map<__nv_bfloat16, USE_B, USE_O>(ctx, op, out, a, b, n, f)   \
                            : run_map<__half, USE_B, USE_O>(ctx, op, out, a, b, n, f))

#define VR_EW_CHECK(op, ptrs_ok)                                \
    VR_CU_CTX_OK(ctx, op);                                      \
    VR_CU_DT_OK(dt, op);                                        \
    if (n > 0 && !(ptrs_ok)) return vr_cu_bad(op, "NULL pointer")

/* ---------------------------------------------------------------- functors */

struct f_copy { __device__ float operator()(float a, float, float) const { return a; } };
struct f_add_o { __device__ float operator()(float a, float, float o) const { return o + a; } };
struct f_add_ab { __device__ float operator()(float a, float b, float) const { return a + b; } };
struct f_scale {
    float s;
    __device__ float operator()(float a, float, float) const { return a * s; }
};
struct f_const {
    float s;
    __device__ float operator()(float, float, float) const { return s; }
};

#define VR_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define VR_GELU_C 0.044715f

__device__ __forceinline__ float gelu_f(float x)
{
    float u = VR_GELU_K * (x + VR_GELU_C * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float x)
{
    float u = VR_GELU_K * (x + VR_GELU_C * x * x * x);
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * VR_GELU_K * (1.0f + 3.0f * VR_GELU_C * x * x);
}

struct f_gelu { __device__ float operator()(float a, float, float) const { return gelu_f(a); } };
template <int ACC> struct f_gelu_bwd {
    __device__ float operator()(float x, float g, float o) const
    {
        float d = g * gelu_grad(x);
        return ACC ? o + d : d;
    }
};
struct f_relu { __device__ float operator()(float a, float, float) const { return a > 0.0f ? a : 0.0f; } };
template <int ACC> struct f_relu_bwd {
    __device__ float operator()(float x, float g, float o) const
    {
        float d = x > 0.0f ? g : 0.0f;
        return ACC ? o + d : d;
    }
};

/* ---------------------------------------------------------------- entry points */

extern "C" vr_status vr_cuda_zero(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *x, size_t n)
{
    VR_EW_CHECK("zero", x);
    if (n == 0) return VR_OK;
    VR_CU_CHECK(cudaMemsetAsync(x, 0, n * vr_cuda_dtype_size(dt), VR_STREAM(ctx)), "zero");
    return VR_OK;
}

extern "C" vr_status vr_cuda_fill(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *x, size_t n,
                                  float value)
{
    VR_EW_CHECK("fill", x);
    return VR_MAP(dt, 0, 0, ctx, "fill", x, x, NULL, n, (f_const{value}));
}

extern "C" vr_status vr_cuda_acc(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dst, const void *src,
                                 size_t n, int acc)
{
    VR_EW_CHECK("acc", dst && src);
    if (!acc) {
        if (dst == src || n == 0) return VR_OK;
        VR_CU_CHECK(cudaMemcpyAsync(dst, src, n * vr_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice,
                                    VR_STREAM(ctx)),
                    "acc");
        return VR_OK;
    }
    return VR_MAP(dt, 0, 1, ctx, "acc", dst, src, NULL, n, f_add_o());
}

extern "C" vr_status vr_cuda_add_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *a,
                                     const void *b, size_t n)
{
    VR_EW_CHECK("add_fwd", out && a && b);
    return VR_MAP(dt, 1, 0, ctx, "add_fwd", out, a, b, n, f_add_ab());
}

extern "C" vr_status vr_cuda_scale(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *x, size_t n, float s)
{
    VR_EW_CHECK("scale", x);
    return VR_MAP(dt, 0, 0, ctx, "scale", x, x, NULL, n, (f_scale{s}));
}

extern "C" vr_status vr_cuda_gelu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                      const void *inp, size_t n)
{
    VR_EW_CHECK("gelu_fwd", out && inp);
    return VR_MAP(dt, 0, 0, ctx, "gelu_fwd", out, inp, NULL, n, f_gelu());
}

extern "C" vr_status vr_cuda_gelu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp,
                                      const void *inp, const void *dout, size_t n, int acc)
{
    VR_EW_CHECK("gelu_bwd", dinp && inp && dout);
    if (acc) return VR_MAP(dt, 1, 1, ctx, "gelu_bwd", dinp, inp, dout, n, f_gelu_bwd<1>());
    return VR_MAP(dt, 1, 0, ctx, "gelu_bwd", dinp, inp, dout, n, f_gelu_bwd<0>());
}

extern "C" vr_status vr_cuda_relu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                      const void *inp, size_t n)
{
    VR_EW_CHECK("relu_fwd", out && inp);
    return VR_MAP(dt, 0, 0, ctx, "relu_fwd", out, inp, NULL, n, f_relu());
}

extern "C" vr_status vr_cuda_relu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp,
                                      const void *x, const void *dout, size_t n, int acc)
{
    VR_EW_CHECK("relu_bwd", dinp && x && dout);
    if (acc) return VR_MAP(dt, 1, 1, ctx, "relu_bwd", dinp, x, dout, n, f_relu_bwd<1>());
    return VR_MAP(dt, 1, 0, ctx, "relu_bwd", dinp, x, dout, n, f_relu_bwd<0>());
}

/* ---------------------------------------------------------------- conversion */

template <typename TO, typename TI>
__global__ void k_convert(TO *dst, const TI *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = vr_fromf<TO>(vr_tof(src[i]));
}

template <typename TO>
static vr_status convert_from(const vr_cuda_ctx *ctx, TO *dst, vr_cuda_dtype src_dt, const void *src,
                              size_t n)
{
    unsigned g = vr_grid_for(n, 256, ctx);
    cudaStream_t s = VR_STREAM(ctx);
    if (src_dt == VR_CUDA_F32) k_convert<<<g, 256, 0, s>>>(dst, (const float *)src, n);
    else if (src_dt == VR_CUDA_BF16) k_convert<<<g, 256, 0, s>>>(dst, (const __nv_bfloat16 *)src, n);
    else k_convert<<<g, 256, 0, s>>>(dst, (const __half *)src, n);
    return vr_cu_launched(ctx, "convert");
}

extern "C" vr_status vr_cuda_convert(const vr_cuda_ctx *ctx, vr_cuda_dtype dst_dt, void *dst,
                                     vr_cuda_dtype src_dt, const void *src, size_t n)
{
    VR_CU_CTX_OK(ctx, "convert");
    if (!vr_cu_dt_ok(dst_dt) || !vr_cu_dt_ok(src_dt)) return vr_cu_bad("convert", "unknown dtype");
    if (n == 0) return VR_OK;
    if (!dst || !src) return vr_cu_bad("convert", "NULL pointer");
    if (dst_dt == src_dt) {
        if (dst == src) return VR_OK;
        VR_CU_CHECK(cudaMemcpyAsync(dst, src, n * vr_cuda_dtype_size(dst_dt), cudaMemcpyDeviceToDevice,
                                    VR_STREAM(ctx)),
                    "convert");
        return VR_OK;
    }
    if (dst == src) return vr_cu_bad("convert", "dst aliases src with different dtypes");
    if (dst_dt == VR_CUDA_F32) return convert_from(ctx, (float *)dst, src_dt, src, n);
    if (dst_dt == VR_CUDA_BF16) return convert_from(ctx, (__nv_bfloat16 *)dst, src_dt, src, n);
    return convert_from(ctx, (__half *)dst, src_dt, src, n);
}

/* ---------------------------------------------------------------- fp16 loss scaling */

template <typename T>
__global__ void k_check_finite(int32_t *found, const T *x, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    int bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad |= !isfinite(vr_tof(x[i]));
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1;
}

template <typename T>
static vr_status check_finite_t(const vr_cuda_ctx *ctx, int32_t *found, const void *x, size_t n)
{
    k_check_finite<<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>(found, (const T *)x, n);
    return vr_cu_launched(ctx, "check_finite");
}

extern "C" vr_status vr_cuda_check_finite(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int32_t *found,
                                          const void *x, size_t n)
{
    VR_EW_CHECK("check_finite", found && x);
    if (n == 0) return VR_OK;
    return VR_CU_DISPATCH(dt, check_finite_t, ctx, found, x, n);
}

__global__ void k_loss_scale_update(float *scale, int32_t *tracker, const int32_t *found, float growth,
                                    float backoff, int interval)
{
    if (*found) {
        *scale *= backoff;
        *tracker = 0;
    } else {
        int t = *tracker + 1;
        if (t >= interval) {
            *scale *= growth;
            t = 0;
        }
        *tracker = t;
    }
}

extern "C" vr_status vr_cuda_loss_scale_update(const vr_cuda_ctx *ctx, float *scale, int32_t *tracker,
                                               const int32_t *found, float growth, float backoff,
                                               int interval)
{
    VR_CU_CTX_OK(ctx, "loss_scale_update");
    if (!scale || !tracker || !found) return vr_cu_bad("loss_scale_update", "NULL pointer");
    if (interval < 1) return vr_cu_bad("loss_scale_update", "interval must be >= 1");
    k_loss_scale_update<<<1, 1, 0, VR_STREAM(ctx)>>>(scale, tracker, found, growth, backoff, interval);
    return vr_cu_launched(ctx, "loss_scale_update");
}

__global__ void k_reciprocal(float *inv, const float *scale, float extra) { *inv = extra / *scale; }

extern "C" vr_status vr_cuda_reciprocal(const vr_cuda_ctx *ctx, float *inv, const float *scale,
                                        float extra)
{
    VR_CU_CTX_OK(ctx, "reciprocal");
    if (!inv || !scale) return vr_cu_bad("reciprocal", "NULL pointer");
    k_reciprocal<<<1, 1, 0, VR_STREAM(ctx)>>>(inv, scale, extra);
    return vr_cu_launched(ctx, "reciprocal");
}
