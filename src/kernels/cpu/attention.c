/* vram — CPU causal multi-head self-attention, flash-style.
 *
 * Forward: for each (batch, head) and each query row i, the scores s_ij = q_i . k_j / sqrt(hs) over
 * keys j <= i are visited in blocks of VR_ATT_KB keys held on the stack; an online softmax keeps the
 * running maximum m and normaliser l and rescales the output row when m grows. Only out and
 * lse_i = m + log(l) are stored; no (T,T) matrix exists, no workspace is needed.
 *
 * Backward recomputes p_ij = exp(s_ij - lse_i) from q, k and lse, with delta_i = dout_i . out_i:
 *   dv_j += p_ij dout_i,  ds_ij = p_ij (dout_i . v_j - delta_i),
 *   dq_i += ds_ij k_j / sqrt(hs),  dk_j += ds_ij q_i / sqrt(hs).
 * One thread owns one (batch, head) pair, so every write to dqkv is race-free. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

#define VR_ATT_KB 64 /* keys per block (stack buffer of this many floats) */

size_t vr_cpu_attention_scratch_bytes(int B, int T, int C, int NH)
{
    (void)B, (void)T, (void)C, (void)NH;
    return 0;
}

static inline float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

VR_CPU_HOT
void vr_cpu_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    // out is (B,T,C), lse is (B,NH,T), qkv is (B,T,3C)
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            float *lrow = lse + ((size_t)b * NH + h) * T;
            float s[VR_ATT_KB];
            for (int i = 0; i < T; i++) {
                const float *q = base + (size_t)i * C3;
                float *o = out + ((size_t)b * T + i) * C + (size_t)h * hs;
                memset(o, 0, (size_t)hs * sizeof(float));
                float m = -INFINITY, l = 0.0f;
                for (int j0 = 0; j0 <= i; j0 += VR_ATT_KB) {
                    int jn = i + 1 - j0 < VR_ATT_KB ? i + 1 - j0 : VR_ATT_KB;
                    float bm = -INFINITY;
                    for (int jj = 0; jj < jn; jj++) {
                        s[jj] = scale * dot(q, base + (size_t)(j0 + jj) * C3 + C, hs);
                        bm = s[jj] > bm ? s[jj] : bm;
                    }
                    if (bm > m) { // the running maximum grows: rescale what was summed so far
                        if (m != -INFINITY) {
                            float corr = vr_expf(m - bm);
                            l *= corr;
#pragma omp simd
                            for (int d = 0; d < hs; d++) o[d] *= corr;
                        }
                        m = bm;
                    }
                    float bl = 0.0f;
#pragma omp simd reduction(+ : bl)
                    for (int jj = 0; jj < jn; jj++) {
                        s[jj] = vr_expf(s[jj] - m);
                        bl += s[jj];
                    }
                    l += bl;
                    for (int jj = 0; jj < jn; jj++) {
                        const float *v = base + (size_t)(j0 + jj) * C3 + 2 * (size_t)C;
                        float p = s[jj];
#pragma omp simd
                        for (int d = 0; d < hs; d++) o[d] += p * v[d];
                    }
                }
                float inv = 1.0f / l;
#pragma omp simd
                for (int d = 0; d < hs; d++) o[d] *= inv;
                lrow[i] = m + logf(l);
            }
        }
    }
}

VR_CPU_HOT
void vr_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int NH, int acc)
{
    // dqkv is (B,T,3C), dout and out are (B,T,C), qkv is (B,T,3C), lse is (B,NH,T)
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            float *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *lrow = lse + ((size_t)b * NH + h) * T;
            if (!acc) {
                for (int t = 0; t < T; t++)
                    for (int part = 0; part < 3; part++)
                        memset(dbase + (size_t)t * C3 + (size_t)part * C, 0, (size_t)hs * sizeof(float));
            }
            float p[VR_ATT_KB], ds[VR_ATT_KB];
            for (int i = 0; i < T; i++) {
                const float *q = base + (size_t)i * C3;
                float *dq = dbase + (size_t)i * C3;
                const float *go = dout + ((size_t)b * T + i) * C + (size_t)h * hs;
                const float *o = out + ((size_t)b * T + i) * C + (size_t)h * hs;
                float delta = dot(go, o, hs);
                float L = lrow[i];
                for (int j0 = 0; j0 <= i; j0 += VR_ATT_KB) {
                    int jn = i + 1 - j0 < VR_ATT_KB ? i + 1 - j0 : VR_ATT_KB;
                    for (int jj = 0; jj < jn; jj++) {
                        const float *kv = base + (size_t)(j0 + jj) * C3;
                        p[jj] = scale * dot(q, kv + C, hs);
                        ds[jj] = dot(go, kv + 2 * (size_t)C, hs);
                    }
#pragma omp simd
                    for (int jj = 0; jj < jn; jj++) {
                        p[jj] = vr_expf(p[jj] - L);
                        ds[jj] = p[jj] * (ds[jj] - delta) * scale;
                    }
                    for (int jj = 0; jj < jn; jj++) {
                        const float *k = base + (size_t)(j0 + jj) * C3 + C;
                        float *dk = dbase + (size_t)(j0 + jj) * C3 + C;
                        float *dv = dk + C;
                        float pj = p[jj], dsj = ds[jj];
#pragma omp simd
                        for (int d = 0; d < hs; d++) {
                            dq[d] += dsj * k[d];
                            dk[d] += dsj * q[d];
                            dv[d] += pj * go[d];
                        }
                    }
                }
            }
        }
    }
}
