/* vram — CPU layer normalization over the last dimension (torch.nn.LayerNorm, eps 1e-5). */
#include <math.h>
#include <stdbool.h>
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
 *   dinp = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dw = sum_n dout xhat,  db = sum_n dout.
 * out: src is the forward's output y and xhat = (y - b) iw with iw = 1 / w (kernels/norm_math.h; b NULL: no
 * bias), so g xhat = dout (y - b) needs no division and dw = iw sum_n dout (y - b); mean is unused. Otherwise src
 * is the forward's input. */
VR_CPU_HOT
static void ln_bwd(float *dinp, float *dw, float *db, const float *dout, const float *src, const float *w,
                   const float *b, const float *mean, const float *rstd, int N, int C, int acc_dinp, int acc_dparam,
                   bool out)
{
    // dinp is (N,C), dw and db are (C), dout and src are (N,C), mean and rstd are (N)
    int par = (size_t)N * C >= VR_CPU_PAR_MIN;
    if (dinp) {
#pragma omp parallel for if (par) schedule(static)
        for (int i = 0; i < N; i++) {
            const float *x = src + (size_t)i * C, *g = dout + (size_t)i * C;
            float m = out ? 0.0f : mean[i], r = rstd[i];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                float wg = g[c] * w[c];
                sg += wg;
                sgx += out ? g[c] * (x[c] - (b ? b[c] : 0.0f)) : wg * (x[c] - m) * r;
            }
            sg /= C;
            sgx /= C;
            float *d = dinp + (size_t)i * C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float xh = out ? (x[c] - (b ? b[c] : 0.0f)) * vr_norm_inv_w(w[c]) : (x[c] - m) * r;
                float v = r * (g[c] * w[c] - sg - xh * sgx);
                d[c] = acc_dinp ? d[c] + v : v;
            }
        }
    }
    if (dw || db) {
        // Column blocks, each summed over all rows by one thread: no two threads share an output.
        int nblk = (C + VR_LN_COLS - 1) / VR_LN_COLS;
#pragma omp parallel for if (par) schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * VR_LN_COLS, cn = C - c0 < VR_LN_COLS ? C - c0 : VR_LN_COLS;
            float aw[VR_LN_COLS], ab[VR_LN_COLS], bc[VR_LN_COLS];
            memset(aw, 0, sizeof aw);
            memset(ab, 0, sizeof ab);
            for (int c = 0; c < cn; c++) bc[c] = out && b ? b[c0 + c] : 0.0f;
            for (int i = 0; i < N; i++) {
                const float *x = src + (size_t)i * C + c0, *g = dout + (size_t)i * C + c0;
                float m = out ? 0.0f : mean[i], r = out ? 1.0f : rstd[i];
#pragma omp simd
                for (int c = 0; c < cn; c++) {
                    aw[c] += g[c] * (x[c] - m - bc[c]) * r;
                    ab[c] += g[c];
                }
            }
            for (int c = 0; c < cn; c++) {
                float tw = out ? aw[c] * vr_norm_inv_w(w[c0 + c]) : aw[c];
                if (dw) dw[c0 + c] = acc_dparam ? dw[c0 + c] + tw : tw;
                if (db) db[c0 + c] = acc_dparam ? db[c0 + c] + ab[c] : ab[c];
            }
        }
    }
}

void vr_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C,
                          int acc_dinp, int acc_dparam)
{
    ln_bwd(dinp, dw, db, dout, inp, w, NULL, mean, rstd, N, C, acc_dinp, acc_dparam, false);
}

void vr_cpu_layernorm_bwd_out(float *dinp, float *dw, float *db, const float *dout, const float *out,
                              const float *w, const float *b, const float *rstd, int N, int C, int acc_dinp,
                              int acc_dparam)
{
    ln_bwd(dinp, dw, db, dout, out, w, b, NULL, rstd, N, C, acc_dinp, acc_dparam, true);
}
