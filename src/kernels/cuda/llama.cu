/* vram — CUDA kernels of the Llama family: RMSNorm, rotary positions, SwiGLU (the CPU ops' contracts,
 * kernels/cpu/rmsnorm.c, rope.c, swiglu.c). fp32 maths in registers for every storage type.
 *
 * RMSNorm forward: one warp per row (sum of squares, then the scaled row). Backward: dinp one warp per
 * row, dinp = rstd (g w - x rstd mean_c(g w x rstd)); dw = sum_n g x rstd in two steps as LayerNorm's:
 * fp32 partial sums over slices of rows to scratch, then one thread per column adds the slices in order
 * (deterministic, no atomics). Where both are wanted and a row fits a warp's registers, LayerNorm's tile
 * kernel (layernorm_rows.cu) does both in one read of dout and inp; else a dinp kernel and a partial-sums
 * kernel over (32 W columns) x (a slice of rows), each reading them.
 * Rope: one thread per (position, head, pair i): rotates (x[i], x[i + hd/2]) of the q and k heads by
 * t * inv_freq[i] (the inverse frequencies come from the host, vr_rope_inv_freq: one definition for the
 * CPU and CUDA), copies the v heads' pairs.
 * Every kernel moves 16-byte vectors (8 bf16/fp16 or 4 fp32 values per thread) where the row widths and
 * pointers allow (ldf/stf), else single elements: one templated kernel for both widths. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/cuda/layernorm_rows.cuh"
#include "kernels/norm_math.h"
#include "kernels/scratch.h"

/* Row slices of dw's partial sums and the scratch they take: kernels/scratch.h (the plan's size too). */
static int rms_slices(int N) { return vr_scratch_ln_slices(N); }

extern "C" size_t vr_cuda_rmsnorm_bwd_scratch_bytes(int N, int C)
{
    return (size_t)vr_scratch_cuda_rmsnorm_bwd(N, C);
}

/* W consecutive elements as fp32: one 16-byte load when W is the vector width, else W scalar loads. */
template <int W, typename T>
__device__ __forceinline__ void ldf(float (&f)[W], const T *p)
{
    if constexpr (W == vr_vec<T>::N) {
        vr_vec<T> v = vr_ld16(p);
#pragma unroll
        for (int k = 0; k < W; k++) f[k] = vr_tof(v.v[k]);
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) f[k] = vr_tof(p[k]);
    }
}

template <int W, typename T>
__device__ __forceinline__ void stf(T *p, const float (&f)[W])
{
    if constexpr (W == vr_vec<T>::N) {
        vr_vec<T> v;
#pragma unroll
        for (int k = 0; k < W; k++) v.v[k] = vr_fromf<T>(f[k]);
        vr_st16(p, v);
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) p[k] = vr_fromf<T>(f[k]);
    }
}

/* p1[0..W) and p2[0..W) (=|+= per acc) y1 and y2: the two halves a rope pair or a swiglu gradient writes. */
template <int W, typename T>
__device__ __forceinline__ void store2(T *p1, T *p2, float (&y1)[W], float (&y2)[W], int acc)
{
    if (acc) {
        float o1[W], o2[W];
        ldf(o1, p1);
        ldf(o2, p2);
#pragma unroll
        for (int k = 0; k < W; k++) y1[k] += o1[k], y2[k] += o2[k];
    }
    stf(p1, y1);
    stf(p2, y2);
}

/* Calls F<T, W> with W the 16-byte vector width of T when vec, else 1. */
#define VR_LLAMA_DISPATCH(dt, vec, F, ...)                                                                  \
    ((dt) == VR_CUDA_F32    ? ((vec) ? F<float, 4>(__VA_ARGS__) : F<float, 1>(__VA_ARGS__))                  \
     : (dt) == VR_CUDA_BF16 ? ((vec) ? F<__nv_bfloat16, 8>(__VA_ARGS__) : F<__nv_bfloat16, 1>(__VA_ARGS__)) \
                            : ((vec) ? F<__half, 8>(__VA_ARGS__) : F<__half, 1>(__VA_ARGS__)))

