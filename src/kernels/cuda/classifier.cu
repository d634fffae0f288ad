/* vram — CUDA fused classifier (tied head + softmax cross-entropy, forward and backward in one op) and
 * plain softmax cross-entropy over given logits (small V).
 *
 * The classifier works through the rows in chunks so that the full (N,V) logits never exist:
 *   1. logits(R,Vw) = x(R,C) wte(Vw,C)^T, cuBLASLt, into the scratch (rows padded to Vw rounded up
 *      to 64 elements, so every row starts 16-byte aligned). Vw >= V is wte's row count: GPT-2's
 *      50257 real tokens padded to 50304 make one fast product where 50257 is slow (an odd V is
 *      split into V rounded down to 128 and the rest);
 *   2. one block per row: max and normaliser over the V real logits (online, fp32, 16-byte loads),
 *      the loss log(sum) + max - z[target] in fp32, and when training dlogits = (softmax - onehot)
 *      dloss_scale written over the logits in place, 0 in the padded columns V..Vw-1;
 *   3. dx(R,C) (=|+=) dlogits wte and dwte(Vw,C) (=|+=) dlogits^T x, cuBLASLt (dwte accumulates over
 *      the chunks in its own dtype: with bf16, one rounding per chunk; its padded rows get 0). */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/scratch.h"

#define VR_CLS_THREADS 1024

/* A row of logits padded to 64 elements, and the recommended rows: kernels/scratch.h (the plan's size). */
static size_t cls_vp(int V) { return (size_t)vr_scratch_cuda_classifier_vp(V); }

extern "C" int vr_cuda_classifier_chunk_rows(size_t scratch_bytes, int V, vr_cuda_dtype dt)
{
    size_t row = cls_vp(V) * vr_cuda_dtype_size(dt);
    if (V <= 0 || row == 0) return 0;
    size_t r = scratch_bytes / row;
    return r > (size_t)1 << 30 ? 1 << 30 : (int)r;
}

extern "C" size_t vr_cuda_classifier_scratch_bytes(int N, int V, vr_cuda_dtype dt)
{
    return (size_t)vr_scratch_cuda_classifier(N, V, (int64_t)vr_cuda_dtype_size(dt), 0);
}

/* Block-wide online max/normaliser over z[0..V), then loss and (grad) in-place dlogits.
 * z is 16-byte aligned. */
template <typename T>
__global__ void __launch_bounds__(VR_CLS_THREADS) k_xent_rows(float *losses, T *logits, size_t ld, T *dst,
                                                            size_t ld_dst, const int32_t *targets, int V,
                                                            int Vw, float dloss_scale, int grad, int r0)
{
    __shared__ float sh[32];
    constexpr int VEC = vr_vec<T>::N;
    int row = blockIdx.x;
    T *z = logits + (size_t)row * ld;
    int t = targets[r0 + row];
    float zt = (t >= 0 && t < V) ? vr_tof(z[t]) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    int nv = V / VEC;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        vr_vec<T> v = vr_ld16(z + (size_t)i * VEC);
        float bm = m;
#pragma unroll
        for (int k = 0; k < VEC; k++) bm = fmaxf(bm, vr_tof(v.v[k]));
        s *= __expf(m - bm);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += __expf(vr_tof(v.v[k]) - bm);
        m = bm;
    }
    for (int i = nv * VEC + threadIdx.x; i < V; i += blockDim.x) {
        float x = vr_tof(z[i]);
        float bm = fmaxf(m, x);
        s = s * __expf(m - bm) + __expf(x - bm);
        m = bm;
    }
    float M = vr_block_max(m, sh);
    float S = vr_block_sum(m == -INFINITY ? 0.0f : s * __expf(m - M), sh);
    if (threadIdx.x == 0) losses[r0 + row] = t < 0 ? 0.0f : logf(S) + M - zt;
    if (!grad) return;
    T *d = dst + (size_t)row * ld_dst;
    float g = t < 0 ? 0.0f : dloss_scale;
    float k = g / S;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        vr_vec<T> v = vr_ld16(z + (size_t)i * VEC), r;
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            int col = i * VEC + e;
            float p = __expf(vr_tof(v.v[e]) - M) * k;
            r.v[e] = vr_fromf<T>(col == t ? p - g : p);
        }
        vr_st16(d + (size_t)i * VEC, r);
    }
    for (int i = nv * VEC + threadIdx.x; i < V; i += blockDim.x) {
        float p = __expf(vr_tof(z[i]) - M) * k;
        d[i] = vr_fromf<T>(i == t ? p - g : p);
    }
    for (int i = V + threadIdx.x; i < Vw; i += blockDim.x) d[i] = vr_fromf<T>(0.0f);
}

