/* vram — CPU RMS normalization over the last dimension (HF LlamaRMSNorm, eps per call). */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/norm_math.h"

#define VR_RMS_COLS 64 /* column block of the parameter-gradient pass */

VR_CPU_HOT
void vr_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps)
{
    // out is (N,C), rstd is (N), inp is (N,C), w is (C)
#pragma omp parallel for if ((size_t)N * C >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += x[c] * x[c];
        float r = 1.0f / sqrtf(v / C + eps);
        float *o = out + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[i] = r;
    }
}

/* With xhat = x rstd and g = dout * w:
 *   dinp = rstd (g - xhat mean_c(g xhat)),  dw = sum_n dout xhat.
 * out: src is the forward's output y and xhat = y iw with iw = 1 / w (kernels/norm_math.h), so g xhat = dout y
 * needs no division and dw = iw sum_n dout y. Otherwise src is the forward's input. */
VR_CPU_HOT
static void rms_bwd(float *dinp, float *dw, const float *dout, const float *src, const float *w, const float *rstd,
                    int N, int C, int acc_dinp, int acc_dparam, bool out)
{
    // dinp is (N,C), dw is (C), dout and src are (N,C), rstd is (N)
    int par = (size_t)N * C >= VR_CPU_PAR_MIN;
    if (dinp) {
#pragma omp parallel for if (par) schedule(static)
        for (int i = 0; i < N; i++) {
            const float *x = src + (size_t)i * C, *g = dout + (size_t)i * C;
            float r = rstd[i], sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
            for (int c = 0; c < C; c++) sgx += out ? g[c] * x[c] : g[c] * w[c] * x[c] * r;
            sgx /= C;
            float *d = dinp + (size_t)i * C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float v = r * (g[c] * w[c] - (out ? x[c] * vr_norm_inv_w(w[c]) : x[c] * r) * sgx);
                d[c] = acc_dinp ? d[c] + v : v;
            }
        }
    }
    if (dw) {
        // Column blocks, each summed over all rows by one thread: no two threads share an output.
        int nblk = (C + VR_RMS_COLS - 1) / VR_RMS_COLS;
#pragma omp parallel for if (par) schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * VR_RMS_COLS, cn = C - c0 < VR_RMS_COLS ? C - c0 : VR_RMS_COLS;
            float aw[VR_RMS_COLS];
            memset(aw, 0, sizeof aw);
            for (int i = 0; i < N; i++) {
                const float *x = src + (size_t)i * C + c0, *g = dout + (size_t)i * C + c0;
                float r = out ? 1.0f : rstd[i];
#pragma omp simd
                for (int c = 0; c < cn; c++) aw[c] += g[c] * x[c] * r;
            }
            for (int c = 0; c < cn; c++) {
                float tw = out ? aw[c] * vr_norm_inv_w(w[c0 + c]) : aw[c];
                dw[c0 + c] = acc_dparam ? dw[c0 + c] + tw : tw;
            }
        }
    }
}

void vr_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        const float *rstd, int N, int C, int acc_dinp, int acc_dparam)
{
    rms_bwd(dinp, dw, dout, inp, w, rstd, N, C, acc_dinp, acc_dparam, false);
}

void vr_cpu_rmsnorm_bwd_out(float *dinp, float *dw, const float *dout, const float *out, const float *w,
                            const float *rstd, int N, int C, int acc_dinp, int acc_dparam)
{
    rms_bwd(dinp, dw, dout, out, w, rstd, N, C, acc_dinp, acc_dparam, true);
}
