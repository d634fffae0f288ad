/* vram — CUDA optimizer updates over compact state (kernels_cuda.h "compact optimizer state"): bf16 and
 * 8-bit block-wise m, v (or momentum), bf16 weights without a master copy, and split masters (any state). One block of 256 threads
 * per chunk of VR_CUDA_MT_CHUNK elements (a multiple of VR_Q8_BLOCK, so an 8-bit block never spans two
 * chunks); 8-bit: each pass of the block takes one quantization block, a thread per element, the block's
 * absmax by a block reduction; bf16 and f32 state: four consecutive elements a thread at a time (optim_elem.cuh's
 * chunk_walk), where every array is aligned for it. The per-element arithmetic is optim_elem.cuh's opt_upd, as in optim.cu;
 * the random bits of stochastic rounding and the nearest-code search are kernels/optim_math.h, shared
 * with the CPU kernels. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/optim_elem.cuh"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/optim_math.h"
#include "vram/optim_state.h"


__constant__ float c_smap[256], c_umap[256];

/* The maps in constant memory, once per device (the first update runs before any CUDA graph capture). */
static vr_status maps_ready(const vr_cuda_ctx *ctx)
{
    static int done[64];
    int d = ctx->device >= 0 && ctx->device < 64 ? ctx->device : 0;
    if (done[d]) return VR_OK;
    VR_CU_CHECK(cudaMemcpyToSymbol(c_smap, vr_qmap(1), 256 * sizeof(float)), "optim_state");
    VR_CU_CHECK(cudaMemcpyToSymbol(c_umap, vr_qmap(0), 256 * sizeof(float)), "optim_state");
    done[d] = 1;
    return VR_OK;
}

