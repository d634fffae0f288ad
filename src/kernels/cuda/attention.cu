/* vram — CUDA causal multi-head self-attention, flash-style (no (T,T) matrix in memory).
 *
 * Layout as the CPU op: qkv (B,T,3C), head h of q/k/v at channels h*hs of each third; out (B,T,C);
 * lse (B,NH,T) fp32 = log-sum-exp of the scaled scores of each query row.
 *
 * Tensor-core path (bf16/fp16, head size 64; FlashAttention-2's scheme with mma.sync m16n8k16):
 * - forward: a block of 4 warps owns 64 query rows (16 per warp, Q fragments in registers); it walks
 *   the key blocks 0..diagonal, 64 keys at a time, staging K and V in shared memory (rows padded to 72
 *   elements: ldmatrix without bank conflicts). S = Q K^T in fp32 accumulators, an online softmax in
 *   the log2 domain (running max and sum per row, the output rescaled when the max grows), P rounded
 *   to bf16/fp16 straight from the accumulator registers into A fragments for O += P V.
 * - backward: delta = rowsum(dout * out) first (scratch), then two kernels without atomics:
 *   dK/dV: a block owns 64 keys and walks the query blocks from the diagonal down, with
 *   S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - delta), dV += P^T dO,
 *   dK += dS^T Q;  dQ: a block owns 64 queries and walks the key blocks, dQ += dS K.
 *   The scores are recomputed twice (once per kernel): about 40% more tensor work than a fused
 *   backward, in exchange for deterministic sums and no (B,T,C) fp32 accumulation buffer.
 * v2 (default; VRAM_ATTN_V1=1 selects the kernels above, =fwd or =bwd for one direction only):
 * - forward: 128 queries per block of 4 warps, 32 rows per warp (two 16-row tiles share every K/V
 *   fragment read from shared memory: half the ldmatrix traffic per mma), key blocks double-buffered
 *   with one barrier per block; a warp skips key blocks above its rows and masks only its diagonal.
 * - backward: one fused kernel per (b, h, 64-key block) in FlashAttention-2's order: dK, dV in
 *   registers as above, dS through shared memory and dQ += dS K added with fp32 (float2) atomics into
 *   the scratch beyond delta, then rounded into dqkv by a small kernel: 5 products per tile pair
 *   instead of 7. It runs when the scratch passed holds delta plus the fp32 dQ of at least one head
 *   (T*64*4 bytes); the heads go in chunks that fit (vr_cuda_attention_scratch_fused_bytes: all
 *   heads in one launch, as the training step's planned scratch of the node gives; 32 MiB: 2 chunks
 *   at GPT-2 124M, B=16). vr_cuda_attention_scratch_bytes is the minimum (delta only); given just
 *   that, the two deterministic kernels run. The atomics make dQ's last bits vary run to run (the
 *   order of fp32 additions). Both sizes and the layout are kernels/scratch.h's.
 * Scalar path (fp32, or other head sizes up to 128): one warp per query row (or key row in the dK/dV
 * backward), the same maths in fp32. It is the fp32 path and the reference the tensor-core path is
 * tested against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/scratch.h"

#define VR_LOG2E 1.4426950408889634f
#define VR_LN2 0.6931471805599453f
#define VR_ATT_HS_MAX 128

/* Where head h's q, k and v sit in a packed qkv row, and its slice of an out row. Multi-head attention
 * is NKV = NH (GPT's qkv (B,T,3C)); grouped-query attention (Llama: qkv (B,T,(NH+2NKV)hs)) has query
 * head h read kv head h / G, G = NH / NKV. The kernels over keys (dK, dV) run per kv head and sum the G
 * query heads that read it, so no two blocks write one kv head. */
struct att_geom {
    int NH, NKV, G, hs;
    size_t ld, ldo, koff, voff; /* qkv and out row strides; k and v of kv head 0 (elements) */
    __host__ __device__ size_t q(int h) const { return (size_t)h * hs; }
    __host__ __device__ size_t k(int h) const { return koff + (size_t)(h / G) * hs; }
    __host__ __device__ size_t v(int h) const { return voff + (size_t)(h / G) * hs; }
};

static att_geom att_geom_of(int NH, int NKV, int hs)
{
    att_geom a;
    a.NH = NH, a.NKV = NKV, a.G = NH / NKV, a.hs = hs;
    a.ld = (size_t)(NH + 2 * NKV) * hs, a.ldo = (size_t)NH * hs;
    a.koff = (size_t)NH * hs, a.voff = (size_t)(NH + NKV) * hs;
    return a;
}

/* The sizes: kernels/scratch.h (the plan sizes the node's scratch with the same functions). */
extern "C" size_t vr_cuda_attention_scratch_bytes(int B, int T, int C, int NH)
{
    (void)C;
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    return (size_t)vr_scratch_cuda_attention_delta(B, T, NH);
}

extern "C" size_t vr_cuda_attention_scratch_fused_bytes(int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    if (C % NH) return (size_t)vr_scratch_cuda_attention_delta(B, T, NH);
    return (size_t)vr_scratch_cuda_attention_fused(B, T, NH, C / NH);
}

/* ---------------------------------------------------------------- delta = rowsum(dout * out) */

template <typename T>
__global__ void k_att_delta(float *delta, const T *dout, const T *out, int B, int T_, att_geom a)
{
    // one warp per (b, t, h); delta is (B,NH,T)
    size_t w = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    int NH = a.NH, hs = a.hs;
    if (w >= (size_t)B * T_ * NH) return;
    int h = (int)(w % NH);
    size_t bt = w / NH;
    int t = (int)(bt % T_), b = (int)(bt / T_);
    const T *g = dout + bt * a.ldo + a.q(h), *o = out + bt * a.ldo + a.q(h);
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += vr_tof(g[d]) * vr_tof(o[d]);
    s = vr_warp_sum(s);
    if (lane == 0) delta[((size_t)b * NH + h) * T_ + t] = s;
}

/* ---------------------------------------------------------------- scalar path */

#define VR_SC_WARPS 8

template <typename T>
__device__ __forceinline__ float dot_sh(const float *a, const T *b, int n)
{
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * vr_tof(b[d]);
    return s;
}

