/* vram — CPU SwiGLU gate of the Llama MLP: out = silu(gate) * up over a packed [gate | up] row. */
#include <math.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

VR_CPU_HOT
void vr_cpu_swiglu_fwd(float *out, const float *inp, int N, int I)
{
    // out is (N,I), inp is (N,2I): gate in columns [0,I), up in [I,2I)
#pragma omp parallel for if ((size_t)N * I >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * I, *u = g + I;
        float *o = out + (size_t)i * I;
        for (int c = 0; c < I; c++) o[c] = g[c] / (1.0f + expf(-g[c])) * u[c];
    }
}

/* silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g). */
VR_CPU_HOT
void vr_cpu_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int I, int acc)
{
    // dinp is (N,2I), dout is (N,I), inp is (N,2I)
#pragma omp parallel for if ((size_t)N * I >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * I, *u = g + I, *d = dout + (size_t)i * I;
        float *dg = dinp + (size_t)i * 2 * I, *du = dg + I;
        for (int c = 0; c < I; c++) {
            float s = 1.0f / (1.0f + expf(-g[c]));
            float vg = d[c] * u[c] * s * (1.0f + g[c] * (1.0f - s)), vu = d[c] * g[c] * s;
            if (acc) {
                dg[c] += vg;
                du[c] += vu;
            } else {
                dg[c] = vg;
                du[c] = vu;
            }
        }
    }
}
