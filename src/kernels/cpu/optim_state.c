/* vram — CPU optimizer updates over compact state: 8-bit block-wise (codes + one absmax per block of
 * VR_Q8_BLOCK, vram/optim_state.h) and bf16 with stochastic rounding (kernels/optim_math.h). The update
 * itself is the fp32 one of optim.c, element for element; only how m, v (or the momentum) are read and
 * written differs. 8-bit, per block: dequantize, update in fp32 (the parameter from the fp32 values),
 * take the block's new absmax, requantize to the nearest map entry. An element whose scaled gradient is
 * inf or NaN keeps its state and its parameter, so it cannot poison its block's absmax. */
#include <math.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/optim_math.h"
#include "vram/optim_state.h"

typedef struct adam_k {
    float shrink, l2, a1, a2, b1, b2, step_size, bc2_sqrt, eps;
} adam_k;

/* The step's constants, computed as optim.c's adam_step does. */
static adam_k adam_consts(float lr, float beta1, float beta2, float eps, float weight_decay, int step, int decoupled)
{
    double bc1 = 1.0 - pow((double)beta1, step), bc2 = 1.0 - pow((double)beta2, step);
    adam_k k;
    k.step_size = (float)((double)lr / bc1);
    k.bc2_sqrt = (float)sqrt(bc2);
    k.l2 = decoupled ? 0.0f : weight_decay;
    k.shrink = decoupled ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
    k.a1 = 1.0f - beta1, k.a2 = 1.0f - beta2, k.b1 = beta1, k.b2 = beta2, k.eps = eps;
    return k;
}

/* One element: m, v in and out; returns the new parameter. */
static inline float adam_elem(const adam_k *k, float param, float grad, float grad_scale, float *m, float *v)
{
    float p = param * k->shrink;
    float g = grad * grad_scale + k->l2 * p;
    float mi = *m * k->b1 + k->a1 * g;
    float vi = *v * k->b2 + k->a2 * g * g;
    *m = mi;
    *v = vi;
    return p - k->step_size * (mi / (sqrtf(vi) / k->bc2_sqrt + k->eps));
}

void vr_cpu_adam_q8(float *param, const float *grad, uint8_t *m, uint8_t *v, float *absmax_m, float *absmax_v,
                    size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                    float grad_scale, int decoupled)
{
    const float *smap = vr_qmap(1), *umap = vr_qmap(0);
    adam_k k = adam_consts(lr, beta1, beta2, eps, weight_decay, step, decoupled);
    size_t nb = (n + VR_Q8_BLOCK - 1) / VR_Q8_BLOCK;
#pragma omp parallel for if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * VR_Q8_BLOCK, hi = lo + VR_Q8_BLOCK < n ? lo + VR_Q8_BLOCK : n;
        float mf[VR_Q8_BLOCK], vf[VR_Q8_BLOCK], am = 0.0f, av = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float mi = smap[m[i]] * absmax_m[b], vi = umap[v[i]] * absmax_v[b];
            if (isfinite(grad[i] * grad_scale))
                param[i] = adam_elem(&k, param[i], grad[i], grad_scale, &mi, &vi);
            mf[i - lo] = mi, vf[i - lo] = vi;
            am = fabsf(mi) > am ? fabsf(mi) : am;
            av = vi > av ? vi : av;
        }
        absmax_m[b] = am, absmax_v[b] = av;
        for (size_t i = lo; i < hi; i++) {
            m[i] = vr_q8_code(smap, am > 0.0f ? mf[i - lo] / am : 0.0f);
            v[i] = vr_q8_code(umap, av > 0.0f ? vf[i - lo] / av : 0.0f);
        }
    }
}

void vr_cpu_adam_bf16s(float *param, const float *grad, uint16_t *m, uint16_t *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int step, float grad_scale, int decoupled,
                       uint64_t seed, uint64_t index0)
{
    adam_k k = adam_consts(lr, beta1, beta2, eps, weight_decay, step, decoupled);
#pragma omp parallel for if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float mi = vr_bf16_to_f32(m[i]), vi = vr_bf16_to_f32(v[i]);
        param[i] = adam_elem(&k, param[i], grad[i], grad_scale, &mi, &vi);
        uint32_t r = vr_sr_bits(seed, VR_SR_MV, index0 + i);
        m[i] = vr_bf16_sr(mi, r);
        v[i] = vr_bf16_sr(vi, r >> 16);
    }
}

/* SGD momentum's element (optim.c): returns the new parameter, *buf the new momentum. */
static inline float mom_elem(float param, float grad, float grad_scale, float *buf, float lr, float momentum,
                             float take, float weight_decay, int nesterov, int first)
{
    float g = grad * grad_scale + weight_decay * param;
    float b = first ? g : momentum * *buf + take * g;
    *buf = b;
    return param - lr * (nesterov ? g + momentum * b : b);
}

void vr_cpu_sgd_momentum_q8(float *param, const float *grad, uint8_t *mom, float *absmax, size_t n, float lr,
                            float momentum, float dampening, float weight_decay, int nesterov, int step,
                            float grad_scale)
{
    const float *smap = vr_qmap(1);
    int first = step <= 1;
    float take = 1.0f - dampening;
    size_t nb = (n + VR_Q8_BLOCK - 1) / VR_Q8_BLOCK;
#pragma omp parallel for if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * VR_Q8_BLOCK, hi = lo + VR_Q8_BLOCK < n ? lo + VR_Q8_BLOCK : n;
        float bf[VR_Q8_BLOCK], am = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float bi = smap[mom[i]] * absmax[b];
            if (isfinite(grad[i] * grad_scale))
                param[i] = mom_elem(param[i], grad[i], grad_scale, &bi, lr, momentum, take, weight_decay, nesterov,
                                    first);
            bf[i - lo] = bi;
            am = fabsf(bi) > am ? fabsf(bi) : am;
        }
        absmax[b] = am;
        for (size_t i = lo; i < hi; i++)
            mom[i] = vr_q8_code(smap, am > 0.0f ? bf[i - lo] / am : 0.0f);
    }
}

void vr_cpu_sgd_momentum_bf16s(float *param, const float *grad, uint16_t *mom, size_t n, float lr, float momentum,
                               float dampening, float weight_decay, int nesterov, int step, float grad_scale,
                               uint64_t seed, uint64_t index0)
{
    int first = step <= 1;
    float take = 1.0f - dampening;
#pragma omp parallel for if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float bi = vr_bf16_to_f32(mom[i]);
        param[i] = mom_elem(param[i], grad[i], grad_scale, &bi, lr, momentum, take, weight_decay, nesterov, first);
        mom[i] = vr_bf16_sr(bi, vr_sr_bits(seed, VR_SR_M, index0 + i));
    }
}