template <typename T>
__global__ void k_att_fwd_scalar(T *out, float *lse, const T *qkv, int B, int T_, att_geom a)
{
    __shared__ float sq[VR_SC_WARPS][VR_ATT_HS_MAX];
    __shared__ float sp[VR_SC_WARPS][32];
    int wib = threadIdx.x >> 5, lane = threadIdx.x & 31;
    size_t w = (size_t)blockIdx.x * VR_SC_WARPS + wib;
    int NH = a.NH, hs = a.hs;
    if (w >= (size_t)B * NH * T_) return;
    int i = (int)(w % T_);
    size_t bh = w / T_;
    int h = (int)(bh % NH), b = (int)(bh / NH);
    size_t ld = a.ld;
    float scale = rsqrtf((float)hs);
    const T *bq = qkv + (size_t)b * T_ * ld + a.q(h), *bk = qkv + (size_t)b * T_ * ld + a.k(h),
            *bv = qkv + (size_t)b * T_ * ld + a.v(h);
    for (int d = lane; d < hs; d += 32) sq[wib][d] = vr_tof(bq[(size_t)i * ld + d]);
    __syncwarp();
    // pass 1: max and normaliser, keys strided over lanes
    float m = -INFINITY, l = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        float s = scale * dot_sh(sq[wib], bk + (size_t)j * ld, hs);
        if (s > m) {
            l = l * __expf(m - s) + 1.0f;
            m = s;
        } else {
            l += __expf(s - m);
        }
    }
    float M = vr_warp_max(m);
    float L = vr_warp_sum(m == -INFINITY ? 0.0f : l * __expf(m - M));
    float ls = M + __logf(L);
    // pass 2: out = sum_j p_j v_j, 32 keys at a time
    float o[VR_ATT_HS_MAX / 32];
#pragma unroll
    for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) o[u] = 0.0f;
    for (int j0 = 0; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        sp[wib][lane] = j <= i ? __expf(scale * dot_sh(sq[wib], bk + (size_t)j * ld, hs) - ls) : 0.0f;
        __syncwarp();
        int jn = min(32, i + 1 - j0);
        for (int jj = 0; jj < jn; jj++) {
            float p = sp[wib][jj];
            const T *v = bv + (size_t)(j0 + jj) * ld;
#pragma unroll
            for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) {
                int d = lane + 32 * u;
                if (d < hs) o[u] += p * vr_tof(v[d]);
            }
        }
        __syncwarp();
    }
    T *orow = out + ((size_t)b * T_ + i) * a.ldo + a.q(h);
#pragma unroll
    for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) {
        int d = lane + 32 * u;
        if (d < hs) orow[d] = vr_fromf<T>(o[u]);
    }
    if (lane == 0) lse[bh * T_ + i] = ls;
}

/* dq for query row i: dq = scale sum_j p_ij (dout_i . v_j - delta_i) k_j. */
template <typename T>
__global__ void k_att_bwd_dq_scalar(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                    const float *delta, int B, int T_, att_geom a, int acc)
{
    __shared__ float sq[VR_SC_WARPS][VR_ATT_HS_MAX], sg[VR_SC_WARPS][VR_ATT_HS_MAX];
    __shared__ float sds[VR_SC_WARPS][32];
    int wib = threadIdx.x >> 5, lane = threadIdx.x & 31;
    size_t w = (size_t)blockIdx.x * VR_SC_WARPS + wib;
    int NH = a.NH, hs = a.hs;
    if (w >= (size_t)B * NH * T_) return;
    int i = (int)(w % T_);
    size_t bh = w / T_;
    int h = (int)(bh % NH), b = (int)(bh / NH);
    size_t ld = a.ld;
    float scale = rsqrtf((float)hs);
    const T *bq = qkv + (size_t)b * T_ * ld + a.q(h), *bk = qkv + (size_t)b * T_ * ld + a.k(h),
            *bv = qkv + (size_t)b * T_ * ld + a.v(h);
    const T *g = dout + ((size_t)b * T_ + i) * a.ldo + a.q(h);
    for (int d = lane; d < hs; d += 32) {
        sq[wib][d] = vr_tof(bq[(size_t)i * ld + d]);
        sg[wib][d] = vr_tof(g[d]);
    }
    __syncwarp();
    float L = lse[bh * T_ + i], dl = delta[bh * T_ + i];
    float dq[VR_ATT_HS_MAX / 32];
#pragma unroll
    for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) dq[u] = 0.0f;
    for (int j0 = 0; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        float ds = 0.0f;
        if (j <= i) {
            float p = __expf(scale * dot_sh(sq[wib], bk + (size_t)j * ld, hs) - L);
            float dp = dot_sh(sg[wib], bv + (size_t)j * ld, hs);
            ds = p * (dp - dl) * scale;
        }
        sds[wib][lane] = ds;
        __syncwarp();
        int jn = min(32, i + 1 - j0);
        for (int jj = 0; jj < jn; jj++) {
            float s = sds[wib][jj];
            const T *k = bk + (size_t)(j0 + jj) * ld;
#pragma unroll
            for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) {
                int d = lane + 32 * u;
                if (d < hs) dq[u] += s * vr_tof(k[d]);
            }
        }
        __syncwarp();
    }
    T *dq_row = dqkv + ((size_t)b * T_ + i) * ld + a.q(h);
#pragma unroll
    for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) {
        int d = lane + 32 * u;
        if (d < hs) dq_row[d] = vr_fromf<T>(acc ? vr_tof(dq_row[d]) + dq[u] : dq[u]);
    }
}

/* dk, dv for key row j of kv head kvh: sums over queries i >= j of the G query heads that read it. */
template <typename T>
__global__ void k_att_bwd_dkv_scalar(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                     const float *delta, int B, int T_, att_geom a, int acc)
{
    __shared__ float sk[VR_SC_WARPS][VR_ATT_HS_MAX], sv[VR_SC_WARPS][VR_ATT_HS_MAX];
    __shared__ float sp[VR_SC_WARPS][32], sds[VR_SC_WARPS][32];
    int wib = threadIdx.x >> 5, lane = threadIdx.x & 31;
    size_t w = (size_t)blockIdx.x * VR_SC_WARPS + wib;
    int hs = a.hs;
    if (w >= (size_t)B * a.NKV * T_) return;
    int j = (int)(w % T_);
    size_t u = w / T_;
    int kvh = (int)(u % a.NKV), b = (int)(u / a.NKV);
    size_t ld = a.ld;
    float scale = rsqrtf((float)hs);
    const T *row0 = qkv + (size_t)b * T_ * ld;
    for (int d = lane; d < hs; d += 32) {
        sk[wib][d] = vr_tof(row0[(size_t)j * ld + a.k(kvh * a.G) + d]);
        sv[wib][d] = vr_tof(row0[(size_t)j * ld + a.v(kvh * a.G) + d]);
    }
    __syncwarp();
    float dk[VR_ATT_HS_MAX / 32], dv[VR_ATT_HS_MAX / 32];
#pragma unroll
    for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) dk[u] = dv[u] = 0.0f;
    for (int gq = 0; gq < a.G; gq++) {
        int h = kvh * a.G + gq;
        size_t bh = (size_t)b * a.NH + h;
        const T *bq = row0 + a.q(h), *gbase = dout + (size_t)b * T_ * a.ldo + a.q(h);
        for (int i0 = j; i0 < T_; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < T_) {
                p = __expf(scale * dot_sh(sk[wib], bq + (size_t)i * ld, hs) - lse[bh * T_ + i]);
                float dp = dot_sh(sv[wib], gbase + (size_t)i * a.ldo, hs);
                ds = p * (dp - delta[bh * T_ + i]) * scale;
            }
            sp[wib][lane] = p;
            sds[wib][lane] = ds;
            __syncwarp();
            int in = min(32, T_ - i0);
            for (int ii = 0; ii < in; ii++) {
                float pp = sp[wib][ii], s = sds[wib][ii];
                const T *q = bq + (size_t)(i0 + ii) * ld, *g = gbase + (size_t)(i0 + ii) * a.ldo;
#pragma unroll
                for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) {
                    int d = lane + 32 * u;
                    if (d < hs) {
                        dv[u] += pp * vr_tof(g[d]);
                        dk[u] += s * vr_tof(q[d]);
                    }
                }
            }
            __syncwarp();
        }
    }
    T *dk_row = dqkv + ((size_t)b * T_ + j) * ld + a.k(kvh * a.G), *dv_row = dqkv + ((size_t)b * T_ + j) * ld + a.v(kvh * a.G);
