/* vram — CUDA fused optimizer updates over flat parameter buffers (torch.optim semantics): SGD,
 * SGD with momentum, Adam, AdamW. One grid-stride pass reads the gradient (any dtype), the fp32
 * state and the fp32 master (or fp32 param), updates them and writes the rounded param. The gradient
 * multiplier is grad_scale * dev_grad_scale[0] (a device scalar: clip factor, 1/loss scale) and a
 * device flag dev_skip skips the step (fp16 overflow), so no host round trip is needed. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/optim_elem.cuh"

/* One element's update (shared by the single-tensor and the multi-tensor kernels; the arithmetic is
 * optim_elem.cuh's opt_upd). wd is this tensor's weight decay, gs the gradient multiplier. */
template <int KIND, typename TP, typename TG>
__device__ __forceinline__ void opt_elem(TP *param, float *master, const TG *grad, float *m, float *v, size_t i,
                                         const opt_args &a, float wd, float gs)
{
    float mi = KIND != OPT_SGD ? m[i] : 0.0f, vi = KIND >= OPT_ADAM ? v[i] : 0.0f;
    float p = opt_upd<KIND>(master ? master[i] : vr_tof(param[i]), __fmul_rn(vr_tof(grad[i]), gs), mi, vi, a, wd);
    if (KIND != OPT_SGD) m[i] = mi;
    if (KIND >= OPT_ADAM) v[i] = vi;
    if (master) master[i] = p;
    param[i] = vr_fromf<TP>(p);
}

template <int KIND, typename TP, typename TG>
__global__ void k_opt(TP *param, float *master, const TG *grad, float *m, float *v, size_t n, opt_args a,
                      const float *dev_scale, const int32_t *dev_skip, const float *hp)
{
    if (dev_skip && *dev_skip) return;
    opt_device_scalars(a, hp);
    float gs = __fmul_rn(a.grad_scale, dev_scale ? *dev_scale : 1.0f);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        opt_elem<KIND>(param, master, grad, m, v, i, a, a.wd, gs);
}

template <int KIND, typename TP>
static void launch_tg(const vr_cuda_ctx *ctx, vr_cuda_dtype gdt, TP *param, float *master, const void *grad,
                      float *m, float *v, size_t n, const opt_args &a, const float *ds, const int32_t *sk)
{
    unsigned g = vr_grid_for(n, 256, ctx);
    cudaStream_t s = VR_STREAM(ctx);
    if (gdt == VR_CUDA_F32)
        k_opt<KIND><<<g, 256, 0, s>>>(param, master, (const float *)grad, m, v, n, a, ds, sk, ctx->opt_scalars);
    else if (gdt == VR_CUDA_BF16)
        k_opt<KIND><<<g, 256, 0, s>>>(param, master, (const __nv_bfloat16 *)grad, m, v, n, a, ds, sk, ctx->opt_scalars);
    else
        k_opt<KIND><<<g, 256, 0, s>>>(param, master, (const __half *)grad, m, v, n, a, ds, sk, ctx->opt_scalars);
}

template <int KIND>
static vr_status run_opt(const vr_cuda_ctx *ctx, const char *op, vr_cuda_dtype pdt, void *param, float *master,
                         vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, const opt_args &a,
                         const float *ds, const int32_t *sk)
{
    VR_CU_CTX_OK(ctx, op);
    if (!vr_cu_dt_ok(pdt) || !vr_cu_dt_ok(gdt)) return vr_cu_bad(op, "unknown dtype");
    if (n == 0) return VR_OK;
    if (!param || !grad) return vr_cu_bad(op, "NULL pointer");
    if (!master && pdt != VR_CUDA_F32) return vr_cu_bad(op, "a bf16/fp16 param needs an fp32 master");
    if ((KIND == OPT_MOM || KIND == OPT_ADAM || KIND == OPT_ADAMW) && !m) return vr_cu_bad(op, "NULL state");
    if ((KIND == OPT_ADAM || KIND == OPT_ADAMW) && !v) return vr_cu_bad(op, "NULL state");
    if (pdt == VR_CUDA_F32) launch_tg<KIND>(ctx, gdt, (float *)param, master, grad, m, v, n, a, ds, sk);
    else if (pdt == VR_CUDA_BF16) launch_tg<KIND>(ctx, gdt, (__nv_bfloat16 *)param, master, grad, m, v, n, a, ds, sk);
    else launch_tg<KIND>(ctx, gdt, (__half *)param, master, grad, m, v, n, a, ds, sk);
    return vr_cu_launched(ctx, op);
}

