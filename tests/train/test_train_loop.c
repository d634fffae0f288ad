/* The training loop: gradient accumulation equals the large batch, frozen
 * parameters stay put and own no optimizer state, a resumed run continues
 * bit-exactly, GPT-2 initialisation, evaluation sharing the parameters, the
 * loss falls, failed saves keep the previous file, and bad inputs are refused
 * with a message naming the field or file. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/atomic_file.h"
#include "vram/checkpoint.h"
#include "vram/exec.h"
#include "vram/train.h"
#include "train/loop_internal.h"

static const char *dir;

static vr_train_config tiny_gpt(void)
{
    vr_train_config c = vr_train_config_default();
    c.model.gpt = (vr_gpt_config){.L = 2, .C = 32, .NH = 4, .V = 256, .Vp = 0, .maxT = 32};
    c.model.B = 4;
    c.model.T = 16;
    c.steps = 6;
    c.warmup = 2;
    c.hp.lr = 3e-3f;
    c.eval_batches = 2;
    c.poison = true;
    return c;
}

static vr_train_config tiny_mlp(void)
{
    vr_train_config c = vr_train_config_default();
    c.model.kind = VR_MODEL_MLP;
    vr_mlp_preset("tiny", &c.model.mlp);
    c.model.B = 16;
    c.model.T = 1;
    c.step.optim = VR_OPTIM_MOMENTUM;
    c.hp = vr_optim_hparams_default(VR_OPTIM_MOMENTUM);
    c.hp.lr = 0.05f;
    c.steps = 6;
    c.poison = true;
    return c;
}

static vr_trainer *make(const vr_train_config *c)
{
    vr_trainer *t = NULL;
    if (vr_trainer_create(c, &t) != VR_OK)
        fail_msg("trainer: %s", vr_last_error());
    return t;
}

static void run_steps(vr_trainer *t, int n)
{
    for (int i = 0; i < n; i++)
        if (vr_trainer_step(t, NULL) != VR_OK)
            fail_msg("step: %s", vr_last_error());
}

/* Every persistent buffer of the training step: params, then the optimizer state. */
static uint8_t *snapshot(vr_trainer *t, size_t *bytes)
{
    const vr_graph *g = vr_trainer_graph(t);
    int ids[3] = {g->params, g->optim[0], g->optim[1]};
    size_t total = 0;
    for (int k = 0; k < 3; k++)
        total += ids[k] >= 0 ? vr_tensor_bytes(&g->tensors[ids[k]]) : 0;
    uint8_t *b = malloc(total), *at = b;
    for (int k = 0; k < 3; k++)
        if (ids[k] >= 0) {
            uint64_t n = vr_tensor_bytes(&g->tensors[ids[k]]);
            assert_int_equal(vr_exec_read(vr_trainer_exec(t), ids[k], at, n), VR_OK);
            at += n;
        }
    *bytes = total;
    return b;
}

/* ------------------------------------------------------------------ accumulation */

/* Runs one step of `m` with micro-batches of B/accum rows cut from the same rows. */
static void accum_run(vr_model_config m, int accum, vr_optim o, const void *in, const int32_t *tg, float *params,
                      float *grads, double *loss)
{
    size_t in_row = m.kind == VR_MODEL_GPT ? (size_t)m.T * 4 : (size_t)m.mlp.sizes[0] * 4;
    size_t tg_row = (size_t)m.T;
    m.B /= accum;
    vr_step_config s = {.train = true, .accum = accum, .optim = o};
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    vr_device *dev = NULL;
    vr_exec *e = NULL;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    assert_int_equal(vr_plan_create(g, NULL, &p), VR_OK);
    assert_int_equal(vr_device_open("cpu", &dev), VR_OK);
    vr_exec_config ec = {.poison = true};
    assert_int_equal(vr_exec_create(p, dev, &ec, &e), VR_OK);
    assert_int_equal(vr_exec_write(e, g->params, params, (uint64_t)g->n_params * 4), VR_OK);
    vr_exec_batch mb[4];
    for (int k = 0; k < accum; k++)
        mb[k] = (vr_exec_batch){(const char *)in + (size_t)k * m.B * in_row, tg + (size_t)k * m.B * tg_row};
    vr_optim_hparams h = vr_optim_hparams_default(o);
    h.lr = 1e-2f;
    h.eps = 1e-6f;
    vr_exec_result r;
    assert_int_equal(vr_exec_step(e, mb, &h, &r), VR_OK);
    *loss = r.loss;
    if (grads)
        for (int t = 0; t < g->n_tensors; t++) {
            const vr_tensor *x = &g->tensors[t];
            if (x->view_of == g->params && x->param_offset >= 0 && x->grad >= 0)
                assert_int_equal(vr_exec_read(e, x->grad, grads + x->param_offset, vr_tensor_bytes(x)), VR_OK);
        }
    assert_int_equal(vr_exec_read(e, g->params, params, (uint64_t)g->n_params * 4), VR_OK);
    vr_exec_free(e);
    vr_device_close(dev);
    vr_plan_free(p);
    vr_graph_free(g);
}

