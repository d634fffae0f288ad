/* vram — CUDA layer normalization over the last dimension (torch.nn.LayerNorm, eps 1e-5).
 *
 * Rows of 16-byte aligned vectors that fit a warp's registers run the bandwidth kernels of
 * layernorm_rows.cu (one read of each row); the kernels here are the generic ones for the others:
 * Forward: one warp per row; mean, then the variance about it (two passes over the row, which
 * stays in L1), fp32 statistics saved for backward.
 * Backward: dinp one warp per row: dinp = rstd (g - mean_c(g) - xhat mean_c(g xhat)), g = dout w.
 * dw = sum_n dout xhat and db = sum_n dout in two steps: blocks over (64 columns) x (a slice of
 * rows) write fp32 partial sums to scratch, then 64 threads per column add the slices in a fixed order
 * (deterministic, no atomics; the final kernel serves the bandwidth kernels too); either of dw and db
 * may be NULL (a frozen weight or bias). */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/norm_math.h"
#include "kernels/cuda/layernorm_rows.cuh"
#include "kernels/scratch.h"

/* Benchmarks only: 1 runs the generic kernels even where the bandwidth ones apply (the old speed). */
static int ln_generic_only;
extern "C" void vr__cuda_layernorm_generic(int on) { ln_generic_only = on; }

/* Row slices of the generic kernels' partial sums: one per multiprocessor, fewer where the rows are few; the
 * scratch they take: kernels/scratch.h (the plan's size too). */
static int ln_slices(const vr_cuda_ctx *ctx, int N)
{
    int s = vr_scratch_ln_slices(N), sms = ctx->sm_count > 0 ? ctx->sm_count : 132;
    return s < sms ? s : sms;
}

extern "C" size_t vr_cuda_layernorm_bwd_scratch_bytes(int N, int C)
{
    return (size_t)vr_scratch_cuda_layernorm_bwd(N, C);
}

template <typename T>
__global__ void k_ln_fwd(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int N,
                         int C)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += vr_tof(x[c]);
    float m = vr_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = vr_tof(x[c]) - m;
        v += d * d;
    }
    float r = rsqrtf(vr_warp_sum(v) / C + VR_LN_EPS);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = vr_fromf<T>((vr_tof(x[c]) - m) * r * vr_tof(w[c]) + vr_tof(b[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

template <typename T>
static vr_status ln_fwd_t(const vr_cuda_ctx *ctx, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int N, int C)
{
    k_ln_fwd<<<(N + 7) / 8, 256, 0, VR_STREAM(ctx)>>>((T *)out, mean, rstd, (const T *)inp, (const T *)w,
                                                     (const T *)b, N, C);
    return vr_cu_launched(ctx, "layernorm_fwd");
}

extern "C" vr_status vr_cuda_layernorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                           float *mean, float *rstd, const void *inp, const void *w,
                                           const void *b, int N, int C)
{
    VR_CU_CTX_OK(ctx, "layernorm_fwd");
    VR_CU_DT_OK(dt, "layernorm_fwd");
    if (N < 0 || C <= 0) return vr_cu_bad("layernorm_fwd", "bad shape");
    if (N == 0) return VR_OK;
    if (!out || !mean || !rstd || !inp || !w || !b) return vr_cu_bad("layernorm_fwd", "NULL pointer");
    vr_status st = VR_OK;
    if (!ln_generic_only && vr__ln_rows_fwd(ctx, dt, out, mean, rstd, NULL, inp, NULL, w, b, N, C, &st)) return st;
    return VR_CU_DISPATCH(dt, ln_fwd_t, ctx, out, mean, rstd, inp, w, b, N, C);
}

/* OUT (every kernel here): inp is the forward's output y, x-hat = (y - b) / w (kernels/norm_math.h; b NULL:
 * none), mean unused. */
template <typename T, bool OUT>
__global__ void k_ln_bwd_dinp(T *dinp, const T *dout, const T *inp, const T *w, const T *b, const float *mean,
                              const float *rstd, int N, int C, int acc)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float m = OUT ? 0.0f : mean[row], r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float wg = vr_tof(g[c]) * vr_tof(w[c]);
        sg += wg;
        sgx += OUT ? vr_tof(g[c]) * (vr_tof(x[c]) - (b ? vr_tof(b[c]) : 0.0f)) : wg * (vr_tof(x[c]) - m) * r;
    }
    sg = vr_warp_sum(sg) / C;
    sgx = vr_warp_sum(sgx) / C;
    T *d = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xh = OUT ? (vr_tof(x[c]) - (b ? vr_tof(b[c]) : 0.0f)) * vr_norm_inv_w(vr_tof(w[c]))
                       : (vr_tof(x[c]) - m) * r;
        float v = r * (vr_tof(g[c]) * vr_tof(w[c]) - sg - xh * sgx);
        d[c] = vr_fromf<T>(acc ? vr_tof(d[c]) + v : v);
    }
}

