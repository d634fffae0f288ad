/* Gradient checks of the CPU kernels against independent double-precision references.
 *
 * For every op: (1) the float forward against the double reference forward (tests/kcpu/ref.h) on
 * the same inputs; (2) the float backward, given dout = R for a random R, against central finite
 * differences (in double) of the reference's scalar loss L = sum(out * R); (3) acc = 1 adds into the
 * output instead of overwriting it. Several shapes each, including N = 1, NH > 1 and T not a multiple
 * of the attention key block (64).
 *
 * Tolerances (normwise: max|float - ref| / max|ref| over a tensor):
 *   TOL_FWD 1e-5: a float forward carries ~1e-7 relative rounding per operation; sums of up to a few
 *                 hundred terms stay well under 1e-5.
 *   TOL_BWD 1e-4: the float backward accumulates more terms (e.g. over all rows for parameter
 *                 gradients); the finite differences themselves are accurate to ~1e-9 in double.
 *   TOL_ACC 1e-5: the acc result against prior + the overwrite result; one float addition of rounding.
 * The measured errors are printed per op (the worst over shapes). */
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
#define FD_MAX 300 /* entries checked by finite differences per tensor, chosen at random beyond that */

static double worst_fwd, worst_bwd, worst_acc;

static void reset_worst(void) { worst_fwd = worst_bwd = worst_acc = 0.0; }

static void report(const char *op)
{
    print_message("  %-14s max rel err: forward %.2e  backward %.2e  acc %.2e\n", op, worst_fwd,
                  worst_bwd, worst_acc);
}

static void expect_fwd(double e, const char *what)
{
    if (e > worst_fwd) worst_fwd = e;
    if (!(e <= TOL_FWD)) fail_msg("%s: forward rel err %.3e > %.0e", what, e, TOL_FWD);
}

static void expect_bwd(double e, const char *what)
{
    if (e > worst_bwd) worst_bwd = e;
    if (!(e <= TOL_BWD)) fail_msg("%s: backward rel err %.3e > %.0e", what, e, TOL_BWD);
}

/* acc = 1 must give prior + (acc = 0 result), up to the rounding of that one addition (and of a
 * different summation order where the kernel adds inside a sum, as sgemm with beta = 1 does). */
static void expect_acc(const float *accd, const float *prior, const float *fresh, size_t n,
                       const char *what)
{
    float *sum = ref_falloc(n);
    for (size_t i = 0; i < n; i++) sum[i] = prior[i] + fresh[i];
    double e = ref_relerr_ff(accd, sum, n);
    free(sum);
    if (e > worst_acc) worst_acc = e;
    if (!(e <= TOL_ACC)) fail_msg("%s: acc=1 rel err %.3e > %.0e", what, e, TOL_ACC);
}

/* Finite-difference check of the float gradient g (n) against loss f over input x (n, double). */
static void fd_check(const float *g, double *x, size_t n, ref_loss_fn f, void *ctx, uint64_t *rng,
                     const char *what)
{
    size_t k;
    size_t *idx = ref_pick(n, FD_MAX, &k, rng);
    double *gd = ref_dalloc(n);
    ref_fd_grad(gd, x, n, n <= FD_MAX ? NULL : idx, k, f, ctx);
    expect_bwd(ref_relerr_idx(g, gd, n, n <= FD_MAX ? NULL : idx, k), what);
    free(gd);
    free(idx);
}