template <typename T>
static vr_status xent_rows_t(const vr_cuda_ctx *ctx, float *losses, void *logits, size_t ld, int rows,
                             const int32_t *targets, int V, int Vw, float dloss_scale, int grad, int r0,
                             const char *op)
{
    k_xent_rows<T><<<rows, VR_CLS_THREADS, 0, VR_STREAM(ctx)>>>(losses, (T *)logits, ld, (T *)logits, ld, targets,
                                                               V, Vw, dloss_scale, grad, r0);
    return vr_cu_launched(ctx, op);
}

extern "C" vr_status vr_cuda_classifier(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *losses, void *dx,
                                        void *dwte, const void *x, const void *wte, const int32_t *targets, int N,
                                        int C, int V, int Vw, float dloss_scale, void *scratch, size_t scratch_bytes,
                                        int acc_dx, int acc_dwte)
{
    const char *op = "classifier";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0 || V <= 0 || Vw < V) return vr_cu_bad(op, "bad shape");
    if (!wte || (N > 0 && (!losses || !x || !targets))) return vr_cu_bad(op, "NULL pointer");
    int R = vr_cuda_classifier_chunk_rows(scratch_bytes, Vw, dt);
    if (!scratch || R < 1)
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes holds no row of %zu bytes", op,
                        scratch_bytes, cls_vp(Vw) * vr_cuda_dtype_size(dt));
    if (!vr_aligned16(scratch)) return vr_cu_bad(op, "scratch not 16-byte aligned");
    int grad = dx || dwte;
    size_t esz = vr_cuda_dtype_size(dt), vp = cls_vp(Vw);
    if (dwte && !acc_dwte && N == 0) return vr_cuda_zero(ctx, dt, dwte, (size_t)Vw * C);
    // cuBLASLt is slow when the vocabulary dimension is odd (50257): each product is split into the
    // first V1 = Vw rounded down to 128 vocabulary entries and the small rest
    int V1 = Vw >= 256 ? Vw / 128 * 128 : Vw, V2 = Vw - V1;
    const char *wte2 = (const char *)wte + (size_t)V1 * C * esz;
    char *sc2 = (char *)scratch + (size_t)V1 * esz;
    for (int r0 = 0; r0 < N; r0 += R) {
        int rn = N - r0 < R ? N - r0 : R;
        const void *xc = (const char *)x + (size_t)r0 * C * esz;
        // logits^T(V,rn) = wte (V,C) x^T(C,rn), column-major
        VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, scratch, wte, xc, V1, rn, C, C, C, (int)vp, 1, 0, 1.0f, 0.0f, 0, NULL,
                                  NULL, 0, op));
        if (V2)
            VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, sc2, wte2, xc, V2, rn, C, C, C, (int)vp, 1, 0, 1.0f, 0.0f, 0, NULL,
                                      NULL, 0, op));
        VR_CU_TRY(VR_CU_DISPATCH(dt, xent_rows_t, ctx, losses, scratch, vp, rn, targets, V, Vw, dloss_scale, grad,
                                 r0, op));
        if (dx) { // dx^T(C,rn) = wte^T(C,V) dlogits^T(V,rn)
            void *dxc = (char *)dx + (size_t)r0 * C * esz;
            VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, dxc, wte, scratch, C, rn, V1, C, (int)vp, C, 0, 0, 1.0f,
                                      acc_dx ? 1.0f : 0.0f, 0, NULL, NULL, 0, op));
            if (V2)
                VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, dxc, wte2, sc2, C, rn, V2, C, (int)vp, C, 0, 0, 1.0f, 1.0f, 0, NULL,
                                          NULL, 0, op));
        }
        if (dwte) { // dwte^T(C,V) (+)= x^T(C,rn) dlogits(rn,V)
            float beta = (r0 == 0 && !acc_dwte) ? 0.0f : 1.0f;
            VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, dwte, xc, scratch, C, V1, rn, C, (int)vp, C, 0, 1, 1.0f, beta, 0,
                                      NULL, NULL, 0, op));
            if (V2)
                VR_CU_TRY(vr_cu_lt_matmul(ctx, dt, (char *)dwte + (size_t)V1 * C * esz, xc, sc2, C, V2, rn, C,
                                          (int)vp, C, 0, 1, 1.0f, beta, 0, NULL, NULL, 0, op));
        }
    }
    return VR_OK;
}

