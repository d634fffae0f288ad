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

/* kt(hs,BK) = the key (or value) rows j0..j0+jn-1 of one head, transposed; columns jn..BK-1 zero.
 * base points at the head's k (or v) channels of qkv row 0; rows are W floats apart. */
static void load_transposed(float *kt, const float *base, size_t W, int j0, int jn, int hs)
{
    for (int d = 0; d < hs; d++)
        for (int jj = jn; jj < VR_ATT_BK; jj++) kt[d * VR_ATT_BK + jj] = 0.0f;
    for (int jj = 0; jj < jn; jj++) {
        const float *k = base + (size_t)(j0 + jj) * W;
        for (int d = 0; d < hs; d++) kt[d * VR_ATT_BK + jj] = k[d];
    }
}

/* The products between tiles: c(M,N) (+)= a(M,K) b(K,N), with a(m,k) = a[m*ars + k*aks],
 * b(k,n) = b[k*bks + n], c(m,n) = c[m*ldc + n]; zero = 1 overwrites c instead of adding into it.
 * Blocks of 4 rows x 16 columns keep their 8 accumulators in vector registers (GCC/Clang vector
 * types, 8 floats: one AVX register, or two SSE ones in the baseline build) while k runs; the
 * edges take plain loops. Always inlined, so it is compiled for each clone of its caller. */
typedef float vr_f8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void
tile_gemm(float *c, size_t ldc, const float *a, size_t ars, size_t aks, const float *b, size_t bks,
          int M, int N, int K, int zero)
{
    int m = 0, n16 = N / 16 * 16;
    for (; m + 4 <= M; m += 4) {
        for (int n = 0; n < n16; n += 16) {
            float *cp = c + (size_t)m * ldc + n;
            vr_f8 acc[8] = {{0}}; // rows 0..3 x (columns 0..7, 8..15); memcpy = unaligned load/store
            if (!zero)
                for (int r = 0; r < 4; r++) memcpy(&acc[2 * r], cp + r * ldc, 2 * sizeof(vr_f8));
            vr_f8 c00 = acc[0], c01 = acc[1], c10 = acc[2], c11 = acc[3];
            vr_f8 c20 = acc[4], c21 = acc[5], c30 = acc[6], c31 = acc[7];
            const float *ap = a + (size_t)m * ars;
            for (int k = 0; k < K; k++) {
                const float *br = b + (size_t)k * bks + n, *ak = ap + (size_t)k * aks;
                vr_f8 b0, b1;
                memcpy(&b0, br, sizeof b0);
                memcpy(&b1, br + 8, sizeof b1);
                float x0 = ak[0], x1 = ak[ars], x2 = ak[2 * ars], x3 = ak[3 * ars];
                c00 += x0 * b0, c01 += x0 * b1;
                c10 += x1 * b0, c11 += x1 * b1;
                c20 += x2 * b0, c21 += x2 * b1;
                c30 += x3 * b0, c31 += x3 * b1;
            }
            acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11;
            acc[4] = c20, acc[5] = c21, acc[6] = c30, acc[7] = c31;
            for (int r = 0; r < 4; r++) memcpy(cp + r * ldc, &acc[2 * r], 2 * sizeof(vr_f8));
        }
    }
    // edges: the rows below the last block of 4 (all columns), and the columns right of the last
    // block of 16 (in the rows of the blocks)
    for (int r = 0; r < M; r++) {
        int n0 = r < m ? n16 : 0;
        if (n0 >= N) continue;
        float *cr = c + (size_t)r * ldc;
        if (zero)
            for (int n = n0; n < N; n++) cr[n] = 0.0f;
        const float *ar = a + (size_t)r * ars;
        for (int k = 0; k < K; k++) {
            float x = ar[(size_t)k * aks];
            const float *br = b + (size_t)k * bks;
#pragma omp simd
            for (int n = n0; n < N; n++) cr[n] += x * br[n];
        }
    }
}

/* ------------------------------------------------------------------ forward */

