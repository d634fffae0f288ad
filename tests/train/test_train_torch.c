/* The training step against PyTorch (Debian's python3-torch at /usr/bin/python3;
 * skipped without it): the same tiny GPT-2 weights, written in llm.c's format and
 * loaded by tests/train/train_oracle.py into a nanoGPT-equivalent model through
 * tools/llmc_ckpt.py, and the same batches give
 *   - the same loss and gradients (vram: the backward-only graph),
 *   - the same global gradient norm and clipping (torch.nn.utils.clip_grad_norm_),
 *   - the same two AdamW updates (decay on 2-D parameters, clipping at 0.5),
 * each within 1e-5 relative, normwise per llm.c tensor (see compare()). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/checkpoint.h"
#include "vram/exec.h"
#include "vram/train.h"

#define PY "/usr/bin/python3"
#define TOL 1e-5

static const int B = 2, T = 16;
static const vr_gpt_config GPT = {.L = 2, .C = 32, .NH = 4, .V = 64, .Vp = 64, .maxT = 24};
/* eps 1e-6 rather than torch's 1e-8: the gradient of the key biases is zero in exact
 * arithmetic (softmax ignores a shift shared by all keys), so both sides hold float
 * noise of ~1e-10 there, and with eps 1e-8 Adam would turn that noise into steps of
 * up to lr in either direction. With 1e-6 those steps stay below 1e-4 lr. */
static const float LR = 1e-3f, WD = 0.1f, B1 = 0.9f, B2 = 0.95f, EPS = 1e-6f, CLIP = 0.5f;

static const char *dir;
static char tool[600], oracle[600];

static int have_torch(void)
{
    return access(PY, X_OK) == 0 && system(PY " -c 'import torch, numpy' >/dev/null 2>&1") == 0;
}

static float *read_f32(const char *name, size_t n)
{
    size_t bytes;
    uint8_t *b = tt_read(tt_path(dir, name), &bytes);
    if (!b || bytes != n * 4)
        fail_msg("%s: missing or %zu bytes (want %zu)", name, bytes, n * 4);
    return (float *)b;
}

/* Per llm.c tensor: the error of vram's values against torch's, relative to torch's
 * (a0/b0, when given, turn values into updates: a - a0 against b - b0). Values and
 * gradients are held to the max norm, max|a-b| / max|b|. Updates to the L2 norm,
 * |a-b|_2 / |b|_2: Adam's step g / (|g| + eps) is ill-conditioned where |g| is
 * near eps (a gradient element 1e-8 against a tensor maximum of 1e-1, equal to
 * float rounding in both, moves by up to 3e-4 of lr), so one such element may not
 * decide; every element still counts in the norm. */
static double compare(const char *what, const float *a, const float *b, const float *a0, const float *b0)
{
    vr_llmc_config lc = {GPT.maxT, GPT.V, GPT.Vp, GPT.L, GPT.NH, GPT.C};
    size_t sizes[VR_LLMC_NUM_TENSORS], off = 0;
    vr_llmc_param_sizes(&lc, sizes);
    double worst = 0, worst_max = 0;
    for (int k = 0; k < VR_LLMC_NUM_TENSORS; k++) {
        double mx = 0, den = 0, l2 = 0, l2den = 0, ulp2 = 0;
        size_t at = off;
        for (size_t i = off; i < off + sizes[k]; i++) {
            double x = a[i] - (a0 ? a0[i] : 0), y = b[i] - (b0 ? b0[i] : 0);
            if (fabs(x - y) > mx)
                mx = fabs(x - y), at = i;
            den = fmax(den, fabs(y));
            l2 += (x - y) * (x - y);
            l2den += y * y;
            double u = fabs(b[i]) * 0x1p-23; /* one float ulp of the value the update was read from */
            ulp2 += u * u;
        }
        double rel_max = den > 0 ? mx / den : mx;
        /* an update read back as p_new - p_old carries the rounding of p itself: a LayerNorm
         * weight near 1 moved by 5e-4 is known to 1.2e-7, 2e-4 of the move; that floor is
         * subtracted before the relative error is taken */
        double rel = a0 ? fmax(0, sqrt(l2) - sqrt(ulp2)) / (l2den > 0 ? sqrt(l2den) : 1) : rel_max;
        if (rel > TOL)
            fail_msg("%s: %s differs from torch by %.3g relative (max |diff| %.3g at element %zu: vram %.9g, torch "
                     "%.9g)", what, vr_llmc_tensor_name(k), rel, mx, at - off, a[at] - (a0 ? a0[at] : 0),
                     b[at] - (b0 ? b0[at] : 0));
        worst = fmax(worst, rel);
        worst_max = fmax(worst_max, rel_max);
        off += sizes[k];
    }
    printf("  %-16s worst tensor %.2e relative (%s norm; max norm %.2e)\n", what, worst, a0 ? "L2" : "max",
           worst_max);
    return worst;
}

