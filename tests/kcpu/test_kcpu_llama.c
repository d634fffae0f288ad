/* Gradient checks of the Llama-family CPU kernels (rmsnorm, rope, swiglu) against double-precision
 * references written here, in the pattern of test_kcpu_grad.c: (1) float forward vs the double
 * forward; (2) float backward with dout = R vs central finite differences of L = sum(out * R);
 * (3) acc = 1 adds into the output. Plus the Llama 3 inverse frequencies against values computed
 * from HF's _compute_llama3_parameters formula (Llama 3.2 1B: hd 64, theta 5e5, factor 32, 1, 4, 8192).
 * GQA attention (NKV < NH, head size != C/NH, one head > 128 for the row path) against a double
 * reference and against multi-head attention over repeated K/V (bit for bit where the arithmetic is
 * the same).
 * Tolerances as test_kcpu_grad.c: forward 1e-5, backward 1e-4, acc 1e-5 (normwise relative). */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kcpu/ref.h"

#define TOL_FWD 1e-5
#define TOL_BWD 1e-4
#define TOL_ACC 1e-5
#define FD_MAX 300

static void expect_le(double e, double tol, const char *what)
{
    if (!(e <= tol)) fail_msg("%s: rel err %.3e > %.0e", what, e, tol);
}

static void fd_check(const float *g, double *x, size_t n, ref_loss_fn f, void *ctx, uint64_t *rng,
                     const char *what)
{
    size_t k;
    size_t *idx = ref_pick(n, FD_MAX, &k, rng);
    double *gd = ref_dalloc(n);
    ref_fd_grad(gd, x, n, n <= FD_MAX ? NULL : idx, k, f, ctx);
    expect_le(ref_relerr_idx(g, gd, n, n <= FD_MAX ? NULL : idx, k), TOL_BWD, what);
    free(gd);
    free(idx);
}

static void expect_acc(const float *accd, const float *prior, const float *fresh, size_t n,
                       const char *what)
{
    float *sum = ref_falloc(n);
    for (size_t i = 0; i < n; i++) sum[i] = prior[i] + fresh[i];
    expect_le(ref_relerr_ff(accd, sum, n), TOL_ACC, what);
    free(sum);
}

