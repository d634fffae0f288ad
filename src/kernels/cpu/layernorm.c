/* vram — CPU layer normalization over the last dimension (torch.nn.LayerNorm, eps 1e-5). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/norm_math.h"

#define VR_LN_EPS 1e-5f
#define VR_LN_COLS 64 /* column block of the parameter-gradient pass */

VR_CPU_HOT
void vr_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C)
{
    // out is (N,C), mean and rstd are (N), inp is (N,C), w and b are (C)
#pragma omp parallel for if ((size_t)N * C >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        float r = 1.0f / sqrtf(v / C + VR_LN_EPS);
        float *o = out + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

/* With xhat = (x - mean) rstd and g = dout * w:
 *   dinp = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dw = sum_n dout xhat,  db = sum_n dout. */
VR_CPU_HOT
void vr_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C,
                          int acc_dinp, int acc_dparam)
{
    // dinp is (N,C), dw and db are (C), dout and inp are (N,C), mean and rstd are (N)
    int par = (size_t)N * C >= VR_CPU_PAR_MIN;
    if (dinp) {
#pragma omp parallel for if (par) schedule(static)
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *g = dout + (size_t)i * C;
            float m = mean[i], r = rstd[i];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                float wg = g[c] * w[c];
                sg += wg;
                sgx += wg * (x[c] - m) * r;
            }
            sg /= C;
            sgx /= C;
            float *d = dinp + (size_t)i * C;
            if (acc_dinp) {
#pragma omp simd
                for (int c = 0; c < C; c++)
                    d[c] += r * (g[c] * w[c] - sg - (x[c] - m) * r * sgx);
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++)
                    d[c] = r * (g[c] * w[c] - sg - (x[c] - m) * r * sgx);
            }
        }
    }
    if (dw || db) {
        // Column blocks, each summed over all rows by one thread: no two threads share an output.
        int nblk = (C + VR_LN_COLS - 1) / VR_LN_COLS;
#pragma omp parallel for if (par) schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * VR_LN_COLS, cn = C - c0 < VR_LN_COLS ? C - c0 : VR_LN_COLS;
            float aw[VR_LN_COLS], ab[VR_LN_COLS];
            memset(aw, 0, sizeof aw);
            memset(ab, 0, sizeof ab);
            for (int i = 0; i < N; i++) {
                const float *x = inp + (size_t)i * C + c0, *g = dout + (size_t)i * C + c0;
                float m = mean[i], r = rstd[i];
#pragma omp simd
                for (int c = 0; c < cn; c++) {
                    aw[c] += g[c] * (x[c] - m) * r;
                    ab[c] += g[c];
                }
            }
            for (int c = 0; c < cn; c++) {
                if (dw) dw[c0 + c] = acc_dparam ? dw[c0 + c] + aw[c] : aw[c];
                if (db) db[c0 + c] = acc_dparam ? db[c0 + c] + ab[c] : ab[c];
            }
        }
    }
}

/* The same from the forward's output y (kernels/norm_math.h): xhat = (y - b) iw with iw = 1 / w, so
 * g xhat = dout (y - b) needs no division, and dw = iw sum_n dout (y - b). b NULL: no bias. */
VR_CPU_HOT
void vr_cpu_layernorm_bwd_out(float *dinp, float *dw, float *db, const float *dout, const float *out,
                              const float *w, const float *b, const float *rstd, int N, int C, int acc_dinp,
                              int acc_dparam)
{
    int par = (size_t)N * C >= VR_CPU_PAR_MIN;
    if (dinp) {
#pragma omp parallel for if (par) schedule(static)
        for (int i = 0; i < N; i++) {
            const float *y = out + (size_t)i * C, *g = dout + (size_t)i * C;
            float r = rstd[i];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                sg += g[c] * w[c];
                sgx += g[c] * (y[c] - (b ? b[c] : 0.0f));
            }
            sg /= C;
            sgx /= C;
            float *d = dinp + (size_t)i * C;
            for (int c = 0; c < C; c++) {
                float xh = (y[c] - (b ? b[c] : 0.0f)) * vr_norm_inv_w(w[c]);
                float v = r * (g[c] * w[c] - sg - xh * sgx);
                d[c] = acc_dinp ? d[c] + v : v;
            }
        }
    }
    if (dw || db) {
        int nblk = (C + VR_LN_COLS - 1) / VR_LN_COLS;
#pragma omp parallel for if (par) schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * VR_LN_COLS, cn = C - c0 < VR_LN_COLS ? C - c0 : VR_LN_COLS;
            float aw[VR_LN_COLS], ab[VR_LN_COLS], bc[VR_LN_COLS];
            memset(aw, 0, sizeof aw);
            memset(ab, 0, sizeof ab);
            for (int c = 0; c < cn; c++) bc[c] = b ? b[c0 + c] : 0.0f;
            for (int i = 0; i < N; i++) {
                const float *y = out + (size_t)i * C + c0, *g = dout + (size_t)i * C + c0;
#pragma omp simd
                for (int c = 0; c < cn; c++) {
                    aw[c] += g[c] * (y[c] - bc[c]);
                    ab[c] += g[c];
                }
            }
            for (int c = 0; c < cn; c++) {
                float tw = aw[c] * vr_norm_inv_w(w[c0 + c]);
                if (dw) dw[c0 + c] = acc_dparam ? dw[c0 + c] + tw : tw;
                if (db) db[c0 + c] = acc_dparam ? db[c0 + c] + ab[c] : ab[c];
            }
        }
    }
}