/* One query tile [i0, i0+iq) of one (batch, head). qb, kb, vb: the head's q and its kv head's k and
 * v channels in qkv row 0 (rows W floats apart); obase: out row 0 of the head (rows OC apart); lrow:
 * lse(T) of the head. The scores are formed transposed, st(jn, BQ) = k q^T, so
 * that the query tile is transposed once (not each key tile) and the softmax bookkeeping runs
 * across the 32 queries of a key at once. */
VR_CPU_HOT
static void fwd_tile(float *obase, float *lrow, const float *qb, const float *kbase,
                     const float *vbase, int i0, int iq, size_t W, size_t OC, int hs, float scale)
{
    float qt[VR_ATT_HSMAX * VR_ATT_BQ], st[VR_ATT_BK * VR_ATT_BQ], o[VR_ATT_BQ * VR_ATT_HSMAX];
    float m[VR_ATT_BQ], l[VR_ATT_BQ], bm[VR_ATT_BQ], corr[VR_ATT_BQ];
    for (int ii = 0; ii < VR_ATT_BQ; ii++) m[ii] = -INFINITY, l[ii] = 0.0f;
    memset(o, 0, sizeof(float) * (size_t)iq * hs);
    // qt(hs,BQ) = the query rows, transposed; columns iq..BQ-1 zero
    for (int d = 0; d < hs; d++)
        for (int ii = iq; ii < VR_ATT_BQ; ii++) qt[d * VR_ATT_BQ + ii] = 0.0f;
    for (int ii = 0; ii < iq; ii++) {
        const float *q = qb + (size_t)(i0 + ii) * W;
        for (int d = 0; d < hs; d++) qt[d * VR_ATT_BQ + ii] = q[d];
    }
    int iend = i0 + iq; // keys j < iend can be seen by some query of the tile
    for (int j0 = 0; j0 < iend; j0 += VR_ATT_BK) {
        int jn = iend - j0 < VR_ATT_BK ? iend - j0 : VR_ATT_BK;
        const float *kb = kbase + (size_t)j0 * W, *vb = vbase + (size_t)j0 * W;
        tile_gemm(st, VR_ATT_BQ, kb, W, 1, qt, VR_ATT_BQ, jn, VR_ATT_BQ, hs, 1); // k_j . q_i
        // scale, causal mask (key j0+jj visible to query i0+ii iff j0+jj <= i0+ii), tile maximum
#pragma omp simd
        for (int ii = 0; ii < VR_ATT_BQ; ii++) bm[ii] = -INFINITY;
        for (int jj = 0; jj < jn; jj++) {
            float *sr = st + jj * VR_ATT_BQ;
            int lim = j0 + jj - i0; // queries ii >= lim see this key
#pragma omp simd
            for (int ii = 0; ii < VR_ATT_BQ; ii++) {
                float v = ii >= lim ? sr[ii] * scale : -INFINITY;
                sr[ii] = v;
                bm[ii] = v > bm[ii] ? v : bm[ii];
            }
        }
        // online softmax: new running maximum, the factor for what was summed so far
#pragma omp simd
        for (int ii = 0; ii < VR_ATT_BQ; ii++) {
            float mn = bm[ii] > m[ii] ? bm[ii] : m[ii];
            corr[ii] = mn == m[ii] ? 1.0f : vr_expf(m[ii] - mn); // m = -inf: exp -> ~0, times 0
            l[ii] *= corr[ii];
            m[ii] = mn;
        }
        for (int ii = 0; ii < iq; ii++) {
            if (corr[ii] == 1.0f) continue;
            float c = corr[ii], *orow = o + ii * hs;
#pragma omp simd
            for (int d = 0; d < hs; d++) orow[d] *= c;
        }
        for (int jj = 0; jj < jn; jj++) {
            float *sr = st + jj * VR_ATT_BQ;
#pragma omp simd
            for (int ii = 0; ii < VR_ATT_BQ; ii++) {
                float p = sr[ii] == -INFINITY ? 0.0f : vr_expf(sr[ii] - m[ii]);
                sr[ii] = p;
                l[ii] += p;
            }
        }
        // o(iq,hs) += p(iq,jn) v(jn,hs), p(ii,jj) = st[jj*BQ + ii]
        tile_gemm(o, hs, st, 1, VR_ATT_BQ, vb, W, iq, hs, jn, 0);
    }
    for (int ii = 0; ii < iq; ii++) {
        float inv = 1.0f / l[ii], *dst = obase + (size_t)(i0 + ii) * OC;
        const float *orow = o + ii * hs;
#pragma omp simd
        for (int d = 0; d < hs; d++) dst[d] = orow[d] * inv;
        lrow[i0 + ii] = m[ii] + logf(l[ii]);
    }
}

