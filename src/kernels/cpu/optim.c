/* vram — CPU optimizer updates over flat buffers, one fused threaded pass each, with the arithmetic
 * of torch.optim (single-tensor path): scalars in double, elementwise work in float. */
#include <math.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

VR_CPU_HOT
void vr_cpu_sgd(float *param, const float *grad, size_t n, float lr, float weight_decay,
                float grad_scale)
{
    // param, grad are (n)
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale + weight_decay * param[i];
        param[i] -= lr * g;
    }
}

VR_CPU_HOT
void vr_cpu_sgd_momentum(float *param, const float *grad, float *mom, size_t n, float lr,
                         float momentum, float dampening, float weight_decay, int nesterov,
                         int step, float grad_scale)
{
    // param, grad, mom are (n); at step 1 the buffer is set to g (its old contents are not read)
    int first = step <= 1;
    float take = 1.0f - dampening;
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale + weight_decay * param[i];
        float b = first ? g : momentum * mom[i] + take * g;
        mom[i] = b;
        float d = nesterov ? g + momentum * b : b;
        param[i] -= lr * d;
    }
}

/* The shared Adam step; decoupled = 1 for AdamW. */
VR_CPU_HOT
static void adam_step(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int step,
                      float grad_scale, int decoupled)
{
    // param, grad, m, v are (n)
    double bc1 = 1.0 - pow((double)beta1, step), bc2 = 1.0 - pow((double)beta2, step);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float l2 = decoupled ? 0.0f : weight_decay;
    float shrink = decoupled ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
    float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float p = param[i] * shrink;
        float g = grad[i] * grad_scale + l2 * p;
        float mi = m[i] * beta1 + a1 * g;
        float vi = v[i] * beta2 + a2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = p - step_size * (mi / denom);
    }
}

void vr_cpu_adam(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale)
{
    adam_step(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale, 0);
}

void vr_cpu_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale)
{
    adam_step(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale, 1);
}