static double rel_err(const float *a, const float *b, const float *a0, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i] - (a0 ? a0[i] : 0), y = b[i] - (a0 ? a0[i] : 0);
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / den);
}

static void accum_case(vr_model_config m, vr_optim o)
{
    vr_step_config s0 = {.train = false};
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(&m, &s0, &g), VR_OK);
    size_t n = (size_t)g->n_params;
    float *p0 = malloc(n * 4);
    vr_train_init_params(g, 3, p0);
    size_t ni = vr_tensor_numel(&g->tensors[g->tokens]), nt = vr_tensor_numel(&g->tensors[g->targets]);
    void *in = malloc(ni * 4);
    int32_t *tg = malloc(nt * 4);
    uint64_t x = 11;
    for (size_t i = 0; i < ni; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (m.kind == VR_MODEL_GPT)
            ((int32_t *)in)[i] = (int32_t)((x >> 33) % (uint64_t)m.gpt.V);
        else
            ((float *)in)[i] = (float)((x >> 40) / 16777216.0) - 0.5f;
    }
    int classes = m.kind == VR_MODEL_GPT ? m.gpt.V : m.mlp.sizes[m.mlp.n_sizes - 1];
    for (size_t i = 0; i < nt; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tg[i] = (int32_t)((x >> 33) % (uint64_t)classes);
    }
    float *pa = malloc(n * 4), *pb = malloc(n * 4), *ga = calloc(n, 4), *gb = calloc(n, 4);
    double la, lb;
    memcpy(pa, p0, n * 4), memcpy(pb, p0, n * 4);
    accum_run(m, 1, VR_OPTIM_NONE, in, tg, pa, ga, &la);
    accum_run(m, 2, VR_OPTIM_NONE, in, tg, pb, gb, &lb);
    double eg = rel_err(gb, ga, NULL, n);
    printf("  %s: loss %.7f vs %.7f, gradients %.2e relative\n", m.kind == VR_MODEL_GPT ? "gpt" : "mlp", lb, la, eg);
    assert_true(fabs(la - lb) <= 1e-6 * fabs(la));
    assert_true(eg <= 1e-5);
    memcpy(pa, p0, n * 4), memcpy(pb, p0, n * 4);
    accum_run(m, 1, o, in, tg, pa, NULL, &la);
    accum_run(m, 2, o, in, tg, pb, NULL, &lb);
    double eu = rel_err(pb, pa, p0, n);
    printf("  %s: %s update %.2e relative\n", m.kind == VR_MODEL_GPT ? "gpt" : "mlp", vr_optim_name(o), eu);
    assert_true(eu <= 1e-5);
    free(p0), free(in), free(tg), free(pa), free(pb), free(ga), free(gb);
    vr_graph_free(g);
}

static void accumulation_equals_large_batch(void **state)
{
    (void)state;
    vr_model_config m = {.kind = VR_MODEL_GPT, .gpt = {2, 32, 4, 64, 64, 16}, .B = 8, .T = 16};
    accum_case(m, VR_OPTIM_ADAMW);
    vr_model_config mm = {.kind = VR_MODEL_MLP, .B = 8, .T = 1};
    vr_mlp_preset("tiny", &mm.mlp);
    accum_case(mm, VR_OPTIM_SGD);
}