__device__ __forceinline__ float ld_state(const void *p, size_t i, int fmt)
{
    return fmt == VR_CUDA_STATE_BF16 ? vr_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* A weight without a master copy: bf16 rounds stochastically, fp32 is exact. */
template <typename TP> __device__ __forceinline__ TP round_w(float p, uint32_t bits)
{
    (void)bits;
    return vr_fromf<TP>(p);
}
template <> __device__ __forceinline__ __nv_bfloat16 round_w<__nv_bfloat16>(float p, uint32_t bits)
{
    return __ushort_as_bfloat16(vr_bf16_sr(p, bits));
}

template <typename TP>
__device__ __forceinline__ void store_param(const vr_cuda_mt_tensor &t, size_t i, float p, const opt_args &a)
{
    TP *param = (TP *)t.param;
    if (t.split) { /* bf16 params (the executor's rule): the high half, the low 16 bits in master */
        opt_split_store((uint16_t *)t.param, (uint16_t *)t.master, i, p);
    } else if (t.master) {
        t.master[i] = p;
        param[i] = vr_fromf<TP>(p);
    } else {
        param[i] = round_w<TP>(p, vr_sr_bits(a.seed, VR_SR_W, t.windex + i));
    }
}

template <typename TP> __device__ __forceinline__ float weight(const vr_cuda_mt_tensor &t, size_t i)
{
    if (t.split)
        return opt_split_weight((const uint16_t *)t.param, (const uint16_t *)t.master, i);
    return t.master ? t.master[i] : vr_tof(((const TP *)t.param)[i]);
}

/* What a kind keeps (m: momentum or Adam's m; v: Adam's v) and the stream of its stochastic rounding's bits: Adam's
 * m and v share one draw (m its low half, v its high half), momentum has its own (as the CPU kernels). */
template <int KIND> struct kind_state {
    static constexpr bool m = KIND != OPT_SGD, v = KIND == OPT_ADAM || KIND == OPT_ADAMW;
    static constexpr uint32_t stream = v ? VR_SR_MV : VR_SR_M;
};

/* Element i of t: f32 or bf16 state. */
template <int KIND, typename TP, typename TG>
__device__ __forceinline__ void elem1(const vr_cuda_mt_tensor &t, size_t i, const opt_args &a, float wd, float gs)
{
    constexpr bool has_m = kind_state<KIND>::m, has_v = kind_state<KIND>::v;
    float mi = has_m ? ld_state(t.m, i, t.fmt) : 0.0f, vi = has_v ? ld_state(t.v, i, t.fmt) : 0.0f;
    float p = opt_upd<KIND>(weight<TP>(t, i), __fmul_rn(vr_tof(((const TG *)t.grad)[i]), gs), mi, vi, a, wd);
    store_param<TP>(t, i, p, a);
    if (t.fmt == VR_CUDA_STATE_BF16) {
        uint32_t r = vr_sr_bits(a.seed, kind_state<KIND>::stream, t.sindex + i);
        if (has_m) ((uint16_t *)t.m)[i] = vr_bf16_sr(mi, r);
        if (has_v) ((uint16_t *)t.v)[i] = vr_bf16_sr(vi, r >> 16);
    } else {
        if (has_m) t.m[i] = mi;
        if (has_v) t.v[i] = vi;
    }
}

/* Four consecutive state values as floats and back: bf16 (8 bytes, stochastically rounded with bits r[k] >> shift)
 * or f32 (16 bytes). */
__device__ __forceinline__ void ld_state4(const void *p, size_t i, int fmt, float o[4])
{
    if (fmt == VR_CUDA_STATE_BF16) {
        uint2 u = *(const uint2 *)((const uint16_t *)p + i);
        const uint16_t *e = (const uint16_t *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = vr_bf16_to_f32(e[k]);
    } else {
        ld4((const float *)p + i, o);
    }
}
__device__ __forceinline__ void st_state4(void *p, size_t i, int fmt, const float x[4], const uint32_t r[4], int shift)
{
    if (fmt == VR_CUDA_STATE_BF16) {
        uint2 u;
        uint16_t *e = (uint16_t *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) e[k] = vr_bf16_sr(x[k], r[k] >> shift);
        *(uint2 *)((uint16_t *)p + i) = u;
    } else {
        st4((float *)p + i, x);
    }
}

/* Elements [i, i+4) of t: elem1's arithmetic and random bits for each, one wide access per array. */
template <int KIND, typename TP, typename TG>
__device__ __forceinline__ void elem4(const vr_cuda_mt_tensor &t, size_t i, const opt_args &a, float wd, float gs)
{
    constexpr bool has_m = kind_state<KIND>::m, has_v = kind_state<KIND>::v;
    float p[4], g[4], mi[4] = {0, 0, 0, 0}, vi[4] = {0, 0, 0, 0};
    if (t.split) {
        uint2 hv = *(const uint2 *)((const uint16_t *)t.param + i), lv = *(const uint2 *)((const uint16_t *)t.master + i);
        const uint16_t *h = (const uint16_t *)&hv, *l = (const uint16_t *)&lv;
#pragma unroll
        for (int k = 0; k < 4; k++) p[k] = vr_bits_f32(vr_split_join(h[k], l[k]));
    } else if (t.master) {
        ld4(t.master + i, p);
    } else {
        ld4((const TP *)t.param + i, p);
    }
    ld4((const TG *)t.grad + i, g);
    if (has_m) ld_state4(t.m, i, t.fmt, mi);
    if (has_v) ld_state4(t.v, i, t.fmt, vi);
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = opt_upd<KIND>(p[k], __fmul_rn(g[k], gs), mi[k], vi[k], a, wd);
    if (t.split) {
        uint2 hv, lv;
        uint16_t *h = (uint16_t *)&hv, *l = (uint16_t *)&lv;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t u = vr_f32_bits(p[k]);
            h[k] = vr_split_hi(u), l[k] = vr_split_lo(u);
        }
        *(uint2 *)((uint16_t *)t.param + i) = hv;
        *(uint2 *)((uint16_t *)t.master + i) = lv;
    } else if (t.master) {
        st4(t.master + i, p);
        st4((TP *)t.param + i, p);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) store_param<TP>(t, i + k, p[k], a);
    }
    uint32_t r[4] = {0, 0, 0, 0}; /* elem1's random bits: m the low 16 (or momentum's), v the high 16 */
    if (t.fmt == VR_CUDA_STATE_BF16)
#pragma unroll
        for (int k = 0; k < 4; k++) r[k] = vr_sr_bits(a.seed, kind_state<KIND>::stream, t.sindex + i + k);
    if (has_m) st_state4(t.m, i, t.fmt, mi, r, 0);
    if (has_v) st_state4(t.v, i, t.fmt, vi, r, 16);
}