/* Whether every pointer is 16-byte aligned and n is a multiple of the vector width of dt. */
static int vec_ok(vr_cuda_dtype dt, size_t n, const void *a, const void *b, const void *c, const void *d)
{
    size_t V = 16 / vr_cuda_dtype_size(dt);
    return n % V == 0 && (!a || vr_aligned16(a)) && (!b || vr_aligned16(b)) && (!c || vr_aligned16(c)) &&
           (!d || vr_aligned16(d));
}

/* ---------------------------------------------------------------- rmsnorm */

template <typename T, int W>
__global__ void k_rms_fwd(T *out, float *rstd, const T *inp, const T *w, int N, int C, float eps)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C;
    float s = 0.0f, xv[W], wv[W];
    for (int c = lane * W; c < C; c += 32 * W) {
        ldf(xv, x + c);
#pragma unroll
        for (int k = 0; k < W; k++) s += xv[k] * xv[k];
    }
    float r = rsqrtf(vr_warp_sum(s) / C + eps);
    T *o = out + (size_t)row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
        ldf(xv, x + c);
        ldf(wv, w + c);
#pragma unroll
        for (int k = 0; k < W; k++) xv[k] = xv[k] * r * wv[k];
        stf(o + c, xv);
    }
    if (lane == 0) rstd[row] = r;
}

template <typename T, int W>
static vr_status rms_fwd_t(const vr_cuda_ctx *ctx, void *out, float *rstd, const void *inp, const void *w, int N,
                           int C, float eps)
{
    k_rms_fwd<T, W><<<(N + 7) / 8, 256, 0, VR_STREAM(ctx)>>>((T *)out, rstd, (const T *)inp, (const T *)w, N, C,
                                                             eps);
    return vr_cu_launched(ctx, "rmsnorm_fwd");
}

extern "C" vr_status vr_cuda_rmsnorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *rstd,
                                         const void *inp, const void *w, int N, int C, float eps)
{
    const char *op = "rmsnorm_fwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0) return vr_cu_bad(op, "bad shape");
    if (N == 0) return VR_OK;
    if (!out || !rstd || !inp || !w) return vr_cu_bad(op, "NULL pointer");
    return VR_LLAMA_DISPATCH(dt, vec_ok(dt, (size_t)C, out, inp, w, NULL), rms_fwd_t, ctx, out, rstd, inp, w, N, C,
                             eps);
}

extern "C" vr_status vr_cuda_add_rmsnorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *res, void *out,
                                             float *rstd, const void *a, const void *b, const void *w, int N, int C,
                                             float eps)
{
    const char *op = "add_rmsnorm_fwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0) return vr_cu_bad(op, "bad shape");
    if (N == 0) return VR_OK;
    if (!res || !out || !rstd || !a || !b || !w) return vr_cu_bad(op, "NULL pointer");
    vr_status st = VR_OK;
    if (vr__add_rms_rows_fwd(ctx, dt, out, rstd, res, a, b, w, N, C, eps, &st)) return st;
    /* the same results in two passes */
    VR_CU_TRY(vr_cuda_add_fwd(ctx, dt, res, a, b, (size_t)N * (size_t)C));
    return vr_cuda_rmsnorm_fwd(ctx, dt, out, rstd, res, w, N, C, eps);
}

/* out (these kernels): inp is the forward's output y, x-hat = y / w (kernels/norm_math.h). */
template <typename T, int W>
__global__ void k_rms_bwd_dinp(T *dinp, const T *dout, const T *inp, const T *w, bool out, const float *rstd, int N,
                               int C, int acc)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float r = rstd[row], sgx = 0.0f, xv[W], gv[W], wv[W], dv[W];
    for (int c = lane * W; c < C; c += 32 * W) {
        ldf(xv, x + c);
        ldf(gv, g + c);
        ldf(wv, w + c);
#pragma unroll
        for (int k = 0; k < W; k++) sgx += out ? gv[k] * xv[k] : gv[k] * wv[k] * xv[k];
    }
    sgx = out ? vr_warp_sum(sgx) / C : vr_warp_sum(sgx) * r / C;
    T *d = dinp + (size_t)row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
        ldf(xv, x + c);
        ldf(gv, g + c);
        ldf(wv, w + c);
        if (acc) ldf(dv, d + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float v = r * (gv[k] * wv[k] - (out ? xv[k] * vr_norm_inv_w(wv[k]) : xv[k] * r) * sgx);
            dv[k] = acc ? dv[k] + v : v;
        }
        stf(d + c, dv);
    }
}