#pragma unroll
    for (int u = 0; u < VR_ATT_HS_MAX / 32; u++) {
        int d = lane + 32 * u;
        if (d < hs) {
            dk_row[d] = vr_fromf<T>(acc ? vr_tof(dk_row[d]) + dk[u] : dk[u]);
            dv_row[d] = vr_fromf<T>(acc ? vr_tof(dv_row[d]) + dv[u] : dv[u]);
        }
    }
}

/* ---------------------------------------------------------------- tensor-core path (hs = 64) */

#define TC_D 64   /* head size */
static_assert(TC_D == VR_SCRATCH_CUDA_ATTENTION_TC_HS, "kernels/scratch.h sizes the fused backward for TC_D");
#define TC_BR 64  /* rows (queries or keys) per block */
#define TC_LD 72  /* shared-memory row stride in elements (64 + 8 pad: no ldmatrix bank conflicts) */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c(16x8 fp32) += a(16x16) b(16x8) */
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    if constexpr (sizeof(T) == 2 && __is_same(T, __nv_bfloat16)) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t u);
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t u)
{
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u));
}
template <> __device__ __forceinline__ float2 unpack2<__half>(uint32_t u)
{
    return __half22float2(*reinterpret_cast<__half2 *>(&u));
}

/* 64 rows x 64 elements from global rows r0.. (row stride ld elements) into shared; rows >= nrows are
 * zero. Asynchronous (cp.async, 16 bytes per copy, zero-fill); 128 threads. */
template <typename T>
__device__ __forceinline__ void tile_load_async(T *s, const T *g, int r0, int nrows, size_t ld)
{
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int c = threadIdx.x + 128 * u;
        int row = c >> 3, col = (c & 7) * 8;
        int gr = r0 + row;
        const T *src = g + (size_t)(gr < nrows ? gr : 0) * ld + col;
        int bytes = gr < nrows ? 16 : 0;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(s + row * TC_LD + col)),
                     "l"(src), "r"(bytes));
    }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* A fragments (16 rows x 64) of the warp's rows from a shared tile: 4 k-steps of 16. */
template <typename T>
__device__ __forceinline__ void load_a_frags(uint32_t f[4][4], const T *s, int row0)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) ldsm_x4(f[kk], s + (row0 + (lane & 15)) * TC_LD + kk * 16 + (lane >> 4) * 8);
}

/* acc(16 x 64) += A(16 x 64, fragments) X^T where X is a shared tile of 64 rows x 64 (rows become the
 * product's columns): S = Q K^T, dP = dO V^T. */
template <typename T>
__device__ __forceinline__ void mma_abt(float acc[8][4], const uint32_t a[4][4], const T *x)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm_x4(b, x + (np * 16 + (lane & 7) + (lane >> 4) * 8) * TC_LD + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816<T>(acc[2 * np], a[kk], b[0], b[1]);
            mma16816<T>(acc[2 * np + 1], a[kk], b[2], b[3]);
        }
    }
}

/* acc(16 x 64) += P(16 x 64, fp32 accumulators rounded to T) X where X is a shared tile of 64 rows x
 * 64: O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K. */