static_assert(VR_Q8_BLOCK == 256, "chunk_walk takes blocks of 256 threads");

/* Elements [lo, hi) of t: f32 or bf16 state, four at a time where every array is aligned for it. */
template <int KIND, typename TP, typename TG>
__device__ void chunk_elem(const vr_cuda_mt_tensor &t, size_t lo, size_t hi, const opt_args &a, float wd, float gs)
{
    constexpr bool has_m = kind_state<KIND>::m, has_v = kind_state<KIND>::v;
    bool wide = al4((const TG *)t.grad) && (t.split ? al4((const uint16_t *)t.param) && al4((const uint16_t *)t.master)
                                                    : al4((const TP *)t.param) && (!t.master || al4(t.master)));
    if (t.fmt == VR_CUDA_STATE_BF16)
        wide = wide && (!has_m || al4((const uint16_t *)t.m)) && (!has_v || al4((const uint16_t *)t.v));
    else
        wide = wide && (!has_m || al4(t.m)) && (!has_v || al4(t.v));
    chunk_walk(lo, hi, wide, [&](size_t i) { elem4<KIND, TP, TG>(t, i, a, wd, gs); },
               [&](size_t i) { elem1<KIND, TP, TG>(t, i, a, wd, gs); });
}

/* Elements [lo, hi) of t, 8-bit state: one quantization block per pass (blockDim.x == VR_Q8_BLOCK). */
template <int KIND, typename TP, typename TG>
__device__ void chunk_q8(const vr_cuda_mt_tensor &t, size_t lo, size_t hi, const opt_args &a, float wd, float gs,
                         const float *smap, const float *umap, float *red)
{
    const TG *grad = (const TG *)t.grad;
    constexpr bool has_v = kind_state<KIND>::v;
    uint8_t *mc = (uint8_t *)t.m, *vc = (uint8_t *)t.v;
    for (size_t b0 = lo; b0 < hi; b0 += VR_Q8_BLOCK) {
        size_t i = b0 + threadIdx.x, blk = b0 / VR_Q8_BLOCK;
        bool in = i < hi;
        float mi = 0.0f, vi = 0.0f;
        if (in) {
            mi = smap[mc[i]] * t.absmax_m[blk];
            if (has_v) vi = umap[vc[i]] * t.absmax_v[blk];
            float g = __fmul_rn(vr_tof(grad[i]), gs);
            if (isfinite(g)) store_param<TP>(t, i, opt_upd<KIND>(weight<TP>(t, i), g, mi, vi, a, wd), a);
        }
        float am = vr_block_max(in ? fabsf(mi) : 0.0f, red);
        float av = has_v ? vr_block_max(in ? vi : 0.0f, red) : 0.0f;
        if (in) {
            mc[i] = vr_q8_code(smap, am > 0.0f ? mi / am : 0.0f);
            if (has_v) vc[i] = vr_q8_code(umap, av > 0.0f ? vi / av : 0.0f);
        }
        if (threadIdx.x == 0) {
            t.absmax_m[blk] = am;
            if (has_v) t.absmax_v[blk] = av;
        }
    }
}