/* ------------------------------------------------------------------ frozen */

static void frozen_params_stay_and_own_no_state(void **state)
{
    (void)state;
    vr_train_config c = tiny_gpt();
    c.step.freeze = "wte,h.0.*";
    vr_trainer *t = make(&c);
    const vr_graph *g = vr_trainer_graph(t);
    size_t n = (size_t)g->n_params;
    float *before = malloc(n * 4), *after = malloc(n * 4);
    assert_int_equal(vr_trainer_read_params(t, before, (int64_t)n), VR_OK);
    run_steps(t, 3);
    assert_int_equal(vr_trainer_read_params(t, after, (int64_t)n), VR_OK);
    int64_t frozen = 0, moved = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const vr_tensor *x = &g->tensors[i];
        if (x->view_of != g->params || x->param_offset < 0)
            continue;
        bool same = !memcmp(before + x->param_offset, after + x->param_offset, vr_tensor_bytes(x));
        if (x->frozen) {
            if (!same)
                fail_msg("frozen %s changed", x->name);
            assert_int_equal(x->grad, -1);
            assert_int_equal(x->optim[0], -1);
            assert_int_equal(x->optim[1], -1);
            frozen += vr_tensor_numel(x);
        } else {
            moved += !same;
        }
    }
    assert_true(frozen > 0 && moved > 0);
    assert_int_equal(g->n_trainable, g->n_params - frozen);
    /* the optimizer state covers the trainable parameters only, and so do the bytes */
    assert_int_equal(vr_tensor_numel(&g->tensors[g->optim[0]]), g->n_trainable);
    assert_int_equal(vr_trainer_plan(t)->total[VR_ROLE_OPTIM], (uint64_t)g->n_trainable * 8);
    assert_int_equal(vr_trainer_plan(t)->total[VR_ROLE_GRAD], (uint64_t)g->n_trainable * 4);
    vr_exec_memory mem;
    vr_exec_get_memory(vr_trainer_exec(t), &mem);
    assert_int_equal(mem.max_live[VR_ROLE_OPTIM], (uint64_t)g->n_trainable * 8);
    free(before), free(after);
    vr_trainer_free(t);
}

/* ------------------------------------------------------------------ resume */

static void resume_case(vr_train_config c, const char *name)
{
    vr_trainer *t = make(&c);
    run_steps(t, (int)c.steps);
    size_t na, nb;
    uint8_t *straight = snapshot(t, &na);
    vr_trainer_free(t);

    const char *path = tt_path(dir, name);
    t = make(&c);
    run_steps(t, 2);
    assert_int_equal(vr_trainer_save_state(t, path), VR_OK);
    vr_trainer_free(t);
    c.resume = path;
    t = make(&c);
    assert_int_equal(vr_trainer_steps_done(t), 2);
    run_steps(t, (int)c.steps - 2);
    uint8_t *resumed = snapshot(t, &nb);
    assert_int_equal(na, nb);
    if (memcmp(straight, resumed, na))
        fail_msg("%s: resumed run differs from the straight one", name);
    vr_trainer_free(t);
    free(straight), free(resumed);
}

static void resume_is_bit_exact(void **state)
{
    (void)state;
    vr_train_config c = tiny_gpt();
    c.step.accum = 2;
    c.step.grad_clip = 1.0f;
    c.data_order = VR_DATA_SHUFFLED;
    resume_case(c, "gpt.state");
    c = tiny_gpt();
    c.memory = VR_MEMORY_DYNAMIC;
    c.step.recompute = VR_RECOMPUTE_BLOCK;
    resume_case(c, "gpt_dyn.state");
    resume_case(tiny_mlp(), "mlp.state");
}