static float *copy_f(const float *x, size_t n)
{
    float *y = ref_falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double dot_d(const double *a, const double *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * r[i];
    return s;
}

/* ------------------------------------------------------------------ elementwise */

typedef struct { double *x, *r, *tmp; size_t n; int kind; } ew_ctx; /* kind 0 gelu, 1 relu */

static double ew_loss(void *p)
{
    ew_ctx *c = p;
    for (size_t i = 0; i < c->n; i++)
        c->tmp[i] = c->kind == 0 ? ref_gelu1(c->x[i]) : (c->x[i] > 0 ? c->x[i] : 0.0);
    return dot_d(c->tmp, c->r, c->n);
}

static void test_gelu_relu(void **state)
{
    (void)state;
    uint64_t rng = 11;
    for (int kind = 0; kind < 2; kind++) {
        reset_worst();
        size_t sizes[] = {1, 17, 1000, 70001};
        for (int si = 0; si < 4; si++) {
            size_t n = sizes[si];
            float *x = ref_falloc(n), *r = ref_falloc(n), *out = ref_falloc(n), *dx = ref_falloc(n);
            ref_fill(x, n, &rng, -6.0f, 6.0f);
            if (kind == 1) // keep ReLU inputs away from the kink so finite differences are exact
                for (size_t i = 0; i < n; i++)
                    if (fabsf(x[i]) < 0.01f) x[i] = 0.5f;
            ref_fill(r, n, &rng, -1.0f, 1.0f);
            ew_ctx c = {ref_to_double(x, n), ref_to_double(r, n), ref_dalloc(n), n, kind};
            if (kind == 0) vr_cpu_gelu_fwd(out, x, n); else vr_cpu_relu_fwd(out, x, n);
            double *od = ref_dalloc(n);
            for (size_t i = 0; i < n; i++) od[i] = kind == 0 ? ref_gelu1(c.x[i]) : (c.x[i] > 0 ? c.x[i] : 0);
            expect_fwd(ref_relerr(out, od, n), kind == 0 ? "gelu" : "relu");
            if (kind == 0) vr_cpu_gelu_bwd(dx, x, r, n, 0); else vr_cpu_relu_bwd(dx, x, r, n, 0);
            fd_check(dx, c.x, n, ew_loss, &c, &rng, kind == 0 ? "gelu dx" : "relu dx");
            float *prior = ref_falloc(n);
            ref_fill(prior, n, &rng, -1.0f, 1.0f);
            float *a = copy_f(prior, n);
            if (kind == 0) vr_cpu_gelu_bwd(a, x, r, n, 1); else vr_cpu_relu_bwd(a, x, r, n, 1);
            expect_acc(a, prior, dx, n, "gelu/relu");
            // in-place forward
            float *y = copy_f(x, n);
            if (kind == 0) vr_cpu_gelu_fwd(y, y, n); else vr_cpu_relu_fwd(y, y, n);
            assert_memory_equal(y, out, n * sizeof(float));
            free(x), free(r), free(out), free(dx), free(prior), free(a), free(y), free(od);
            free(c.x), free(c.r), free(c.tmp);
        }
        report(kind == 0 ? "gelu" : "relu");
    }
}

static void test_acc_add_scale(void **state)
{
    (void)state;
    uint64_t rng = 5;
    size_t n = 100003;
    float *a = ref_falloc(n), *b = ref_falloc(n), *o = ref_falloc(n), *d = ref_falloc(n);
    ref_fill(a, n, &rng, -1, 1);
    ref_fill(b, n, &rng, -1, 1);
    vr_cpu_add_fwd(o, a, b, n);
    for (size_t i = 0; i < n; i++) assert_true(o[i] == a[i] + b[i]);
    vr_cpu_acc(d, a, n, 0);
    assert_memory_equal(d, a, n * sizeof(float));
    vr_cpu_acc(d, b, n, 1);
    assert_memory_equal(d, o, n * sizeof(float));
    vr_cpu_add_fwd(a, a, b, n); // aliasing out == a
    assert_memory_equal(a, o, n * sizeof(float));
    vr_cpu_scale(o, n, 0.5f);
    for (size_t i = 0; i < n; i++) assert_true(o[i] == d[i] * 0.5f);
    free(a), free(b), free(o), free(d);
}

static void test_reductions(void **state)
{
    (void)state;
    uint64_t rng = 6;
    size_t sizes[] = {0, 1, 5, 100000, 1000003};
    reset_worst();
    for (int si = 0; si < 5; si++) {
        size_t n = sizes[si];
        float *x = ref_falloc(n);
        ref_fill(x, n, &rng, -2, 2);
        double s = 0, ss = 0;
        for (size_t i = 0; i < n; i++) s += x[i], ss += (double)x[i] * x[i];
        double e1 = fabs(vr_cpu_sumsq(x, n) - ss) / (ss > 0 ? ss : 1);
        double e2 = fabs(vr_cpu_sum(x, n) - s) / (fabs(s) > 1 ? fabs(s) : 1);
        assert_true(e1 < 1e-12 && e2 < 1e-12);
        if (n) {
            float m;
            vr_cpu_mean_fwd(&m, x, n);
            double md = s / n;
            expect_fwd(fabs(m - md) / (fabs(md) > 1e-3 ? fabs(md) : 1e-3), "mean");
            float g = 0.7f, *dx = ref_falloc(n), *prior = ref_falloc(n);
            vr_cpu_mean_bwd(dx, &g, n, 0);
            for (size_t i = 0; i < n; i++) assert_true(fabs(dx[i] - 0.7 / n) <= 1e-7 * 0.7 / n);
            ref_fill(prior, n, &rng, -1, 1);
            float *a = copy_f(prior, n);
            vr_cpu_mean_bwd(a, &g, n, 1);
            expect_acc(a, prior, dx, n, "mean");
            free(dx), free(prior), free(a);
        }
        free(x);
    }
    report("mean/sums");
}

/* ------------------------------------------------------------------ embedding */

typedef struct { double *wte, *wpe, *r, *out; const int32_t *tok; int B, T, C; } emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    ref_embedding(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void test_embedding(void **state)
{
    (void)state;
    uint64_t rng = 21;
    int shapes[][5] = {{1, 1, 4, 3, 1}, {2, 5, 8, 7, 6}, {3, 33, 20, 11, 40}, {4, 64, 96, 50, 64}};
    reset_worst();
    for (int si = 0; si < 4; si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], V = shapes[si][3], maxT = shapes[si][4];
        size_t n = (size_t)B * T * C;
        int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
        for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(ref_rng_next(&rng) % (uint64_t)V);
        float *wte = ref_falloc((size_t)V * C), *wpe = ref_falloc((size_t)maxT * C);
        float *out = ref_falloc(n), *r = ref_falloc(n);
        ref_fill(wte, (size_t)V * C, &rng, -1, 1);
        ref_fill(wpe, (size_t)maxT * C, &rng, -1, 1);
        ref_fill(r, n, &rng, -1, 1);
        vr_cpu_embedding_fwd(out, tok, wte, wpe, B, T, C);
        emb_ctx c = {ref_to_double(wte, (size_t)V * C), ref_to_double(wpe, (size_t)maxT * C),
                     ref_to_double(r, n), ref_dalloc(n), tok, B, T, C};
        emb_loss(&c);
        expect_fwd(ref_relerr(out, c.out, n), "embedding");
        float *dwte = ref_falloc((size_t)V * C), *dwpe = ref_falloc((size_t)maxT * C);
        ref_fill(dwte, (size_t)V * C, &rng, -9, 9); // garbage: acc=0 must overwrite
        ref_fill(dwpe, (size_t)maxT * C, &rng, -9, 9);
        memset(dwpe + (size_t)T * C, 0, (size_t)(maxT - T) * C * sizeof(float));
        vr_cpu_embedding_bwd(dwte, dwpe, r, tok, B, T, C, V, 0);
        fd_check(dwte, c.wte, (size_t)V * C, emb_loss, &c, &rng, "embedding dwte");
        fd_check(dwpe, c.wpe, (size_t)maxT * C, emb_loss, &c, &rng, "embedding dwpe");
        float *p1 = ref_falloc((size_t)V * C), *p2 = ref_falloc((size_t)maxT * C);
        ref_fill(p1, (size_t)V * C, &rng, -1, 1);
        ref_fill(p2, (size_t)maxT * C, &rng, -1, 1);
        memset(p2 + (size_t)T * C, 0, (size_t)(maxT - T) * C * sizeof(float));
        float *a1 = copy_f(p1, (size_t)V * C), *a2 = copy_f(p2, (size_t)maxT * C);
        vr_cpu_embedding_bwd(a1, a2, r, tok, B, T, C, V, 1);
        expect_acc(a1, p1, dwte, (size_t)V * C, "embedding dwte");
        expect_acc(a2, p2, dwpe, (size_t)maxT * C, "embedding dwpe");
        vr_cpu_embedding_bwd(NULL, a2, r, tok, B, T, C, V, 0); // frozen wte
        assert_memory_equal(a2, dwpe, (size_t)maxT * C * sizeof(float));
        free(tok), free(wte), free(wpe), free(out), free(r), free(dwte), free(dwpe);
        free(p1), free(p2), free(a1), free(a2), free(c.wte), free(c.wpe), free(c.r), free(c.out);
    }
    report("embedding");
}

/* ------------------------------------------------------------------ matmul */

typedef struct { double *inp, *w, *bias, *r, *out; int N, C, OC; } mm_ctx;

static double mm_loss(void *p)
{
    mm_ctx *c = p;
    ref_matmul(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot_d(c->out, c->r, (size_t)c->N * c->OC);
}

static void test_matmul(void **state)
{
    (void)state;
    uint64_t rng = 31;
    int shapes[][3] = {{1, 1, 1}, {1, 7, 5}, {6, 3, 9}, {37, 64, 48}, {128, 33, 300}};
    reset_worst();
    for (int si = 0; si < 5; si++) {
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int N = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
            size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
            float *inp = ref_falloc(ni), *w = ref_falloc(nw), *bias = ref_falloc(OC), *out = ref_falloc(no),
                  *r = ref_falloc(no);
            ref_fill(inp, ni, &rng, -1, 1);
            ref_fill(w, nw, &rng, -1, 1);
            ref_fill(bias, OC, &rng, -1, 1);
            ref_fill(r, no, &rng, -1, 1);
            vr_cpu_matmul_fwd(out, inp, w, with_bias ? bias : NULL, N, C, OC);
            mm_ctx c = {ref_to_double(inp, ni), ref_to_double(w, nw),
                        with_bias ? ref_to_double(bias, OC) : NULL, ref_to_double(r, no), ref_dalloc(no),
                        N, C, OC};
            mm_loss(&c);
            expect_fwd(ref_relerr(out, c.out, no), "matmul");
            float *dinp = ref_falloc(ni), *dw = ref_falloc(nw), *db = ref_falloc(OC);
            ref_fill(dinp, ni, &rng, -9, 9);
            ref_fill(dw, nw, &rng, -9, 9);
            ref_fill(db, OC, &rng, -9, 9);
            vr_cpu_matmul_bwd(dinp, dw, with_bias ? db : NULL, r, inp, w, N, C, OC, 0, 0);
            fd_check(dinp, c.inp, ni, mm_loss, &c, &rng, "matmul dinp");
            fd_check(dw, c.w, nw, mm_loss, &c, &rng, "matmul dw");
            if (with_bias) fd_check(db, c.bias, OC, mm_loss, &c, &rng, "matmul dbias");
            // acc for each group separately
            float *p1 = ref_falloc(ni), *p2 = ref_falloc(nw), *p3 = ref_falloc(OC);
            ref_fill(p1, ni, &rng, -1, 1);
            ref_fill(p2, nw, &rng, -1, 1);
            ref_fill(p3, OC, &rng, -1, 1);
            float *a1 = copy_f(p1, ni), *a2 = copy_f(p2, nw), *a3 = copy_f(p3, OC);
            vr_cpu_matmul_bwd(a1, NULL, NULL, r, inp, w, N, C, OC, 1, 0);
            expect_acc(a1, p1, dinp, ni, "matmul dinp");
            vr_cpu_matmul_bwd(NULL, a2, with_bias ? a3 : NULL, r, inp, w, N, C, OC, 0, 1);
            expect_acc(a2, p2, dw, nw, "matmul dw");
            if (with_bias) expect_acc(a3, p3, db, OC, "matmul dbias");
            free(inp), free(w), free(bias), free(out), free(r), free(dinp), free(dw), free(db);
            free(p1), free(p2), free(p3), free(a1), free(a2), free(a3);
            free(c.inp), free(c.w), free(c.bias), free(c.r), free(c.out);
        }
    }
    report("matmul");
}

/* ------------------------------------------------------------------ layernorm */

typedef struct { double *inp, *w, *b, *r, *out; int N, C; } ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    ref_layernorm(c->out, c->inp, c->w, c->b, c->N, c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_layernorm(void **state)
{
    (void)state;
    uint64_t rng = 41;
    // (C = 2 is left out: there the output is ±1 up to eps and dinp is pure float cancellation)
    int shapes[][2] = {{1, 3}, {1, 9}, {5, 16}, {33, 70}, {300, 130}};
    reset_worst();
    for (int si = 0; si < 5; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t n = (size_t)N * C;
        float *inp = ref_falloc(n), *w = ref_falloc(C), *b = ref_falloc(C), *out = ref_falloc(n),
              *r = ref_falloc(n), *mean = ref_falloc(N), *rstd = ref_falloc(N);
        ref_fill(inp, n, &rng, -2, 3);
        ref_fill(w, C, &rng, 0.5f, 1.5f);
        ref_fill(b, C, &rng, -1, 1);
        ref_fill(r, n, &rng, -1, 1);
        vr_cpu_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
        ln_ctx c = {ref_to_double(inp, n), ref_to_double(w, C), ref_to_double(b, C), ref_to_double(r, n),
                    ref_dalloc(n), N, C};
        ln_loss(&c);
        expect_fwd(ref_relerr(out, c.out, n), "layernorm out");
        double *md = ref_dalloc(N), *rd = ref_dalloc(N);
        for (int i = 0; i < N; i++) {
            double m = 0, v = 0;
            for (int k = 0; k < C; k++) m += c.inp[(size_t)i * C + k];
            m /= C;
            for (int k = 0; k < C; k++) v += (c.inp[(size_t)i * C + k] - m) * (c.inp[(size_t)i * C + k] - m);
            md[i] = m;
            rd[i] = 1.0 / sqrt(v / C + 1e-5);
        }
        expect_fwd(ref_relerr(mean, md, N), "layernorm mean");
        expect_fwd(ref_relerr(rstd, rd, N), "layernorm rstd");
        float *dinp = ref_falloc(n), *dw = ref_falloc(C), *db = ref_falloc(C);
        ref_fill(dinp, n, &rng, -9, 9);
        ref_fill(dw, C, &rng, -9, 9);
        ref_fill(db, C, &rng, -9, 9);
        vr_cpu_layernorm_bwd(dinp, dw, db, r, inp, w, mean, rstd, N, C, 0, 0);
        fd_check(dinp, c.inp, n, ln_loss, &c, &rng, "layernorm dinp");
        fd_check(dw, c.w, C, ln_loss, &c, &rng, "layernorm dw");
        fd_check(db, c.b, C, ln_loss, &c, &rng, "layernorm db");
        float *p1 = ref_falloc(n), *p2 = ref_falloc(C), *p3 = ref_falloc(C);
        ref_fill(p1, n, &rng, -1, 1);
        ref_fill(p2, C, &rng, -1, 1);
        ref_fill(p3, C, &rng, -1, 1);
        float *a1 = copy_f(p1, n), *a2 = copy_f(p2, C), *a3 = copy_f(p3, C);
        vr_cpu_layernorm_bwd(a1, NULL, NULL, r, inp, w, mean, rstd, N, C, 1, 0);
        expect_acc(a1, p1, dinp, n, "layernorm dinp");
        vr_cpu_layernorm_bwd(NULL, a2, a3, r, inp, w, mean, rstd, N, C, 0, 1);
        expect_acc(a2, p2, dw, C, "layernorm dw");
        expect_acc(a3, p3, db, C, "layernorm db");
        float *only = ref_falloc(C); // one parameter gradient alone
        vr_cpu_layernorm_bwd(NULL, only, NULL, r, inp, w, mean, rstd, N, C, 0, 0);
        assert_memory_equal(only, dw, (size_t)C * sizeof(float));
        vr_cpu_layernorm_bwd(NULL, NULL, only, r, inp, w, mean, rstd, N, C, 0, 0);
        assert_memory_equal(only, db, (size_t)C * sizeof(float));
        free(only);
        /* from the forward's output (vr_step_config.norm_from_out): the same gradients, acc too */
        float *o1 = ref_falloc(n), *o2 = ref_falloc(C), *o3 = ref_falloc(C);
        vr_cpu_layernorm_bwd_out(o1, o2, o3, r, out, w, b, rstd, N, C, 0, 0);
        fd_check(o1, c.inp, n, ln_loss, &c, &rng, "layernorm from out dinp");
        fd_check(o2, c.w, C, ln_loss, &c, &rng, "layernorm from out dw");
        fd_check(o3, c.b, C, ln_loss, &c, &rng, "layernorm from out db");
        memcpy(a1, p1, n * sizeof(float));
        vr_cpu_layernorm_bwd_out(a1, NULL, NULL, r, out, w, b, rstd, N, C, 1, 0);
        expect_acc(a1, p1, o1, n, "layernorm from out dinp");
        memcpy(a2, p2, (size_t)C * sizeof(float));
        memcpy(a3, p3, (size_t)C * sizeof(float));
        vr_cpu_layernorm_bwd_out(NULL, a2, a3, r, out, w, b, rstd, N, C, 0, 1);
        expect_acc(a2, p2, o2, C, "layernorm from out dw");
        expect_acc(a3, p3, o3, C, "layernorm from out db");
        /* a weight of 0 (and one negative): its output is b whatever the input, so no gradient, and no NaN */
        w[0] = 0.0f;
        w[C - 1] = -w[C - 1];
        vr_cpu_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
        vr_cpu_layernorm_bwd_out(o1, o2, o3, r, out, w, b, rstd, N, C, 0, 0);
        vr_cpu_layernorm_bwd(dinp, dw, db, r, inp, w, mean, rstd, N, C, 0, 0);
        assert_true(o2[0] == 0.0f);
        for (size_t i = 0; i < n; i++) assert_true(isfinite(o1[i]));
        if (C > 1) /* the negative weight's gradient as from the input */
            assert_true(fabsf(o2[C - 1] - dw[C - 1]) <= 1e-4f * (1.0f + fabsf(dw[C - 1])));
        free(o1), free(o2), free(o3);
        free(inp), free(w), free(b), free(out), free(r), free(mean), free(rstd), free(md), free(rd);
        free(dinp), free(dw), free(db), free(p1), free(p2), free(p3), free(a1), free(a2), free(a3);
        free(c.inp), free(c.w), free(c.b), free(c.r), free(c.out);
    }
    report("layernorm");
}

/* ------------------------------------------------------------------ attention */

typedef struct { double *qkv, *r, *out; int B, T, C, NH; } att_ctx;

static double att_loss(void *p)
{
    att_ctx *c = p;
    ref_attention(c->out, NULL, c->qkv, c->B, c->T, c->C, c->NH);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void test_attention(void **state)
{
    (void)state;
    uint64_t rng = 51;
    // (B, T, C, NH): T = 1, T < a tile, T = 64 + 1 keys, T not a multiple of 32 or 64, several
    // heads; head sizes up to 128 take the tiled path, larger ones (132) the row-at-a-time path
    int shapes[][4] = {{1, 1, 4, 1},   {2, 7, 8, 2},     {1, 65, 8, 2},  {2, 70, 12, 3},
                       {1, 130, 16, 4}, {3, 200, 32, 2}, {1, 33, 256, 2}, {1, 9, 132, 1},
                       {2, 70, 264, 2}};
    reset_worst();
    for (int si = 0; si < 9; si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
        assert_int_equal(vr_cpu_attention_scratch_bytes(B, T, C, NH), 0);
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
        float *qkv = ref_falloc(nq), *out = ref_falloc(no), *lse = ref_falloc(nl), *r = ref_falloc(no);
        ref_fill(qkv, nq, &rng, -2, 2); // |scores| up to ~8: a peaked softmax, not a flat one
        ref_fill(r, no, &rng, -1, 1);
        vr_cpu_attention_fwd(out, lse, qkv, B, T, C, NH);
        att_ctx c = {ref_to_double(qkv, nq), ref_to_double(r, no), ref_dalloc(no), B, T, C, NH};
        double *lsed = ref_dalloc(nl);
        ref_attention(c.out, lsed, c.qkv, B, T, C, NH);
        expect_fwd(ref_relerr(out, c.out, no), "attention out");
        expect_fwd(ref_relerr(lse, lsed, nl), "attention lse");
        float *dqkv = ref_falloc(nq);
        ref_fill(dqkv, nq, &rng, -9, 9);
        vr_cpu_attention_bwd(dqkv, r, qkv, out, lse, B, T, C, NH, 0);
        fd_check(dqkv, c.qkv, nq, att_loss, &c, &rng, "attention dqkv");
        float *prior = ref_falloc(nq);
        ref_fill(prior, nq, &rng, -1, 1);
        float *a = copy_f(prior, nq);
        vr_cpu_attention_bwd(a, r, qkv, out, lse, B, T, C, NH, 1);
        expect_acc(a, prior, dqkv, nq, "attention dqkv");
        free(qkv), free(out), free(lse), free(r), free(lsed), free(dqkv), free(prior), free(a);
        free(c.qkv), free(c.r), free(c.out);
    }
    report("attention");
}

/* ------------------------------------------------------------------ fused classifier */

typedef struct { double *x, *wte, *logits, *losses; const int32_t *tg; int N, C, V; double scale; } cls_ctx;

static double cls_loss(void *p)
{
    cls_ctx *c = p;
    ref_matmul(c->logits, c->x, c->wte, NULL, c->N, c->C, c->V);
    ref_xent(c->losses, c->logits, c->tg, c->N, c->V);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s * c->scale;
}

static void test_classifier(void **state)
{
    (void)state;
    uint64_t rng = 61;
    int shapes[][3] = {{1, 3, 2}, {5, 8, 11}, {9, 16, 37}, {130, 24, 300}};
    reset_worst();
    for (int si = 0; si < 4; si++) {
        int N = shapes[si][0], C = shapes[si][1], V = shapes[si][2];
        size_t nx = (size_t)N * C, nw = (size_t)V * C;
        float *x = ref_falloc(nx), *wte = ref_falloc(nw), *losses = ref_falloc(N);
        int32_t *tg = malloc((size_t)N * sizeof(int32_t));
        ref_fill(x, nx, &rng, -1.5f, 1.5f);
        ref_fill(wte, nw, &rng, -1, 1);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)(ref_rng_next(&rng) % (uint64_t)V);
        if (N > 2) tg[1] = tg[N - 1] = -1; // ignored rows
        float scale = 1.0f / (float)N;
        cls_ctx c = {ref_to_double(x, nx), ref_to_double(wte, nw), ref_dalloc((size_t)N * V),
                     ref_dalloc(N), tg, N, C, V, scale};
        cls_loss(&c);
        double *lossd = ref_dalloc(N);
        memcpy(lossd, c.losses, (size_t)N * sizeof(double));
        // scratch of 1 row, 2 rows (chunks with a partial last one), and the recommended size
        size_t rec = vr_cpu_classifier_scratch_bytes(N, V);
        assert_true(rec >= (size_t)V * sizeof(float));
        size_t scr_sizes[] = {(size_t)V * sizeof(float), 2 * (size_t)V * sizeof(float) + 3, rec};
        float *dx0 = NULL, *dw0 = NULL;
        for (int k = 0; k < 3; k++) {
            float *scr = ref_falloc(scr_sizes[k] / sizeof(float));
            float *dx = ref_falloc(nx), *dw = ref_falloc(nw);
            ref_fill(dx, nx, &rng, -9, 9);
            ref_fill(dw, nw, &rng, -9, 9);
            ref_fill(losses, N, &rng, -9, 9);
            vr_cpu_classifier(losses, NULL, NULL, x, wte, tg, N, C, V, scale, scr, scr_sizes[k], 0, 0);
            expect_fwd(ref_relerr(losses, lossd, N), "classifier losses (no grad)");
            vr_cpu_classifier(losses, dx, dw, x, wte, tg, N, C, V, scale, scr, scr_sizes[k], 0, 0);
            expect_fwd(ref_relerr(losses, lossd, N), "classifier losses");
            for (int i = 0; i < N; i++) {
                if (tg[i] >= 0) continue;
                assert_true(losses[i] == 0.0f);
                for (int j = 0; j < C; j++) assert_true(dx[(size_t)i * C + j] == 0.0f);
            }
            if (k == 0) {
                fd_check(dx, c.x, nx, cls_loss, &c, &rng, "classifier dx");
                fd_check(dw, c.wte, nw, cls_loss, &c, &rng, "classifier dwte");
                dx0 = copy_f(dx, nx);
                dw0 = copy_f(dw, nw);
            } else { // chunking changes only the order of float sums
                expect_bwd(ref_relerr_ff(dx, dx0, nx), "classifier dx chunked");
                expect_bwd(ref_relerr_ff(dw, dw0, nw), "classifier dwte chunked");
            }
            // acc on each output separately; dx alone, dwte alone
            float *p1 = ref_falloc(nx), *p2 = ref_falloc(nw);
            ref_fill(p1, nx, &rng, -1, 1);
            ref_fill(p2, nw, &rng, -1, 1);
            float *a1 = copy_f(p1, nx), *a2 = copy_f(p2, nw);
            vr_cpu_classifier(losses, a1, NULL, x, wte, tg, N, C, V, scale, scr, scr_sizes[k], 1, 0);
            expect_acc(a1, p1, dx, nx, "classifier dx");
            vr_cpu_classifier(losses, NULL, a2, x, wte, tg, N, C, V, scale, scr, scr_sizes[k], 0, 1);
            expect_acc(a2, p2, dw, nw, "classifier dwte");
            for (int i = 0; i < N; i++) // ignored rows: dx untouched under acc
                if (tg[i] < 0)
                    for (int j = 0; j < C; j++) assert_true(a1[(size_t)i * C + j] == p1[(size_t)i * C + j]);
            free(scr), free(dx), free(dw), free(p1), free(p2), free(a1), free(a2);
        }
        // all rows ignored: zero loss, zero gradients
        int32_t *none = malloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N; i++) none[i] = -1;
        float *scr = ref_falloc(rec / sizeof(float)), *dx = ref_falloc(nx), *dw = ref_falloc(nw);
        ref_fill(dx, nx, &rng, -9, 9);
        ref_fill(dw, nw, &rng, -9, 9);
        vr_cpu_classifier(losses, dx, dw, x, wte, none, N, C, V, scale, scr, rec, 0, 0);
        for (int i = 0; i < N; i++) assert_true(losses[i] == 0.0f);
        for (size_t i = 0; i < nx; i++) assert_true(dx[i] == 0.0f);
        for (size_t i = 0; i < nw; i++) assert_true(dw[i] == 0.0f);
        free(none), free(scr), free(dx), free(dw), free(dx0), free(dw0);
        free(x), free(wte), free(losses), free(tg), free(lossd);
        free(c.x), free(c.wte), free(c.logits), free(c.losses);
    }
    report("classifier");
}

/* ------------------------------------------------------------------ softmax cross-entropy */

typedef struct { double *logits, *dl, *losses; const int32_t *tg; int N, V; double scale; } sx_ctx;

static double sx_loss(void *p)
{
    sx_ctx *c = p;
    ref_xent(c->losses, c->logits, c->tg, c->N, c->V);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i] * c->dl[i];
    return s * c->scale;
}

