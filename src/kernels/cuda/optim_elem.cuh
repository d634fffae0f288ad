/* vram — one optimizer element's arithmetic, shared by the fp32-state kernels (optim.cu) and the
 * compact-state kernels (optim_state.cu): the step's scalars and the update of a weight and its state
 * in registers. Every operation is an explicit IEEE intrinsic (round to nearest, FMAs where written):
 * nothing is left to the compiler's contraction, which could differ between kernels, so all of them give
 * the same bits from the same inputs. */
#ifndef VRAM_KERNELS_CUDA_OPTIM_ELEM_CUH
#define VRAM_KERNELS_CUDA_OPTIM_ELEM_CUH

#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/optim_math.h"

/* The kinds, in vr_cuda_mt_optim's numbering (VR_CUDA_MT_SGD ...). */
enum { OPT_SGD = VR_CUDA_MT_SGD, OPT_MOM = VR_CUDA_MT_MOMENTUM, OPT_ADAM = VR_CUDA_MT_ADAM, OPT_ADAMW = VR_CUDA_MT_ADAMW };

struct opt_args {
    float lr, wd, b1, b2, eps, bc1, bc2_sqrt, momentum, dampening, grad_scale;
    float step_size; /* lr / bc1 (Adam), once a step instead of once an element: the same rounded quotient */
    int nesterov, first;
    uint64_t seed; /* stochastic rounding's: the step */
};

/* The scalars of a step (host), as the kernels use them: bias corrections of step max(step, 1). */
static inline opt_args opt_make_args(int kind, float lr, float b1, float b2, float eps, float momentum,
                                     float dampening, int nesterov, float wd, int step, float grad_scale)
{
    opt_args a;
    memset(&a, 0, sizeof a);
    int t = step < 1 ? 1 : step;
    a.lr = lr, a.wd = wd, a.grad_scale = grad_scale, a.b1 = b1, a.b2 = b2, a.eps = eps;
    a.momentum = momentum, a.dampening = dampening, a.nesterov = nesterov, a.first = step <= 1;
    a.bc1 = kind >= OPT_ADAM ? (float)(1.0 - pow((double)b1, (double)t)) : 1.0f;
    a.bc2_sqrt = kind >= OPT_ADAM ? (float)sqrt(1.0 - pow((double)b2, (double)t)) : 1.0f;
    a.seed = (uint64_t)t;
    a.step_size = a.lr / a.bc1; /* IEEE single division, as __fdiv_rn */
    return a;
}

/* The step's lr, bias corrections and seed from the device (a replayed CUDA graph; vr_cuda_opt_scalars). */
__device__ __forceinline__ void opt_device_scalars(opt_args &a, const float *hp)
{
    if (hp) {
        a.lr = hp[0];
        a.bc1 = hp[1];
        a.bc2_sqrt = hp[2];
        a.first = hp[3] != 0.0f;
        a.seed = (uint64_t)hp[4];
        a.step_size = __fdiv_rn(a.lr, a.bc1);
    }
}

/* One element: returns the new fp32 weight from p; mi (momentum or m) and vi are the state in and out.
 * g is the scaled gradient, wd this tensor's weight decay. */
template <int KIND>
__device__ __forceinline__ float opt_upd(float p, float g, float &mi, float &vi, const opt_args &a, float wd)
{
    if (KIND == OPT_SGD) {
        g = __fmaf_rn(wd, p, g);
        return __fmaf_rn(-a.lr, g, p);
    }
    if (KIND == OPT_MOM) {
        g = __fmaf_rn(wd, p, g);
        float buf = a.first ? g : __fmaf_rn(a.momentum, mi, __fmul_rn(__fsub_rn(1.0f, a.dampening), g));
        mi = buf;
        g = a.nesterov ? __fmaf_rn(a.momentum, buf, g) : buf;
        return __fmaf_rn(-a.lr, g, p);
    }
    if (KIND == OPT_ADAM) g = __fmaf_rn(wd, p, g);
    else p = __fmul_rn(p, __fmaf_rn(-a.lr, wd, 1.0f));
    mi = __fmaf_rn(a.b1, mi, __fmul_rn(__fsub_rn(1.0f, a.b1), g));
    vi = __fmaf_rn(a.b2, vi, __fmul_rn(__fmul_rn(__fsub_rn(1.0f, a.b2), g), g));
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
    return __fsub_rn(p, __fdiv_rn(__fmul_rn(a.step_size, mi), den));
}

/* Element i of a split master (kernels/optim_math.h): its fp32 value from the bf16 weight's bits hi[i] and the
 * low bits lo[i], and the two halves of a new value stored back. */
__device__ __forceinline__ float opt_split_weight(const uint16_t *hi, const uint16_t *lo, size_t i)
{
    return vr_bits_f32(vr_split_join(hi[i], lo[i]));
}

__device__ __forceinline__ void opt_split_store(uint16_t *hi, uint16_t *lo, size_t i, float p)
{
    uint32_t u = vr_f32_bits(p);
    hi[i] = vr_split_hi(u);
    lo[i] = vr_split_lo(u);
}

/* ---------------------------------------------------------------- the multi-tensor kernels' walk */

/* The table entry holding chunk c: the last with chunk0 <= c (chunk0 strictly increasing). */
__device__ __forceinline__ int mt_find(const vr_cuda_mt_tensor *tab, int nt, int64_t c)
{
    int lo = 0, hi = nt - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tab[mid].chunk0 <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Four consecutive elements of T as floats, and back (one 16-byte or 8-byte access). */
template <typename T> struct vec4_of;
template <> struct vec4_of<float> { typedef float4 type; };
template <> struct vec4_of<__nv_bfloat16> { typedef uint2 type; };
template <> struct vec4_of<__half> { typedef uint2 type; };

template <typename T>
__device__ __forceinline__ void ld4(const T *p, float o[4])
{
    typename vec4_of<T>::type u = *(const typename vec4_of<T>::type *)p;
    const T *e = (const T *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = vr_tof(e[k]);
}

template <typename T>
__device__ __forceinline__ void st4(T *p, const float x[4])
{
    typename vec4_of<T>::type u;
    T *e = (T *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) e[k] = vr_fromf<T>(x[k]);
    *(typename vec4_of<T>::type *)p = u;
}

template <typename T> __device__ __forceinline__ bool al4(const T *p) { return ((uintptr_t)p & (sizeof(T) * 4 - 1)) == 0; }

/* A block's walk over elements [lo, hi) of a chunk: four consecutive elements at a time (e4(i)) where `wide` (the
 * arrays aligned for it), the rest one by one (e1(i)). VR_CUDA_MT_CHUNK is a multiple of 4: so is every lo. */
template <class E4, class E1>
__device__ __forceinline__ void chunk_walk(size_t lo, size_t hi, bool wide, E4 e4, E1 e1)
{
    size_t mid = lo;
    if (wide) {
        mid = lo + ((hi - lo) & ~(size_t)3);
        for (size_t i = lo + 4 * (size_t)threadIdx.x; i < mid; i += 4 * 256)
            e4(i);
    }
    for (size_t i = mid + threadIdx.x; i < hi; i += 256)
        e1(i);
}

#endif