/* Block (32, 8) over 32 W columns: lane owns W consecutive columns; 8 row lanes walk the slice. */
template <typename T, int W>
__global__ void k_rms_bwd_partial(float *part, const T *dout, const T *inp, const T *w, bool out, const float *rstd,
                                  int N, int C, int rows_per_slice)
{
    constexpr int COLS = 32 * W;
    __shared__ float sw[8][COLS + 1];
    int lane = threadIdx.x, ry = threadIdx.y;
    int c0 = blockIdx.x * COLS + lane * W, slice = blockIdx.y;
    int r0 = slice * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
    float aw[W], xv[W], gv[W];
#pragma unroll
    for (int k = 0; k < W; k++) aw[k] = 0.0f;
    if (c0 + W <= C) {
        for (int r = r0 + ry; r < r1; r += 8) {
            float rs = out ? 1.0f : rstd[r]; /* out: dout y, scaled by 1 / w below */
            ldf(xv, inp + (size_t)r * C + c0);
            ldf(gv, dout + (size_t)r * C + c0);
#pragma unroll
            for (int k = 0; k < W; k++) aw[k] += gv[k] * xv[k] * rs;
        }
    } else { /* the scalar kernel's ragged last block */
        for (int r = r0 + ry; r < r1; r += 8)
            for (int k = 0; k < W && c0 + k < C; k++)
                aw[k] += vr_tof(dout[(size_t)r * C + c0 + k]) * vr_tof(inp[(size_t)r * C + c0 + k]) *
                         (out ? 1.0f : rstd[r]);
    }
#pragma unroll
    for (int k = 0; k < W; k++) {
        if (out && c0 + k < C) aw[k] *= vr_norm_inv_w(vr_tof(w[c0 + k]));
        sw[ry][lane * W + k] = aw[k];
    }
    __syncthreads();
    for (int col = ry * 32 + lane; col < COLS; col += 256) {
        int c = blockIdx.x * COLS + col;
        float tw = 0.0f;
        for (int y = 0; y < 8; y++) tw += sw[y][col];
        if (c < C) part[(size_t)slice * C + c] = tw;
    }
}

template <typename T, int W>
static vr_status rms_bwd_t(const vr_cuda_ctx *ctx, void *dinp, void *dw, const void *dout, const void *inp,
                           const void *w, bool out, const float *rstd, int N, int C, int acc_dinp, int acc_dw,
                           void *scratch)
{
    cudaStream_t s = VR_STREAM(ctx);
    if (dinp && N > 0) {
        k_rms_bwd_dinp<T, W><<<(N + 7) / 8, 256, 0, s>>>((T *)dinp, (const T *)dout, (const T *)inp, (const T *)w,
                                                         out, rstd, N, C, acc_dinp);
        VR_CU_LAUNCHED(ctx, "rmsnorm_bwd");
    }
    if (dw) {
        int slices = N > 0 ? rms_slices(N) : 0;
        if (N > 0) {
            int rps = (N + slices - 1) / slices;
            dim3 grid((C + 32 * W - 1) / (32 * W), slices), block(32, 8);
            k_rms_bwd_partial<T, W><<<grid, block, 0, s>>>((float *)scratch, (const T *)dout, (const T *)inp,
                                                          (const T *)w, out, rstd, N, C, rps);
            VR_CU_LAUNCHED(ctx, "rmsnorm_bwd");
        }
        vr_cu_sum_partials(s, (T *)dw, (const float *)scratch, slices, C, acc_dw);
        VR_CU_LAUNCHED(ctx, "rmsnorm_bwd");
    }
    return VR_OK;
}

/* dw (=|+=) the sum of `slices` rows of partial sums. */
template <typename T>
static vr_status rms_final_t(const vr_cuda_ctx *ctx, void *dw, const float *part, int slices, int C, int acc)
{
    vr_cu_sum_partials(VR_STREAM(ctx), (T *)dw, part, slices, C, acc);
    return vr_cu_launched(ctx, "rmsnorm_bwd");
}