/* Row-at-a-time forward for heads larger than VR_ATT_HSMAX: same online softmax, accumulating
 * straight into the output row. */
VR_CPU_HOT
static void fwd_rows(float *obase, float *lrow, const float *qb, const float *kb, const float *vb,
                     int T, size_t W, size_t OC, int hs, float scale)
{
    float s[VR_ATT_BK];
    for (int i = 0; i < T; i++) {
        const float *q = qb + (size_t)i * W;
        float *o = obase + (size_t)i * OC;
        memset(o, 0, (size_t)hs * sizeof(float));
        float m = -INFINITY, l = 0.0f;
        for (int j0 = 0; j0 <= i; j0 += VR_ATT_BK) {
            int jn = i + 1 - j0 < VR_ATT_BK ? i + 1 - j0 : VR_ATT_BK;
            float bm = -INFINITY;
            for (int jj = 0; jj < jn; jj++) {
                s[jj] = scale * dot(q, kb + (size_t)(j0 + jj) * W, hs);
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
                const float *v = vb + (size_t)(j0 + jj) * W;
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

void vr_cpu_attention_gqa_fwd(float *out, float *lse, const float *qkv, int B, int T, int NH,
                              int NKV, int hs)
{
    // out is (B,T,NH*hs), lse is (B,NH,T), qkv is (B,T,W) with W = (NH+2*NKV)*hs; query head h reads
    // kv head h / (NH/NKV)
    size_t W = (size_t)(NH + 2 * NKV) * hs, OC = (size_t)NH * hs;
    int G = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    if (hs > VR_ATT_HSMAX) {
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *qb = qkv + (size_t)b * T * W + (size_t)h * hs;
                const float *kb = qkv + (size_t)b * T * W + (size_t)(NH + h / G) * hs;
                fwd_rows(out + (size_t)b * T * OC + (size_t)h * hs, lse + ((size_t)b * NH + h) * T, qb,
                         kb, kb + (size_t)NKV * hs, T, W, OC, hs, scale);
            }
        return;
    }
    int nq = (T + VR_ATT_BQ - 1) / VR_ATT_BQ;
    // Tiles near the end of the sequence see the most keys: hand those out first.
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int t = 0; t < nq; t++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int i0 = (nq - 1 - t) * VR_ATT_BQ, iq = T - i0 < VR_ATT_BQ ? T - i0 : VR_ATT_BQ;
                const float *qb = qkv + (size_t)b * T * W + (size_t)h * hs;
                const float *kb = qkv + (size_t)b * T * W + (size_t)(NH + h / G) * hs;
                fwd_tile(out + (size_t)b * T * OC + (size_t)h * hs, lse + ((size_t)b * NH + h) * T, qb,
                         kb, kb + (size_t)NKV * hs, i0, iq, W, OC, hs, scale);
            }
}

void vr_cpu_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    vr_cpu_attention_gqa_fwd(out, lse, qkv, B, T, NH, NH, C / NH);
}

/* ------------------------------------------------------------------ backward */

/* One (batch, query head). qb, kb, vb: the head's q and its kv head's k and v channels in qkv row 0,
 * dqb, dkb, dvb the same places in dqkv (rows W floats apart); obase/gbase: out/dout row 0 of the head
 * (rows OC apart). acc_q for dq, acc_kv for dk and dv (a kv head shared by several query heads
 * takes acc_kv = 1 after its first). */
VR_CPU_HOT
static void bwd_head(float *dqb, float *dkb, float *dvb, const float *gbase, const float *qb,
                     const float *kbase, const float *vbase, const float *obase, const float *lrow,
                     int T, size_t W, size_t OC, int hs, float scale, int acc_q, int acc_kv)
{
    float kt[VR_ATT_HSMAX * VR_ATT_BK], vt[VR_ATT_HSMAX * VR_ATT_BK];
    float dk[VR_ATT_BK * VR_ATT_HSMAX], dv[VR_ATT_BK * VR_ATT_HSMAX];
    float p[VR_ATT_BQ * VR_ATT_BK], ds[VR_ATT_BQ * VR_ATT_BK];
    if (!acc_q)
        for (int t = 0; t < T; t++) memset(dqb + (size_t)t * W, 0, (size_t)hs * sizeof(float));
    for (int j0 = 0; j0 < T; j0 += VR_ATT_BK) {
        int jn = T - j0 < VR_ATT_BK ? T - j0 : VR_ATT_BK;
        const float *kb = kbase + (size_t)j0 * W; // k rows of the key tile
        load_transposed(kt, kbase, W, j0, jn, hs);
        load_transposed(vt, vbase, W, j0, jn, hs);
        memset(dk, 0, sizeof(float) * (size_t)jn * hs);
        memset(dv, 0, sizeof(float) * (size_t)jn * hs);
        for (int i0 = j0 / VR_ATT_BQ * VR_ATT_BQ; i0 < T; i0 += VR_ATT_BQ) {
            int iq = T - i0 < VR_ATT_BQ ? T - i0 : VR_ATT_BQ;
            const float *q = qb + (size_t)i0 * W, *go = gbase + (size_t)i0 * OC;
            tile_gemm(p, VR_ATT_BK, q, W, 1, kt, VR_ATT_BK, iq, VR_ATT_BK, hs, 1);   // q_i . k_j
            tile_gemm(ds, VR_ATT_BK, go, OC, 1, vt, VR_ATT_BK, iq, VR_ATT_BK, hs, 1); // dout_i . v_j
            for (int ii = 0; ii < iq; ii++) {
                int i = i0 + ii;
                int nv = i - j0 + 1 < jn ? i - j0 + 1 : jn;
                float *pr = p + ii * VR_ATT_BK, *dr = ds + ii * VR_ATT_BK;
                float delta = nv > 0 ? dot(go + (size_t)ii * OC, obase + (size_t)i * OC, hs) : 0.0f;
                float L = lrow[i];
#pragma omp simd
                for (int jj = 0; jj < VR_ATT_BK; jj++) {
                    float pj = jj < nv ? vr_expf(pr[jj] * scale - L) : 0.0f;
                    pr[jj] = pj;
                    dr[jj] = pj * (dr[jj] - delta) * scale;
                }
            }
            // dv(jn,hs) += p^T dout, dk(jn,hs) += ds^T q, dq(iq,hs) += ds k
            tile_gemm(dv, hs, p, 1, VR_ATT_BK, go, OC, jn, hs, iq, 0);
            tile_gemm(dk, hs, ds, 1, VR_ATT_BK, q, W, jn, hs, iq, 0);
            tile_gemm(dqb + (size_t)i0 * W, W, ds, VR_ATT_BK, 1, kb, W, iq, hs, jn, 0);
        }
        for (int jj = 0; jj < jn; jj++) {
            float *dkd = dkb + (size_t)(j0 + jj) * W, *dvd = dvb + (size_t)(j0 + jj) * W;
            const float *dkr = dk + jj * hs, *dvr = dv + jj * hs;
            if (acc_kv) {
#pragma omp simd
                for (int d = 0; d < hs; d++) dkd[d] += dkr[d], dvd[d] += dvr[d];
            } else {
#pragma omp simd
                for (int d = 0; d < hs; d++) dkd[d] = dkr[d], dvd[d] = dvr[d];
            }
        }
    }
}

/* Row-at-a-time backward for heads larger than VR_ATT_HSMAX; pointers and flags as bwd_head. */
VR_CPU_HOT
static void bwd_rows(float *dqb, float *dkb, float *dvb, const float *gbase, const float *qb,
                     const float *kb, const float *vb, const float *obase, const float *lrow, int T,
                     size_t W, size_t OC, int hs, float scale, int acc_q, int acc_kv)
{
    for (int t = 0; t < T; t++) {
        if (!acc_q) memset(dqb + (size_t)t * W, 0, (size_t)hs * sizeof(float));
        if (!acc_kv) {
            memset(dkb + (size_t)t * W, 0, (size_t)hs * sizeof(float));
            memset(dvb + (size_t)t * W, 0, (size_t)hs * sizeof(float));
        }
    }
    float p[VR_ATT_BK], ds[VR_ATT_BK];
    for (int i = 0; i < T; i++) {
        const float *q = qb + (size_t)i * W;
        float *dq = dqb + (size_t)i * W;
        const float *go = gbase + (size_t)i * OC, *o = obase + (size_t)i * OC;
        float delta = dot(go, o, hs), L = lrow[i];
        for (int j0 = 0; j0 <= i; j0 += VR_ATT_BK) {
            int jn = i + 1 - j0 < VR_ATT_BK ? i + 1 - j0 : VR_ATT_BK;
            for (int jj = 0; jj < jn; jj++) {
                p[jj] = scale * dot(q, kb + (size_t)(j0 + jj) * W, hs);
                ds[jj] = dot(go, vb + (size_t)(j0 + jj) * W, hs);
            }
#pragma omp simd
            for (int jj = 0; jj < jn; jj++) {
                p[jj] = vr_expf(p[jj] - L);
                ds[jj] = p[jj] * (ds[jj] - delta) * scale;
            }
            for (int jj = 0; jj < jn; jj++) {
                const float *k = kb + (size_t)(j0 + jj) * W;
                float *dk = dkb + (size_t)(j0 + jj) * W, *dv = dvb + (size_t)(j0 + jj) * W;
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

/* Parallel over (batch, kv head): the G = NH/NKV query heads of a kv head run in turn on one thread,
 * adding into its dK and dV, so no two threads write the same place of dqkv. */
void vr_cpu_attention_gqa_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int NH, int NKV, int hs, int acc)
{
    // dqkv and qkv are (B,T,W), W = (NH+2*NKV)*hs; dout and out are (B,T,NH*hs); lse is (B,NH,T)
    size_t W = (size_t)(NH + 2 * NKV) * hs, OC = (size_t)NH * hs;
    int G = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < NKV; kh++)
            for (int g = 0; g < G; g++) {
                int h = kh * G + g;
                size_t qo = (size_t)b * T * W + (size_t)h * hs, ko = (size_t)b * T * W + (size_t)(NH + kh) * hs;
                size_t vo = ko + (size_t)NKV * hs, oo = (size_t)b * T * OC + (size_t)h * hs;
                const float *lrow = lse + ((size_t)b * NH + h) * T;
                int acc_kv = acc || g > 0;
                if (hs > VR_ATT_HSMAX)
                    bwd_rows(dqkv + qo, dqkv + ko, dqkv + vo, dout + oo, qkv + qo, qkv + ko, qkv + vo,
                             out + oo, lrow, T, W, OC, hs, scale, acc, acc_kv);
                else
                    bwd_head(dqkv + qo, dqkv + ko, dqkv + vo, dout + oo, qkv + qo, qkv + ko, qkv + vo,
                             out + oo, lrow, T, W, OC, hs, scale, acc, acc_kv);
            }
}

void vr_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int NH, int acc)
{
    vr_cpu_attention_gqa_bwd(dqkv, dout, qkv, out, lse, B, T, NH, NH, C / NH, acc);
}