static void test_softmax_xent(void **state)
{
    (void)state;
    uint64_t rng = 71;
    int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {64, 10}, {300, 129}};
    reset_worst();
    for (int si = 0; si < 5; si++) {
        int N = shapes[si][0], V = shapes[si][1];
        size_t n = (size_t)N * V;
        float *z = ref_falloc(n), *pr = ref_falloc(n), *losses = ref_falloc(N), *dl = ref_falloc(N);
        int32_t *tg = malloc((size_t)N * sizeof(int32_t));
        ref_fill(z, n, &rng, -4, 4);
        ref_fill(dl, N, &rng, 0.5f, 1.5f);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)(ref_rng_next(&rng) % (uint64_t)V);
        if (N > 3) tg[2] = -1;
        float scale = 0.37f;
        vr_cpu_softmax_xent_fwd(losses, pr, z, tg, N, V);
        sx_ctx c = {ref_to_double(z, n), ref_to_double(dl, N), ref_dalloc(N), tg, N, V, scale};
        sx_loss(&c);
        expect_fwd(ref_relerr(losses, c.losses, N), "softmax_xent losses");
        double *pd = ref_dalloc(n);
        for (int i = 0; i < N; i++) {
            double mx = -INFINITY, s = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, c.logits[(size_t)i * V + v]);
            for (int v = 0; v < V; v++) s += exp(c.logits[(size_t)i * V + v] - mx);
            for (int v = 0; v < V; v++) pd[(size_t)i * V + v] = exp(c.logits[(size_t)i * V + v] - mx) / s;
        }
        expect_fwd(ref_relerr(pr, pd, n), "softmax_xent probs");
        float *dz = ref_falloc(n);
        ref_fill(dz, n, &rng, -9, 9);
        vr_cpu_softmax_xent_bwd(dz, dl, scale, pr, tg, N, V, 0);
        fd_check(dz, c.logits, n, sx_loss, &c, &rng, "softmax_xent dlogits");
        float *prior = ref_falloc(n);
        ref_fill(prior, n, &rng, -1, 1);
        float *a = copy_f(prior, n);
        vr_cpu_softmax_xent_bwd(a, dl, scale, pr, tg, N, V, 1);
        expect_acc(a, prior, dz, n, "softmax_xent dlogits");
        free(z), free(pr), free(losses), free(dl), free(tg), free(pd), free(dz), free(prior), free(a);
        free(c.logits), free(c.dl), free(c.losses);
    }
    report("softmax_xent");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acc_add_scale), cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_gelu_relu),     cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_matmul),        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_attention),     cmocka_unit_test(test_classifier),
        cmocka_unit_test(test_softmax_xent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