extern "C" vr_status vr_cuda_sgd(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                 vr_cuda_dtype gdt, const void *grad, size_t n, float lr, float weight_decay,
                                 float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    opt_args a = opt_make_args(OPT_SGD, lr, 0, 0, 0, 0, 0, 0, weight_decay, 1, grad_scale);
    return run_opt<OPT_SGD>(ctx, "sgd", pdt, param, master, gdt, grad, NULL, NULL, n, a, dev_grad_scale, dev_skip);
}

extern "C" vr_status vr_cuda_sgd_momentum(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                          vr_cuda_dtype gdt, const void *grad, float *mom, size_t n, float lr,
                                          float momentum, float dampening, float weight_decay, int nesterov,
                                          int step, float grad_scale, const float *dev_grad_scale,
                                          const int32_t *dev_skip)
{
    opt_args a = opt_make_args(OPT_MOM, lr, 0, 0, 0, momentum, dampening, nesterov, weight_decay, step, grad_scale);
    return run_opt<OPT_MOM>(ctx, "sgd_momentum", pdt, param, master, gdt, grad, mom, NULL, n, a, dev_grad_scale,
                            dev_skip);
}

extern "C" void vr_cuda_opt_scalars(float out[VR_CUDA_OPT_SCALARS], float lr, float beta1, float beta2, int step)
{
    int t = step < 1 ? 1 : step;
    out[0] = lr;
    out[1] = (float)(1.0 - pow((double)beta1, (double)t));
    out[2] = (float)sqrt(1.0 - pow((double)beta2, (double)t));
    out[3] = step <= 1 ? 1.0f : 0.0f;
    out[4] = (float)t;
}

extern "C" vr_status vr_cuda_adam(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                  vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay, int step,
                                  float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    opt_args a = opt_make_args(OPT_ADAM, lr, beta1, beta2, eps, 0, 0, 0, weight_decay, step, grad_scale);
    return run_opt<OPT_ADAM>(ctx, "adam", pdt, param, master, gdt, grad, m, v, n, a, dev_grad_scale, dev_skip);
}

extern "C" vr_status vr_cuda_adamw(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                   vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, int step,
                                   float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    opt_args a = opt_make_args(OPT_ADAMW, lr, beta1, beta2, eps, 0, 0, 0, weight_decay, step, grad_scale);
    return run_opt<OPT_ADAMW>(ctx, "adamw", pdt, param, master, gdt, grad, m, v, n, a, dev_grad_scale, dev_skip);
}

/* ---------------------------------------------------------------- multi-tensor apply */

extern "C" int64_t vr_cuda_mt_layout(vr_cuda_mt_tensor *t, int n)
{
    int64_t c = 0;
    for (int i = 0; i < n; i++) {
        t[i].chunk0 = c;
        c += (t[i].n + VR_CUDA_MT_CHUNK - 1) / VR_CUDA_MT_CHUNK;
    }
    return c;
}

/* The gradient, m and v of elements [i, i+4) read, the four weights p updated (opt_elem's arithmetic for each), m and
 * v written back: one wide access per array. */
template <int KIND, typename TG>
__device__ __forceinline__ void upd4(float p[4], const TG *grad, float *m, float *v, size_t i, const opt_args &a,
                                     float wd, float gs)
{
    float g[4], mi[4] = {0, 0, 0, 0}, vi[4] = {0, 0, 0, 0};
    ld4(grad + i, g);
    if (KIND != OPT_SGD) ld4(m + i, mi);
    if (KIND >= OPT_ADAM) ld4(v + i, vi);
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = opt_upd<KIND>(p[k], __fmul_rn(g[k], gs), mi[k], vi[k], a, wd);
    if (KIND != OPT_SGD) st4(m + i, mi);
    if (KIND >= OPT_ADAM) st4(v + i, vi);
}

/* Elements [i, i+4): the weights from the master (or the fp32 params), upd4, the new weights stored. */
template <int KIND, typename TP, typename TG>
__device__ __forceinline__ void opt_elem4(TP *param, float *master, const TG *grad, float *m, float *v, size_t i,
                                          const opt_args &a, float wd, float gs)
{
    float p[4];
    if (master) ld4(master + i, p);
    else ld4(param + i, p);
    upd4<KIND>(p, grad, m, v, i, a, wd, gs);
    if (master) st4(master + i, p);
    st4(param + i, p);
}

