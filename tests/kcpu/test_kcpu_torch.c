/* The CPU kernels against PyTorch (Debian's python3-torch, CPU, at /usr/bin/python3).
 *
 * The group setup writes every case's inputs to a temporary directory with a manifest, runs
 * tests/kcpu/torch_oracle.py once over all of them (importing torch costs seconds), and each test
 * then runs the kernels on the same inputs and compares with torch's results. Skipped when
 * /usr/bin/python3 or its torch module is missing.
 *
 * Tolerance: normwise relative error max|vram - torch| / max|torch| <= 1e-5 for every tensor.
 * Both sides compute in float32 with different summation orders (OpenBLAS vs MKL-DNN/ATen blocking,
 * an online softmax vs a full one), which costs a few 1e-7 on the sizes used; 1e-5 leaves margin
 * while any semantic difference (a missing scale, a wrong bias correction, decay applied to the
 * wrong term) shows at 1e-3 or more. For the optimizers the update p - p0 is compared, not only p,
 * which is the stricter test (its tolerance widens by the float rounding of p itself, see c_optim).
 * Where the two differ most, torch is the less exact one: e.g. cross-entropy on a confident row
 * (loss 0.017), torch's float log_softmax is 3e-6 from the float64 answer, vram's 5e-8 (the loss is
 * formed in double from the row's max and normaliser). The measured errors are printed. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kcpu/ref.h"

#define TOL 1e-5
#define PY "/usr/bin/python3"

enum { WRITE, CHECK };

static char dir[512];
static FILE *manifest;
static int case_id;
static int have_torch;
static double worst;

/* ------------------------------------------------------------------ files */

static void path_of(char *p, size_t cap, int cid, const char *name, const char *ext)
{
    snprintf(p, cap, "%s/%d_%s.%s", dir, cid, name, ext);
}

static void put(int cid, const char *name, const void *data, size_t bytes, const char *ext)
{
    char p[640];
    path_of(p, sizeof p, cid, name, ext);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_true(fwrite(data, 1, bytes, f) == bytes);
    fclose(f);
}

static void *get(int cid, const char *name, size_t bytes, const char *ext)
{
    char p[640];
    path_of(p, sizeof p, cid, name, ext);
    FILE *f = fopen(p, "rb");
    if (!f) fail_msg("missing %s (did the oracle run?)", p);
    void *buf = malloc(bytes ? bytes : 1);
    assert_non_null(buf);
    size_t got = fread(buf, 1, bytes, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != bytes || extra) fail_msg("%s: wrong size (want %zu bytes)", p, bytes);
    return buf;
}

static void put_f(int cid, const char *name, const float *x, size_t n) { put(cid, name, x, n * 4, "f32"); }
static void put_i(int cid, const char *name, const int32_t *x, size_t n) { put(cid, name, x, n * 4, "i32"); }
static float *get_f(int cid, const char *name, size_t n) { return get(cid, name, n * 4, "f32"); }
static int32_t *get_i(int cid, const char *name, size_t n) { return get(cid, name, n * 4, "i32"); }
static float *get_out(int cid, const char *name, size_t n) { return get(cid, name, n * 4, "out.f32"); }

static float *rand_f(size_t n, uint64_t *rng, float lo, float hi)
{
    float *x = ref_falloc(n);
    ref_fill(x, n, rng, lo, hi);
    return x;
}

/* Compares a kernel result with torch's, by name. */
static void cmp(int cid, const char *what, const float *mine, const char *name, size_t n)
{
    float *t = get_out(cid, name, n);
    if (getenv("VRAM_KEEP_TMP")) put(cid, name, mine, n * 4, "mine.f32"); // for a look afterwards
    double e = ref_relerr_ff(mine, t, n);
    free(t);
    if (e > worst) worst = e;
    print_message("  case %-3d %-28s rel err %.2e\n", cid, what, e);
    if (!(e <= TOL)) fail_msg("case %d %s: rel err %.3e > %.0e", cid, what, e, TOL);
}

/* The case counter advances in both phases, so a case has the same id when written and checked. */
static int begin(int phase, const char *only, const char *op)
{
    (void)phase;
    int cid = case_id++;
    if (phase == CHECK && strcmp(only, op) != 0) return -1;
    return cid;
}

/* ------------------------------------------------------------------ cases */