static void resume_refuses_mismatches(void **state)
{
    (void)state;
    vr_train_config c = tiny_gpt();
    const char *path = tt_path(dir, "mm.state");
    vr_trainer *t = make(&c);
    run_steps(t, 1);
    assert_int_equal(vr_trainer_save_state(t, path), VR_OK);
    vr_trainer_free(t);
    vr_train_config d = c;
    d.resume = path;
    d.model.gpt.C = 64;
    assert_int_not_equal(vr_trainer_create(&d, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "channels"));
    d = c;
    d.resume = path;
    d.step.optim = VR_OPTIM_ADAM;
    assert_int_not_equal(vr_trainer_create(&d, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "vr_step_config.optim "));
    /* a flipped byte in the payload is found */
    size_t n;
    uint8_t *b = tt_read(path, &n);
    b[n - 100] ^= 0x40;
    const char *bad = tt_path(dir, "bad.state");
    tt_write(bad, b, n);
    free(b);
    d = c;
    d.resume = bad;
    assert_int_not_equal(vr_trainer_create(&d, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "bad.state"));
}

/* ------------------------------------------------------------------ init, eval, loss */

static double stdev(const float *x, size_t n, double *mean)
{
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++)
        q += (x[i] - *mean) * (x[i] - *mean);
    return sqrt(q / (double)n);
}

/* A graph of many parameters declared in any order initialises as in buffer order (the parameters are
 * found by offset through one index, not a scan per parameter): 3000 of them declared last to first give
 * the values of the same ones declared first to last. */
static vr_graph *many_params(int n, bool reversed)
{
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    vr_graph_param_buffer(g, 2 * (int64_t)n);
    int64_t shape[1] = {2};
    for (int k = 0; k < n; k++) {
        int i = reversed ? n - 1 - k : k;
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        assert_true(vr_graph_param(g, name, 1, shape, 2 * (int64_t)i, i % 3 ? VR_INIT_NORMAL : VR_INIT_UNIFORM,
                                   0.5f) >= 0);
    }
    return g;
}

static void initialisation_by_offset(void **state)
{
    (void)state;
    const int n = 3000;
    vr_graph *f = many_params(n, false), *r = many_params(n, true);
    float *a = malloc(sizeof(float) * 2 * n), *b = malloc(sizeof(float) * 2 * n);
    vr_train_init_params(f, 5, a);
    vr_train_init_params(r, 5, b);
    assert_memory_equal(a, b, sizeof(float) * 2 * n);
    int zeros = 0;
    for (int i = 0; i < 2 * n; i++)
        zeros += a[i] == 0.0f;
    assert_true(zeros < 2); /* every parameter was drawn */
    free(a);
    free(b);
    vr_graph_free(f);
    vr_graph_free(r);
}

static void gpt2_initialisation(void **state)
{
    (void)state;
    vr_model_config m = {.kind = VR_MODEL_GPT, .gpt = {4, 64, 4, 200, 256, 64}, .B = 1, .T = 8};
    vr_step_config s = {0};
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    size_t n = (size_t)g->n_params;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    vr_train_init_params(g, 1, a);
    vr_train_init_params(g, 1, b);
    vr_train_init_params(g, 2, c);
    assert_memory_equal(a, b, n * 4);
    assert_true(memcmp(a, c, n * 4) != 0);
    for (int t = 0; t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of != g->params || x->param_offset < 0)
            continue;
        const float *p = a + x->param_offset;
        size_t k = (size_t)vr_tensor_numel(x);
        double mean, sd;
        if (!strcmp(x->name, "wte")) {
            sd = stdev(p, 200 * 64, &mean);
            assert_true(fabs(sd - 0.02) < 0.002 && fabs(mean) < 0.001);
            for (size_t i = 200 * 64; i < k; i++)
                assert_true(p[i] == 0.0f); /* padded rows */
        } else if (strstr(x->name, "c_proj.w")) {
            sd = stdev(p, k, &mean);
            assert_true(fabs(sd - 0.02 / sqrt(8.0)) < 0.0008);
        } else if (!strcmp(x->name, "wpe") || (strstr(x->name, ".w") && x->ndim == 2)) {
            sd = stdev(p, k, &mean);
            assert_true(fabs(sd - 0.02) < 0.002);
        } else {
            float want = strstr(x->name, "ln") && x->name[strlen(x->name) - 1] == 'w' ? 1.0f : 0.0f;
            for (size_t i = 0; i < k; i++)
                if (p[i] != want)
                    fail_msg("%s[%zu] = %g, want %g", x->name, i, p[i], want);
        }
    }
    free(a), free(b), free(c);
    vr_graph_free(g);
}