/* opt_elem4 for a split master (bf16 param = its high half, lo its 16 low bits: optim_math.h): the same fp32
 * value in, the same arithmetic, the same fp32 value out as a full master. */
template <int KIND, typename TG>
__device__ __forceinline__ void opt_elem4_split(__nv_bfloat16 *param, uint16_t *lo, const TG *grad, float *m, float *v,
                                                size_t i, const opt_args &a, float wd, float gs)
{
    float p[4];
    uint2 hv = *(const uint2 *)(param + i), lv = *(const uint2 *)(lo + i);
    const uint16_t *h = (const uint16_t *)&hv, *l = (const uint16_t *)&lv;
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = vr_bits_f32(vr_split_join(h[k], l[k]));
    upd4<KIND>(p, grad, m, v, i, a, wd, gs);
    uint16_t *ho = (uint16_t *)&hv, *lo4 = (uint16_t *)&lv;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t u = vr_f32_bits(p[k]);
        ho[k] = vr_split_hi(u);
        lo4[k] = vr_split_lo(u);
    }
    *(uint2 *)(param + i) = hv;
    *(uint2 *)(lo + i) = lv;
}

template <int KIND, typename TG>
__device__ __forceinline__ void opt_elem_split(__nv_bfloat16 *param, uint16_t *lo, const TG *grad, float *m, float *v,
                                               size_t i, const opt_args &a, float wd, float gs)
{
    float mi = KIND != OPT_SGD ? m[i] : 0.0f, vi = KIND >= OPT_ADAM ? v[i] : 0.0f;
    float p = opt_upd<KIND>(opt_split_weight((const uint16_t *)param, lo, i), __fmul_rn(vr_tof(grad[i]), gs), mi, vi,
                            a, wd);
    if (KIND != OPT_SGD) m[i] = mi;
    if (KIND >= OPT_ADAM) v[i] = vi;
    opt_split_store((uint16_t *)param, lo, i, p);
}

/* Elements [lo, hi) of a split-master tensor: bf16 params only (the executor gives no other a split master). */
template <int KIND, typename TG>
__device__ __forceinline__ void chunk_split(__nv_bfloat16 *param, const vr_cuda_mt_tensor &t, size_t lo, size_t hi,
                                            const opt_args &a, float wd, float gs)
{
    uint16_t *low = (uint16_t *)t.master;
    const TG *grad = (const TG *)t.grad;
    bool wide = al4(param) && al4(low) && al4(grad) && (KIND == OPT_SGD || al4(t.m)) && (KIND < OPT_ADAM || al4(t.v));
    chunk_walk(lo, hi, wide, [&](size_t i) { opt_elem4_split<KIND>(param, low, grad, t.m, t.v, i, a, wd, gs); },
               [&](size_t i) { opt_elem_split<KIND>(param, low, grad, t.m, t.v, i, a, wd, gs); });
}
template <int KIND, typename TG, typename TP>
__device__ __forceinline__ void chunk_split(TP *, const vr_cuda_mt_tensor &, size_t, size_t, const opt_args &, float,
                                            float)
{
}

/* One block per chunk (the hardware balances the blocks). Each thread takes four consecutive elements at a time
 * (16-byte fp32 and 8-byte 16-bit accesses) where the tensor's arrays are aligned for it, else one; the tail of a
 * chunk past a multiple of four goes one by one. 4 blocks of 256 per SM leave 64 registers: no spill (ptxas -v);
 * with 6 blocks (40 registers) the four-wide body spilled. Per element the arithmetic is opt_elem's. */
template <int KIND, typename TP, typename TG>
__global__ void __launch_bounds__(256, 4) k_mt_opt(const vr_cuda_mt_tensor *tab, int nt, opt_args a,
                                                const float *dev_scale, const int32_t *dev_skip, const float *hp)
{
    if (dev_skip && *dev_skip) return;
    opt_device_scalars(a, hp);
    float gs = __fmul_rn(a.grad_scale, dev_scale ? *dev_scale : 1.0f);
    __shared__ vr_cuda_mt_tensor t;
    if (threadIdx.x == 0) t = tab[mt_find(tab, nt, (int64_t)blockIdx.x)];
    __syncthreads();
    size_t lo = (size_t)((int64_t)blockIdx.x - t.chunk0) * VR_CUDA_MT_CHUNK;
    size_t hi = lo + VR_CUDA_MT_CHUNK < (size_t)t.n ? lo + VR_CUDA_MT_CHUNK : (size_t)t.n;
    float wd = t.decay ? a.wd : 0.0f;
    if (t.split) {
        chunk_split<KIND, TG>((TP *)t.param, t, lo, hi, a, wd, gs);
        return;
    }
    TP *param = (TP *)t.param;
    const TG *grad = (const TG *)t.grad;
    float *master = t.master, *m = t.m, *v = t.v;
    bool wide = al4(param) && al4(grad) && (!master || al4(master)) && (KIND == OPT_SGD || al4(m)) &&
                (KIND < OPT_ADAM || al4(v));
    chunk_walk(lo, hi, wide, [&](size_t i) { opt_elem4<KIND>(param, master, grad, m, v, i, a, wd, gs); },
               [&](size_t i) { opt_elem<KIND>(param, master, grad, m, v, i, a, wd, gs); });
}