/* ---------------------------------------------------------------- softmax cross-entropy (small V) */

/* probs row = softmax(logits row); loss. Rows need not be aligned: scalar loads. */
template <typename T>
__global__ void k_softmax_xent_fwd(float *losses, T *probs, const T *logits, const int32_t *targets, int V)
{
    __shared__ float sh[32];
    int row = blockIdx.x;
    const T *z = logits + (size_t)row * V;
    T *p = probs + (size_t)row * V;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, vr_tof(z[i]));
    m = vr_block_max(m, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += __expf(vr_tof(z[i]) - m);
    s = vr_block_sum(s, sh);
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = vr_fromf<T>(__expf(vr_tof(z[i]) - m) * inv);
    int t = targets[row];
    if (threadIdx.x == 0) losses[row] = t < 0 ? 0.0f : logf(s) + m - vr_tof(z[t]);
}

template <typename T>
__global__ void k_softmax_xent_bwd(T *dlogits, const float *dlosses, float dloss_scale, const T *probs,
                                   const int32_t *targets, int V, int acc)
{
    int row = blockIdx.x;
    int t = targets[row];
    float g = t < 0 ? 0.0f : dloss_scale * (dlosses ? dlosses[row] : 1.0f);
    const T *p = probs + (size_t)row * V;
    T *d = dlogits + (size_t)row * V;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = vr_tof(p[i]) * g - (i == t ? g : 0.0f);
        d[i] = vr_fromf<T>(acc ? vr_tof(d[i]) + v : v);
    }
}

static int row_threads(int V)
{
    int t = (V + 31) / 32 * 32;
    return t > 1024 ? 1024 : t < 32 ? 32 : t;
}

template <typename T>
static vr_status sx_fwd_t(const vr_cuda_ctx *ctx, float *losses, void *probs, const void *logits,
                          const int32_t *targets, int N, int V)
{
    k_softmax_xent_fwd<T><<<N, row_threads(V), 0, VR_STREAM(ctx)>>>(losses, (T *)probs, (const T *)logits, targets, V);
    return vr_cu_launched(ctx, "softmax_xent_fwd");
}

template <typename T>
static vr_status sx_bwd_t(const vr_cuda_ctx *ctx, void *dlogits, const float *dlosses, float dloss_scale,
                          const void *probs, const int32_t *targets, int N, int V, int acc)
{
    k_softmax_xent_bwd<T><<<N, row_threads(V), 0, VR_STREAM(ctx)>>>((T *)dlogits, dlosses, dloss_scale,
                                                                   (const T *)probs, targets, V, acc);
    return vr_cu_launched(ctx, "softmax_xent_bwd");
}

extern "C" vr_status vr_cuda_softmax_xent_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *losses, void *probs,
                                              const void *logits, const int32_t *targets, int N, int V)
{
    VR_CU_CTX_OK(ctx, "softmax_xent_fwd");
    VR_CU_DT_OK(dt, "softmax_xent_fwd");
    if (N < 0 || V <= 0) return vr_cu_bad("softmax_xent_fwd", "bad shape");
    if (N == 0) return VR_OK;
    if (!losses || !probs || !logits || !targets) return vr_cu_bad("softmax_xent_fwd", "NULL pointer");
    return VR_CU_DISPATCH(dt, sx_fwd_t, ctx, losses, probs, logits, targets, N, V);
}

extern "C" vr_status vr_cuda_softmax_xent_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dlogits,
                                              const float *dlosses, float dloss_scale, const void *probs,
                                              const int32_t *targets, int N, int V, int acc)
{
    VR_CU_CTX_OK(ctx, "softmax_xent_bwd");
    VR_CU_DT_OK(dt, "softmax_xent_bwd");
    if (N < 0 || V <= 0) return vr_cu_bad("softmax_xent_bwd", "bad shape");
    if (N == 0) return VR_OK;
    if (!dlogits || !probs || !targets) return vr_cu_bad("softmax_xent_bwd", "NULL pointer");
    return VR_CU_DISPATCH(dt, sx_bwd_t, ctx, dlogits, dlosses, dloss_scale, probs, targets, N, V, acc);
}