/* One block per chunk: of the table's entry holding it (tab, nt), or of the single tensor one. Launch bounds (256, 1):
 * with the block size alone ptxas capped the registers at 40 and spilled the four-wide body. */
template <int KIND, typename TP, typename TG>
__global__ void __launch_bounds__(VR_Q8_BLOCK, 1) k_state(const vr_cuda_mt_tensor *tab, int nt, vr_cuda_mt_tensor one,
                                                       opt_args a, const float *dev_scale, const int32_t *dev_skip,
                                                       const float *hp)
{
    if (dev_skip && *dev_skip) return;
    opt_device_scalars(a, hp);
    float gs = __fmul_rn(a.grad_scale, dev_scale ? *dev_scale : 1.0f);
    __shared__ vr_cuda_mt_tensor t;
    __shared__ float smap[256], umap[256], red[32];
    if (threadIdx.x == 0) t = tab ? tab[mt_find(tab, nt, (int64_t)blockIdx.x)] : one;
    __syncthreads();
    size_t lo = (size_t)((int64_t)blockIdx.x - t.chunk0) * VR_CUDA_MT_CHUNK;
    size_t hi = lo + VR_CUDA_MT_CHUNK < (size_t)t.n ? lo + VR_CUDA_MT_CHUNK : (size_t)t.n;
    float wd = t.decay ? a.wd : 0.0f;
    if (t.fmt == VR_CUDA_STATE_Q8 && KIND != OPT_SGD) { /* the maps in shared memory: the 8-bit state only */
        smap[threadIdx.x] = c_smap[threadIdx.x];
        umap[threadIdx.x] = c_umap[threadIdx.x];
        __syncthreads();
        chunk_q8<KIND, TP, TG>(t, lo, hi, a, wd, gs, smap, umap, red);
    } else {
        chunk_elem<KIND, TP, TG>(t, lo, hi, a, wd, gs);
    }
}

template <int KIND, typename TP>
static void launch_tg(const vr_cuda_ctx *ctx, vr_cuda_dtype gdt, const vr_cuda_mt_tensor *tab, int nt,
                      const vr_cuda_mt_tensor &one, unsigned blocks, const opt_args &a, const float *ds,
                      const int32_t *sk)
{
    cudaStream_t s = VR_STREAM(ctx);
    const float *hp = ctx->opt_scalars;
    if (gdt == VR_CUDA_F32)
        k_state<KIND, TP, float><<<blocks, VR_Q8_BLOCK, 0, s>>>(tab, nt, one, a, ds, sk, hp);
    else if (gdt == VR_CUDA_BF16)
        k_state<KIND, TP, __nv_bfloat16><<<blocks, VR_Q8_BLOCK, 0, s>>>(tab, nt, one, a, ds, sk, hp);
    else
        k_state<KIND, TP, __half><<<blocks, VR_Q8_BLOCK, 0, s>>>(tab, nt, one, a, ds, sk, hp);
}

template <int KIND>
static void launch(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, vr_cuda_dtype gdt, const vr_cuda_mt_tensor *tab, int nt,
                   const vr_cuda_mt_tensor &one, unsigned blocks, const opt_args &a, const float *ds, const int32_t *sk)
{
    if (pdt == VR_CUDA_F32) launch_tg<KIND, float>(ctx, gdt, tab, nt, one, blocks, a, ds, sk);
    else if (pdt == VR_CUDA_BF16) launch_tg<KIND, __nv_bfloat16>(ctx, gdt, tab, nt, one, blocks, a, ds, sk);
    else launch_tg<KIND, __half>(ctx, gdt, tab, nt, one, blocks, a, ds, sk);
}