static double dot_d(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ------------------------------------------------------------------ rmsnorm */

typedef struct { double *inp, *w, *r, *out; int N, C; double eps; } rms_ctx;

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    for (int i = 0; i < c->N; i++) {
        const double *x = c->inp + (size_t)i * c->C;
        double v = 0;
        for (int k = 0; k < c->C; k++) v += x[k] * x[k];
        double r = 1.0 / sqrt(v / c->C + c->eps);
        for (int k = 0; k < c->C; k++) c->out[(size_t)i * c->C + k] = x[k] * r * c->w[k];
    }
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    uint64_t rng = 7;
    int shapes[][2] = {{1, 3}, {5, 16}, {33, 70}, {300, 130}};
    float epss[] = {1e-5f, 1e-6f, 1e-5f, 1e-6f};
    for (int si = 0; si < 4; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t n = (size_t)N * C;
        float *inp = ref_falloc(n), *w = ref_falloc(C), *out = ref_falloc(n), *r = ref_falloc(n),
              *rstd = ref_falloc(N);
        ref_fill(inp, n, &rng, -2, 3);
        ref_fill(w, C, &rng, 0.5f, 1.5f);
        ref_fill(r, n, &rng, -1, 1);
        vr_cpu_rmsnorm_fwd(out, rstd, inp, w, N, C, epss[si]);
        rms_ctx c = {ref_to_double(inp, n), ref_to_double(w, C), ref_to_double(r, n), ref_dalloc(n), N, C,
                     epss[si]};
        rms_loss(&c);
        expect_le(ref_relerr(out, c.out, n), TOL_FWD, "rmsnorm out");
        float *dinp = ref_falloc(n), *dw = ref_falloc(C);
        vr_cpu_rmsnorm_bwd(dinp, dw, r, inp, w, rstd, N, C, 0, 0);
        fd_check(dinp, c.inp, n, rms_loss, &c, &rng, "rmsnorm dinp");
        fd_check(dw, c.w, C, rms_loss, &c, &rng, "rmsnorm dw");
        float *p1 = ref_falloc(n), *p2 = ref_falloc(C), *a1 = ref_falloc(n), *a2 = ref_falloc(C);
        ref_fill(p1, n, &rng, -1, 1);
        ref_fill(p2, C, &rng, -1, 1);
        memcpy(a1, p1, n * sizeof(float));
        memcpy(a2, p2, (size_t)C * sizeof(float));
        vr_cpu_rmsnorm_bwd(a1, NULL, r, inp, w, rstd, N, C, 1, 0);
        vr_cpu_rmsnorm_bwd(NULL, a2, r, inp, w, rstd, N, C, 0, 1);
        expect_acc(a1, p1, dinp, n, "rmsnorm dinp acc");
        expect_acc(a2, p2, dw, C, "rmsnorm dw acc");
        /* from the forward's output (vr_step_config.norm_from_out): the same gradients, acc too */
        float *o1 = ref_falloc(n), *o2 = ref_falloc(C);
        vr_cpu_rmsnorm_bwd_out(o1, o2, r, out, w, rstd, N, C, 0, 0);
        fd_check(o1, c.inp, n, rms_loss, &c, &rng, "rmsnorm from out dinp");
        fd_check(o2, c.w, C, rms_loss, &c, &rng, "rmsnorm from out dw");
        memcpy(a1, p1, n * sizeof(float));
        memcpy(a2, p2, (size_t)C * sizeof(float));
        vr_cpu_rmsnorm_bwd_out(a1, a2, r, out, w, rstd, N, C, 1, 1);
        expect_acc(a1, p1, o1, n, "rmsnorm from out dinp acc");
        expect_acc(a2, p2, o2, C, "rmsnorm from out dw acc");
        free(o1), free(o2);
        vr_cpu_rmsnorm_fwd(inp, rstd, inp, w, N, C, epss[si]); // in place
        assert_memory_equal(inp, out, n * sizeof(float));
        free(inp), free(w), free(out), free(r), free(rstd), free(dinp), free(dw);
        free(p1), free(p2), free(a1), free(a2), free(c.inp), free(c.w), free(c.r), free(c.out);
    }
}

/* ------------------------------------------------------------------ rope */

static void test_rope_inv_freq(void **state)
{
    (void)state;
    vr_rope_params p = {500000.0, 1, 32.0, 1.0, 4.0, 8192.0};
    float f[32];
    vr_rope_inv_freq(f, 64, &p);
    // i = 0: high frequency, kept; 17: the one blended band; 18, 31: low frequency, divided by 32
    int idx[] = {0, 17, 18, 31};
    double want[] = {1.0, 9.70828780262767e-05, 1.9461638184831125e-05, 9.418306725434909e-08};
    for (int k = 0; k < 4; k++)
        if (fabs(f[idx[k]] - want[k]) > 1e-6 * want[k])
            fail_msg("inv_freq[%d] = %.9g, want %.9g", idx[k], f[idx[k]], want[k]);
    vr_rope_params q = {10000.0, 0, 0, 0, 0, 0};
    vr_rope_inv_freq(f, 64, &q);
    for (int i = 0; i < 32; i++) {
        double w = 1.0 / pow(10000.0, 2.0 * i / 64);
        if (fabs(f[i] - w) > 1e-6 * w) fail_msg("unscaled inv_freq[%d] = %.9g, want %.9g", i, f[i], w);
    }
}

typedef struct { double *inp, *r, *out; const float *inv; int B, T, NH, NKV, hd; } rope_ctx;

