/* vram — CPU reductions over flat buffers, accumulated in double. */
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

double vr_cpu_sumsq(const float *x, size_t n)
{
    double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

double vr_cpu_sum(const float *x, size_t n)
{
    double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    return s;
}

void vr_cpu_mean_fwd(float *out, const float *inp, size_t n)
{
    // out is (1), inp is (n)
    out[0] = n ? (float)(vr_cpu_sum(inp, n) / (double)n) : 0.0f;
}

void vr_cpu_mean_bwd(float *dinp, const float *dout, size_t n, int acc)
{
    // dinp is (n), dout is (1)
    if (!n) return;
    float g = (float)((double)dout[0] / (double)n);
    if (acc) {
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
        for (size_t i = 0; i < n; i++) dinp[i] += g;
    } else {
#pragma omp parallel for simd if (n >= VR_CPU_PAR_MIN) schedule(static)
        for (size_t i = 0; i < n; i++) dinp[i] = g;
    }
}

void vr_cpu_chunks(size_t n, size_t chunk, void (*fn)(void *ctx, size_t off, size_t len), void *ctx)
{
    if (!chunk)
        return;
    size_t nc = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1)
    for (size_t c = 0; c < nc; c++)
        fn(ctx, c * chunk, n - c * chunk < chunk ? n - c * chunk : chunk);
}