static void rel_ok(const char *what, double a, double b)
{
    double rel = fabs(a - b) / fabs(b);
    printf("  %-16s vram %.8f torch %.8f (%.2e)\n", what, a, b, rel);
    if (rel > TOL)
        fail_msg("%s: vram %.9g, torch %.9g", what, a, b);
}

static vr_exec *make_exec(vr_optim o, float clip, vr_graph **g, vr_plan **p, vr_device *dev)
{
    vr_model_config m = {.kind = VR_MODEL_GPT, .gpt = GPT, .B = B, .T = T};
    vr_step_config s = {.train = true, .accum = 1, .optim = o, .grad_clip = clip};
    assert_int_equal(vr_graph_build(&m, &s, g), VR_OK);
    assert_int_equal(vr_plan_create(*g, NULL, p), VR_OK);
    vr_exec_config ec = {.memory = VR_MEMORY_PLANNED, .poison = true};
    vr_exec *e = NULL;
    assert_int_equal(vr_exec_create(*p, dev, &ec, &e), VR_OK);
    return e;
}

static void matches_pytorch(void **state)
{
    (void)state;
    if (!have_torch())
        skip();
    int64_t n = vr_gpt_num_params(&GPT);
    /* weights: GPT-2 init plus noise on every tensor, so biases and LayerNorms are not trivial */
    vr_model_config m = {.kind = VR_MODEL_GPT, .gpt = GPT, .B = B, .T = T};
    vr_step_config s0 = {.train = false};
    vr_graph *g0 = NULL;
    assert_int_equal(vr_graph_build(&m, &s0, &g0), VR_OK);
    float *p0 = malloc((size_t)n * 4);
    vr_train_init_params(g0, 7, p0);
    uint64_t x = 5;
    for (int64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p0[i] += 0.05f * ((float)(x >> 40) / 16777216.0f - 0.5f);
    }
    vr_graph_free(g0);
    vr_llmc_config lc = {GPT.maxT, GPT.V, GPT.Vp, GPT.L, GPT.NH, GPT.C};
    assert_int_equal(vr_llmc_save(tt_path(dir, "model.bin"), &lc, p0, (size_t)n), VR_OK);
    int32_t tok[2][32], tgt[2][32];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < B * T; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            tok[k][i] = (int32_t)((x >> 33) % (uint64_t)GPT.V);
            tgt[k][i] = (int32_t)((x >> 45) % (uint64_t)GPT.V);
        }
    tt_write(tt_path(dir, "tok0.i32"), tok[0], sizeof tok[0]);
    tt_write(tt_path(dir, "tgt0.i32"), tgt[0], sizeof tgt[0]);
    tt_write(tt_path(dir, "tok1.i32"), tok[1], sizeof tok[1]);
    tt_write(tt_path(dir, "tgt1.i32"), tgt[1], sizeof tgt[1]);
    FILE *f = fopen(tt_path(dir, "config.json"), "w");
    assert_non_null(f);
    fprintf(f, "{\"B\": %d, \"T\": %d, \"lr\": %.9g, \"wd\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, "
               "\"clip\": %.9g}\n", B, T, LR, WD, B1, B2, EPS, CLIP);
    fclose(f);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, PY " '%s' '%s' '%s'", oracle, dir, tool);
    assert_int_equal(system(cmd), 0);
    float *t_loss = read_f32("torch_loss.f32", 2), *t_norm = read_f32("torch_norm.f32", 2);
    float *t_grads = read_f32("torch_grads.f32", (size_t)n);
    float *t_p1 = read_f32("torch_params1.f32", (size_t)n), *t_p2 = read_f32("torch_params2.f32", (size_t)n);

    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cpu", &dev), VR_OK);
    /* loss and gradients: the backward-only graph keeps its gradients as outputs */
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    vr_exec *e = make_exec(VR_OPTIM_NONE, 0, &g, &p, dev);
    assert_int_equal(vr_exec_write(e, g->params, p0, (uint64_t)n * 4), VR_OK);
    vr_exec_batch b0 = {tok[0], tgt[0]}, b1 = {tok[1], tgt[1]};
    vr_exec_result r;
    assert_int_equal(vr_exec_step(e, &b0, NULL, &r), VR_OK);
    rel_ok("loss", r.loss, t_loss[0]);
    float *grads = calloc((size_t)n, 4);
    for (int t = 0; t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of == g->params && x->param_offset >= 0 && x->grad >= 0)
            assert_int_equal(vr_exec_read(e, x->grad, grads + x->param_offset, vr_tensor_bytes(x)), VR_OK);
    }
    compare("gradients", grads, t_grads, NULL, NULL);
    vr_exec_free(e);
    vr_plan_free(p);
    vr_graph_free(g);

    /* two AdamW steps with clipping */
    e = make_exec(VR_OPTIM_ADAMW, CLIP, &g, &p, dev);
    assert_int_equal(vr_exec_write(e, g->params, p0, (uint64_t)n * 4), VR_OK);
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    h.lr = LR, h.weight_decay = WD, h.beta1 = B1, h.beta2 = B2, h.eps = EPS, h.step = 1;
    float *p1 = malloc((size_t)n * 4), *p2 = malloc((size_t)n * 4);
    assert_int_equal(vr_exec_step(e, &b0, &h, &r), VR_OK);
    rel_ok("grad norm 1", r.grad_norm, t_norm[0]);
    assert_true(r.grad_scale < 1.0); /* clipping is active */
    assert_int_equal(vr_exec_read(e, g->params, p1, (uint64_t)n * 4), VR_OK);
    compare("adamw update 1", p1, t_p1, p0, p0);
    h.step = 2;
    assert_int_equal(vr_exec_step(e, &b1, &h, &r), VR_OK);
    rel_ok("loss after 1", r.loss, t_loss[1]);
    rel_ok("grad norm 2", r.grad_norm, t_norm[1]);
    assert_int_equal(vr_exec_read(e, g->params, p2, (uint64_t)n * 4), VR_OK);
    compare("adamw update 2", p2, t_p2, p1, t_p1);
    vr_exec_free(e);
    vr_plan_free(p);
    vr_graph_free(g);
    vr_device_close(dev);
    free(p0), free(p1), free(p2), free(grads);
    free(t_loss), free(t_norm), free(t_grads), free(t_p1), free(t_p2);
}

static int setup(void **state)
{
    (void)state;
    const char *src = getenv("VRAM_SOURCE_DIR");
    snprintf(tool, sizeof tool, "%s/tools/llmc_ckpt.py", src ? src : ".");
    snprintf(oracle, sizeof oracle, "%s/tests/train/train_oracle.py", src ? src : ".");
    dir = tt_scratch_dir("trainpy");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tt_remove_dir(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(matches_pytorch)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
