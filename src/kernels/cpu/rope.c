/* vram — CPU rotary position embedding (HF Llama rotate-half) of the q and k heads of a packed qkv,
 * and the inverse frequencies (theta, Llama 3 scaling) shared by every rope kernel. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

/* HF _compute_llama3_parameters: wavelengths longer than orig/low_freq are divided by factor, shorter
 * than orig/high_freq kept, in between blended by smooth = (orig/wavelen - low) / (high - low). */
void vr_rope_inv_freq(float *inv_freq, int hd, const vr_rope_params *p)
{
    for (int i = 0; i < hd / 2; i++) {
        // HF: 1 / theta^(arange(0, hd, 2) / hd) in float32
        float f = (float)(1.0 / pow(p->theta, (double)(float)(2 * i) / hd));
        if (p->scaling == 1) {
            double lo_wl = p->orig_max_t / p->low_freq, hi_wl = p->orig_max_t / p->high_freq;
            double wl = 6.283185307179586 / f, g = f; // 2 pi / f
            if (wl > lo_wl) g = f / p->factor;
            if (!(wl < hi_wl) && !(wl > lo_wl)) {
                double smooth = (p->orig_max_t / wl - p->low_freq) / (p->high_freq - p->low_freq);
                g = (1.0 - smooth) * g / p->factor + smooth * g;
            }
            f = (float)g;
        }
        inv_freq[i] = f;
    }
}

/* One pass for both directions: sign = +1 rotates by +angle (forward), -1 by -angle (backward). */
static void rope_apply(float *out, const float *inp, int B, int T, int NH, int NKV, int hd,
                       const vr_rope_params *p, float sign, int acc)
{
    // out and inp are (B,T,(NH+2*NKV)*hd); heads [0, NH+NKV) rotated, the NKV v heads copied
    float inv_freq[VR_ROPE_MAX_HD / 2];
    vr_rope_inv_freq(inv_freq, hd, p);
    int h2 = hd / 2, nrot = NH + NKV, W = (NH + 2 * NKV) * hd;
    size_t n = (size_t)B * T * W;
#pragma omp parallel for if (n >= VR_CPU_PAR_MIN) schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float t = (float)(bt % T), cs[VR_ROPE_MAX_HD / 2], sn[VR_ROPE_MAX_HD / 2];
        for (int i = 0; i < h2; i++) {
            float a = t * inv_freq[i]; // float32 angle, as HF
            cs[i] = cosf(a);
            sn[i] = sign * sinf(a);
        }
        const float *x = inp + (size_t)bt * W;
        float *y = out + (size_t)bt * W;
        for (int h = 0; h < nrot; h++) {
            const float *xh = x + (size_t)h * hd;
            float *yh = y + (size_t)h * hd;
            for (int i = 0; i < h2; i++) {
                float x1 = xh[i], x2 = xh[i + h2];
                float y1 = x1 * cs[i] - x2 * sn[i], y2 = x2 * cs[i] + x1 * sn[i];
                yh[i] = acc ? yh[i] + y1 : y1;
                yh[i + h2] = acc ? yh[i + h2] + y2 : y2;
            }
        }
        for (int c = nrot * hd; c < W; c++) y[c] = acc ? y[c] + x[c] : x[c];
    }
}

VR_CPU_HOT
void vr_cpu_rope_fwd(float *out, const float *inp, int B, int T, int NH, int NKV, int hd,
                     const vr_rope_params *p)
{
    rope_apply(out, inp, B, T, NH, NKV, hd, p, 1.0f, 0);
}

VR_CPU_HOT
void vr_cpu_rope_bwd(float *dinp, const float *dout, int B, int T, int NH, int NKV, int hd,
                     const vr_rope_params *p, int acc)
{
    rope_apply(dinp, dout, B, T, NH, NKV, hd, p, -1.0f, acc);
}