template <int KIND, typename TP>
static void mt_launch_tg(const vr_cuda_ctx *ctx, vr_cuda_dtype gdt, const vr_cuda_mt_tensor *tab, int nt,
                         unsigned blocks, const opt_args &a, const float *ds, const int32_t *sk)
{
    cudaStream_t s = VR_STREAM(ctx);
    if (gdt == VR_CUDA_F32)
        k_mt_opt<KIND, TP, float><<<blocks, 256, 0, s>>>(tab, nt, a, ds, sk, ctx->opt_scalars);
    else if (gdt == VR_CUDA_BF16)
        k_mt_opt<KIND, TP, __nv_bfloat16><<<blocks, 256, 0, s>>>(tab, nt, a, ds, sk, ctx->opt_scalars);
    else
        k_mt_opt<KIND, TP, __half><<<blocks, 256, 0, s>>>(tab, nt, a, ds, sk, ctx->opt_scalars);
}

template <int KIND>
static void mt_launch(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, vr_cuda_dtype gdt, const vr_cuda_mt_tensor *tab,
                      int nt, unsigned blocks, const opt_args &a, const float *ds, const int32_t *sk)
{
    if (pdt == VR_CUDA_F32) mt_launch_tg<KIND, float>(ctx, gdt, tab, nt, blocks, a, ds, sk);
    else if (pdt == VR_CUDA_BF16) mt_launch_tg<KIND, __nv_bfloat16>(ctx, gdt, tab, nt, blocks, a, ds, sk);
    else mt_launch_tg<KIND, __half>(ctx, gdt, tab, nt, blocks, a, ds, sk);
}

extern "C" vr_status vr_cuda_mt_optim(const vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                                      const vr_cuda_mt_tensor *tab, int n_tensors, int64_t n_chunks, float lr,
                                      float beta1, float beta2, float eps, float momentum, float dampening,
                                      int nesterov, float weight_decay, int step, float grad_scale,
                                      const float *dev_grad_scale, const int32_t *dev_skip)
{
    const char *op = "multi_tensor_optim";
    VR_CU_CTX_OK(ctx, op);
    if (!vr_cu_dt_ok(pdt) || !vr_cu_dt_ok(gdt)) return vr_cu_bad(op, "unknown dtype");
    if (kind < VR_CUDA_MT_SGD || kind > VR_CUDA_MT_ADAMW) return vr_cu_bad(op, "unknown optimizer");
    if (n_chunks <= 0 || n_tensors <= 0) return VR_OK;
    if (!tab) return vr_cu_bad(op, "NULL table");
    if (n_chunks > 0x7fffffff) return vr_cu_bad(op, "too many chunks");
    opt_args a = opt_make_args(kind, lr, beta1, beta2, eps, momentum, dampening, nesterov, weight_decay, step,
                               grad_scale);
    unsigned blocks = (unsigned)n_chunks;
    switch (kind) {
    case VR_CUDA_MT_SGD: mt_launch<OPT_SGD>(ctx, pdt, gdt, tab, n_tensors, blocks, a, dev_grad_scale, dev_skip); break;
    case VR_CUDA_MT_MOMENTUM:
        mt_launch<OPT_MOM>(ctx, pdt, gdt, tab, n_tensors, blocks, a, dev_grad_scale, dev_skip);
        break;
    case VR_CUDA_MT_ADAM: mt_launch<OPT_ADAM>(ctx, pdt, gdt, tab, n_tensors, blocks, a, dev_grad_scale, dev_skip); break;
    default: mt_launch<OPT_ADAMW>(ctx, pdt, gdt, tab, n_tensors, blocks, a, dev_grad_scale, dev_skip); break;
    }
    return vr_cu_launched(ctx, op);
}
