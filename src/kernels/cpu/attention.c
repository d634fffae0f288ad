/* vram — CPU causal multi-head self-attention, flash-style.
 *
 * Per (batch, head) the T queries and keys are cut into tiles of VR_ATT_BQ queries and VR_ATT_BK
 * keys, small enough to stay in L1/L2 while they are used; the products between tiles are plain
 * loops whose innermost index runs over contiguous floats, so they vectorize.
 *
 * Forward, for a query tile against each key tile j <= i (scores s_ij = q_i . k_j / sqrt(hs)):
 * an online softmax keeps per query row the running maximum m_i and normaliser l_i, rescales the
 * output accumulator when m_i grows, and adds p_ij v_j. Only out and lse_i = m_i + log(l_i) are
 * stored: no (T,T) matrix exists, no workspace is needed.
 *
 * Backward (FlashAttention-2 order): for each key tile, its dK and dV accumulate in local tiles
 * while the query tiles at or below it are visited; with p_ij = exp(s_ij - lse_i) recomputed and
 * delta_i = dout_i . out_i,
 *   dv_j += p_ij dout_i,  ds_ij = p_ij (dout_i . v_j - delta_i) / sqrt(hs),
 *   dk_j += ds_ij q_i,    dq_i += ds_ij k_j.
 * One thread owns a whole (batch, head) in backward, so every write to dqkv is race-free; forward
 * also splits over query tiles.
 *
 * The tiles live on the thread's stack (at most ~150 KiB, for head sizes up to VR_ATT_HSMAX);
 * larger heads take a row-at-a-time path with a 64-float stack buffer. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

#define VR_ATT_BQ 32     /* queries per tile */
#define VR_ATT_BK 64     /* keys per tile */
#define VR_ATT_HSMAX 128 /* largest head size of the tiled path */

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

/* kt(hs,BK) = the key (part = 1) or value (part = 2) rows j0..j0+jn-1 of one head, transposed;
 * columns jn..BK-1 zero. base points at qkv row 0 of this (batch, head). */
static void load_transposed(float *kt, const float *base, size_t C3, int C, int part, int j0, int jn,
                            int hs)
{
    for (int d = 0; d < hs; d++)
        for (int jj = jn; jj < VR_ATT_BK; jj++) kt[d * VR_ATT_BK + jj] = 0.0f;
    for (int jj = 0; jj < jn; jj++) {
        const float *k = base + (size_t)(j0 + jj) * C3 + (size_t)part * C;
        for (int d = 0; d < hs; d++) kt[d * VR_ATT_BK + jj] = k[d];
    }
}

/* s(BK) = a(hs) . kt(hs,BK) columns, times scale. */
static inline void row_times_tile(float *s, const float *a, const float *kt, int hs, float scale)
{
    float acc[VR_ATT_BK];
#pragma omp simd
    for (int jj = 0; jj < VR_ATT_BK; jj++) acc[jj] = 0.0f;
    for (int d = 0; d < hs; d++) {
        float ad = a[d];
        const float *kr = kt + d * VR_ATT_BK;
#pragma omp simd
        for (int jj = 0; jj < VR_ATT_BK; jj++) acc[jj] += ad * kr[jj];
    }
#pragma omp simd
    for (int jj = 0; jj < VR_ATT_BK; jj++) s[jj] = acc[jj] * scale;
}

/* ------------------------------------------------------------------ forward */

/* One query tile [i0, i0+iq) of one (batch, head). base: qkv row 0 of the head; obase: out row 0
 * of the head; lrow: lse(T) of the head. */
VR_CPU_HOT
static void fwd_tile(float *obase, float *lrow, const float *base, int i0, int iq, int C, int hs,
                     float scale)
{
    size_t C3 = (size_t)3 * C;
    float kt[VR_ATT_HSMAX * VR_ATT_BK], o[VR_ATT_BQ * VR_ATT_HSMAX], s[VR_ATT_BK];
    float m[VR_ATT_BQ], l[VR_ATT_BQ];
    for (int ii = 0; ii < iq; ii++) {
        m[ii] = -INFINITY;
        l[ii] = 0.0f;
        memset(o + ii * hs, 0, (size_t)hs * sizeof(float));
    }
    int iend = i0 + iq; // keys j < iend can be seen by some query of the tile
    for (int j0 = 0; j0 < iend; j0 += VR_ATT_BK) {
        int jn = iend - j0 < VR_ATT_BK ? iend - j0 : VR_ATT_BK;
        load_transposed(kt, base, C3, C, 1, j0, jn, hs);
        for (int ii = 0; ii < iq; ii++) {
            int i = i0 + ii;
            int nv = i - j0 + 1 < jn ? i - j0 + 1 : jn; // keys j0..j0+nv-1 are <= i
            if (nv <= 0) continue;
            row_times_tile(s, base + (size_t)i * C3, kt, hs, scale);
            float bm = -INFINITY;
            for (int jj = 0; jj < nv; jj++) bm = s[jj] > bm ? s[jj] : bm;
            float *orow = o + ii * hs;
            if (bm > m[ii]) { // the running maximum grows: rescale what was summed so far
                if (m[ii] != -INFINITY) {
                    float corr = vr_expf(m[ii] - bm);
                    l[ii] *= corr;
#pragma omp simd
                    for (int d = 0; d < hs; d++) orow[d] *= corr;
                }
                m[ii] = bm;
            }
            float mi = m[ii], bl = 0.0f;
#pragma omp simd reduction(+ : bl)
            for (int jj = 0; jj < nv; jj++) {
                s[jj] = vr_expf(s[jj] - mi);
                bl += s[jj];
            }
            l[ii] += bl;
            for (int jj = 0; jj < nv; jj++) {
                const float *v = base + (size_t)(j0 + jj) * C3 + 2 * (size_t)C;
                float p = s[jj];
#pragma omp simd
                for (int d = 0; d < hs; d++) orow[d] += p * v[d];
            }
        }
    }
    for (int ii = 0; ii < iq; ii++) {
        float inv = 1.0f / l[ii], *dst = obase + (size_t)(i0 + ii) * C;
        const float *orow = o + ii * hs;
#pragma omp simd
        for (int d = 0; d < hs; d++) dst[d] = orow[d] * inv;
        lrow[i0 + ii] = m[ii] + logf(l[ii]);
    }
}