template <typename T>
__device__ __forceinline__ void mma_pb(float acc[8][4], const float p[8][4], const T *x)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4];
        a[0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
        a[1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
        a[2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        a[3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, x + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * TC_LD + dp * 16 + (lane >> 4) * 8);
            mma16816<T>(acc[2 * dp], a, b[0], b[1]);
            mma16816<T>(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* Writes a warp's 16 x 64 fp32 accumulator tile (times mul) to rows row0.. of g (row stride ld), rows
 * >= nrows skipped; acc adds into what is there. */
template <typename T>
__device__ __forceinline__ void store_acc(T *g, size_t ld, int row0, int nrows, const float a[8][4], float mul,
                                          int acc)
{
    int lane = threadIdx.x & 31;
    int r = row0 + (lane >> 2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int rr = r + half * 8;
        if (rr >= nrows) continue;
        T *row = g + (size_t)rr * ld;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            int col = nt * 8 + 2 * (lane & 3);
            float x0 = a[nt][2 * half] * mul, x1 = a[nt][2 * half + 1] * mul;
            uint32_t *dst = reinterpret_cast<uint32_t *>(row + col);
            if (acc) {
                float2 o = unpack2<T>(*dst);
                x0 += o.x;
                x1 += o.y;
            }
            *dst = pack2<T>(x0, x1);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(128) k_att_fwd_tc(T *out, float *lse, const T *qkv, int T_, att_geom a,
                                                    float scale_log2)
{
    __shared__ __align__(16) T sQ[TC_BR * TC_LD];
    __shared__ __align__(16) T sK[2][TC_BR * TC_LD];
    __shared__ __align__(16) T sV[2][TC_BR * TC_LD];
    int nq = (T_ + TC_BR - 1) / TC_BR;
    int qt = nq - 1 - (int)blockIdx.x; // the longest rows first
    int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t ld = a.ld;
    const T *bq = qkv + (size_t)b * T_ * ld + a.q(h), *bk = qkv + (size_t)b * T_ * ld + a.k(h),
            *bv = qkv + (size_t)b * T_ * ld + a.v(h);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int q0 = qt * TC_BR;

    tile_load_async(sQ, bq, q0, T_, ld);
    tile_load_async(sK[0], bk, 0, T_, ld);
    tile_load_async(sV[0], bv, 0, T_, ld);
    cp_async_commit();

    float o[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int row[2] = {q0 + warp * 16 + (lane >> 2), q0 + warp * 16 + (lane >> 2) + 8};
    uint32_t qf[4][4];

    for (int kt = 0; kt <= qt; kt++) {
        int cur = kt & 1;
        if (kt < qt) { // prefetch the next key block into the other buffer
            tile_load_async(sK[cur ^ 1], bk, (kt + 1) * TC_BR, T_, ld);
            tile_load_async(sV[cur ^ 1], bv, (kt + 1) * TC_BR, T_, ld);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0) load_a_frags(qf, sQ, warp * 16);

        float s[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        mma_abt<T>(s, qf, sK[cur]);

        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[nt][e] * scale_log2;
                if (kt == qt) {
                    int key = kt * TC_BR + nt * 8 + 2 * (lane & 3) + (e & 1);
                    if (key > row[e >> 1]) x = -INFINITY;
                }
                s[nt][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mn = fmaxf(m[r], mx[r]);
            float corr = exp2f(m[r] - mn);
            l[r] *= corr;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                o[nt][2 * r] *= corr;
                o[nt][2 * r + 1] *= corr;
            }
            m[r] = mn;
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[nt][e] - m[e >> 1]);
                s[nt][e] = p;
                l[e >> 1] += p;
            }
        }
        mma_pb<T>(o, s, sV[cur]);
        __syncthreads(); // everyone is done with sK/sV[cur] before it is refilled
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        o[nt][0] *= inv[0];
        o[nt][1] *= inv[0];
        o[nt][2] *= inv[1];
        o[nt][3] *= inv[1];
    }
    store_acc(out + (size_t)b * T_ * a.ldo + a.q(h), a.ldo, q0 + warp * 16, T_, o, 1.0f, 0);
    if ((lane & 3) == 0) {
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (row[r] < T_) lse[(size_t)bh * T_ + row[r]] = (m[r] + __log2f(l[r])) * VR_LN2;
    }
}

/* dK, dV for a block of 64 keys of one kv head: the block walks, for each of the G query heads that read
 * it, the query blocks from the diagonal down (items (g, qt) in that order, double-buffered). */
template <typename T>
__global__ void __launch_bounds__(128) k_att_bwd_dkv_tc(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                                        const float *delta, int T_, att_geom a, float scale,
                                                        int acc)
{
    // K and V are staged in the second Q / dO buffers, read into registers once, and those buffers are
    // then reused for the query blocks (static shared memory stays under 48 KB)
    __shared__ __align__(16) T sQ[2][TC_BR * TC_LD];
    __shared__ __align__(16) T sG[2][TC_BR * TC_LD];
    __shared__ float sL[2][TC_BR], sD[2][TC_BR];
    int nq = (T_ + TC_BR - 1) / TC_BR;
    int kt = blockIdx.x; // the longest columns first
    int u = blockIdx.y, b = u / a.NKV, kvh = u % a.NKV;
    size_t ld = a.ld;
    const T *row0 = qkv + (size_t)b * T_ * ld, *grow0 = dout + (size_t)b * T_ * a.ldo;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int k0 = kt * TC_BR, nqk = nq - kt, items = a.G * nqk;
    float scale_log2 = scale * VR_LOG2E;

    tile_load_async(sQ[1], row0 + a.k(kvh * a.G), k0, T_, ld);
    tile_load_async(sG[1], row0 + a.v(kvh * a.G), k0, T_, ld);
    cp_async_commit();
    uint32_t kf[4][4], vf[4][4];
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags(kf, sQ[1], warp * 16);
    load_a_frags(vf, sG[1], warp * 16);
    __syncthreads();

    float dk[8][4], dv[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.0f;
    int key[2] = {k0 + warp * 16 + (lane >> 2), k0 + warp * 16 + (lane >> 2) + 8};

    for (int it = -1; it < items; it++) {
        int cur = it & 1;
        if (it + 1 < items) { // stage item it+1: query block q1 of query head h1
            int h1 = kvh * a.G + (it + 1) / nqk, q1 = (kt + (it + 1) % nqk) * TC_BR;
            size_t bh1 = (size_t)b * a.NH + h1;
            tile_load_async(sQ[cur ^ 1], row0 + a.q(h1), q1, T_, ld);
            tile_load_async(sG[cur ^ 1], grow0 + a.q(h1), q1, T_, a.ldo);
            cp_async_commit();
            if (threadIdx.x < TC_BR) {
                int i = q1 + threadIdx.x;
                sL[cur ^ 1][threadIdx.x] = i < T_ ? lse[bh1 * T_ + i] * VR_LOG2E : INFINITY;
                sD[cur ^ 1][threadIdx.x] = i < T_ ? delta[bh1 * T_ + i] : 0.0f;
            }
        }
        if (it < 0) continue;
        if (it + 1 < items) cp_async_wait<1>();
        else cp_async_wait<0>();
        __syncthreads();
        int qt = kt + it % nqk, q0 = qt * TC_BR;
        // S^T (16 keys x 64 queries) = K Q^T;  dP^T = V dO^T
        float st[8][4], dpt[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[i][e] = dpt[i][e] = 0.0f;
        mma_abt<T>(st, kf, sQ[cur]);
        mma_abt<T>(dpt, vf, sG[cur]);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = nt * 8 + 2 * (lane & 3) + (e & 1);
                float p = exp2f(st[nt][e] * scale_log2 - sL[cur][qc]);
                if (qt == kt && q0 + qc < key[e >> 1]) p = 0.0f;
                st[nt][e] = p;
                dpt[nt][e] = p * (dpt[nt][e] - sD[cur][qc]);
            }
        }
        mma_pb<T>(dv, st, sG[cur]);  // dV += P^T dO
        mma_pb<T>(dk, dpt, sQ[cur]); // dK += dS^T Q
        __syncthreads();
    }
    store_acc(dqkv + (size_t)b * T_ * ld + a.k(kvh * a.G), ld, k0 + warp * 16, T_, dk, scale, acc);
    store_acc(dqkv + (size_t)b * T_ * ld + a.v(kvh * a.G), ld, k0 + warp * 16, T_, dv, 1.0f, acc);
}

/* dQ for a block of 64 queries. */
template <typename T>
__global__ void __launch_bounds__(128) k_att_bwd_dq_tc(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                                       const float *delta, int T_, att_geom a, float scale,
                                                       int acc)
{
    // Q and dO are staged in the second K / V buffers, read into registers once, then reused
    __shared__ __align__(16) T sK[2][TC_BR * TC_LD];
    __shared__ __align__(16) T sV[2][TC_BR * TC_LD];
    int nq = (T_ + TC_BR - 1) / TC_BR;
    int qt = nq - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t ld = a.ld;
    const T *bq = qkv + (size_t)b * T_ * ld + a.q(h), *bk = qkv + (size_t)b * T_ * ld + a.k(h),
            *bv = qkv + (size_t)b * T_ * ld + a.v(h);
    const T *gbase = dout + (size_t)b * T_ * a.ldo + a.q(h);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int q0 = qt * TC_BR;
    float scale_log2 = scale * VR_LOG2E;

    tile_load_async(sK[1], bq, q0, T_, ld);
    tile_load_async(sV[1], gbase, q0, T_, a.ldo);
    tile_load_async(sK[0], bk, 0, T_, ld);
    tile_load_async(sV[0], bv, 0, T_, ld);
    cp_async_commit();

    int row[2] = {q0 + warp * 16 + (lane >> 2), q0 + warp * 16 + (lane >> 2) + 8};
    float L[2], Dl[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        L[r] = row[r] < T_ ? lse[(size_t)bh * T_ + row[r]] * VR_LOG2E : INFINITY;
        Dl[r] = row[r] < T_ ? delta[(size_t)bh * T_ + row[r]] : 0.0f;
    }
    float dq[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
    uint32_t qf[4][4], gf[4][4];
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags(qf, sK[1], warp * 16);
    load_a_frags(gf, sV[1], warp * 16);
    __syncthreads();

    for (int kt = 0; kt <= qt; kt++) {
        int cur = kt & 1;
        if (kt < qt) {
            tile_load_async(sK[cur ^ 1], bk, (kt + 1) * TC_BR, T_, ld);
            tile_load_async(sV[cur ^ 1], bv, (kt + 1) * TC_BR, T_, ld);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float s[8][4], dp[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0.0f;
        mma_abt<T>(s, qf, sK[cur]);
        mma_abt<T>(dp, gf, sV[cur]);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = e >> 1;
                float p = exp2f(s[nt][e] * scale_log2 - L[r]);
                if (kt == qt && kt * TC_BR + nt * 8 + 2 * (lane & 3) + (e & 1) > row[r]) p = 0.0f;
                s[nt][e] = p * (dp[nt][e] - Dl[r]);
            }
        }
        mma_pb<T>(dq, s, sK[cur]); // dQ += dS K
        __syncthreads();
    }
    store_acc(dqkv + (size_t)b * T_ * ld + a.q(h), ld, q0 + warp * 16, T_, dq, scale, acc);
}

/* ---------------------------------------------------------------- forward v2 (default) */

/* As mma_abt for a warp that owns 32 rows (two 16-row A tiles): each B fragment read from shared
 * memory feeds 4 mma instead of 2 (half the ldmatrix traffic per product). */
template <typename T>
__device__ __forceinline__ void mma_abt2(float acc[2][8][4], const uint32_t a[2][4][4], const T *x)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm_x4(b, x + (np * 16 + (lane & 7) + (lane >> 4) * 8) * TC_LD + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                mma16816<T>(acc[mt][2 * np], a[mt][kk], b[0], b[1]);
                mma16816<T>(acc[mt][2 * np + 1], a[mt][kk], b[2], b[3]);
            }
        }
    }
}

/* As mma_pb for 32 rows (two 16-row P tiles). */
template <typename T>
__device__ __forceinline__ void mma_pb2(float acc[2][8][4], const float p[2][8][4], const T *x)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            a[mt][0] = pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            a[mt][1] = pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            a[mt][2] = pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            a[mt][3] = pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, x + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * TC_LD + dp * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                mma16816<T>(acc[mt][2 * dp], a[mt], b[0], b[1]);
                mma16816<T>(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

#define TC_BQ2 128 /* forward v2: queries per block (4 warps x 32 rows) */

/* Forward v2: a block of 4 warps owns 128 queries, 32 per warp (two 16-row tiles sharing each K/V
 * fragment), and walks the 64-key blocks 0..last double-buffered (cp.async); a warp skips the key
 * blocks entirely above its rows and masks only those that cross its diagonal. Q is staged in the
 * second K/V buffers, read into registers once, before the pipeline starts. */
template <typename T>
__global__ void __launch_bounds__(128) k_att_fwd_tc2(T *out, float *lse, const T *qkv, int T_, att_geom a,
                                                     float scale_log2)
{
    __shared__ __align__(16) T sKV[4][TC_BR * TC_LD]; // [2*buf]: K, [2*buf+1]: V
    int nqb = (T_ + TC_BQ2 - 1) / TC_BQ2, nk = (T_ + TC_BR - 1) / TC_BR;
    int qb = nqb - 1 - (int)blockIdx.x; // the longest rows first (a head's blocks run together: K/V stay in L2)
    int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t ld = a.ld;
    const T *bq = qkv + (size_t)b * T_ * ld + a.q(h), *bk = qkv + (size_t)b * T_ * ld + a.k(h),
            *bv = qkv + (size_t)b * T_ * ld + a.v(h);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int q0 = qb * TC_BQ2;
    int wr0 = q0 + warp * 32; // the warp's first row
    int last = (q0 + TC_BQ2 - 1) / TC_BR;
    if (last > nk - 1) last = nk - 1;

    tile_load_async(sKV[2], bq, q0, T_, ld);
    tile_load_async(sKV[3], bq, q0 + TC_BR, T_, ld);
    tile_load_async(sKV[0], bk, 0, T_, ld);
    tile_load_async(sKV[1], bv, 0, T_, ld);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) load_a_frags(qf[mt], sKV[2 + (warp >> 1)], (warp & 1) * 32 + mt * 16);
    __syncthreads();

    float o[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int i = 0; i < 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    float m[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, l[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

    for (int kt = 0; kt <= last; kt++) {
        int cur = kt & 1;
        // one barrier per key block: after it, block kt has landed for everyone and every warp is done
        // with block kt-1, so its buffer can take the prefetch of block kt+1 (overlapping this compute)
        cp_async_wait<0>();
        __syncthreads();
        if (kt < last) {
            tile_load_async(sKV[2 * (cur ^ 1)], bk, (kt + 1) * TC_BR, T_, ld);
            tile_load_async(sKV[2 * (cur ^ 1) + 1], bv, (kt + 1) * TC_BR, T_, ld);
            cp_async_commit();
        }
        if (kt * TC_BR <= wr0 + 31) { // warp-uniform: some key of this block is at or below the warp's rows
            float s[2][8][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
            mma_abt2<T>(s, qf, sKV[2 * cur]);
            bool diag = kt * TC_BR + TC_BR - 1 > wr0;
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int row0 = wr0 + mt * 16 + (lane >> 2);
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][nt][e] * scale_log2;
                        if (diag) {
                            int key = kt * TC_BR + nt * 8 + 2 * (lane & 3) + (e & 1);
                            if (key > row0 + 8 * (e >> 1)) x = -INFINITY;
                        }
                        s[mt][nt][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                    float mn = fmaxf(m[mt][r], mx[r]);
                    float corr = exp2f(m[mt][r] - mn);
                    l[mt][r] *= corr;
#pragma unroll
                    for (int nt = 0; nt < 8; nt++) {
                        o[mt][nt][2 * r] *= corr;
                        o[mt][nt][2 * r + 1] *= corr;
                    }
                    m[mt][r] = mn;
                }
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = exp2f(s[mt][nt][e] - m[mt][e >> 1]);
                        s[mt][nt][e] = p;
                        l[mt][e >> 1] += p;
                    }
                }
            }
            mma_pb2<T>(o, s, sKV[2 * cur + 1]);
        }
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
        }
        float inv[2] = {1.0f / l[mt][0], 1.0f / l[mt][1]};
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            o[mt][nt][0] *= inv[0];
            o[mt][nt][1] *= inv[0];
            o[mt][nt][2] *= inv[1];
            o[mt][nt][3] *= inv[1];
        }
        store_acc(out + (size_t)b * T_ * a.ldo + a.q(h), a.ldo, wr0 + mt * 16, T_, o[mt], 1.0f, 0);
        if ((lane & 3) == 0) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int row = wr0 + mt * 16 + (lane >> 2) + 8 * r;
                if (row < T_) lse[(size_t)bh * T_ + row] = (m[mt][r] + __log2f(l[mt][r])) * VR_LN2;
            }
        }
    }
}