static void loss_falls_and_eval_shares_params(void **state)
{
    (void)state;
    vr_train_config c = tiny_gpt();
    c.steps = 40;
    c.model.B = 8;
    vr_trainer *t = make(&c);
    double v0, v1;
    assert_int_equal(vr_trainer_eval(t, &v0), VR_OK);
    vr_train_step_info first, last;
    assert_int_equal(vr_trainer_step(t, &first), VR_OK);
    for (int i = 1; i < 40; i++)
        assert_int_equal(vr_trainer_step(t, &last), VR_OK);
    assert_int_equal(vr_trainer_eval(t, &v1), VR_OK);
    printf("  loss %.4f -> %.4f, val %.4f -> %.4f\n", first.loss, last.loss, v0, v1);
    assert_true(last.loss < first.loss - 1.0);
    assert_true(v1 < v0 - 1.0);
    /* the evaluation executor borrows the parameters: its own memory is the arena less them */
    const vr_plan *ep = vr_trainer_eval_plan(t);
    vr_exec_memory em;
    vr_exec_get_memory(vr_trainer_eval_exec(t), &em);
    assert_int_equal(em.arena, ep->arena_size - ep->persistent_size);
    assert_int_equal(em.peak, ep->peak);
    assert_int_equal(ep->total[VR_ROLE_ACT], 0);
    assert_int_equal(ep->total[VR_ROLE_GRAD], 0);
    vr_trainer_free(t);
}

/* ------------------------------------------------------------------ checkpoints and errors */

static void llmc_checkpoints(void **state)
{
    (void)state;
    vr_train_config c = tiny_gpt();
    const char *ck = tt_path(dir, "model.bin");
    vr_trainer *t = make(&c);
    run_steps(t, 2);
    assert_int_equal(vr_trainer_save_model(t, ck), VR_OK);
    size_t n = (size_t)vr_trainer_graph(t)->n_params;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    assert_int_equal(vr_trainer_read_params(t, a, (int64_t)n), VR_OK);
    vr_trainer_free(t);
    vr_train_config d = c;
    d.init = ck;
    t = make(&d);
    assert_int_equal(vr_trainer_read_params(t, b, (int64_t)n), VR_OK);
    assert_memory_equal(a, b, n * 4);
    vr_trainer_free(t);
    /* shapes that do not match the checkpoint are named */
    d.model.gpt.NH = 2;
    assert_int_not_equal(vr_trainer_create(&d, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "heads"));
    assert_non_null(strstr(vr_last_error(), "model.bin"));
    /* a save that fails leaves the previous checkpoint as it was */
    size_t before_n, after_n;
    uint8_t *before = tt_read(ck, &before_n);
    d = c;
    t = make(&d);
    run_steps(t, 1);
    vr_atomic_fail_after(4096);
    assert_int_not_equal(vr_trainer_save_model(t, ck), VR_OK);
    vr_atomic_fail_after(-1);
    uint8_t *after = tt_read(ck, &after_n);
    assert_int_equal(before_n, after_n);
    assert_memory_equal(before, after, before_n);
    vr_trainer_free(t);
    free(a), free(b), free(before), free(after);
}

