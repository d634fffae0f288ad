/* vram — CUDA token + position embedding (GPT-2 encoder), forward and a deterministic backward.
 *
 * Backward for dwte: tokens repeat, so rows of dwte collide. Instead of float atomics (whose order,
 * and so whose rounding, changes from run to run) the row indices are sorted by token with a stable
 * radix sort (CUB, on the stream), then one block per run of equal tokens sums that token's dout rows
 * in a fixed order (row groups, then the groups in order), in fp32, and adds the sum into dwte once. dwpe: one thread per (t, channel) sums
 * over the batch. */
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/scratch.h"

template <typename T>
__global__ void k_emb_fwd(T *out, const int32_t *tok, const T *wte, const T *wpe, int B, int T_, int C)
{
    size_t n = (size_t)B * T_ * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        size_t r = i / (size_t)C;
        int c = (int)(i - r * (size_t)C), t = (int)(r % (size_t)T_);
        out[i] = vr_fromf<T>(vr_tof(wte[(size_t)tok[r] * C + c]) + (wpe ? vr_tof(wpe[(size_t)t * C + c]) : 0.0f));
    }
}

template <typename T>
static vr_status emb_fwd_t(const vr_cuda_ctx *ctx, void *out, const int32_t *tok, const void *wte,
                           const void *wpe, int B, int T_, int C)
{
    k_emb_fwd<<<vr_grid_for((size_t)B * T_ * C, 256, ctx), 256, 0, VR_STREAM(ctx)>>>(
        (T *)out, tok, (const T *)wte, (const T *)wpe, B, T_, C);
    return vr_cu_launched(ctx, "embedding_fwd");
}

extern "C" vr_status vr_cuda_embedding_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                           const int32_t *tok, const void *wte, const void *wpe, int B,
                                           int T, int C)
{
    VR_CU_CTX_OK(ctx, "embedding_fwd");
    VR_CU_DT_OK(dt, "embedding_fwd");
    if (B < 0 || T < 0 || C <= 0) return vr_cu_bad("embedding_fwd", "bad shape");
    if ((size_t)B * T == 0) return VR_OK;
    if (!out || !tok || !wte) return vr_cu_bad("embedding_fwd", "NULL pointer"); /* wpe NULL: no positions */
    return VR_CU_DISPATCH(dt, emb_fwd_t, ctx, out, tok, wte, wpe, B, T, C);
}

/* ---------------------------------------------------------------- backward */

static int key_bits(int V)
{
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) < (int64_t)V) b++;
    return b;
}

/* The scratch: the sort's four key/value arrays, then CUB's temporary storage (histograms and look-back
 * state), sized by kernels/scratch.h for any vocabulary (the plan's size too); emb_bwd_t checks CUB's own
 * figure against what is left. */
extern "C" size_t vr_cuda_embedding_bwd_scratch_bytes(int B, int T, int V)
{
    (void)V;
    return (size_t)vr_scratch_cuda_embedding_bwd(B, T);
}

__global__ void k_emb_keys(int32_t *keys, int32_t *vals, const int32_t *tok, int R)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < R) {
        keys[i] = tok[i];
        vals[i] = i;
    }
}

/* dwte: block b takes the runs of equal tokens that start at sorted positions [b*S, b*S+S). A run is
 * summed by the whole block: threadIdx.x walks the columns (VEC elements per load), threadIdx.y is
 * one of G row groups taking rows j = start + y, start + y + G, ...; the G partial sums (fp32, in
 * shared memory) are then added in group order and into dwte once. A long run (a frequent token:
 * thousands of rows) is thus spread over the block instead of one thread per column walking it; the
 * order of every addition is fixed, so the result is run-to-run deterministic. */
#define VR_EMB_SEG 8

template <typename T, int VEC>
__device__ __forceinline__ void emb_load_add(float *acc, const T *src)
{
    if constexpr (VEC * sizeof(T) == 16) {
        uint4 u = *(const uint4 *)src;
        const T *x = (const T *)&u;
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] += vr_tof(x[k]);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] += vr_tof(src[k]);
    }
}