/* The same with 16-byte vectors: lane handles VEC consecutive columns at a time (C % VEC == 0 and
 * 16-byte aligned rows). */
template <typename T, bool OUT>
__global__ void k_ln_bwd_dinp_vec(T *dinp, const T *dout, const T *inp, const T *w, const T *b, const float *mean,
                                  const float *rstd, int N, int C, int acc)
{
    constexpr int V = vr_vec<T>::N;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float m = OUT ? 0.0f : mean[row], r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    int nv = C / V;
    for (int i = lane; i < nv; i += 32) {
        vr_vec<T> xv = vr_ld16(x + i * V), gv = vr_ld16(g + i * V), wv = vr_ld16(w + i * V), bv;
        if (OUT && b) bv = vr_ld16(b + i * V);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float wg = vr_tof(gv.v[k]) * vr_tof(wv.v[k]);
            sg += wg;
            sgx += OUT ? vr_tof(gv.v[k]) * (vr_tof(xv.v[k]) - (b ? vr_tof(bv.v[k]) : 0.0f))
                       : wg * (vr_tof(xv.v[k]) - m) * r;
        }
    }
    sg = vr_warp_sum(sg) / C;
    sgx = vr_warp_sum(sgx) / C;
    T *d = dinp + (size_t)row * C;
    for (int i = lane; i < nv; i += 32) {
        vr_vec<T> xv = vr_ld16(x + i * V), gv = vr_ld16(g + i * V), wv = vr_ld16(w + i * V), bv, dv, o;
        if (OUT && b) bv = vr_ld16(b + i * V);
        if (acc) dv = vr_ld16(d + i * V);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float xh = OUT ? (vr_tof(xv.v[k]) - (b ? vr_tof(bv.v[k]) : 0.0f)) * vr_norm_inv_w(vr_tof(wv.v[k]))
                           : (vr_tof(xv.v[k]) - m) * r;
            float v = r * (vr_tof(gv.v[k]) * vr_tof(wv.v[k]) - sg - xh * sgx);
            o.v[k] = vr_fromf<T>(acc ? vr_tof(dv.v[k]) + v : v);
        }
        vr_st16(d + i * V, o);
    }
}

/* Block (32, 8) over 32 * VEC columns: lane owns VEC consecutive columns; 8 row lanes walk the slice. */
template <typename T, bool OUT>
__global__ void k_ln_bwd_partial_vec(float *part, const T *dout, const T *inp, const T *w, const T *b,
                                     const float *mean, const float *rstd, int N, int C, int rows_per_slice)
{
    constexpr int V = vr_vec<T>::N, COLS = 32 * V;
    __shared__ float sw[8][COLS + 1], sb[8][COLS + 1];
    int lane = threadIdx.x, ry = threadIdx.y;
    int c0 = blockIdx.x * COLS + lane * V, slice = blockIdx.y;
    int r0 = slice * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
    float aw[V], ab[V], bc[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        aw[k] = ab[k] = 0.0f;
        bc[k] = OUT && b && c0 < C ? vr_tof(b[c0 + k]) : 0.0f;
    }
    if (c0 < C) {
        for (int r = r0 + ry; r < r1; r += 8) {
            float m = OUT ? 0.0f : mean[r], rs = OUT ? 1.0f : rstd[r]; /* OUT: dout (y - b), scaled by 1 / w below */
            vr_vec<T> xv = vr_ld16(inp + (size_t)r * C + c0), gv = vr_ld16(dout + (size_t)r * C + c0);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float gg = vr_tof(gv.v[k]);
                aw[k] += gg * (vr_tof(xv.v[k]) - m - bc[k]) * rs;
                ab[k] += gg;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
        if (OUT && c0 < C) aw[k] *= vr_norm_inv_w(vr_tof(w[c0 + k]));
        sw[ry][lane * V + k] = aw[k];
        sb[ry][lane * V + k] = ab[k];
    }
    __syncthreads();
    for (int col = ry * 32 + lane; col < COLS; col += 256) {
        int c = blockIdx.x * COLS + col;
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < 8; y++) {
            tw += sw[y][col];
            tb += sb[y][col];
        }
        if (c < C) {
            part[(size_t)slice * 2 * C + c] = tw;
            part[(size_t)slice * 2 * C + C + c] = tb;
        }
    }
}