static double rope_loss(void *p)
{
    rope_ctx *c = p;
    int W = (c->NH + 2 * c->NKV) * c->hd, h2 = c->hd / 2;
    for (int bt = 0; bt < c->B * c->T; bt++) {
        const double *x = c->inp + (size_t)bt * W;
        double *y = c->out + (size_t)bt * W;
        memcpy(y, x, (size_t)W * sizeof(double));
        for (int h = 0; h < c->NH + c->NKV; h++)
            for (int i = 0; i < h2; i++) {
                double a = (double)(float)((float)(bt % c->T) * c->inv[i]);
                double x1 = x[h * c->hd + i], x2 = x[h * c->hd + i + h2];
                y[h * c->hd + i] = x1 * cos(a) - x2 * sin(a);
                y[h * c->hd + i + h2] = x2 * cos(a) + x1 * sin(a);
            }
    }
    return dot_d(c->out, c->r, (size_t)c->B * c->T * W);
}

static void test_rope(void **state)
{
    (void)state;
    uint64_t rng = 11;
    // B, T, NH, NKV, hd, scaled
    int shapes[][6] = {{1, 1, 1, 1, 2, 0}, {2, 5, 4, 2, 8, 1}, {1, 70, 3, 1, 16, 1}, {2, 9, 4, 4, 6, 0}};
    for (int si = 0; si < 4; si++) {
        int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], NKV = shapes[si][3],
            hd = shapes[si][4];
        vr_rope_params p = {shapes[si][5] ? 500000.0 : 10000.0, shapes[si][5], 32.0, 1.0, 4.0, 32.0};
        float inv[VR_ROPE_MAX_HD / 2];
        vr_rope_inv_freq(inv, hd, &p);
        size_t n = (size_t)B * T * (NH + 2 * NKV) * hd;
        float *inp = ref_falloc(n), *out = ref_falloc(n), *r = ref_falloc(n), *d = ref_falloc(n);
        ref_fill(inp, n, &rng, -2, 2);
        ref_fill(r, n, &rng, -1, 1);
        vr_cpu_rope_fwd(out, inp, B, T, NH, NKV, hd, &p);
        rope_ctx c = {ref_to_double(inp, n), ref_to_double(r, n), ref_dalloc(n), inv, B, T, NH, NKV, hd};
        rope_loss(&c);
        expect_le(ref_relerr(out, c.out, n), TOL_FWD, "rope out");
        vr_cpu_rope_bwd(d, r, B, T, NH, NKV, hd, &p, 0);
        fd_check(d, c.inp, n, rope_loss, &c, &rng, "rope dinp");
        // backward undoes forward: rotating back the output gives the input
        float *back = ref_falloc(n);
        vr_cpu_rope_bwd(back, out, B, T, NH, NKV, hd, &p, 0);
        expect_le(ref_relerr_ff(back, inp, n), TOL_FWD, "rope bwd(fwd(x)) = x");
        float *prior = ref_falloc(n), *a = ref_falloc(n);
        ref_fill(prior, n, &rng, -1, 1);
        memcpy(a, prior, n * sizeof(float));
        vr_cpu_rope_bwd(a, r, B, T, NH, NKV, hd, &p, 1);
        expect_acc(a, prior, d, n, "rope dinp acc");
        memcpy(a, inp, n * sizeof(float));
        vr_cpu_rope_fwd(a, a, B, T, NH, NKV, hd, &p); // in place
        assert_memory_equal(a, out, n * sizeof(float));
        free(inp), free(out), free(r), free(d), free(back), free(prior), free(a);
        free(c.inp), free(c.r), free(c.out);
    }
}

/* ------------------------------------------------------------------ swiglu */

typedef struct { double *inp, *r, *out; int N, HI; } sw_ctx;

static double sw_loss(void *p)
{
    sw_ctx *c = p;
    for (int i = 0; i < c->N; i++)
        for (int k = 0; k < c->HI; k++) {
            double g = c->inp[(size_t)i * 2 * c->HI + k], u = c->inp[(size_t)i * 2 * c->HI + c->HI + k];
            c->out[(size_t)i * c->HI + k] = g / (1.0 + exp(-g)) * u;
        }
    return dot_d(c->out, c->r, (size_t)c->N * c->HI);
}

