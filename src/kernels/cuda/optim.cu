/* vram — CUDA fused optimizer updates over flat parameter buffers (torch.optim semantics): SGD,
 * SGD with momentum, Adam, AdamW. One grid-stride pass reads the gradient (any dtype), the fp32
 * state and the fp32 master (or fp32 param), updates them and writes the rounded param. The gradient
 * multiplier is grad_scale * dev_grad_scale[0] (a device scalar: clip factor, 1/loss scale) and a
 * device flag dev_skip skips the step (fp16 overflow), so no host round trip is needed. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

enum { OPT_SGD, OPT_MOM, OPT_ADAM, OPT_ADAMW };

struct opt_args {
    float lr, wd, b1, b2, eps, bc1, bc2_sqrt, momentum, dampening, grad_scale;
    int nesterov, first;
};

template <int KIND, typename TP, typename TG>
__global__ void k_opt(TP *param, float *master, const TG *grad, float *m, float *v, size_t n, opt_args a,
                      const float *dev_scale, const int32_t *dev_skip, const float *hp)
{
    if (dev_skip && *dev_skip) return;
    if (hp) { /* this step's lr and bias corrections from the device (a replayed CUDA graph) */
        a.lr = hp[0];
        a.bc1 = hp[1];
        a.bc2_sqrt = hp[2];
        a.first = hp[3] != 0.0f;
    }
    float gs = a.grad_scale * (dev_scale ? *dev_scale : 1.0f);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = master ? master[i] : vr_tof(param[i]);
        float g = vr_tof(grad[i]) * gs;
        if (KIND == OPT_SGD) {
            g += a.wd * p;
            p -= a.lr * g;
        } else if (KIND == OPT_MOM) {
            g += a.wd * p;
            float buf = a.first ? g : a.momentum * m[i] + (1.0f - a.dampening) * g;
            m[i] = buf;
            g = a.nesterov ? g + a.momentum * buf : buf;
            p -= a.lr * g;
        } else {
            if (KIND == OPT_ADAM) g += a.wd * p;
            else p *= 1.0f - a.lr * a.wd;
            float mi = a.b1 * m[i] + (1.0f - a.b1) * g;
            float vi = a.b2 * v[i] + (1.0f - a.b2) * g * g;
            m[i] = mi;
            v[i] = vi;
            p -= (a.lr / a.bc1) * mi / (sqrtf(vi) / a.bc2_sqrt + a.eps);
        }
        if (master) master[i] = p;
        param[i] = vr_fromf<TP>(p);
    }
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

static opt_args base_args(float lr, float wd, float grad_scale)
{
    opt_args a;
    memset(&a, 0, sizeof a);
    a.lr = lr, a.wd = wd, a.grad_scale = grad_scale;
    a.bc1 = 1.0f, a.bc2_sqrt = 1.0f;
    return a;
}

extern "C" vr_status vr_cuda_sgd(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                 vr_cuda_dtype gdt, const void *grad, size_t n, float lr, float weight_decay,
                                 float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    opt_args a = base_args(lr, weight_decay, grad_scale);
    return run_opt<OPT_SGD>(ctx, "sgd", pdt, param, master, gdt, grad, NULL, NULL, n, a, dev_grad_scale, dev_skip);
}

extern "C" vr_status vr_cuda_sgd_momentum(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                          vr_cuda_dtype gdt, const void *grad, float *mom, size_t n, float lr,
                                          float momentum, float dampening, float weight_decay, int nesterov,
                                          int step, float grad_scale, const float *dev_grad_scale,
                                          const int32_t *dev_skip)
{
    opt_args a = base_args(lr, weight_decay, grad_scale);
    a.momentum = momentum, a.dampening = dampening, a.nesterov = nesterov, a.first = step <= 1;
    return run_opt<OPT_MOM>(ctx, "sgd_momentum", pdt, param, master, gdt, grad, mom, NULL, n, a, dev_grad_scale,
                            dev_skip);
}

extern "C" void vr_cuda_opt_scalars(float out[4], float lr, float beta1, float beta2, int step)
{
    int t = step < 1 ? 1 : step;
    out[0] = lr;
    out[1] = (float)(1.0 - pow((double)beta1, (double)t));
    out[2] = (float)sqrt(1.0 - pow((double)beta2, (double)t));
    out[3] = step <= 1 ? 1.0f : 0.0f;
}

static opt_args adam_args(float lr, float b1, float b2, float eps, float wd, int step, float grad_scale)
{
    opt_args a = base_args(lr, wd, grad_scale);
    a.b1 = b1, a.b2 = b2, a.eps = eps;
    int t = step < 1 ? 1 : step;
    a.bc1 = (float)(1.0 - pow((double)b1, (double)t));
    a.bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
    return a;
}

extern "C" vr_status vr_cuda_adam(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                  vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay, int step,
                                  float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    opt_args a = adam_args(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    return run_opt<OPT_ADAM>(ctx, "adam", pdt, param, master, gdt, grad, m, v, n, a, dev_grad_scale, dev_skip);
}

extern "C" vr_status vr_cuda_adamw(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                                   vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, int step,
                                   float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip)
{
    opt_args a = adam_args(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    return run_opt<OPT_ADAMW>(ctx, "adamw", pdt, param, master, gdt, grad, m, v, n, a, dev_grad_scale, dev_skip);
}