/* ---------------------------------------------------------------- fused backward (v2, default) */

/* acc(16 x 64) += A(16 x 64, fragments) X where X is a shared tile of 64 rows x 64 (rows = the
 * reduction dimension): dQ += dS K. */
template <typename T>
__device__ __forceinline__ void mma_ab(float acc[8][4], const uint32_t a[4][4], const T *x)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, x + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * TC_LD + dp * 16 + (lane >> 4) * 8);
            mma16816<T>(acc[2 * dp], a[kk], b[0], b[1]);
            mma16816<T>(acc[2 * dp + 1], a[kk], b[2], b[3]);
        }
    }
}

/* delta = rowsum(dout * out) for head size 64: 8 threads per (b, t, h) row, 16-byte loads. */
template <typename T>
__global__ void k_att_delta64(float *delta, const T *dout, const T *out, int B, int T_, att_geom a)
{
    int NH = a.NH;
    size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t w = g >> 3; // (b, t, h) row
    int part = (int)(g & 7);
    bool ok = w < (size_t)B * T_ * NH;
    float s = 0.0f;
    int h = 0, t = 0, b = 0;
    if (ok) {
        h = (int)(w % NH);
        size_t bt = w / NH;
        t = (int)(bt % T_), b = (int)(bt / T_);
        size_t off = bt * a.ldo + a.q(h) + part * 8;
        vr_vec<T> x = vr_ld16_nc(dout + off), y = vr_ld16_nc(out + off);
#pragma unroll
        for (int i = 0; i < 8; i++) s += vr_tof(x.v[i]) * vr_tof(y.v[i]);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (ok && part == 0) delta[((size_t)b * NH + h) * T_ + t] = s;
}

/* dK, dV and (atomically, fp32) dQ for a block of 64 keys of one kv head: FlashAttention-2's backward
 * order. For each of the G query heads that read the kv head, the block walks the query blocks from the
 * diagonal down (items (g, qt)): S^T = K Q^T, P^T, dP^T = V dO^T, dS^T; dV += P^T dO, dK += dS^T Q in
 * registers; dS goes through shared memory (as [query][key]) and dQ(64 queries) += dS K is added with
 * fp32 atomics into dqacc (the chunk's (b, query head) pairs, T, 64), unscaled. Grid (key blocks, the
 * chunk's (b, kv head) pairs); u0 = the chunk's first pair. */
template <typename T>
__global__ void __launch_bounds__(128) k_att_bwd_fused_tc(float *dqacc, T *dqkv, const T *dout, const T *qkv,
                                                          const float *lse, const float *delta, int T_, att_geom a,
                                                          float scale, int acc, int u0)
{
    __shared__ __align__(16) T sQ[2][TC_BR * TC_LD];
    __shared__ __align__(16) T sG[2][TC_BR * TC_LD];
    __shared__ __align__(16) T sK[TC_BR * TC_LD];
    __shared__ float sL[2][TC_BR], sD[2][TC_BR];
    int nq = (T_ + TC_BR - 1) / TC_BR;
    int kt = blockIdx.x; // the longest columns first (a head's blocks run together: Q/dO stay in L2)
    int u = u0 + (int)blockIdx.y, b = u / a.NKV, kvh = u % a.NKV;
    size_t ld = a.ld;
    const T *row0 = qkv + (size_t)b * T_ * ld, *grow0 = dout + (size_t)b * T_ * a.ldo;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int k0 = kt * TC_BR, nqk = nq - kt, items = a.G * nqk;
    float scale_log2 = scale * VR_LOG2E;

    // K stays in sK (for dQ = dS K); V is staged in sG[1] and read into registers once; item 0 (query
    // head kvh G, the diagonal block) into buffer 0
    int h0 = kvh * a.G;
    tile_load_async(sK, row0 + a.k(h0), k0, T_, ld);
    tile_load_async(sG[1], row0 + a.v(h0), k0, T_, ld);
    tile_load_async(sQ[0], row0 + a.q(h0), k0, T_, ld);
    tile_load_async(sG[0], grow0 + a.q(h0), k0, T_, a.ldo);
    cp_async_commit();
    if (threadIdx.x < TC_BR) {
        int i = k0 + threadIdx.x;
        size_t bh = (size_t)b * a.NH + h0;
        sL[0][threadIdx.x] = i < T_ ? lse[bh * T_ + i] * VR_LOG2E : INFINITY;
        sD[0][threadIdx.x] = i < T_ ? delta[bh * T_ + i] : 0.0f;
    }
    uint32_t kf[4][4], vf[4][4];
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags(kf, sK, warp * 16);
    load_a_frags(vf, sG[1], warp * 16);
    __syncthreads();

    float dk[8][4], dv[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.0f;
    int key[2] = {k0 + warp * 16 + (lane >> 2), k0 + warp * 16 + (lane >> 2) + 8};

    for (int it = 0; it < items; it++) {
        int cur = it & 1;
        // after this barrier item it has landed and every warp is done with item it-1 (its buffers, sS
        // included), which then take the prefetch of item it+1
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < items) {
            int h1 = kvh * a.G + (it + 1) / nqk, q1 = (kt + (it + 1) % nqk) * TC_BR;
            size_t bh1 = (size_t)b * a.NH + h1;
            tile_load_async(sQ[cur ^ 1], row0 + a.q(h1), q1, T_, ld);
            tile_load_async(sG[cur ^ 1], grow0 + a.q(h1), q1, T_, a.ldo);
            cp_async_commit();
            if (threadIdx.x < TC_BR) {
                int i = q1 + threadIdx.x;
                sL[cur ^ 1][threadIdx.x] = i < T_ ? lse[bh1 * T_ + i] * VR_LOG2E : INFINITY;
                sD[cur ^ 1][threadIdx.x] = i < T_ ? delta[bh1 * T_ + i] : 0.0f;
            }
        }
        int qt = kt + it % nqk, q0 = qt * TC_BR;
        float *dqa = dqacc + ((size_t)blockIdx.y * a.G + it / nqk) * T_ * TC_D;
        float st[8][4], dpt[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[i][e] = dpt[i][e] = 0.0f;
        mma_abt<T>(st, kf, sQ[cur]);
        mma_abt<T>(dpt, vf, sG[cur]);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = nt * 8 + 2 * (lane & 3) + (e & 1);
                float p = exp2f(st[nt][e] * scale_log2 - sL[cur][qc]);
                if (qt == kt && q0 + qc < key[e >> 1]) p = 0.0f;
                st[nt][e] = p;
                dpt[nt][e] = p * (dpt[nt][e] - sD[cur][qc]);
            }
        }
        mma_pb<T>(dv, st, sG[cur]);  // dV += P^T dO
        mma_pb<T>(dk, dpt, sQ[cur]); // dK += dS^T Q
        __syncthreads();             // every warp is done with sG[cur]: it now holds dS as [query][key]
        T *sS = sG[cur];
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = nt * 8 + 2 * (lane & 3) + (e & 1);
                int kc = warp * 16 + (lane >> 2) + 8 * (e >> 1);
                sS[qc * TC_LD + kc] = vr_fromf<T>(dpt[nt][e]);
            }
        }
        __syncthreads();
        uint32_t sf[4][4];
        load_a_frags(sf, sS, warp * 16);
        float dq[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
        mma_ab<T>(dq, sf, sK); // dQ(16 queries of this warp) = dS K
        int r = q0 + warp * 16 + (lane >> 2);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int rr = r + 8 * half;
            if (rr < T_) {
                float *row = dqa + (size_t)rr * TC_D;
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    float *dst = row + nt * 8 + 2 * (lane & 3);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                    atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(dq[nt][2 * half], dq[nt][2 * half + 1]));
#else
                    atomicAdd(dst, dq[nt][2 * half]);
                    atomicAdd(dst + 1, dq[nt][2 * half + 1]);
#endif
                }
            }
        }
    }
    store_acc(dqkv + (size_t)b * T_ * ld + a.k(h0), ld, k0 + warp * 16, T_, dk, scale, acc);
    store_acc(dqkv + (size_t)b * T_ * ld + a.v(h0), ld, k0 + warp * 16, T_, dv, 1.0f, acc);
}