static void test_swiglu(void **state)
{
    (void)state;
    uint64_t rng = 13;
    int shapes[][2] = {{1, 1}, {3, 7}, {40, 96}, {300, 130}};
    for (int si = 0; si < 4; si++) {
        int N = shapes[si][0], HI = shapes[si][1];
        size_t n = (size_t)N * HI;
        float *inp = ref_falloc(2 * n), *out = ref_falloc(n), *r = ref_falloc(n), *d = ref_falloc(2 * n);
        ref_fill(inp, 2 * n, &rng, -4, 4);
        ref_fill(r, n, &rng, -1, 1);
        vr_cpu_swiglu_fwd(out, inp, N, HI);
        sw_ctx c = {ref_to_double(inp, 2 * n), ref_to_double(r, n), ref_dalloc(n), N, HI};
        sw_loss(&c);
        expect_le(ref_relerr(out, c.out, n), TOL_FWD, "swiglu out");
        vr_cpu_swiglu_bwd(d, r, inp, N, HI, 0);
        fd_check(d, c.inp, 2 * n, sw_loss, &c, &rng, "swiglu dinp");
        float *prior = ref_falloc(2 * n), *a = ref_falloc(2 * n);
        ref_fill(prior, 2 * n, &rng, -1, 1);
        memcpy(a, prior, 2 * n * sizeof(float));
        vr_cpu_swiglu_bwd(a, r, inp, N, HI, 1);
        expect_acc(a, prior, d, 2 * n, "swiglu dinp acc");
        free(inp), free(out), free(r), free(d), free(prior), free(a), free(c.inp), free(c.r), free(c.out);
    }
}

/* ------------------------------------------------------------------ GQA attention */

typedef struct { double *qkv, *r, *out; int B, T, NH, NKV, hs; } gqa_ctx;

/* Plain causal softmax attention in double, query head h on kv head h / (NH/NKV). */
static double gqa_loss(void *p)
{
    gqa_ctx *c = p;
    int W = (c->NH + 2 * c->NKV) * c->hs, OC = c->NH * c->hs, G = c->NH / c->NKV;
    double *s = ref_dalloc((size_t)c->T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++) {
            const double *base = c->qkv + (size_t)b * c->T * W;
            int ko = (c->NH + h / G) * c->hs, vo = ko + c->NKV * c->hs;
            for (int i = 0; i < c->T; i++) {
                double m = -1e300, l = 0;
                for (int j = 0; j <= i; j++) {
                    double d = 0;
                    for (int k = 0; k < c->hs; k++)
                        d += base[(size_t)i * W + h * c->hs + k] * base[(size_t)j * W + ko + k];
                    s[j] = d / sqrt((double)c->hs);
                    if (s[j] > m) m = s[j];
                }
                for (int j = 0; j <= i; j++) l += (s[j] = exp(s[j] - m));
                double *o = c->out + ((size_t)b * c->T + i) * OC + h * c->hs;
                for (int k = 0; k < c->hs; k++) {
                    double a = 0;
                    for (int j = 0; j <= i; j++) a += s[j] / l * base[(size_t)j * W + vo + k];
                    o[k] = a;
                }
            }
        }
    free(s);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * OC);
}