static void c_attention(int phase, const char *only, int B, int T, int C, int NH)
{
    int cid = begin(phase, only, "attention");
    if (cid < 0) return;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *qkv = rand_f(nq, &rng, -2, 2), *dout = rand_f(no, &rng, -1, 1);
        put_f(cid, "qkv", qkv, nq);
        put_f(cid, "dout", dout, no);
        fprintf(manifest, "%d attention %d %d %d %d\n", cid, B, T, C, NH);
        free(qkv), free(dout);
        return;
    }
    float *qkv = get_f(cid, "qkv", nq), *dout = get_f(cid, "dout", no);
    float *out = ref_falloc(no), *lse = ref_falloc(nl), *dqkv = ref_falloc(nq);
    vr_cpu_attention_fwd(out, lse, qkv, B, T, C, NH);
    vr_cpu_attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, NH, 0);
    cmp(cid, "attention out", out, "out", no);
    cmp(cid, "attention lse", lse, "lse", nl);
    cmp(cid, "attention dqkv", dqkv, "dqkv", nq);
    free(qkv), free(dout), free(out), free(lse), free(dqkv);
}

static void c_layernorm(int phase, const char *only, int N, int C)
{
    int cid = begin(phase, only, "layernorm");
    if (cid < 0) return;
    size_t n = (size_t)N * C;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *x = rand_f(n, &rng, -2, 3), *w = rand_f(C, &rng, 0.5f, 1.5f), *b = rand_f(C, &rng, -1, 1),
              *dout = rand_f(n, &rng, -1, 1);
        put_f(cid, "inp", x, n), put_f(cid, "w", w, C), put_f(cid, "b", b, C), put_f(cid, "dout", dout, n);
        fprintf(manifest, "%d layernorm %d %d\n", cid, N, C);
        free(x), free(w), free(b), free(dout);
        return;
    }
    float *x = get_f(cid, "inp", n), *w = get_f(cid, "w", C), *b = get_f(cid, "b", C),
          *dout = get_f(cid, "dout", n);
    float *out = ref_falloc(n), *mean = ref_falloc(N), *rstd = ref_falloc(N), *dx = ref_falloc(n),
          *dw = ref_falloc(C), *db = ref_falloc(C);
    vr_cpu_layernorm_fwd(out, mean, rstd, x, w, b, N, C);
    vr_cpu_layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C, 0, 0);
    cmp(cid, "layernorm out", out, "out", n);
    cmp(cid, "layernorm mean", mean, "mean", N);
    cmp(cid, "layernorm rstd", rstd, "rstd", N);
    cmp(cid, "layernorm dinp", dx, "dinp", n);
    cmp(cid, "layernorm dw", dw, "dw", C);
    cmp(cid, "layernorm db", db, "db", C);
    free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
}

static void c_gelu(int phase, const char *only, int n)
{
    int cid = begin(phase, only, "gelu");
    if (cid < 0) return;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *x = rand_f(n, &rng, -8, 8), *dout = rand_f(n, &rng, -1, 1);
        put_f(cid, "x", x, n), put_f(cid, "dout", dout, n);
        fprintf(manifest, "%d gelu %d\n", cid, n);
        free(x), free(dout);
        return;
    }
    float *x = get_f(cid, "x", n), *dout = get_f(cid, "dout", n), *out = ref_falloc(n), *dx = ref_falloc(n);
    vr_cpu_gelu_fwd(out, x, n);
    vr_cpu_gelu_bwd(dx, x, dout, n, 0);
    cmp(cid, "gelu out", out, "out", n);
    cmp(cid, "gelu dx", dx, "dx", n);
    free(x), free(dout), free(out), free(dx);
}

static void c_matmul(int phase, const char *only, int N, int C, int OC)
{
    int cid = begin(phase, only, "matmul");
    if (cid < 0) return;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *x = rand_f(ni, &rng, -1, 1), *w = rand_f(nw, &rng, -1, 1), *b = rand_f(OC, &rng, -1, 1),
              *dout = rand_f(no, &rng, -1, 1);
        put_f(cid, "inp", x, ni), put_f(cid, "w", w, nw), put_f(cid, "bias", b, OC), put_f(cid, "dout", dout, no);
        fprintf(manifest, "%d matmul %d %d %d\n", cid, N, C, OC);
        free(x), free(w), free(b), free(dout);
        return;
    }
    float *x = get_f(cid, "inp", ni), *w = get_f(cid, "w", nw), *b = get_f(cid, "bias", OC),
          *dout = get_f(cid, "dout", no);
    float *out = ref_falloc(no), *dx = ref_falloc(ni), *dw = ref_falloc(nw), *db = ref_falloc(OC);
    vr_cpu_matmul_fwd(out, x, w, b, N, C, OC);
    vr_cpu_matmul_bwd(dx, dw, db, dout, x, w, N, C, OC, 0, 0);
    cmp(cid, "matmul out", out, "out", no);
    cmp(cid, "matmul dinp", dx, "dinp", ni);
    cmp(cid, "matmul dw", dw, "dw", nw);
    cmp(cid, "matmul dbias", db, "dbias", OC);
    free(x), free(w), free(b), free(dout), free(out), free(dx), free(dw), free(db);
}

