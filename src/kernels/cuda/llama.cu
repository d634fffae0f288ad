/* vram — CUDA kernels of the Llama family: RMSNorm, rotary positions, SwiGLU (the CPU ops' contracts,
 * kernels/cpu/rmsnorm.c, rope.c, swiglu.c). fp32 maths in registers for every storage type.
 *
 * RMSNorm forward: one warp per row (sum of squares, then the scaled row). Backward: dinp one warp per
 * row, dinp = rstd (g w - x rstd mean_c(g w x rstd)); dw = sum_n g x rstd in two steps as LayerNorm's:
 * blocks over (64 columns) x (a slice of rows) write fp32 partial sums to scratch, then one thread per
 * column adds the slices in order (deterministic, no atomics).
 * Rope: one thread per (position, head, pair i): rotates (x[i], x[i + hd/2]) of the q and k heads by
 * t * inv_freq[i] (the inverse frequencies come from the host, vr_rope_inv_freq: one definition for the
 * CPU and CUDA), copies the v heads' pairs. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define VR_RMS_MAX_SLICES 128
#define VR_RMS_ROWS_PER_SLICE 128

static int rms_slices(int N)
{
    int s = (N + VR_RMS_ROWS_PER_SLICE - 1) / VR_RMS_ROWS_PER_SLICE;
    return s < 1 ? 1 : s > VR_RMS_MAX_SLICES ? VR_RMS_MAX_SLICES : s;
}

extern "C" size_t vr_cuda_rmsnorm_bwd_scratch_bytes(int N, int C)
{
    return (size_t)rms_slices(N) * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

/* ---------------------------------------------------------------- rmsnorm */

template <typename T>
__global__ void k_rms_fwd(T *out, float *rstd, const T *inp, const T *w, int N, int C, float eps)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = vr_tof(x[c]);
        s += v * v;
    }
    float r = rsqrtf(vr_warp_sum(s) / C + eps);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = vr_fromf<T>(vr_tof(x[c]) * r * vr_tof(w[c]));
    if (lane == 0) rstd[row] = r;
}

template <typename T>
static vr_status rms_fwd_t(const vr_cuda_ctx *ctx, void *out, float *rstd, const void *inp, const void *w, int N,
                           int C, float eps)
{
    k_rms_fwd<<<(N + 7) / 8, 256, 0, VR_STREAM(ctx)>>>((T *)out, rstd, (const T *)inp, (const T *)w, N, C, eps);
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
    return VR_CU_DISPATCH(dt, rms_fwd_t, ctx, out, rstd, inp, w, N, C, eps);
}

template <typename T>
__global__ void k_rms_bwd_dinp(T *dinp, const T *dout, const T *inp, const T *w, const float *rstd, int N, int C,
                               int acc)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float r = rstd[row], sgx = 0.0f;
    for (int c = lane; c < C; c += 32) sgx += vr_tof(g[c]) * vr_tof(w[c]) * vr_tof(x[c]) * r;
    sgx = vr_warp_sum(sgx) / C;
    T *d = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float v = r * (vr_tof(g[c]) * vr_tof(w[c]) - vr_tof(x[c]) * r * sgx);
        d[c] = vr_fromf<T>(acc ? vr_tof(d[c]) + v : v);
    }
}

/* Block (32, 8): lane owns columns c0 + lane and c0 + 32 + lane; 8 row lanes walk the slice. */
template <typename T>
__global__ void k_rms_bwd_partial(float *part, const T *dout, const T *inp, const float *rstd, int N, int C,
                                  int rows_per_slice)
{
    __shared__ float sw[8][64];
    int lane = threadIdx.x, ry = threadIdx.y;
    int c0 = blockIdx.x * 64, slice = blockIdx.y;
    int r0 = slice * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
    float aw[2] = {0.0f, 0.0f};
    for (int r = r0 + ry; r < r1; r += 8) {
        float rs = rstd[r];
        const T *x = inp + (size_t)r * C, *g = dout + (size_t)r * C;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int c = c0 + j * 32 + lane;
            if (c < C) aw[j] += vr_tof(g[c]) * vr_tof(x[c]) * rs;
        }
    }
    sw[ry][lane] = aw[0];
    sw[ry][32 + lane] = aw[1];
    __syncthreads();
    if (ry < 2) {
        int col = ry * 32 + lane, c = c0 + col;
        float tw = 0.0f;
        for (int y = 0; y < 8; y++) tw += sw[y][col];
        if (c < C) part[(size_t)slice * C + c] = tw;
    }
}