/* Row-at-a-time forward for heads larger than VR_ATT_HSMAX: same online softmax, accumulating
 * straight into the output row. */
VR_CPU_HOT
static void fwd_rows(float *obase, float *lrow, const float *base, int T, int C, int hs, float scale)
{
    size_t C3 = (size_t)3 * C;
    float s[VR_ATT_BK];
    for (int i = 0; i < T; i++) {
        const float *q = base + (size_t)i * C3;
        float *o = obase + (size_t)i * C;
        memset(o, 0, (size_t)hs * sizeof(float));
        float m = -INFINITY, l = 0.0f;
        for (int j0 = 0; j0 <= i; j0 += VR_ATT_BK) {
            int jn = i + 1 - j0 < VR_ATT_BK ? i + 1 - j0 : VR_ATT_BK;
            float bm = -INFINITY;
            for (int jj = 0; jj < jn; jj++) {
                s[jj] = scale * dot(q, base + (size_t)(j0 + jj) * C3 + C, hs);
                bm = s[jj] > bm ? s[jj] : bm;
            }
            if (bm > m) {
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

void vr_cpu_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    // out is (B,T,C), lse is (B,NH,T), qkv is (B,T,3C)
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    if (hs > VR_ATT_HSMAX) {
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                fwd_rows(out + (size_t)b * T * C + (size_t)h * hs, lse + ((size_t)b * NH + h) * T,
                         qkv + (size_t)b * T * C3 + (size_t)h * hs, T, C, hs, scale);
        return;
    }
    int nq = (T + VR_ATT_BQ - 1) / VR_ATT_BQ;
    // Tiles near the end of the sequence see the most keys: hand those out first.
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int t = 0; t < nq; t++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int i0 = (nq - 1 - t) * VR_ATT_BQ, iq = T - i0 < VR_ATT_BQ ? T - i0 : VR_ATT_BQ;
                fwd_tile(out + (size_t)b * T * C + (size_t)h * hs, lse + ((size_t)b * NH + h) * T,
                         qkv + (size_t)b * T * C3 + (size_t)h * hs, i0, iq, C, hs, scale);
            }
}

/* ------------------------------------------------------------------ backward */

/* One (batch, head): base/dbase are qkv/dqkv row 0 of the head, obase/gbase out/dout row 0. */
VR_CPU_HOT
static void bwd_head(float *dbase, const float *gbase, const float *base, const float *obase,
                     const float *lrow, int T, int C, int hs, float scale, int acc)
{
    size_t C3 = (size_t)3 * C;
    float kt[VR_ATT_HSMAX * VR_ATT_BK], vt[VR_ATT_HSMAX * VR_ATT_BK];
    float dk[VR_ATT_BK * VR_ATT_HSMAX], dv[VR_ATT_BK * VR_ATT_HSMAX];
    float p[VR_ATT_BQ * VR_ATT_BK], ds[VR_ATT_BQ * VR_ATT_BK];
    int nvr[VR_ATT_BQ];
    if (!acc)
        for (int t = 0; t < T; t++) memset(dbase + (size_t)t * C3, 0, (size_t)hs * sizeof(float));
    for (int j0 = 0; j0 < T; j0 += VR_ATT_BK) {
        int jn = T - j0 < VR_ATT_BK ? T - j0 : VR_ATT_BK;
        load_transposed(kt, base, C3, C, 1, j0, jn, hs);
        load_transposed(vt, base, C3, C, 2, j0, jn, hs);
        memset(dk, 0, sizeof(float) * (size_t)jn * hs);
        memset(dv, 0, sizeof(float) * (size_t)jn * hs);
        for (int i0 = j0 / VR_ATT_BQ * VR_ATT_BQ; i0 < T; i0 += VR_ATT_BQ) {
            int iq = T - i0 < VR_ATT_BQ ? T - i0 : VR_ATT_BQ;
            // p and ds for the (iq, jn) block
            for (int ii = 0; ii < iq; ii++) {
                int i = i0 + ii;
                int nv = i - j0 + 1 < jn ? i - j0 + 1 : jn;
                nvr[ii] = nv;
                if (nv <= 0) continue;
                const float *q = base + (size_t)i * C3;
                const float *go = gbase + (size_t)i * C, *o = obase + (size_t)i * C;
                float delta = dot(go, o, hs), L = lrow[i];
                float *pr = p + ii * VR_ATT_BK, *dr = ds + ii * VR_ATT_BK;
                row_times_tile(pr, q, kt, hs, scale); // scores
                row_times_tile(dr, go, vt, hs, 1.0f); // dout_i . v_j
#pragma omp simd
                for (int jj = 0; jj < VR_ATT_BK; jj++) {
                    float pj = jj < nv ? vr_expf(pr[jj] - L) : 0.0f;
                    pr[jj] = pj;
                    dr[jj] = pj * (dr[jj] - delta) * scale;
                }
            }
            // dv_j += p_ij dout_i, dk_j += ds_ij q_i
            for (int ii = 0; ii < iq; ii++) {
                int i = i0 + ii, nv = nvr[ii];
                const float *q = base + (size_t)i * C3, *go = gbase + (size_t)i * C;
                const float *pr = p + ii * VR_ATT_BK, *dr = ds + ii * VR_ATT_BK;
                for (int jj = 0; jj < nv; jj++) {
                    float pj = pr[jj], dj = dr[jj];
                    float *dvr = dv + jj * hs, *dkr = dk + jj * hs;
#pragma omp simd
                    for (int d = 0; d < hs; d++) {
                        dvr[d] += pj * go[d];
                        dkr[d] += dj * q[d];
                    }
                }
            }
            // dq_i += ds_ij k_j
            for (int ii = 0; ii < iq; ii++) {
                int nv = nvr[ii];
                float *dq = dbase + (size_t)(i0 + ii) * C3;
                const float *dr = ds + ii * VR_ATT_BK;
                for (int jj = 0; jj < nv; jj++) {
                    const float *k = base + (size_t)(j0 + jj) * C3 + C;
                    float dj = dr[jj];
#pragma omp simd
                    for (int d = 0; d < hs; d++) dq[d] += dj * k[d];
                }
            }
        }
        for (int jj = 0; jj < jn; jj++) {
            float *dkd = dbase + (size_t)(j0 + jj) * C3 + C, *dvd = dkd + C;
            const float *dkr = dk + jj * hs, *dvr = dv + jj * hs;
            if (acc) {
#pragma omp simd
                for (int d = 0; d < hs; d++) dkd[d] += dkr[d], dvd[d] += dvr[d];
            } else {
#pragma omp simd
                for (int d = 0; d < hs; d++) dkd[d] = dkr[d], dvd[d] = dvr[d];
            }
        }
    }
}

/* Row-at-a-time backward for heads larger than VR_ATT_HSMAX. */
VR_CPU_HOT
static void bwd_rows(float *dbase, const float *gbase, const float *base, const float *obase,
                     const float *lrow, int T, int C, int hs, float scale, int acc)
{
    size_t C3 = (size_t)3 * C;
    if (!acc)
        for (int t = 0; t < T; t++)
            for (int part = 0; part < 3; part++)
                memset(dbase + (size_t)t * C3 + (size_t)part * C, 0, (size_t)hs * sizeof(float));
    float p[VR_ATT_BK], ds[VR_ATT_BK];
    for (int i = 0; i < T; i++) {
        const float *q = base + (size_t)i * C3;
        float *dq = dbase + (size_t)i * C3;
        const float *go = gbase + (size_t)i * C, *o = obase + (size_t)i * C;
        float delta = dot(go, o, hs), L = lrow[i];
        for (int j0 = 0; j0 <= i; j0 += VR_ATT_BK) {
            int jn = i + 1 - j0 < VR_ATT_BK ? i + 1 - j0 : VR_ATT_BK;
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
                float *dk = dbase + (size_t)(j0 + jj) * C3 + C, *dv = dk + C;
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

void vr_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int NH, int acc)
{
    // dqkv is (B,T,3C), dout and out are (B,T,C), qkv is (B,T,3C), lse is (B,NH,T)
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t qo = (size_t)b * T * C3 + (size_t)h * hs, oo = (size_t)b * T * C + (size_t)h * hs;
            const float *lrow = lse + ((size_t)b * NH + h) * T;
            if (hs > VR_ATT_HSMAX)
                bwd_rows(dqkv + qo, dout + oo, qkv + qo, out + oo, lrow, T, C, hs, scale, acc);
            else
                bwd_head(dqkv + qo, dout + oo, qkv + qo, out + oo, lrow, T, C, hs, scale, acc);
        }
}