static void c_classifier(int phase, const char *only, int N, int C, int V)
{
    int cid = begin(phase, only, "classifier");
    if (cid < 0) return;
    size_t nx = (size_t)N * C, nw = (size_t)V * C;
    float scale = 1.0f / (float)N;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *x = rand_f(nx, &rng, -1.5f, 1.5f), *wte = rand_f(nw, &rng, -1, 1);
        int32_t *tg = malloc((size_t)N * 4);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)(ref_rng_next(&rng) % (uint64_t)V);
        if (N > 3) tg[0] = tg[3] = -1;
        put_f(cid, "x", x, nx), put_f(cid, "wte", wte, nw), put_i(cid, "targets", tg, N);
        fprintf(manifest, "%d classifier %d %d %d %.9g\n", cid, N, C, V, (double)scale);
        free(x), free(wte), free(tg);
        return;
    }
    float *x = get_f(cid, "x", nx), *wte = get_f(cid, "wte", nw);
    int32_t *tg = get_i(cid, "targets", N);
    size_t sb = vr_cpu_classifier_scratch_bytes(N, V);
    float *scr = ref_falloc(sb / 4), *losses = ref_falloc(N), *dx = ref_falloc(nx), *dw = ref_falloc(nw);
    vr_cpu_classifier(losses, dx, dw, x, wte, tg, N, C, V, scale, scr, sb, 0, 0);
    cmp(cid, "classifier losses", losses, "losses", N);
    cmp(cid, "classifier dx", dx, "dx", nx);
    cmp(cid, "classifier dwte", dw, "dwte", nw);
    free(x), free(wte), free(tg), free(scr), free(losses), free(dx), free(dw);
}

static void c_softmax_xent(int phase, const char *only, int N, int V)
{
    int cid = begin(phase, only, "softmax_xent");
    if (cid < 0) return;
    size_t n = (size_t)N * V;
    float scale = 0.25f;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *z = rand_f(n, &rng, -4, 4), *dl = rand_f(N, &rng, 0.5f, 1.5f);
        int32_t *tg = malloc((size_t)N * 4);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)(ref_rng_next(&rng) % (uint64_t)V);
        if (N > 2) tg[1] = -1;
        put_f(cid, "logits", z, n), put_f(cid, "dlosses", dl, N), put_i(cid, "targets", tg, N);
        fprintf(manifest, "%d softmax_xent %d %d %.9g\n", cid, N, V, (double)scale);
        free(z), free(dl), free(tg);
        return;
    }
    float *z = get_f(cid, "logits", n), *dl = get_f(cid, "dlosses", N);
    int32_t *tg = get_i(cid, "targets", N);
    float *losses = ref_falloc(N), *pr = ref_falloc(n), *dz = ref_falloc(n);
    vr_cpu_softmax_xent_fwd(losses, pr, z, tg, N, V);
    vr_cpu_softmax_xent_bwd(dz, dl, scale, pr, tg, N, V, 0);
    cmp(cid, "softmax_xent losses", losses, "losses", N);
    cmp(cid, "softmax_xent probs", pr, "probs", n);
    cmp(cid, "softmax_xent dlogits", dz, "dlogits", n);
    free(z), free(dl), free(tg), free(losses), free(pr), free(dz);
}