template <typename T>
__global__ void k_rms_bwd_final(T *dw, const float *part, int slices, int C, int acc)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f;
    for (int s = 0; s < slices; s++) tw += part[(size_t)s * C + c];
    dw[c] = vr_fromf<T>(acc ? vr_tof(dw[c]) + tw : tw);
}

template <typename T>
static vr_status rms_bwd_t(const vr_cuda_ctx *ctx, void *dinp, void *dw, const void *dout, const void *inp,
                           const void *w, const float *rstd, int N, int C, int acc_dinp, int acc_dw, void *scratch)
{
    cudaStream_t s = VR_STREAM(ctx);
    if (dinp && N > 0) {
        k_rms_bwd_dinp<<<(N + 7) / 8, 256, 0, s>>>((T *)dinp, (const T *)dout, (const T *)inp, (const T *)w, rstd,
                                                  N, C, acc_dinp);
        VR_CU_LAUNCHED(ctx, "rmsnorm_bwd");
    }
    if (dw) {
        int slices = N > 0 ? rms_slices(N) : 0;
        if (N > 0) {
            int rps = (N + slices - 1) / slices;
            dim3 grid((C + 63) / 64, slices), block(32, 8);
            k_rms_bwd_partial<<<grid, block, 0, s>>>((float *)scratch, (const T *)dout, (const T *)inp, rstd, N, C,
                                                    rps);
            VR_CU_LAUNCHED(ctx, "rmsnorm_bwd");
        }
        k_rms_bwd_final<<<(C + 255) / 256, 256, 0, s>>>((T *)dw, (const float *)scratch, slices, C, acc_dw);
        VR_CU_LAUNCHED(ctx, "rmsnorm_bwd");
    }
    return VR_OK;
}

extern "C" vr_status vr_cuda_rmsnorm_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                         const void *dout, const void *inp, const void *w, const float *rstd, int N,
                                         int C, int acc_dinp, int acc_dw, void *scratch, size_t scratch_bytes)
{
    const char *op = "rmsnorm_bwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0) return vr_cu_bad(op, "bad shape");
    if (N > 0 && (!dout || !inp || !rstd || (dinp && !w))) return vr_cu_bad(op, "NULL pointer");
    size_t need = vr_cuda_rmsnorm_bwd_scratch_bytes(N, C);
    if (dw && N > 0 && (!scratch || scratch_bytes < need))
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes < %zu needed", op, scratch_bytes,
                        need);
    return VR_CU_DISPATCH(dt, rms_bwd_t, ctx, dinp, dw, dout, inp, w, rstd, N, C, acc_dinp, acc_dw, scratch);
}

/* ---------------------------------------------------------------- rope */

struct rope_freqs {
    float f[VR_CUDA_ROPE_MAX_HD / 2];
};

template <typename T>
__global__ void k_rope(T *out, const T *inp, size_t n, int T_, int heads, int nrot, int hd, rope_freqs fr, float sign,
                       int acc)
{
    int h2 = hd / 2;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(g % h2);
        size_t r = g / h2;
        int h = (int)(r % heads);
        size_t bt = r / heads;
        size_t off = bt * (size_t)heads * hd + (size_t)h * hd + i;
        float x1 = vr_tof(inp[off]), x2 = vr_tof(inp[off + h2]), y1 = x1, y2 = x2;
        if (h < nrot) {
            float s, c;
            sincosf((float)(bt % T_) * fr.f[i], &s, &c); // float32 angle, as HF
            s *= sign;
            y1 = x1 * c - x2 * s;
            y2 = x2 * c + x1 * s;
        }
        if (acc) {
            y1 += vr_tof(out[off]);
            y2 += vr_tof(out[off + h2]);
        }
        out[off] = vr_fromf<T>(y1);
        out[off + h2] = vr_fromf<T>(y2);
    }
}