/* out: inp is the forward's output. */
static vr_status rms_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw, const void *dout,
                         const void *inp, const void *w, bool out, const float *rstd, int N, int C, int acc_dinp,
                         int acc_dw, void *scratch, size_t scratch_bytes)
{
    const char *op = "rmsnorm_bwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0) return vr_cu_bad(op, "bad shape");
    if (N > 0 && (!dout || !inp || !rstd || ((dinp || out) && !w))) return vr_cu_bad(op, "NULL pointer");
    size_t need = vr_cuda_rmsnorm_bwd_scratch_bytes(N, C);
    if (dw && N > 0 && (!scratch || scratch_bytes < need))
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes < %zu needed", op, scratch_bytes,
                        need);
    if (dinp && dw && N > 0) { /* both: one pass where the rows fit (layernorm_rows.cu) */
        int slices = rms_slices(N);
        vr_status st = VR_OK;
        if (vr__rms_rows_bwd(ctx, dt, dinp, (float *)scratch, dout, inp, w, out, rstd, N, C, &slices, acc_dinp, &st))
            return st ? st : VR_CU_DISPATCH(dt, rms_final_t, ctx, dw, (const float *)scratch, slices, C, acc_dw);
    }
    int vec = vec_ok(dt, (size_t)C, dinp, dout, inp, dinp || out ? w : NULL);
    return VR_LLAMA_DISPATCH(dt, vec, rms_bwd_t, ctx, dinp, dw, dout, inp, w, out, rstd, N, C, acc_dinp, acc_dw,
                             scratch);
}

extern "C" vr_status vr_cuda_rmsnorm_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                         const void *dout, const void *inp, const void *w, const float *rstd, int N,
                                         int C, int acc_dinp, int acc_dw, void *scratch, size_t scratch_bytes)
{
    return rms_bwd(ctx, dt, dinp, dw, dout, inp, w, false, rstd, N, C, acc_dinp, acc_dw, scratch, scratch_bytes);
}

extern "C" vr_status vr_cuda_rmsnorm_bwd_out(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                             const void *dout, const void *out, const void *w, const float *rstd,
                                             int N, int C, int acc_dinp, int acc_dw, void *scratch,
                                             size_t scratch_bytes)
{
    return rms_bwd(ctx, dt, dinp, dw, dout, out, w, true, rstd, N, C, acc_dinp, acc_dw, scratch, scratch_bytes);
}

/* ---------------------------------------------------------------- rope */

struct rope_freqs {
    float f[VR_CUDA_ROPE_MAX_HD / 2];
};

/* One thread per (position, head, W consecutive pairs). */
template <typename T, int W>
__global__ void k_rope(T *out, const T *inp, size_t n, int T_, int heads, int nrot, int hd, rope_freqs fr, float sign,
                       int acc)
{
    int h2 = hd / 2, per = h2 / W;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(g % per) * W;
        size_t r = g / per;
        int h = (int)(r % heads);
        size_t bt = r / heads;
        size_t off = bt * (size_t)heads * hd + (size_t)h * hd + i;
        float x1[W], x2[W], y1[W], y2[W];
        ldf(x1, inp + off);
        ldf(x2, inp + off + h2);
        float t = (float)(bt % T_);
#pragma unroll
        for (int k = 0; k < W; k++) {
            y1[k] = x1[k], y2[k] = x2[k];
            if (h < nrot) {
                float s, c;
                sincosf(t * fr.f[i + k], &s, &c); // float32 angle, as HF
                s *= sign;
                y1[k] = x1[k] * c - x2[k] * s;
                y2[k] = x2[k] * c + x1[k] * s;
            }
        }
        store2(out + off, out + off + h2, y1, y2, acc);
    }
}

template <typename T, int W>
static vr_status rope_t(const vr_cuda_ctx *ctx, void *out, const void *inp, int B, int T_, int NH, int NKV, int hd,
                        const rope_freqs &fr, float sign, int acc)
{
    int heads = NH + 2 * NKV;
    size_t n = (size_t)B * T_ * heads * (hd / 2 / W);
    k_rope<T, W><<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)out, (const T *)inp, n, T_, heads,
                                                                       NH + NKV, hd, fr, sign, acc);
    return vr_cu_launched(ctx, "rope");
}