static void c_embedding(int phase, const char *only, int B, int T, int C, int V, int maxT)
{
    int cid = begin(phase, only, "embedding");
    if (cid < 0) return;
    size_t no = (size_t)B * T * C, nw = (size_t)V * C, np = (size_t)maxT * C;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *wte = rand_f(nw, &rng, -1, 1), *wpe = rand_f(np, &rng, -1, 1), *dout = rand_f(no, &rng, -1, 1);
        int32_t *tok = malloc((size_t)B * T * 4);
        for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(ref_rng_next(&rng) % (uint64_t)V);
        put_f(cid, "wte", wte, nw), put_f(cid, "wpe", wpe, np), put_f(cid, "dout", dout, no);
        put_i(cid, "tok", tok, (size_t)B * T);
        fprintf(manifest, "%d embedding %d %d %d %d %d\n", cid, B, T, C, V, maxT);
        free(wte), free(wpe), free(dout), free(tok);
        return;
    }
    float *wte = get_f(cid, "wte", nw), *wpe = get_f(cid, "wpe", np), *dout = get_f(cid, "dout", no);
    int32_t *tok = get_i(cid, "tok", (size_t)B * T);
    float *out = ref_falloc(no), *dwte = ref_falloc(nw), *dwpe = ref_falloc(np); // rows >= T stay 0
    vr_cpu_embedding_fwd(out, tok, wte, wpe, B, T, C);
    vr_cpu_embedding_bwd(dwte, dwpe, dout, tok, B, T, C, V, 0);
    cmp(cid, "embedding out", out, "out", no);
    cmp(cid, "embedding dwte", dwte, "dwte", nw);
    cmp(cid, "embedding dwpe", dwpe, "dwpe", np);
    free(wte), free(wpe), free(dout), free(tok), free(out), free(dwte), free(dwpe);
}

/* kind "sgd": a = momentum, b = dampening; "adam"/"adamw": a, b = betas, c = eps. */
static void c_optim(int phase, const char *only, const char *kind, int n, int steps, float lr, float wd,
                    float a, float b, float c, int nesterov, float gs)
{
    int cid = begin(phase, only, "optim");
    if (cid < 0) return;
    if (phase == WRITE) {
        uint64_t rng = 1000 + cid;
        float *p = rand_f(n, &rng, -1, 1), *g = rand_f((size_t)steps * n, &rng, -1, 1);
        put_f(cid, "param", p, n), put_f(cid, "grads", g, (size_t)steps * n);
        fprintf(manifest, "%d optim %s %d %d %.9g %.9g %.9g %.9g %.9g %d %.9g\n", cid, kind, n, steps,
                (double)lr, (double)wd, (double)a, (double)b, (double)c, nesterov, (double)gs);
        free(p), free(g);
        return;
    }
    float *p0 = get_f(cid, "param", n), *g = get_f(cid, "grads", (size_t)steps * n);
    float *p = ref_falloc(n), *s1 = ref_falloc(n), *s2 = ref_falloc(n);
    memcpy(p, p0, (size_t)n * 4);
    ref_fill(s1, n, &(uint64_t){7}, -9, 9); // garbage: step 1 must not read the momentum buffer
    memset(s2, 0, (size_t)n * 4);
    int is_sgd = !strcmp(kind, "sgd"), is_adam = !strcmp(kind, "adam");
    if (!is_sgd) memset(s1, 0, (size_t)n * 4); // Adam's m and v start at zero, as torch's state
    for (int t = 1; t <= steps; t++) {
        const float *gt = g + (size_t)(t - 1) * n;
        if (is_sgd && a == 0.0f) vr_cpu_sgd(p, gt, n, lr, wd, gs);
        else if (is_sgd) vr_cpu_sgd_momentum(p, gt, s1, n, lr, a, b, wd, nesterov, t, gs);
        else if (is_adam) vr_cpu_adam(p, gt, s1, s2, n, lr, a, b, c, wd, t, gs);
        else vr_cpu_adamw(p, gt, s1, s2, n, lr, a, b, c, wd, t, gs);
    }
    // The update p - p0 against torch's. Both sides round p to float once per step, so the update
    // is only defined to steps * 2^-24 * max|p| absolutely; that much is added to the tolerance
    // (it matters only where the update is tiny against p, e.g. lr 3e-4 over 3 steps).
    float *tp = get_out(cid, "param", n), *du = ref_falloc(n), *dt = ref_falloc(n);
    double pmax = 0.0, dmax = 0.0;
    for (int i = 0; i < n; i++) {
        du[i] = p[i] - p0[i], dt[i] = tp[i] - p0[i];
        pmax = fmax(pmax, fabs(tp[i]));
        dmax = fmax(dmax, fabs(dt[i]));
    }
    double e = ref_relerr_ff(du, dt, n), tol = TOL + steps * ldexp(1.0, -24) * pmax / dmax;
    print_message("  case %-3d %-28s rel err %.2e (tolerance %.1e)\n", cid, "update p - p0", e, tol);
    if (!(e <= tol)) fail_msg("case %d %s update: rel err %.3e > %.1e", cid, kind, e, tol);
    cmp(cid, "param", p, "param", n);
    if (is_sgd && a != 0.0f) cmp(cid, "momentum buffer", s1, "mom", n);
    if (!is_sgd) {
        cmp(cid, "exp_avg", s1, "m", n);
        cmp(cid, "exp_avg_sq", s2, "v", n);
    }
    free(p0), free(g), free(p), free(s1), free(s2), free(tp), free(du), free(dt);
}