static vr_status run(const vr_cuda_ctx *ctx, const char *op, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                     const vr_cuda_mt_tensor *tab, int nt, const vr_cuda_mt_tensor &one, int64_t chunks,
                     const opt_args &a, const float *ds, const int32_t *sk)
{
    if (!vr_cu_dt_ok(pdt) || !vr_cu_dt_ok(gdt)) return vr_cu_bad(op, "unknown dtype");
    if (kind < OPT_SGD || kind > OPT_ADAMW) return vr_cu_bad(op, "unknown optimizer");
    if (chunks <= 0) return VR_OK;
    if (chunks > 0x7fffffff) return vr_cu_bad(op, "too many chunks");
    VR_CU_TRY(maps_ready(ctx));
    unsigned blocks = (unsigned)chunks;
    switch (kind) {
    case OPT_SGD: launch<OPT_SGD>(ctx, pdt, gdt, tab, nt, one, blocks, a, ds, sk); break;
    case OPT_MOM: launch<OPT_MOM>(ctx, pdt, gdt, tab, nt, one, blocks, a, ds, sk); break;
    case OPT_ADAM: launch<OPT_ADAM>(ctx, pdt, gdt, tab, nt, one, blocks, a, ds, sk); break;
    default: launch<OPT_ADAMW>(ctx, pdt, gdt, tab, nt, one, blocks, a, ds, sk); break;
    }
    return vr_cu_launched(ctx, op);
}

extern "C" vr_status vr_cuda_mt_optim_state(const vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                                            const vr_cuda_mt_tensor *tab, int n_tensors, int64_t n_chunks, float lr,
                                            float beta1, float beta2, float eps, float momentum, float dampening,
                                            int nesterov, float weight_decay, int step, float grad_scale,
                                            const float *dev_grad_scale, const int32_t *dev_skip)
{
    const char *op = "multi_tensor_optim_state";
    VR_CU_CTX_OK(ctx, op);
    if (n_tensors <= 0) return VR_OK;
    if (!tab) return vr_cu_bad(op, "NULL table");
    vr_cuda_mt_tensor none;
    memset(&none, 0, sizeof none);
    opt_args a = opt_make_args(kind, lr, beta1, beta2, eps, momentum, dampening, nesterov, weight_decay, step, grad_scale);
    return run(ctx, op, kind, pdt, gdt, tab, n_tensors, none, n_chunks, a, dev_grad_scale, dev_skip);
}

extern "C" vr_status vr_cuda_optim_state(const vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                                         const vr_cuda_mt_tensor *t, float lr, float beta1, float beta2, float eps,
                                         float momentum, float dampening, int nesterov, float weight_decay, int step,
                                         float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    const char *op = "optim_state";
    VR_CU_CTX_OK(ctx, op);
    if (!t || t->n <= 0) return VR_OK;
    if (!t->param || !t->grad) return vr_cu_bad(op, "NULL pointer");
    if (!t->master && pdt == VR_CUDA_F16) return vr_cu_bad(op, "an fp16 param needs an fp32 master");
    if (t->split && (pdt != VR_CUDA_BF16 || !t->master)) return vr_cu_bad(op, "a split master needs bf16 params");
    if (kind != OPT_SGD && !t->m) return vr_cu_bad(op, "NULL state");
    if ((kind == OPT_ADAM || kind == OPT_ADAMW) && !t->v) return vr_cu_bad(op, "NULL state");
    if (t->fmt == VR_CUDA_STATE_Q8 && kind != OPT_SGD && (!t->absmax_m || (kind >= OPT_ADAM && !t->absmax_v)))
        return vr_cu_bad(op, "8-bit state without its absmax");
    vr_cuda_mt_tensor one = *t;
    one.chunk0 = 0;
    int64_t chunks = (t->n + VR_CUDA_MT_CHUNK - 1) / VR_CUDA_MT_CHUNK;
    opt_args a = opt_make_args(kind, lr, beta1, beta2, eps, momentum, dampening, nesterov, weight_decay, step, grad_scale);
    return run(ctx, op, kind, pdt, gdt, NULL, 0, one, chunks, a, dev_grad_scale, dev_skip);
}