static void test_gqa_attention(void **state)
{
    (void)state;
    uint64_t rng = 17;
    // B, T, NH, NKV, hs: groups of 2 and 4, one kv head, T across the key block, a head > 128
    int shapes[][5] = {{1, 1, 2, 1, 4},   {2, 7, 4, 2, 16}, {1, 70, 4, 1, 8},
                       {2, 33, 6, 3, 12}, {1, 5, 2, 1, 136}};
    for (int si = 0; si < 5; si++) {
        int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], NKV = shapes[si][3],
            hs = shapes[si][4];
        size_t n = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
        float *qkv = ref_falloc(n), *out = ref_falloc(no), *lse = ref_falloc((size_t)B * NH * T),
              *r = ref_falloc(no), *d = ref_falloc(n);
        ref_fill(qkv, n, &rng, -1, 1);
        ref_fill(r, no, &rng, -1, 1);
        vr_cpu_attention_gqa_fwd(out, lse, qkv, B, T, NH, NKV, hs);
        gqa_ctx c = {ref_to_double(qkv, n), ref_to_double(r, no), ref_dalloc(no), B, T, NH, NKV, hs};
        gqa_loss(&c);
        expect_le(ref_relerr(out, c.out, no), TOL_FWD, "gqa out");
        ref_fill(d, n, &rng, -9, 9);
        vr_cpu_attention_gqa_bwd(d, r, qkv, out, lse, B, T, NH, NKV, hs, 0);
        fd_check(d, c.qkv, n, gqa_loss, &c, &rng, "gqa dqkv");
        float *prior = ref_falloc(n), *a = ref_falloc(n);
        ref_fill(prior, n, &rng, -1, 1);
        memcpy(a, prior, n * sizeof(float));
        vr_cpu_attention_gqa_bwd(a, r, qkv, out, lse, B, T, NH, NKV, hs, 1);
        expect_acc(a, prior, d, n, "gqa dqkv acc");

        // Against multi-head attention over K/V repeated per query head (what HF's repeat_kv does):
        // out, lse and dq bit for bit; dk, dv = the sum over the group's copies.
        int G = NH / NKV, W = (NH + 2 * NKV) * hs, W3 = 3 * NH * hs;
        size_t n3 = (size_t)B * T * W3;
        float *x3 = ref_falloc(n3), *o3 = ref_falloc(no), *l3 = ref_falloc((size_t)B * NH * T),
              *d3 = ref_falloc(n3);
        for (size_t bt = 0; bt < (size_t)B * T; bt++)
            for (int h = 0; h < NH; h++)
                for (int k = 0; k < hs; k++) {
                    const float *src = qkv + bt * W;
                    float *dst = x3 + bt * W3;
                    dst[h * hs + k] = src[h * hs + k];
                    dst[(NH + h) * hs + k] = src[(NH + h / G) * hs + k];
                    dst[(2 * NH + h) * hs + k] = src[(NH + NKV + h / G) * hs + k];
                }
        vr_cpu_attention_fwd(o3, l3, x3, B, T, NH * hs, NH);
        assert_memory_equal(o3, out, no * sizeof(float));
        assert_memory_equal(l3, lse, (size_t)B * NH * T * sizeof(float));
        vr_cpu_attention_bwd(d3, r, x3, o3, l3, B, T, NH * hs, NH, 0);
        float *sum = ref_falloc(n);
        memset(sum, 0, n * sizeof(float));
        for (size_t bt = 0; bt < (size_t)B * T; bt++)
            for (int h = 0; h < NH; h++)
                for (int k = 0; k < hs; k++) {
                    const float *src = d3 + bt * W3;
                    float *dst = sum + bt * W;
                    dst[h * hs + k] = src[h * hs + k];
                    dst[(NH + h / G) * hs + k] += src[(NH + h) * hs + k];
                    dst[(NH + NKV + h / G) * hs + k] += src[(2 * NH + h) * hs + k];
                }
        for (size_t bt = 0; bt < (size_t)B * T; bt++) // dq: the same arithmetic
            assert_memory_equal(sum + bt * W, d + bt * W, (size_t)NH * hs * sizeof(float));
        expect_le(ref_relerr_ff(d, sum, n), TOL_ACC, "gqa dkv vs repeated-kv sum");
        free(qkv), free(out), free(lse), free(r), free(d), free(prior), free(a);
        free(x3), free(o3), free(l3), free(d3), free(sum), free(c.qkv), free(c.r), free(c.out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_rope), cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_gqa_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