/* dq part of dqkv (=|+=) scale * dqacc for the query heads of the chunk's nu (b, kv head) pairs from u0;
 * 8 elements per thread. */
template <typename T>
__global__ void k_att_dq_convert(T *dqkv, const float *dqacc, int u0, int nu, int T_, att_geom a, float scale,
                                 int acc)
{
    size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (size_t)nu * a.G * T_ * (TC_D / 8)) return;
    int d8 = (int)(g % (TC_D / 8)) * 8;
    size_t rt = g / (TC_D / 8);
    int t = (int)(rt % T_), hl = (int)(rt / T_); // hl: the chunk's (pair, query head of the group)
    int u = u0 + hl / a.G, b = u / a.NKV, h = (u % a.NKV) * a.G + hl % a.G;
    const float4 *src = reinterpret_cast<const float4 *>(dqacc + rt * TC_D + d8);
    float4 x0 = src[0], x1 = src[1];
    float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    T *dst = dqkv + ((size_t)b * T_ + t) * a.ld + a.q(h) + d8;
    vr_vec<T> o;
    if (acc) o = vr_ld16(dst);
#pragma unroll
    for (int i = 0; i < 8; i++) o.v[i] = vr_fromf<T>(v[i] * scale + (acc ? vr_tof(o.v[i]) : 0.0f));
    vr_st16(dst, o);
}