/* Block (32, 8): lane owns columns c0 + lane and c0 + 32 + lane; 8 row lanes walk the slice. */
template <typename T, bool OUT>
__global__ void k_ln_bwd_partial(float *part, const T *dout, const T *inp, const T *w, const T *b,
                                 const float *mean, const float *rstd, int N, int C, int rows_per_slice)
{
    __shared__ float sw[8][64], sb[8][64];
    int lane = threadIdx.x, ry = threadIdx.y;
    int c0 = blockIdx.x * 64, slice = blockIdx.y;
    int r0 = slice * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
    float aw[2] = {0.0f, 0.0f}, ab[2] = {0.0f, 0.0f}, bc[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int c = c0 + j * 32 + lane;
        bc[j] = OUT && b && c < C ? vr_tof(b[c]) : 0.0f;
    }
    for (int r = r0 + ry; r < r1; r += 8) {
        float m = OUT ? 0.0f : mean[r], rs = OUT ? 1.0f : rstd[r]; /* OUT: dout (y - b), scaled by 1 / w below */
        const T *x = inp + (size_t)r * C, *g = dout + (size_t)r * C;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int c = c0 + j * 32 + lane;
            if (c < C) {
                float gv = vr_tof(g[c]);
                aw[j] += gv * (vr_tof(x[c]) - m - bc[j]) * rs;
                ab[j] += gv;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int c = c0 + j * 32 + lane;
        if (OUT && c < C) aw[j] *= vr_norm_inv_w(vr_tof(w[c]));
        sw[ry][j * 32 + lane] = aw[j];
        sb[ry][j * 32 + lane] = ab[j];
    }
    __syncthreads();
    if (ry < 2) {
        int col = ry * 32 + lane, c = c0 + col;
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < 8; y++) {
            tw += sw[y][col];
            tb += sb[y][col];
        }
        if (c < C) {
            part[(size_t)slice * 2 * C + c] = tw;
            part[(size_t)slice * 2 * C + C + c] = tb;
        }
    }
}

/* Block (8, 64): 8 columns, 64 slice lanes; lane y adds slices y, y + 64, ... in order, then the lanes' sums
 * meet in a fixed tree (a fixed order: deterministic; the slices' loads in flight side by side, and at 1024
 * columns 128 blocks where 32 columns a block made 32). */
#define VR_LN_FINAL_X 8
#define VR_LN_FINAL_Y 64
/* ds (NULL: none) the same way from the slices' column sums of dinp (psum, slice s's at s C), acc_ds. */
template <typename T>
__global__ void __launch_bounds__(VR_LN_FINAL_X * VR_LN_FINAL_Y) k_ln_bwd_final(T *dw, T *db, const float *part,
                                                                               int slices, int C, int acc, T *ds,
                                                                               const float *psum, int acc_ds)
{
    __shared__ float sw[VR_LN_FINAL_Y][VR_LN_FINAL_X], sb[VR_LN_FINAL_Y][VR_LN_FINAL_X],
        ss[VR_LN_FINAL_Y][VR_LN_FINAL_X];
    int x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * VR_LN_FINAL_X + x;
    float tw = 0.0f, tb = 0.0f, ts = 0.0f;
    if (c < C)
        for (int s = y; s < slices; s += VR_LN_FINAL_Y) {
            tw += part[(size_t)s * 2 * C + c];
            tb += part[(size_t)s * 2 * C + C + c];
            if (ds) ts += psum[(size_t)s * C + c];
        }
    sw[y][x] = tw;
    sb[y][x] = tb;
    ss[y][x] = ts;
    for (int h = VR_LN_FINAL_Y / 2; h > 0; h >>= 1) {
        __syncthreads();
        if (y < h) {
            sw[y][x] += sw[y + h][x];
            sb[y][x] += sb[y + h][x];
            ss[y][x] += ss[y + h][x];
        }
    }
    if (y || c >= C) return;
    tw = sw[0][x], tb = sb[0][x], ts = ss[0][x];
    if (dw) dw[c] = vr_fromf<T>(acc ? vr_tof(dw[c]) + tw : tw);
    if (db) db[c] = vr_fromf<T>(acc ? vr_tof(db[c]) + tb : tb);
    if (ds) ds[c] = vr_fromf<T>(acc_ds ? vr_tof(ds[c]) + ts : ts);
}