extern "C" vr_status vr_cuda_rope(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp, int B, int T,
                                  int NH, int NKV, int hd, const float *inv_freq, float sign, int acc)
{
    const char *op = "rope";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (B < 0 || T < 0 || NH <= 0 || NKV <= 0 || hd <= 0 || hd % 2 || hd > VR_CUDA_ROPE_MAX_HD)
        return vr_cu_bad(op, "bad shape (head size even and at most 256)");
    if ((size_t)B * T == 0) return VR_OK;
    if (!out || !inp || !inv_freq) return vr_cu_bad(op, "NULL pointer");
    rope_freqs fr;
    for (int i = 0; i < hd / 2; i++) fr.f[i] = inv_freq[i];
    return VR_LLAMA_DISPATCH(dt, vec_ok(dt, (size_t)hd / 2, out, inp, NULL, NULL), rope_t, ctx, out, inp, B, T, NH,
                             NKV, hd, fr, sign, acc);
}

/* ---------------------------------------------------------------- swiglu */

/* One thread per W consecutive columns of a row. */
template <typename T, int W>
__global__ void k_swiglu_fwd(T *out, const T *inp, size_t n, int HI)
{
    int per = HI / W;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
        size_t row = g / per;
        int c = (int)(g % per) * W;
        const T *x = inp + row * 2 * HI;
        float a[W], u[W];
        ldf(a, x + c);
        ldf(u, x + HI + c);
#pragma unroll
        for (int k = 0; k < W; k++) a[k] = a[k] / (1.0f + expf(-a[k])) * u[k];
        stf(out + row * HI + c, a);
    }
}

template <typename T, int W>
__global__ void k_swiglu_bwd(T *dinp, const T *dout, const T *inp, size_t n, int HI, int acc)
{
    int per = HI / W;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
        size_t row = g / per;
        int c = (int)(g % per) * W;
        const T *x = inp + row * 2 * HI;
        T *dx = dinp + row * 2 * HI;
        float a[W], u[W], d[W], vg[W], vu[W];
        ldf(a, x + c);
        ldf(u, x + HI + c);
        ldf(d, dout + row * HI + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float s = 1.0f / (1.0f + expf(-a[k]));
            vg[k] = d[k] * u[k] * s * (1.0f + a[k] * (1.0f - s));
            vu[k] = d[k] * a[k] * s;
        }
        store2(dx + c, dx + HI + c, vg, vu, acc);
    }
}

template <typename T, int W>
static vr_status swiglu_fwd_t(const vr_cuda_ctx *ctx, void *out, const void *inp, int N, int HI)
{
    size_t n = (size_t)N * (HI / W);
    k_swiglu_fwd<T, W><<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)out, (const T *)inp, n, HI);
    return vr_cu_launched(ctx, "swiglu_fwd");
}

template <typename T, int W>
static vr_status swiglu_bwd_t(const vr_cuda_ctx *ctx, void *dinp, const void *dout, const void *inp, int N, int HI,
                              int acc)
{
    size_t n = (size_t)N * (HI / W);
    k_swiglu_bwd<T, W><<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)dinp, (const T *)dout,
                                                                             (const T *)inp, n, HI, acc);
    return vr_cu_launched(ctx, "swiglu_bwd");
}

extern "C" vr_status vr_cuda_swiglu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp, int N,
                                        int HI)
{
    VR_CU_CTX_OK(ctx, "swiglu_fwd");
    VR_CU_DT_OK(dt, "swiglu_fwd");
    if (N < 0 || HI <= 0) return vr_cu_bad("swiglu_fwd", "bad shape");
    if (N == 0) return VR_OK;
    if (!out || !inp) return vr_cu_bad("swiglu_fwd", "NULL pointer");
    return VR_LLAMA_DISPATCH(dt, vec_ok(dt, (size_t)HI, out, inp, NULL, NULL), swiglu_fwd_t, ctx, out, inp, N, HI);
}

extern "C" vr_status vr_cuda_swiglu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, const void *dout,
                                        const void *inp, int N, int HI, int acc)
{
    VR_CU_CTX_OK(ctx, "swiglu_bwd");
    VR_CU_DT_OK(dt, "swiglu_bwd");
    if (N < 0 || HI <= 0) return vr_cu_bad("swiglu_bwd", "bad shape");
    if (N == 0) return VR_OK;
    if (!dinp || !dout || !inp) return vr_cu_bad("swiglu_bwd", "NULL pointer");
    return VR_LLAMA_DISPATCH(dt, vec_ok(dt, (size_t)HI, dinp, dout, inp, NULL), swiglu_bwd_t, ctx, dinp, dout, inp, N,
                             HI, acc);
}