/* ---------------------------------------------------------------- entry points */

/* ctx->attention_v1 selects the first tensor-core kernels (forward 64 queries per block; backward as two
 * deterministic kernels without atomics) instead of v2: bit 0 the forward, bit 1 the backward. */
static int att_v1(const vr_cuda_ctx *ctx, int bwd) { return (ctx->attention_v1 >> (bwd ? 1 : 0)) & 1; }

static int use_tc(vr_cuda_dtype dt, const att_geom &a, const void *p1, const void *p2, const void *p3)
{
    return dt != VR_CUDA_F32 && a.hs == TC_D && a.ld % 8 == 0 && vr_aligned16(p1) && vr_aligned16(p2) &&
           vr_aligned16(p3);
}

template <typename T>
static vr_status att_fwd_t(const vr_cuda_ctx *ctx, void *out, float *lse, const void *qkv, int B, int T_,
                           att_geom a, int tc)
{
    cudaStream_t s = VR_STREAM(ctx);
    if constexpr (!__is_same(T, float)) {
        if (tc && !att_v1(ctx, 0)) {
            dim3 grid((T_ + TC_BQ2 - 1) / TC_BQ2, B * a.NH);
            float scale_log2 = rsqrtf((float)TC_D) * VR_LOG2E;
            k_att_fwd_tc2<T><<<grid, 128, 0, s>>>((T *)out, lse, (const T *)qkv, T_, a, scale_log2);
            return vr_cu_launched(ctx, "attention_fwd");
        }
        if (tc) {
            dim3 grid((T_ + TC_BR - 1) / TC_BR, B * a.NH);
            float scale_log2 = rsqrtf((float)TC_D) * VR_LOG2E;
            k_att_fwd_tc<T><<<grid, 128, 0, s>>>((T *)out, lse, (const T *)qkv, T_, a, scale_log2);
            return vr_cu_launched(ctx, "attention_fwd");
        }
    }
    size_t rows = (size_t)B * a.NH * T_;
    k_att_fwd_scalar<T><<<(unsigned)((rows + VR_SC_WARPS - 1) / VR_SC_WARPS), 32 * VR_SC_WARPS, 0, s>>>(
        (T *)out, lse, (const T *)qkv, B, T_, a);
    return vr_cu_launched(ctx, "attention_fwd");
}