template <typename T>
static vr_status ln_bwd_final_t(const vr_cuda_ctx *ctx, void *dw, void *db, const float *part, int slices, int C,
                                int acc, void *ds, const float *psum, int acc_ds)
{
    dim3 grid((C + VR_LN_FINAL_X - 1) / VR_LN_FINAL_X), block(VR_LN_FINAL_X, VR_LN_FINAL_Y);
    k_ln_bwd_final<<<grid, block, 0, VR_STREAM(ctx)>>>((T *)dw, (T *)db, part, slices, C, acc, (T *)ds, psum, acc_ds);
    return vr_cu_launched(ctx, "layernorm_bwd");
}

template <typename T, bool OUT>
static vr_status ln_bwd_t(const vr_cuda_ctx *ctx, void *dinp, void *dw, void *db, const void *dout,
                          const void *inp, const void *w, const void *b, const float *mean, const float *rstd, int N,
                          int C, int acc_dinp, int acc_dparam, void *scratch)
{
    cudaStream_t s = VR_STREAM(ctx);
    int vec = C % vr_vec<T>::N == 0 && vr_aligned16(dout) && vr_aligned16(inp) &&
              (!dinp || (vr_aligned16(dinp) && vr_aligned16(w))) && (!OUT || !b || vr_aligned16(b));
    const T *wp = (const T *)w, *bp = (const T *)b;
    if (dinp && N > 0) {
        if (vec)
            k_ln_bwd_dinp_vec<T, OUT><<<(N + 7) / 8, 256, 0, s>>>((T *)dinp, (const T *)dout, (const T *)inp, wp, bp,
                                                                 mean, rstd, N, C, acc_dinp);
        else
            k_ln_bwd_dinp<T, OUT><<<(N + 7) / 8, 256, 0, s>>>((T *)dinp, (const T *)dout, (const T *)inp, wp, bp,
                                                             mean, rstd, N, C, acc_dinp);
        VR_CU_LAUNCHED(ctx, "layernorm_bwd");
    }
    if (dw || db) {
        int slices = ln_slices(ctx, N);
        int rps = N > 0 ? (N + slices - 1) / slices : 0;
        if (N > 0) {
            dim3 block(32, 8);
            if (vec) {
                constexpr int COLS = 32 * vr_vec<T>::N;
                dim3 grid((C + COLS - 1) / COLS, slices);
                k_ln_bwd_partial_vec<T, OUT><<<grid, block, 0, s>>>((float *)scratch, (const T *)dout, (const T *)inp,
                                                                   wp, bp, mean, rstd, N, C, rps);
            } else {
                dim3 grid((C + 63) / 64, slices);
                k_ln_bwd_partial<T, OUT><<<grid, block, 0, s>>>((float *)scratch, (const T *)dout, (const T *)inp, wp,
                                                               bp, mean, rstd, N, C, rps);
            }
            VR_CU_LAUNCHED(ctx, "layernorm_bwd");
        } else {
            slices = 0;
        }
        VR_CU_TRY(ln_bwd_final_t<T>(ctx, dw, db, (const float *)scratch, slices, C, acc_dparam, NULL, NULL, 0));
    }
    return VR_OK;
}

template <typename T>
static vr_status ln_bwd_any_t(const vr_cuda_ctx *ctx, void *dinp, void *dw, void *db, const void *dout,
                              const void *inp, const void *w, const void *b, bool out, const float *mean,
                              const float *rstd, int N, int C, int acc_dinp, int acc_dparam, void *scratch)
{
    return out ? ln_bwd_t<T, true>(ctx, dinp, dw, db, dout, inp, w, b, mean, rstd, N, C, acc_dinp, acc_dparam, scratch)
               : ln_bwd_t<T, false>(ctx, dinp, dw, db, dout, inp, w, b, mean, rstd, N, C, acc_dinp, acc_dparam,
                                    scratch);
}

