/* vram — CUDA token + position embedding (GPT-2 encoder), forward and a deterministic backward.
 *
 * Backward for dwte: tokens repeat, so rows of dwte collide. Instead of float atomics (whose order,
 * and so whose rounding, changes from run to run) the row indices are sorted by token with a stable
 * radix sort (CUB, on the stream), then one block per run of equal tokens sums that token's dout rows
 * in row order, in fp32, and adds the sum into dwte once. dwpe: one thread per (t, channel) sums
 * over the batch. */
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_internal.cuh"

template <typename T>
__global__ void k_emb_fwd(T *out, const int32_t *tok, const T *wte, const T *wpe, int B, int T_, int C)
{
    size_t n = (size_t)B * T_ * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        size_t r = i / (size_t)C;
        int c = (int)(i - r * (size_t)C), t = (int)(r % (size_t)T_);
        out[i] = vr_fromf<T>(vr_tof(wte[(size_t)tok[r] * C + c]) + vr_tof(wpe[(size_t)t * C + c]));
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
    if (!out || !tok || !wte || !wpe) return vr_cu_bad("embedding_fwd", "NULL pointer");
    return VR_CU_DISPATCH(dt, emb_fwd_t, ctx, out, tok, wte, wpe, B, T, C);
}

/* ---------------------------------------------------------------- backward */

static int key_bits(int V)
{
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) < (int64_t)V) b++;
    return b;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* CUB's temporary storage for the sort (histograms and look-back state; the key and value buffers
 * are ours). Asked of CUB where a device is present; else a bound that covers it. */
static size_t cub_temp_bytes(int R, int V)
{
    size_t bytes = 0;
    cub::DoubleBuffer<int32_t> k(NULL, NULL), v(NULL, NULL);
    cudaError_t e = cub::DeviceRadixSort::SortPairs(NULL, bytes, k, v, R, 0, key_bits(V));
    if (e != cudaSuccess) {
        cudaGetLastError();
        bytes = ((size_t)1 << 20) + (size_t)R * 8;
    }
    return bytes;
}

extern "C" size_t vr_cuda_embedding_bwd_scratch_bytes(int B, int T, int V)
{
    size_t R = (size_t)(B > 0 ? B : 0) * (size_t)(T > 0 ? T : 0);
    if (R == 0) return 0;
    return 4 * align256(R * sizeof(int32_t)) + align256(cub_temp_bytes((int)R, V));
}

__global__ void k_emb_keys(int32_t *keys, int32_t *vals, const int32_t *tok, int R)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < R) {
        keys[i] = tok[i];
        vals[i] = i;
    }
}

/* One block per sorted position; only the first position of each run of equal tokens works. */
template <typename T>
__global__ void k_emb_dwte(T *dwte, const T *dout, const int32_t *keys, const int32_t *rows, int R, int C)
{
    int i = blockIdx.x;
    int key = keys[i];
    if (i > 0 && keys[i - 1] == key) return;
    T *d = dwte + (size_t)key * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int j = i; j < R && keys[j] == key; j++) s += vr_tof(dout[(size_t)rows[j] * C + c]);
        d[c] = vr_fromf<T>(vr_tof(d[c]) + s);
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
            size_t seg = align256((size_t)R * sizeof(int32_t));
            char *p = (char *)scratch;
            int32_t *k0 = (int32_t *)p, *k1 = (int32_t *)(p + seg), *v0 = (int32_t *)(p + 2 * seg),
                    *v1 = (int32_t *)(p + 3 * seg);
            void *temp = p + 4 * seg;
            size_t temp_bytes = scratch_bytes - 4 * seg;
            k_emb_keys<<<(R + 255) / 256, 256, 0, s>>>(k0, v0, tok, R);
            VR_CU_LAUNCHED(ctx, op);
            cub::DoubleBuffer<int32_t> keys(k0, k1), vals(v0, v1);
            VR_CU_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, vals, R, 0, key_bits(V), s),
                        op);
            VR_CU_LAUNCHED(ctx, op);
            int threads = C >= 256 ? 256 : ((C + 31) / 32) * 32;
            k_emb_dwte<<<R, threads, 0, s>>>((T *)dwte, (const T *)dout, keys.Current(), vals.Current(), R, C);
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