static void bad_inputs_are_named(void **state)
{
    (void)state;
    vr_trainer *t = NULL;
    vr_train_config c = tiny_gpt();
    c.data = tt_path(dir, "missing.txt");
    assert_int_not_equal(vr_trainer_create(&c, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "missing.txt"));
    c = tiny_gpt();
    c.model.gpt.V = 100; /* the byte corpus has tokens up to 255 */
    c.model.gpt.Vp = 0;
    assert_int_not_equal(vr_trainer_create(&c, &t), VR_OK);
    c = tiny_gpt();
    c.init = tt_path(dir, "garbage.bin");
    tt_write(c.init, "not a checkpoint at all", 23);
    assert_int_not_equal(vr_trainer_create(&c, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "garbage.bin"));
    c = tiny_mlp();
    c.data = "some.txt";
    assert_int_not_equal(vr_trainer_create(&c, &t), VR_OK);
    assert_non_null(strstr(vr_last_error(), "vr_train_config.data: "));
    c = tiny_gpt();
    c.device = "meta";
    assert_int_equal(vr_trainer_create(&c, &t), VR_ERR_UNSUPPORTED);
    c = tiny_gpt();
    c.step.precision = VR_PREC_BF16;
    assert_int_equal(vr_trainer_create(&c, &t), VR_ERR_UNSUPPORTED);
    assert_non_null(strstr(vr_last_error(), "fp32"));
    c = tiny_gpt();
    c.device = "cpu:64KiB"; /* the arena does not fit: out of memory, said so */
    assert_int_equal(vr_trainer_create(&c, &t), VR_ERR_OOM);
    assert_non_null(strstr(vr_last_error(), "arena"));
}

static int setup(void **state)
{
    (void)state;
    dir = tt_scratch_dir("trainloop");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tt_remove_dir(dir);
    return 0;
}

/* A step that fails (here: out of memory on a small cpu: device in dynamic mode) leaves the data where
 * it was, so a resumed or retried run does not skip a batch. */
static void failed_step_keeps_the_data_position(void **state)
{
    (void)state;
    static const char *caps[] = {"cpu:4MiB", "cpu:5MiB", "cpu:6MiB"};
    int tried = 0;
    for (int i = 0; i < 3; i++) {
        vr_train_config c = tiny_gpt();
        c.model.B = 32; /* activations of several MiB: the step, not the trainer, runs out */
        c.model.T = 32;
        c.memory = VR_MEMORY_DYNAMIC;
        c.device = caps[i];
        vr_trainer *t = NULL;
        if (vr_trainer_create(&c, &t) != VR_OK)
            continue;
        vr_data_pos before = vr_data_tell(t->train);
        vr_status st = vr_trainer_step(t, NULL);
        if (st == VR_OK) {
            vr_trainer_free(t);
            continue;
        }
        tried++;
        assert_non_null(strstr(vr_last_error(), "out of memory"));
        vr_data_pos after = vr_data_tell(t->train);
        assert_memory_equal(&before, &after, sizeof before);
        assert_int_equal(vr_trainer_steps_done(t), 0);
        vr_trainer_free(t);
    }
    if (!tried)
        fail_msg("no capacity made the step (and not the trainer) fail");
}

/* vr_trainer_lookahead: each step starts the next before waiting for its own (vr_exec_step_start). On the CPU a
 * step runs whole on start, so the trainer looks ahead only when told to regardless (ahead_always, as it does
 * behind a queued CUDA graph): the same losses, learning rates, data order and final state as one step at a time,
 * bit for bit (shuffled data, clipping, a schedule; accumulation; the MLP); while a step is queued, what reads or
 * writes the weights refuses, naming itself, and the next vr_trainer_step runs it. Without ahead_always the CPU
 * does not look ahead (a step's time stays its own). */