template <typename T>
static vr_status att_bwd_t(const vr_cuda_ctx *ctx, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, int B, int T_, att_geom a, int acc, float *delta,
                           size_t scratch_bytes, int tc)
{
    cudaStream_t s = VR_STREAM(ctx);
    size_t rows = (size_t)B * a.NH * T_;
    (void)scratch_bytes;
    if constexpr (!__is_same(T, float)) {
        // v2: the fused backward, when the scratch beyond delta holds the fp32 dQ of the query heads of at
        // least one (b, kv head) pair
        size_t dbytes = (size_t)vr_scratch_align(vr_scratch_cuda_attention_delta(B, T_, a.NH));
        size_t per_u = (size_t)a.G * (size_t)vr_scratch_cuda_attention_dq_head(T_);
        if (tc && !att_v1(ctx, 1) && vr_aligned16(out) && vr_aligned16(delta) && scratch_bytes >= dbytes + per_u) {
            k_att_delta64<T><<<(unsigned)((rows * 8 + 255) / 256), 256, 0, s>>>(delta, (const T *)dout,
                                                                              (const T *)out, B, T_, a);
            VR_CU_LAUNCHED(ctx, "attention_bwd (delta)");
            float *dqacc = (float *)((char *)delta + dbytes);
            int U = B * a.NKV;
            int maxu = (int)((scratch_bytes - dbytes) / per_u < (size_t)U ? (scratch_bytes - dbytes) / per_u
                                                                            : (size_t)U);
            int nchunk = (U + maxu - 1) / maxu, per = (U + nchunk - 1) / nchunk;
            float scale = rsqrtf((float)TC_D);
            for (int u0 = 0; u0 < U; u0 += per) {
                int nu = U - u0 < per ? U - u0 : per;
                VR_CU_CHECK(cudaMemsetAsync(dqacc, 0, (size_t)nu * per_u, s), "attention_bwd");
                dim3 grid((T_ + TC_BR - 1) / TC_BR, nu);
                k_att_bwd_fused_tc<T><<<grid, 128, 0, s>>>(dqacc, (T *)dqkv, (const T *)dout, (const T *)qkv, lse,
                                                          delta, T_, a, scale, acc, u0);
                VR_CU_LAUNCHED(ctx, "attention_bwd (fused dk, dv, dq)");
                size_t n8 = (size_t)nu * a.G * T_ * (TC_D / 8);
                k_att_dq_convert<T><<<(unsigned)((n8 + 255) / 256), 256, 0, s>>>((T *)dqkv, dqacc, u0, nu, T_, a,
                                                                                scale, acc);
                VR_CU_LAUNCHED(ctx, "attention_bwd (dq convert)");
            }
            return VR_OK;
        }
    }
    k_att_delta<T><<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(delta, (const T *)dout, (const T *)out, B, T_, a);
    VR_CU_LAUNCHED(ctx, "attention_bwd (delta)");
    if constexpr (!__is_same(T, float)) {
        if (tc) {
            float scale = rsqrtf((float)TC_D);
            dim3 gk((T_ + TC_BR - 1) / TC_BR, B * a.NKV), gq((T_ + TC_BR - 1) / TC_BR, B * a.NH);
            k_att_bwd_dkv_tc<T><<<gk, 128, 0, s>>>((T *)dqkv, (const T *)dout, (const T *)qkv, lse, delta, T_, a,
                                                   scale, acc);
            VR_CU_LAUNCHED(ctx, "attention_bwd (dk, dv)");
            k_att_bwd_dq_tc<T><<<gq, 128, 0, s>>>((T *)dqkv, (const T *)dout, (const T *)qkv, lse, delta, T_, a,
                                                  scale, acc);
            return vr_cu_launched(ctx, "attention_bwd (dq)");
        }
    }
    size_t krows = (size_t)B * a.NKV * T_;
    k_att_bwd_dkv_scalar<T><<<(unsigned)((krows + VR_SC_WARPS - 1) / VR_SC_WARPS), 32 * VR_SC_WARPS, 0, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, delta, B, T_, a, acc);
    VR_CU_LAUNCHED(ctx, "attention_bwd (dk, dv)");
    k_att_bwd_dq_scalar<T><<<(unsigned)((rows + VR_SC_WARPS - 1) / VR_SC_WARPS), 32 * VR_SC_WARPS, 0, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, delta, B, T_, a, acc);
    return vr_cu_launched(ctx, "attention_bwd (dq)");
}

static vr_status att_check(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int B, int T, int NH, int NKV, int hs,
                           const char *op)
{
    VR_CU_CTX_OK(ctx, op);
    VR_CU_DT_OK(dt, op);
    if (B < 0 || T < 0 || NH <= 0 || NKV <= 0 || hs <= 0 || NH % NKV)
        return vr_cu_bad(op, "bad shape (heads and kv heads > 0, heads a multiple of kv heads)");
    if (hs > VR_ATT_HS_MAX) return vr_cu_bad(op, "head size above 128");
    if ((size_t)B * NH > 65535) return vr_cu_bad(op, "B * NH above 65535");
    return VR_OK;
}

extern "C" vr_status vr_cuda_attention_gqa_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                               const void *qkv, int B, int T, int NH, int NKV, int hs)
{
    VR_CU_TRY(att_check(ctx, dt, B, T, NH, NKV, hs, "attention_fwd"));
    if ((size_t)B * T == 0) return VR_OK;
    if (!out || !lse || !qkv) return vr_cu_bad("attention_fwd", "NULL pointer");
    att_geom a = att_geom_of(NH, NKV, hs);
    int tc = use_tc(dt, a, out, qkv, qkv);
    return VR_CU_DISPATCH(dt, att_fwd_t, ctx, out, lse, qkv, B, T, a, tc);
}

extern "C" vr_status vr_cuda_attention_gqa_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv,
                                               const void *dout, const void *qkv, const void *out, const float *lse,
                                               int B, int T, int NH, int NKV, int hs, int acc, void *scratch,
                                               size_t scratch_bytes)
{
    const char *op = "attention_bwd";
    VR_CU_TRY(att_check(ctx, dt, B, T, NH, NKV, hs, op));
    if ((size_t)B * T == 0) return VR_OK;
    if (!dqkv || !dout || !qkv || !out || !lse) return vr_cu_bad(op, "NULL pointer");
    size_t need = vr_cuda_attention_scratch_bytes(B, T, NH * hs, NH);
    if (!scratch || scratch_bytes < need)
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes < %zu needed", op, scratch_bytes,
                        need);
    att_geom a = att_geom_of(NH, NKV, hs);
    int tc = use_tc(dt, a, dqkv, dout, qkv);
    return VR_CU_DISPATCH(dt, att_bwd_t, ctx, dqkv, dout, qkv, out, lse, B, T, a, acc, (float *)scratch,
                          scratch_bytes, tc);
}

extern "C" vr_status vr_cuda_attention_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                           const void *qkv, int B, int T, int C, int NH)
{
    if (NH <= 0 || C <= 0 || C % NH) return vr_cu_bad("attention_fwd", "bad shape (C % NH must be 0)");
    return vr_cuda_attention_gqa_fwd(ctx, dt, out, lse, qkv, B, T, NH, NH, C / NH);
}

extern "C" vr_status vr_cuda_attention_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv,
                                           const void *dout, const void *qkv, const void *out, const float *lse,
                                           int B, int T, int C, int NH, int acc, void *scratch,
                                           size_t scratch_bytes)
{
    if (NH <= 0 || C <= 0 || C % NH) return vr_cu_bad("attention_bwd", "bad shape (C % NH must be 0)");
    return vr_cuda_attention_gqa_bwd(ctx, dt, dqkv, dout, qkv, out, lse, B, T, NH, NH, C / NH, acc, scratch,
                                     scratch_bytes);
}