/* Both sources: out, inp is the forward's output (b its bias or NULL, mean unused). */
static vr_status ln_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw, void *db, void *dsum,
                        const void *dout, const void *inp, const void *w, const void *b, bool out, const float *mean,
                        const float *rstd, int N, int C, int acc_dinp, int acc_dparam, int acc_dsum, void *scratch,
                        size_t scratch_bytes)
{
    const char *op = "layernorm_bwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0) return vr_cu_bad(op, "bad shape");
    if (N > 0 && (!dout || !inp || (!out && !mean) || !rstd || ((dinp || out) && !w)))
        return vr_cu_bad(op, "NULL pointer");
    if ((dw || db) && N > 0 && (!scratch || scratch_bytes < vr_cuda_layernorm_bwd_scratch_bytes(N, C)))
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes < %zu needed", op,
                        scratch_bytes, vr_cuda_layernorm_bwd_scratch_bytes(N, C));
    /* dsum rides on the bandwidth kernel, and is written by the final kernel only (after the inputs are read:
     * it may be on their bytes) */
    if (dsum && (!dinp || !(dw || db) || N == 0 || ln_generic_only))
        return VR_ERR_UNSUPPORTED;
    if (!ln_generic_only && N > 0 && (dinp || dw || db)) {
        int slices = vr_scratch_ln_slices(N); /* the most the scratch holds; the kernel may take fewer */
        float *part = dw || db ? (float *)scratch : NULL, *psum = dsum ? part + (size_t)slices * 2 * C : NULL;
        vr_status st = VR_OK;
        if (vr__ln_rows_bwd(ctx, dt, dinp, part, psum, dout, inp, w, b, out, mean, rstd, N, C, &slices, acc_dinp,
                            &st)) {
            if (st || !part) return st;
            return VR_CU_DISPATCH(dt, ln_bwd_final_t, ctx, dw, db, part, slices, C, acc_dparam, dsum, psum, acc_dsum);
        }
    }
    if (dsum) /* the bandwidth kernel does not take this shape or alignment: nothing was queued */
        return VR_ERR_UNSUPPORTED;
    return VR_CU_DISPATCH(dt, ln_bwd_any_t, ctx, dinp, dw, db, dout, inp, w, b, out, mean, rstd, N, C, acc_dinp,
                          acc_dparam, scratch);
}

extern "C" vr_status vr_cuda_layernorm_bwd_sum(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                               void *db, void *dsum, const void *dout, const void *inp,
                                               const void *w, const float *mean, const float *rstd, int N, int C,
                                               int acc_dinp, int acc_dparam, int acc_dsum, void *scratch,
                                               size_t scratch_bytes)
{
    return ln_bwd(ctx, dt, dinp, dw, db, dsum, dout, inp, w, NULL, false, mean, rstd, N, C, acc_dinp, acc_dparam,
                  acc_dsum, scratch, scratch_bytes);
}

extern "C" vr_status vr_cuda_layernorm_bwd_out(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                               void *db, void *dsum, const void *dout, const void *out,
                                               const void *w, const void *b, const float *rstd, int N, int C,
                                               int acc_dinp, int acc_dparam, int acc_dsum, void *scratch,
                                               size_t scratch_bytes)
{
    return ln_bwd(ctx, dt, dinp, dw, db, dsum, dout, out, w, b, true, NULL, rstd, N, C, acc_dinp, acc_dparam,
                  acc_dsum, scratch, scratch_bytes);
}

extern "C" vr_status vr_cuda_layernorm_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                           void *db, const void *dout, const void *inp, const void *w,
                                           const float *mean, const float *rstd, int N, int C, int acc_dinp,
                                           int acc_dparam, void *scratch, size_t scratch_bytes)
{
    return vr_cuda_layernorm_bwd_sum(ctx, dt, dinp, dw, db, NULL, dout, inp, w, mean, rstd, N, C, acc_dinp,
                                     acc_dparam, 0, scratch, scratch_bytes);
}

extern "C" vr_status vr_cuda_add_layernorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *res, void *out,
                                               float *mean, float *rstd, const void *a, const void *b,
                                               const void *w, const void *bias, int N, int C)
{
    const char *op = "add_layernorm_fwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (N < 0 || C <= 0) return vr_cu_bad(op, "bad shape");
    if (N == 0) return VR_OK;
    if (!res || !out || !mean || !rstd || !a || !b || !w || !bias) return vr_cu_bad(op, "NULL pointer");
    vr_status st = VR_OK;
    if (!ln_generic_only && vr__ln_rows_fwd(ctx, dt, out, mean, rstd, res, a, b, w, bias, N, C, &st)) return st;
    /* the same results in two passes */
    VR_CU_TRY(vr_cuda_add_fwd(ctx, dt, res, a, b, (size_t)N * (size_t)C));
    return vr_cuda_layernorm_fwd(ctx, dt, out, mean, rstd, res, w, bias, N, C);
}
