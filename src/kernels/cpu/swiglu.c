/* vram — CPU SwiGLU gate of the Llama MLP: out = silu(gate) * up over a packed [gate | up] row. */
#include <math.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

VR_CPU_HOT
void vr_cpu_swiglu_fwd(float *out, const float *inp, int N, int HI)
{
    // out is (N,HI), inp is (N,2HI): gate in columns [0,HI), up in [HI,2HI)
#pragma omp parallel for if ((size_t)N * HI >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * HI, *u = g + HI;
        float *o = out + (size_t)i * HI;
        for (int c = 0; c < HI; c++) o[c] = g[c] / (1.0f + expf(-g[c])) * u[c];
    }
}

/* silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g). */
VR_CPU_HOT
void vr_cpu_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int HI, int acc)
{
    // dinp is (N,2HI), dout is (N,HI), inp is (N,2HI)
#pragma omp parallel for if ((size_t)N * HI >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * HI, *u = g + HI, *d = dout + (size_t)i * HI;
        float *dg = dinp + (size_t)i * 2 * HI, *du = dg + HI;
        for (int c = 0; c < HI; c++) {
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