template <typename T>
static vr_status rope_t(const vr_cuda_ctx *ctx, void *out, const void *inp, int B, int T_, int NH, int NKV, int hd,
                        const rope_freqs &fr, float sign, int acc)
{
    int heads = NH + 2 * NKV;
    size_t n = (size_t)B * T_ * heads * (hd / 2);
    k_rope<<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)out, (const T *)inp, n, T_, heads, NH + NKV, hd,
                                                                 fr, sign, acc);
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
    return VR_CU_DISPATCH(dt, rope_t, ctx, out, inp, B, T, NH, NKV, hd, fr, sign, acc);
}

/* ---------------------------------------------------------------- swiglu */

template <typename T>
__global__ void k_swiglu_fwd(T *out, const T *inp, size_t n, int HI)
{
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
        size_t row = g / HI;
        int c = (int)(g % HI);
        const T *x = inp + row * 2 * HI;
        float a = vr_tof(x[c]), u = vr_tof(x[HI + c]);
        out[g] = vr_fromf<T>(a / (1.0f + expf(-a)) * u);
    }
}

template <typename T>
__global__ void k_swiglu_bwd(T *dinp, const T *dout, const T *inp, size_t n, int HI, int acc)
{
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
        size_t row = g / HI;
        int c = (int)(g % HI);
        const T *x = inp + row * 2 * HI;
        T *dx = dinp + row * 2 * HI;
        float a = vr_tof(x[c]), u = vr_tof(x[HI + c]), d = vr_tof(dout[g]);
        float s = 1.0f / (1.0f + expf(-a));
        float vg = d * u * s * (1.0f + a * (1.0f - s)), vu = d * a * s;
        if (acc) {
            vg += vr_tof(dx[c]);
            vu += vr_tof(dx[HI + c]);
        }
        dx[c] = vr_fromf<T>(vg);
        dx[HI + c] = vr_fromf<T>(vu);
    }
}

template <typename T>
static vr_status swiglu_fwd_t(const vr_cuda_ctx *ctx, void *out, const void *inp, int N, int HI)
{
    size_t n = (size_t)N * HI;
    k_swiglu_fwd<<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)out, (const T *)inp, n, HI);
    return vr_cu_launched(ctx, "swiglu_fwd");
}

template <typename T>
static vr_status swiglu_bwd_t(const vr_cuda_ctx *ctx, void *dinp, const void *dout, const void *inp, int N, int HI,
                              int acc)
{
    size_t n = (size_t)N * HI;
    k_swiglu_bwd<<<vr_grid_for(n, 256, ctx), 256, 0, VR_STREAM(ctx)>>>((T *)dinp, (const T *)dout, (const T *)inp, n,
                                                                       HI, acc);
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
    return VR_CU_DISPATCH(dt, swiglu_fwd_t, ctx, out, inp, N, HI);
}

extern "C" vr_status vr_cuda_swiglu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, const void *dout,
                                        const void *inp, int N, int HI, int acc)
{
    VR_CU_CTX_OK(ctx, "swiglu_bwd");
    VR_CU_DT_OK(dt, "swiglu_bwd");
    if (N < 0 || HI <= 0) return vr_cu_bad("swiglu_bwd", "bad shape");
    if (N == 0) return VR_OK;
    if (!dinp || !dout || !inp) return vr_cu_bad("swiglu_bwd", "NULL pointer");
    return VR_CU_DISPATCH(dt, swiglu_bwd_t, ctx, dinp, dout, inp, N, HI, acc);
}