template <typename T, int VEC>
__global__ void k_emb_dwte(T *dwte, const T *dout, const int32_t *keys, const int32_t *rows, int R, int C)
{
    extern __shared__ float part[]; /* [G][C] */
    __shared__ int s_end;
    const int G = blockDim.y, nt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int ncol = C / VEC;
    int p_end = (blockIdx.x + 1) * VR_EMB_SEG < R ? (blockIdx.x + 1) * VR_EMB_SEG : R;
    for (int p = blockIdx.x * VR_EMB_SEG; p < p_end; p++) {
        int key = keys[p];
        if (p > 0 && keys[p - 1] == key) continue; /* not a run start: uniform over the block */
        if (tid == 0) s_end = R;
        __syncthreads();
        for (int base = p + 1; base < R; base += nt) { /* the run's end: keys are sorted */
            int j = base + tid;
            if (j < R && keys[j] != key) atomicMin(&s_end, j);
            __syncthreads();
            int e = s_end;
            __syncthreads();
            if (e < R) break;
        }
        int end = s_end;
        for (int cv = threadIdx.x; cv < ncol; cv += blockDim.x) {
            float acc[VEC];
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
            int j = p + threadIdx.y;
            for (; j + 3 * G < end; j += 4 * G) { /* four rows' loads in flight */
                int r0 = rows[j], r1 = rows[j + G], r2 = rows[j + 2 * G], r3 = rows[j + 3 * G];
                float a1[VEC], a2[VEC], a3[VEC];
#pragma unroll
                for (int k = 0; k < VEC; k++) a1[k] = a2[k] = a3[k] = 0.0f;
                emb_load_add<T, VEC>(acc, dout + (size_t)r0 * C + (size_t)cv * VEC);
                emb_load_add<T, VEC>(a1, dout + (size_t)r1 * C + (size_t)cv * VEC);
                emb_load_add<T, VEC>(a2, dout + (size_t)r2 * C + (size_t)cv * VEC);
                emb_load_add<T, VEC>(a3, dout + (size_t)r3 * C + (size_t)cv * VEC);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += (a1[k] + a2[k]) + a3[k];
            }
            for (; j < end; j += G) emb_load_add<T, VEC>(acc, dout + (size_t)rows[j] * C + (size_t)cv * VEC);
#pragma unroll
            for (int k = 0; k < VEC; k++) part[(size_t)threadIdx.y * C + (size_t)cv * VEC + k] = acc[k];
        }
        __syncthreads();
        T *d = dwte + (size_t)key * C;
        for (int c = tid; c < C; c += nt) {
            float sum = 0.0f;
            for (int g = 0; g < G; g++) sum += part[(size_t)g * C + c];
            d[c] = vr_fromf<T>(vr_tof(d[c]) + sum);
        }
        __syncthreads(); /* part and s_end are reused by the next run */
    }
}

template <typename T>
__global__ void k_emb_dwpe(T *dwpe, const T *dout, int B, int T_, int C, int acc)
{
    size_t n = (size_t)T_ * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += vr_tof(dout[(size_t)b * n + i]);
        dwpe[i] = vr_fromf<T>(acc ? vr_tof(dwpe[i]) + s : s);
    }
}