/* Every case, in one fixed order. */
static void all_cases(int phase, const char *only)
{
    case_id = 0;
    c_attention(phase, only, 1, 1, 4, 1);
    c_attention(phase, only, 2, 67, 32, 4);
    c_attention(phase, only, 2, 130, 64, 2);
    c_layernorm(phase, only, 1, 7);
    c_layernorm(phase, only, 33, 130);
    c_layernorm(phase, only, 256, 768);
    c_gelu(phase, only, 1);
    c_gelu(phase, only, 100003);
    c_matmul(phase, only, 1, 3, 5);
    c_matmul(phase, only, 64, 96, 200);
    c_classifier(phase, only, 1, 4, 5);
    c_classifier(phase, only, 37, 32, 500);
    c_classifier(phase, only, 300, 64, 5003); // several chunks, the last one partial
    c_softmax_xent(phase, only, 1, 3);
    c_softmax_xent(phase, only, 64, 10);
    c_embedding(phase, only, 2, 9, 16, 13, 12);
    c_optim(phase, only, "sgd", 10007, 5, 0.05f, 0.01f, 0.0f, 0.0f, 0.0f, 0, 0.5f);
    c_optim(phase, only, "sgd", 10007, 5, 0.05f, 0.01f, 0.9f, 0.1f, 0.0f, 0, 0.5f);
    c_optim(phase, only, "sgd", 10007, 5, 0.05f, 0.0f, 0.9f, 0.0f, 0.0f, 1, 1.0f);
    c_optim(phase, only, "adam", 10007, 5, 1e-2f, 0.01f, 0.9f, 0.999f, 1e-8f, 0, 0.5f);
    c_optim(phase, only, "adamw", 10007, 5, 1e-2f, 0.1f, 0.9f, 0.95f, 1e-8f, 0, 0.25f);
    c_optim(phase, only, "adamw", 10007, 3, 3e-4f, 0.0f, 0.8f, 0.99f, 1e-6f, 0, 1.0f);
}

/* ------------------------------------------------------------------ setup: run the oracle once */

static int setup(void **state)
{
    (void)state;
    if (access(PY, X_OK) != 0 || system(PY " -c 'import torch' >/dev/null 2>&1") != 0) {
        have_torch = 0;
        return 0;
    }
    have_torch = 1;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/vram_kcpu_torch_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return -1;
    char p[640];
    snprintf(p, sizeof p, "%s/manifest.txt", dir);
    manifest = fopen(p, "w");
    if (!manifest) return -1;
    all_cases(WRITE, "");
    fclose(manifest);
    const char *src = getenv("VRAM_SOURCE_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/kcpu/torch_oracle.py' '%s' > '%s/oracle.log' 2>&1",
             src && *src ? src : ".", dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s/oracle.log' >&2", dir);
        if (system(cmd) != 0) {}
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (have_torch && dir[0] && !getenv("VRAM_KEEP_TMP")) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

static void run(const char *op)
{
    if (!have_torch) {
        print_message("  " PY " with torch not found: skipped\n");
        skip();
    }
    worst = 0.0;
    all_cases(CHECK, op);
    print_message("  %s: worst rel err %.2e (tolerance %.0e)\n", op, worst, TOL);
}

static void test_attention(void **s) { (void)s; run("attention"); }
static void test_layernorm(void **s) { (void)s; run("layernorm"); }
static void test_gelu(void **s) { (void)s; run("gelu"); }
static void test_matmul(void **s) { (void)s; run("matmul"); }
static void test_classifier(void **s) { (void)s; run("classifier"); }
static void test_softmax_xent(void **s) { (void)s; run("softmax_xent"); }
static void test_embedding(void **s) { (void)s; run("embedding"); }
static void test_optim(void **s) { (void)s; run("optim"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),  cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),       cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_classifier), cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_embedding),  cmocka_unit_test(test_optim),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