static void lookahead_changes_nothing(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) {
        vr_train_config c = v == 2 ? tiny_mlp() : tiny_gpt();
        c.data_order = v == 2 ? c.data_order : VR_DATA_SHUFFLED;
        c.step.grad_clip = 1.0f;
        c.step.accum = v == 1 ? 2 : 1;
        vr_train_step_info a[6], b[6];
        uint8_t *snap[2];
        size_t nb[2];
        for (int ahead = 0; ahead < 2; ahead++) {
            vr_trainer *t = make(&c);
            t->ahead_always = ahead;
            vr_train_step_info *info = ahead ? b : a;
            for (int i = 0; i < (int)c.steps; i++) {
                vr_trainer_lookahead(t, ahead && i + 1 < (int)c.steps);
                if (vr_trainer_step(t, &info[i]) != VR_OK)
                    fail_msg("step %d: %s", i, vr_last_error());
                if (ahead && i == 2) { /* the next step is queued: nothing may touch the weights */
                    assert_true(t->ahead);
                    double vl;
                    assert_int_equal(vr_trainer_eval(t, &vl), VR_ERR_INVALID);
                    assert_non_null(strstr(vr_last_error(), "vr_trainer_eval"));
                    assert_int_equal(vr_trainer_save_state(t, tt_path(dir, "ahead.state")), VR_ERR_INVALID);
                    assert_non_null(strstr(vr_last_error(), "vr_trainer_save_state"));
                    assert_int_equal(vr_trainer_save_model(t, tt_path(dir, "ahead.bin")), VR_ERR_INVALID);
                }
            }
            assert_false(t->ahead);
            assert_int_equal(vr_trainer_steps_done(t), c.steps);
            snap[ahead] = snapshot(t, &nb[ahead]);
            if (!ahead) { /* told to look ahead, but behind a step that already ran: it does not */
                vr_trainer_lookahead(t, true);
                assert_int_equal(vr_trainer_step(t, NULL), VR_OK);
                assert_false(t->ahead);
            }
            vr_trainer_free(t);
        }
        for (int i = 0; i < (int)c.steps; i++) {
            assert_true(a[i].step == b[i].step && a[i].lr == b[i].lr && a[i].tokens == b[i].tokens);
            if (memcmp(&a[i].loss, &b[i].loss, sizeof a[i].loss) || memcmp(&a[i].grad_norm, &b[i].grad_norm, 8))
                fail_msg("case %d step %d: loss %.9g / %.9g, norm %.9g / %.9g", v, i, a[i].loss, b[i].loss,
                         a[i].grad_norm, b[i].grad_norm);
        }
        assert_int_equal(nb[0], nb[1]);
        if (memcmp(snap[0], snap[1], nb[0]))
            fail_msg("case %d: the state after the steps differs with lookahead", v);
        free(snap[0]), free(snap[1]);
    }
}

/* CUDA graphs asked for where they cannot run (here: the cpu backend): the run's summary says why, as
 * vram train prints it; not asked for, it says nothing of them. */
static void cuda_graph_off_is_in_the_summary(void **state)
{
    (void)state;
    for (int json = 0; json < 2; json++)
        for (int asked = 0; asked < 2; asked++) {
            vr_train_config c = tiny_mlp();
            c.poison = false; /* poison alone keeps CUDA graphs off: this case is about the device */
            c.steps = 2;
            c.cuda_graph = asked;
            vr_train_run_opts o = {.progress = json ? VR_PROGRESS_JSON : VR_PROGRESS_LINES, .eval_every = -1};
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            assert_non_null(f);
            if (vr_train_run(&c, &o, f, NULL))
                fail_msg("run: %s", vr_last_error());
            fclose(f);
            const char *note = json ? "\"cuda_graph_off\":\"on a device without CUDA graphs\""
                                    : "\n          cuda graph: off on a device without CUDA graphs\n";
            if (asked && !strstr(buf, note))
                fail_msg("no '%s' in:\n%s", note, buf);
            if (!asked && strstr(buf, json ? "cuda_graph" : "cuda graph"))
                fail_msg("CUDA graphs not asked for, yet:\n%s", buf);
            free(buf);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_graph_off_is_in_the_summary),
        cmocka_unit_test(failed_step_keeps_the_data_position),
        cmocka_unit_test(lookahead_changes_nothing),
        cmocka_unit_test(accumulation_equals_large_batch),
        cmocka_unit_test(frozen_params_stay_and_own_no_state),
        cmocka_unit_test(resume_is_bit_exact),
        cmocka_unit_test(resume_refuses_mismatches),
        cmocka_unit_test(gpt2_initialisation), cmocka_unit_test(initialisation_by_offset),
        cmocka_unit_test(loss_falls_and_eval_shares_params),
        cmocka_unit_test(llmc_checkpoints),
        cmocka_unit_test(bad_inputs_are_named),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
