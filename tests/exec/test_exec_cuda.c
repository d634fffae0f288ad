/* The CUDA executor against the CPU one (skips without a GPU; CI has none):
 * a tiny GPT's fp32 step on the GPU matches the CPU step (loss, gradient norm,
 * parameters after one AdamW step with clipping) within 1e-4; bf16 (fp32
 * master, fp32 m/v) gives the loss within 1e-2 and a master close to the fp32
 * update; the plan's bytes per role equal what the CUDA run held, in planned
 * and dynamic mode, and the arena is the plan's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "exec_test_util.h"
#include "exec/exec_internal.h"
#include "vram/device.h"

typedef struct run_out {
    double loss, norm;
    float *params;        /* after the step (fp32; the master where there is one) */
    vr_exec_memory mem;
    vr_plan *plan;
    vr_graph *g;
} run_out;

static bool gpu_present(void)
{
    int n = 0;
    return vr_cuda_device_count(&n) == VR_OK && n > 0;
}

static void run_step(const char *dev_spec, vr_precision prec, vr_memory_mode mode, run_out *o)
{
    memset(o, 0, sizeof *o);
    bool cuda = !strncmp(dev_spec, "cuda", 4);
    vr_model_config m = et_gpt(4, 32);
    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .precision = prec, .grad_clip = 1.0f};
    if (cuda) {
        s.kernels = VR_KERNELS_CUDA;
        s.workspace_bytes = (uint64_t)4 << 20;
    }
    assert_int_equal(vr_graph_build(&m, &s, &o->g), VR_OK);
    vr_plan_config pc = {.memory = mode};
    assert_int_equal(vr_plan_create(o->g, &pc, &o->plan), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open(dev_spec, &dev), VR_OK);
    vr_exec_config ec = {.memory = mode, .poison = true};
    vr_exec *e = NULL;
    if (vr_exec_create(o->plan, dev, &ec, &e) != VR_OK)
        fail_msg("%s", vr_last_error());
    /* the same initial values on every device: built from an fp32 graph's layout (identical) */
    float *p = et_params(o->g, 42);
    assert_int_equal(vr_exec_write(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    void *inputs;
    int32_t *targets;
    et_batch(o->g, 7, &inputs, &targets);
    vr_exec_batch b = {inputs, targets};
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    h.lr = 3e-5f; /* a sign flip of a ~0 gradient moves a parameter 2 lr: under 1e-4 */
    vr_exec_result r;
    if (vr_exec_step(e, &b, &h, &r) != VR_OK)
        fail_msg("%s", vr_last_error());
    o->loss = r.loss;
    o->norm = r.grad_norm;
    assert_int_equal(vr_exec_read(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    o->params = p;
    vr_exec_get_memory(e, &o->mem);
    vr_exec_free(e);
    vr_device_close(dev);
    free(inputs);
    free(targets);
}

static void run_free(run_out *o)
{
    free(o->params);
    vr_plan_free(o->plan);
    vr_graph_free(o->g);
}

static void check_plan_equals_run(const run_out *o)
{
    for (int r = 0; r < VR_ROLE_COUNT; r++) {
        assert_true(o->plan->max_live[r] == o->mem.max_live[r]);
        assert_true(o->plan->at_peak[r] == o->mem.at_peak[r]);
    }
    assert_true(o->plan->peak == o->mem.peak);
}

static float max_diff(const float *a, const float *b, int64_t n)
{
    float d = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        if (!(x <= d))
            d = x;
    }
    return d;
}

#define NEED_GPU()                                                                                                    \
    do {                                                                                                              \
        if (!gpu_present())                                                                                           \
            skip();                                                                                                   \
    } while (0)

static void fp32_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    run_out c, g;
    run_step("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, &c);
    run_step("cuda", VR_PREC_FP32, VR_MEMORY_PLANNED, &g);
    printf("fp32: loss cpu %.7f cuda %.7f, norm cpu %.6f cuda %.6f, max param diff %.3g\n", c.loss, g.loss, c.norm,
           g.norm, (double)max_diff(c.params, g.params, c.g->n_params));
    assert_true(fabs(c.loss - g.loss) < 1e-4);
    assert_true(fabs(c.norm - g.norm) < 1e-4 * (1 + c.norm));
    assert_true(max_diff(c.params, g.params, c.g->n_params) < 1e-4f);
    check_plan_equals_run(&g);
    assert_true(g.mem.arena == g.plan->arena_size);
    run_free(&c);
    run_free(&g);
}

static void bf16_close_to_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    run_out c, g;
    run_step("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, &c);
    run_step("cuda", VR_PREC_BF16, VR_MEMORY_PLANNED, &g);
    printf("bf16: loss cpu %.7f cuda %.7f, max master diff %.3g\n", c.loss, g.loss,
           (double)max_diff(c.params, g.params, c.g->n_params));
    assert_true(fabs(c.loss - g.loss) < 1e-2);
    assert_true(max_diff(c.params, g.params, c.g->n_params) < 1e-2f);
    check_plan_equals_run(&g);
    assert_true(g.mem.arena == g.plan->arena_size);
    run_free(&c);
    run_free(&g);
}

static void dynamic_equals_plan(void **state)
{
    (void)state;
    NEED_GPU();
    run_out d, p;
    run_step("cuda", VR_PREC_BF16, VR_MEMORY_DYNAMIC, &d);
    run_step("cuda", VR_PREC_BF16, VR_MEMORY_PLANNED, &p);
    check_plan_equals_run(&d);
    assert_true(d.mem.peak_requested == d.plan->dynamic.peak_requested);
    assert_true(fabs(d.loss - p.loss) < 1e-6);
    run_free(&d);
    run_free(&p);
}

/* Steps of a bf16 tiny GPT with lr and step changing every step (and weight decay at step 5, which
 * recaptures): node by node, and with cuda_graph (step 1 node by node, step 2 captured, the rest
 * replayed). Same losses, norms and parameters (sumsq's fp32 atomics may reorder a few additions:
 * 1e-5), and the plan still equals the run. */
static void graph_steps(bool graph, int steps, double *loss, double *norm, float **params, run_out *o)
{
    memset(o, 0, sizeof *o);
    vr_model_config m = et_gpt(4, 32);
    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_BF16,
                        .grad_clip = 1.0f, .kernels = VR_KERNELS_CUDA, .workspace_bytes = (uint64_t)4 << 20};
    assert_int_equal(vr_graph_build(&m, &s, &o->g), VR_OK);
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED};
    assert_int_equal(vr_plan_create(o->g, &pc, &o->plan), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cuda", &dev), VR_OK);
    vr_exec_config ec = {.memory = VR_MEMORY_PLANNED, .cuda_graph = graph};
    vr_exec *e = NULL;
    if (vr_exec_create(o->plan, dev, &ec, &e) != VR_OK)
        fail_msg("%s", vr_last_error());
    assert_true(e->graph == graph);
    float *p = et_params(o->g, 42);
    assert_int_equal(vr_exec_write(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    for (int k = 0; k < steps; k++) {
        void *inputs;
        int32_t *targets;
        et_batch(o->g, 7 + k, &inputs, &targets);
        vr_exec_batch b = {inputs, targets};
        h.lr = 1e-3f / (float)(k + 1);
        h.step = k + 1;
        if (k == 4)
            h.weight_decay = 0.05f;
        vr_exec_result r;
        if (vr_exec_step(e, &b, &h, &r) != VR_OK)
            fail_msg("%s", vr_last_error());
        loss[k] = r.loss;
        norm[k] = r.grad_norm;
        free(inputs);
        free(targets);
        if (graph && k >= 1)
            assert_true(e->graph && e->graph_captured);
    }
    assert_int_equal(vr_exec_read(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    *params = p;
    vr_exec_get_memory(e, &o->mem);
    vr_exec_free(e);
    vr_device_close(dev);
}

static void cuda_graph_equals_nodes(void **state)
{
    (void)state;
    NEED_GPU();
    enum { K = 7 };
    double l0[K], n0[K], l1[K], n1[K];
    float *p0, *p1;
    run_out a, b;
    graph_steps(false, K, l0, n0, &p0, &a);
    graph_steps(true, K, l1, n1, &p1, &b);
    double dl = 0, dn = 0;
    for (int k = 0; k < K; k++) {
        dl = fmax(dl, fabs(l0[k] - l1[k]));
        dn = fmax(dn, fabs(n0[k] - n1[k]));
    }
    float dp = max_diff(p0, p1, a.g->n_params);
    printf("cuda graph: %d steps, losses %.6f..%.6f, max |loss diff| %.3g, |norm diff| %.3g, param diff %.3g\n", K,
           l0[0], l0[K - 1], dl, dn, (double)dp);
    assert_true(l0[K - 1] != l0[0]); /* the steps changed something (fresh batches: not always downhill) */
    assert_true(dl < 1e-5 && dn < 1e-5 && dp < 1e-5f);
    check_plan_equals_run(&b);
    assert_true(b.mem.arena == b.plan->arena_size);
    free(p0);
    free(p1);
    a.params = b.params = NULL;
    run_free(&a);
    run_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fp32_matches_cpu),
        cmocka_unit_test(bf16_close_to_cpu),
        cmocka_unit_test(dynamic_equals_plan),
        cmocka_unit_test(cuda_graph_equals_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