template <typename T>
static vr_status emb_bwd_t(const vr_cuda_ctx *ctx, void *dwte, void *dwpe, const void *dout,
                           const int32_t *tok, int B, int T_, int C, int V, int acc, void *scratch,
                           size_t scratch_bytes)
{
    const char *op = "embedding_bwd";
    cudaStream_t s = VR_STREAM(ctx);
    int R = B * T_;
    if (dwte) {
        if (!acc) VR_CU_CHECK(cudaMemsetAsync(dwte, 0, (size_t)V * C * sizeof(T), s), op);
        if (R > 0) {
            size_t seg = (size_t)vr_scratch_cuda_embedding_seg(R);
            char *p = (char *)scratch;
            int32_t *k0 = (int32_t *)p, *k1 = (int32_t *)(p + seg), *v0 = (int32_t *)(p + 2 * seg),
                    *v1 = (int32_t *)(p + 3 * seg);
            void *temp = p + 4 * seg;
            size_t temp_bytes = scratch_bytes - 4 * seg;
            /* CUB's own figure for this device, against what the planned bound left */
            size_t cub_need = 0;
            cub::DoubleBuffer<int32_t> qk(NULL, NULL), qv(NULL, NULL);
            VR_CU_CHECK(cub::DeviceRadixSort::SortPairs(NULL, cub_need, qk, qv, R, 0, key_bits(V), s), op);
            if (cub_need > temp_bytes)
                return vr_error(VR_ERR_INVALID, "cuda kernels: %s: the radix sort of %d rows needs %zu bytes of "
                                "temporary storage, the scratch leaves %zu (the bound of kernels/scratch.h is too "
                                "small)", op, R, cub_need, temp_bytes);
            k_emb_keys<<<(R + 255) / 256, 256, 0, s>>>(k0, v0, tok, R);
            VR_CU_LAUNCHED(ctx, op);
            cub::DoubleBuffer<int32_t> keys(k0, k1), vals(v0, v1);
            VR_CU_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, vals, R, 0, key_bits(V), s),
                        op);
            VR_CU_LAUNCHED(ctx, op);
            constexpr int VEC = 16 / sizeof(T);
            bool vec = C % VEC == 0 && ((uintptr_t)dout % 16) == 0;
            int ncol = vec ? C / VEC : C;
            int bx = ncol < 128 ? ncol : 128;
            int gy = 512 / bx;
            /* dynamic shared memory: gy rows of C partial sums, beside the kernel's static s_end; within the
             * 48 KiB every launch may use (C = 4096 fit exactly and the launch failed), else opted into up to
             * the device's maximum for the one row */
            const size_t limit = 48 * 1024 - 64;
            while (gy > 1 && (size_t)gy * C * sizeof(float) > limit) gy--;
            size_t shm = (size_t)gy * C * sizeof(float);
            if (shm > limit) {
                int dev = 0, most = 0;
                VR_CU_CHECK(cudaGetDevice(&dev), op);
                VR_CU_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), op);
                if (shm + 64 > (size_t)most) return vr_cu_bad(op, "C too large for the dwte kernel");
                VR_CU_CHECK(cudaFuncSetAttribute(vec ? k_emb_dwte<T, VEC> : k_emb_dwte<T, 1>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm),
                            op);
            }
            dim3 blk(bx, gy);
            unsigned grid = (unsigned)((R + VR_EMB_SEG - 1) / VR_EMB_SEG);
            if (vec)
                k_emb_dwte<T, VEC><<<grid, blk, shm, s>>>((T *)dwte, (const T *)dout, keys.Current(),
                                                        vals.Current(), R, C);
            else
                k_emb_dwte<T, 1><<<grid, blk, shm, s>>>((T *)dwte, (const T *)dout, keys.Current(),
                                                      vals.Current(), R, C);
            VR_CU_LAUNCHED(ctx, op);
        }
    }
    if (dwpe && T_ > 0) {
        k_emb_dwpe<<<vr_grid_for((size_t)T_ * C, 256, ctx), 256, 0, s>>>((T *)dwpe, (const T *)dout, B, T_, C,
                                                                          acc);
        VR_CU_LAUNCHED(ctx, op);
    }
    return VR_OK;
}

extern "C" vr_status vr_cuda_embedding_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dwte, void *dwpe,
                                           const void *dout, const int32_t *tok, int B, int T, int C, int V,
                                           int acc, void *scratch, size_t scratch_bytes)
{
    const char *op = "embedding_bwd";
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (B < 0 || T < 0 || C <= 0 || V <= 0) return vr_cu_bad(op, "bad shape");
    if ((size_t)B * T > 0 && (!dout || (dwte && !tok))) return vr_cu_bad(op, "NULL pointer");
    if (dwte && (size_t)B * T > 0) {
        size_t need = vr_cuda_embedding_bwd_scratch_bytes(B, T, V);
        if (!scratch || scratch_bytes < need)
            return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes < %zu needed", op,
                            scratch_bytes, need);
    }
    return VR_CU_DISPATCH(dt, emb_bwd_t, ctx, dwte, dwpe, dout, tok, B, T, C, V, acc, scratch, scratch_bytes);
}
