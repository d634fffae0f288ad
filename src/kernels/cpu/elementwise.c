/* vram — CPU elementwise kernels: accumulate-copy, residual add, scale, GELU (tanh), ReLU. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

void vr_cpu_acc(float *dst, const float *src, size_t n, int acc)
{
    // dst, src are (n)
    if (!acc) {
        if (dst != src) memcpy(dst, src, n * sizeof(float));
        return;
    }
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void vr_cpu_add_fwd(float *out, const float *a, const float *b, size_t n)
{
    // out, a, b are (n); out may alias a or b (element i reads before it writes)
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void vr_cpu_scale(float *x, size_t n, float s)
{
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* GELU, tanh approximation (GPT-2):
 *   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * computed through 0.5 (1 + tanh(u)) = sigmoid(2u), which needs only exp (our vectorizable one
 * instead of a libm call per element) and has no cancellation for negative x:
 *   gelu(x)  = x s,  s = sigmoid(2u)
 *   gelu'(x) = s + 2 x s (1 - s) u'(x),  u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * (0.5 x (1 - tanh(u)^2) u' = 2 x s (1 - s) u', since 1 - tanh^2 = 4 s (1 - s)).
 * sigmoid(z) is formed from e = exp(-|z|) <= 1 (1/(1+e) or e/(1+e)): no huge intermediate whose
 * reciprocal or product would be denormal, which costs microcode assists even in discarded lanes. */
#define VR_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static inline float sigmoid2u(float x)
{
    float z = 2.0f * VR_GELU_K * (x + 0.044715f * x * x * x);
    float e = vr_expf(z < 0.0f ? z : -z);
    float r = 1.0f / (1.0f + e);
    return z >= 0.0f ? r : e * r;
}

VR_CPU_HOT
void vr_cpu_gelu_fwd(float *out, const float *inp, size_t n)
{
    // out, inp are (n)
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN / 4) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x * sigmoid2u(x);
    }
}

VR_CPU_HOT
void vr_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n, int acc)
{
    // dinp, inp, dout are (n)
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN / 4) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float sg = sigmoid2u(x);
        float du = VR_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        float d = (sg + 2.0f * x * sg * (1.0f - sg) * du) * dout[i];
        dinp[i] = acc ? dinp[i] + d : d;
    }
}

void vr_cpu_relu_fwd(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void vr_cpu_relu_bwd(float *dinp, const float *x, const float *dout, size_t n, int acc)
{
    // dout is loaded unconditionally, so the select vectorizes (no conditional load)
    if (acc) {
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
        for (size_t i = 0; i < n; i++) {
            float g = dout[i];
            dinp[i] += x[i] > 0.0f ? g : 0.0f;
        }
    } else {
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
        for (size_t i = 0; i < n; i++) {
            float g = dout[i];
            dinp[i] = x[i] > 0.0f ? g : 0.0f;
        }
    }
}
