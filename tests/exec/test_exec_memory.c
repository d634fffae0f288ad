/* Plan equals reality: for tiny GPTs and MLPs under every strategy (recompute
 * none/block/selective, accumulation, frozen parameters, clipping, backward
 * only, no-grad evaluation), in planned and dynamic mode, the bytes the CPU
 * run really held per role during every node, at the peak and in total equal
 * the plan's; the device's own used-bytes figure equals the arena (planned)
 * or the allocator's reserved peak (dynamic), whose statistics equal the
 * plan's replay; also with outputs planned in place over dying inputs. Every tensor is poisoned (NaN) when it becomes live, and the
 * two modes must give bit-identical parameters, so a plan that let two live
 * tensors share bytes, or a kernel reading what nothing wrote, fails here. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "exec/exec_test_util.h"
#include "vram/device.h"

typedef struct run_out {
    float *params;
    double loss[2];
} run_out;

static uint64_t round512(uint64_t n) { return (n + 511) / 512 * 512; }

static bool inplace;        /* plan gelu/relu/add outputs over their dying inputs */
static int steps = 2;       /* steps per run */
static const char *policy;  /* dynamic mode's allocator policy (NULL: pytorch) */

/* Builds, plans and runs 2 steps of (m, s) in the given mode; checks the figures. */
static run_out run_case(const char *what, const vr_model_config *m, const vr_step_config *s, vr_memory_mode mode)
{
    vr_graph *g = NULL;
    if (vr_graph_build(m, s, &g) != VR_OK)
        fail_msg("%s: build: %s", what, vr_last_error());
    vr_plan_config pc = {.memory = mode, .inplace = inplace, .alloc_policy = policy};
    vr_plan *p = NULL;
    assert_int_equal(vr_plan_create(g, &pc, &p), VR_OK);
    if (inplace && p->n_inplace == 0)
        fail_msg("%s: nothing was planned in place", what);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cpu", &dev), VR_OK);
    vr_exec_config ec = {.memory = mode, .poison = true, .alloc_policy = policy};
    vr_exec *e = NULL;
    if (vr_exec_create(p, dev, &ec, &e) != VR_OK)
        fail_msg("%s: exec: %s", what, vr_last_error());
    float *init = et_params(g, 42);
    assert_int_equal(vr_exec_write(e, g->params, init, (uint64_t)g->n_params * 4), VR_OK);
    int accum = s->train && s->accum > 1 ? s->accum : 1;
    vr_optim_hparams h = vr_optim_hparams_default(s->optim);
    h.lr = 1e-2f;
    run_out r = {0};
    for (int step = 0; step < steps; step++) {
        vr_exec_batch mb[4];
        void *in[4];
        int32_t *tg[4];
        for (int k = 0; k < accum; k++) {
            et_batch(g, (uint64_t)(step * 10 + k), &in[k], &tg[k]);
            mb[k] = (vr_exec_batch){in[k], tg[k]};
        }
        h.step = step + 1;
        vr_exec_result res;
        if (vr_exec_step(e, mb, &h, &res) != VR_OK)
            fail_msg("%s: step: %s", what, vr_last_error());
        if (!isfinite(res.loss))
            fail_msg("%s (%s): loss %g is not finite: a kernel read poisoned bytes", what,
                     mode == VR_MEMORY_PLANNED ? "planned" : "dynamic", res.loss);
        r.loss[step < 2 ? step : 1] = res.loss;
        for (int k = 0; k < accum; k++) {
            free(in[k]);
            free(tg[k]);
        }
    }
    vr_exec_memory mem;
    vr_exec_get_memory(e, &mem);
    for (int i = 0; i < g->n_nodes; i++)
        for (int ro = 0; ro < VR_ROLE_COUNT; ro++)
            if (vr_exec_live(e, i, ro) != vr_plan_live(p, i, ro))
                fail_msg("%s: node %d (%s) role %s: ran with %llu bytes live, plan says %llu", what, i,
                         g->nodes[i].name, vr_role_name((vr_role)ro), (unsigned long long)vr_exec_live(e, i, ro),
                         (unsigned long long)vr_plan_live(p, i, ro));
    for (int ro = 0; ro < VR_ROLE_COUNT; ro++) {
        assert_int_equal(mem.max_live[ro], p->max_live[ro]);
        assert_int_equal(mem.at_peak[ro], p->at_peak[ro]);
    }
    assert_int_equal(mem.peak, p->peak);
    assert_int_equal(mem.peak_node, p->peak_node);
    for (int ro = 0; ro < VR_ROLE_COUNT; ro++)
        if (mem.host[ro] != p->host_total[ro])
            fail_msg("%s: host role %s: %llu bytes bound, plan says %llu", what, vr_role_name((vr_role)ro),
                     (unsigned long long)mem.host[ro], (unsigned long long)p->host_total[ro]);
    assert_int_equal(mem.host_arena, p->host_size);
    assert_true((p->host_size > 0) == (s->offload == VR_OFFLOAD_OPTIM && s->train && s->optim != VR_OPTIM_NONE));
    if (mode == VR_MEMORY_PLANNED) {
        assert_int_equal(mem.arena, p->arena_size);
        assert_int_equal(mem.device_peak, round512(p->arena_size));
        assert_int_equal(mem.device_used, round512(p->arena_size));
    } else {
        assert_true(p->has_dynamic);
        assert_int_equal(mem.peak_requested, p->peak);
        assert_int_equal(mem.peak_allocated, p->dynamic.peak_allocated);
        assert_int_equal(mem.peak_reserved, p->dynamic.peak_reserved);
        assert_int_equal(mem.device_peak, mem.peak_reserved);
    }
    r.params = malloc((size_t)g->n_params * 4);
    assert_int_equal(vr_exec_read(e, g->params, r.params, (uint64_t)g->n_params * 4), VR_OK);
    for (int64_t i = 0; i < g->n_params; i++)
        if (!isfinite(r.params[i]))
            fail_msg("%s: parameter %lld is %g after 2 steps: a kernel read poisoned bytes", what, (long long)i,
                     r.params[i]);
    free(init);
    vr_exec_free(e);
    vr_device_mem dm;
    assert_int_equal(vr_device_mem_info(dev, &dm), VR_OK);
    assert_int_equal(dm.used_by_us, 0); /* everything given back */
    vr_device_close(dev);
    vr_plan_free(p);
    vr_graph_free(g);
    return r;
}

static void both_modes(const char *what, const vr_model_config *m, const vr_step_config *s)
{
    run_out a = run_case(what, m, s, VR_MEMORY_PLANNED);
    run_out b = run_case(what, m, s, VR_MEMORY_DYNAMIC);
    int64_t n = m->kind == VR_MODEL_GPT ? vr_gpt_num_params(&m->gpt) : vr_mlp_num_params(&m->mlp);
    if (m->kind == VR_MODEL_GPT && m->gpt.Vp == 0) {
        vr_gpt_config c = m->gpt;
        vr_gpt_config_check(&c);
        n = vr_gpt_num_params(&c);
    }
    if (memcmp(a.params, b.params, (size_t)n * 4))
        fail_msg("%s: planned and dynamic runs differ", what);
    assert_true(a.loss[0] == b.loss[0] && a.loss[1] == b.loss[1]);
    free(a.params);
    free(b.params);
}

static vr_step_config train_cfg(vr_optim o)
{
    vr_step_config s;
    memset(&s, 0, sizeof s);
    s.train = true;
    s.accum = 1;
    s.optim = o;
    return s;
}

static void gpt_plain(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s = train_cfg(VR_OPTIM_ADAMW);
    both_modes("gpt adamw", &m, &s);
}

static void gpt_recompute(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s = train_cfg(VR_OPTIM_ADAMW);
    s.recompute = VR_RECOMPUTE_BLOCK;
    both_modes("gpt block", &m, &s);
    s.recompute = VR_RECOMPUTE_SELECTIVE;
    both_modes("gpt selective", &m, &s);
    s.recompute = VR_RECOMPUTE_ACT;
    both_modes("gpt act", &m, &s);
    s.recompute_layers = 1; /* block 0 recomputed, block 1 keeping everything */
    both_modes("gpt act, first block", &m, &s);
    s.recompute = VR_RECOMPUTE_BLOCK;
    both_modes("gpt block, first block", &m, &s);
}

/* Acts bytes the plan of (m, s) saves for the backward. */
static uint64_t acts_total(const vr_model_config *m, const vr_step_config *s)
{
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(m, s, &g), VR_OK);
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED};
    vr_plan *p = NULL;
    assert_int_equal(vr_plan_create(g, &pc, &p), VR_OK);
    uint64_t n = p->total[VR_ROLE_ACT];
    vr_plan_free(p);
    vr_graph_free(g);
    return n;
}

/* The norms' backward from their output: plan equals reality in both modes (poisoned), the norms' inputs (the
 * residual stream and the embedding's sum) and their means are no longer saved (to the byte), and the step is
 * the input-reading backward's within fp32 rounding; also with clipping, accumulation, selective recompute and
 * a frozen norm. */
static void gpt_norm_from_out(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s = train_cfg(VR_OPTIM_SGD); /* the gradients as they are (Adam makes ~0 ones +-lr) */
    s.grad_clip = 1.0f;
    uint64_t acts_in = acts_total(&m, &s);
    run_out ref = run_case("gpt norm from input", &m, &s, VR_MEMORY_PLANNED);
    s.norm_from_out = true;
    run_out got = run_case("gpt norm from output", &m, &s, VR_MEMORY_PLANNED);
    uint64_t N = (uint64_t)m.B * (uint64_t)m.T, norms = 2u * (uint64_t)m.gpt.L + 1u;
    /* every norm's input and mean no longer saved; ln_f's output now is (the classifier used it up before) */
    assert_int_equal(acts_in - acts_total(&m, &s), (norms - 1u) * N * (uint64_t)m.gpt.C * 4u + norms * N * 4u);
    vr_gpt_config c = m.gpt;
    vr_gpt_config_check(&c);
    int64_t n = vr_gpt_num_params(&c);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got.params[i] - ref.params[i]) / (fabs(ref.params[i]) + 1e-3);
        worst = d > worst ? d : worst;
    }
    if (worst > 1e-4 || fabs(got.loss[1] - ref.loss[1]) > 1e-5 * fabs(ref.loss[1]))
        fail_msg("norm from output: params differ by %g (relative), loss %.7f vs %.7f", worst, got.loss[1],
                 ref.loss[1]);
    free(ref.params);
    free(got.params);
    s.optim = VR_OPTIM_ADAMW;
    both_modes("gpt norm from output", &m, &s);
    s.accum = 2;
    both_modes("gpt norm from output, accum 2", &m, &s);
    s.accum = 1;
    s.recompute = VR_RECOMPUTE_SELECTIVE;
    both_modes("gpt norm from output, selective", &m, &s);
    s.recompute = VR_RECOMPUTE_NONE;
    s.freeze = "h.0.ln_1*";
    both_modes("gpt norm from output, frozen ln_1", &m, &s);
}

static void gpt_accum_clip(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 8);
    vr_step_config s = train_cfg(VR_OPTIM_ADAM);
    s.accum = 3;
    both_modes("gpt accum 3", &m, &s);
    s.accum = 2;
    s.grad_clip = 0.5f;
    s.recompute = VR_RECOMPUTE_BLOCK;
    both_modes("gpt accum 2 clip block", &m, &s);
}

static void gpt_frozen(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(3, 16);
    vr_step_config s = train_cfg(VR_OPTIM_MOMENTUM);
    s.freeze = "wte,h.0.*";
    both_modes("gpt frozen", &m, &s);
}

/* Compact optimizer state: 8-bit (codes, absmax, f32 state of the small tensors) and bf16, with Adam and
 * momentum, accumulation, clipping and freezing: the plan equals what runs, per role. */
static void gpt_optim_state(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s = train_cfg(VR_OPTIM_ADAMW);
    s.optim_state = VR_OSTATE_8BIT;
    both_modes("gpt adamw 8-bit", &m, &s);
    s.optim_state = VR_OSTATE_BF16;
    both_modes("gpt adamw bf16 state", &m, &s);
    s = train_cfg(VR_OPTIM_MOMENTUM);
    s.optim_state = VR_OSTATE_8BIT;
    s.accum = 2;
    s.grad_clip = 0.5f;
    s.freeze = "h.0.*";
    both_modes("gpt momentum 8-bit accum clip frozen", &m, &s);
}

static void gpt_eval_and_backward_only(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(4, 32);
    vr_step_config s;
    memset(&s, 0, sizeof s);
    both_modes("gpt eval", &m, &s);
    s = train_cfg(VR_OPTIM_NONE);
    both_modes("gpt backward only", &m, &s);
}

static void mlp_all(void **st)
{
    (void)st;
    vr_model_config m = et_mlp(8);
    vr_step_config s = train_cfg(VR_OPTIM_SGD);
    both_modes("mlp sgd", &m, &s);
    s = train_cfg(VR_OPTIM_ADAMW);
    s.accum = 2;
    s.grad_clip = 0.1f;
    both_modes("mlp adamw accum clip", &m, &s);
    s = train_cfg(VR_OPTIM_MOMENTUM);
    s.recompute = VR_RECOMPUTE_BLOCK;
    s.freeze = "fc0.*";
    both_modes("mlp momentum block frozen", &m, &s);
    memset(&s, 0, sizeof s);
    both_modes("mlp eval", &m, &s);
}

/* Offload: master and state on the host, the update run there after the gradients' copies: the plan's device
 * and host bytes per role equal the run's, and the weights equal those of the same step on the device
 * (fp32 both sides, the same kernels and the same order of the norm's sum: bit for bit) with
 * accumulation and clipping, after 4 steps. */
static void offload_case(const char *what, const vr_model_config *m, vr_step_config s)
{
    steps = 4;
    run_out dev = run_case(what, m, &s, VR_MEMORY_PLANNED);
    s.offload = VR_OFFLOAD_OPTIM;
    run_out a = run_case(what, m, &s, VR_MEMORY_PLANNED);
    run_out b = run_case(what, m, &s, VR_MEMORY_DYNAMIC);
    steps = 2;
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(m, &s, &g), VR_OK);
    size_t n = (size_t)g->n_params;
    assert_true(g->n_params > 0 && g->host_grads >= 0 && g->tensors[g->master].host);
    vr_graph_free(g);
    if (memcmp(a.params, dev.params, n * 4) || memcmp(b.params, dev.params, n * 4))
        fail_msg("%s: the offloaded weights differ from the on-device step's", what);
    assert_true(a.loss[1] == dev.loss[1] && b.loss[1] == dev.loss[1]);
    free(dev.params);
    free(a.params);
    free(b.params);
}

static void gpt_offload(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s = train_cfg(VR_OPTIM_ADAMW);
    s.accum = 2;
    s.grad_clip = 0.5f;
    offload_case("gpt adamw offload accum clip", &m, s);
    s = train_cfg(VR_OPTIM_MOMENTUM);
    s.optim_state = VR_OSTATE_8BIT;
    s.freeze = "h.0.*";
    s.recompute = VR_RECOMPUTE_BLOCK;
    offload_case("gpt momentum 8-bit offload frozen block", &m, s);
    vr_model_config mm = et_mlp(8);
    s = train_cfg(VR_OPTIM_SGD);
    offload_case("mlp sgd offload", &mm, s);
    s = train_cfg(VR_OPTIM_ADAM);
    s.optim_state = VR_OSTATE_BF16;
    s.grad_clip = 0.1f;
    offload_case("mlp adam bf16 state offload clip", &mm, s);
}

static void other_allocator_policies(void **st)
{
    (void)st;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s = train_cfg(VR_OPTIM_ADAMW);
    s.accum = 2;
    policy = "expandable"; /* ("stitch" needs physical memory handles, which cpu has not) */
    both_modes("expandable segments", &m, &s);
    policy = NULL;
}

static void in_place(void **st)
{
    (void)st;
    inplace = true;
    vr_model_config m = et_gpt(2, 16);
    vr_step_config s;
    memset(&s, 0, sizeof s);
    both_modes("gpt eval in place", &m, &s);
    s = train_cfg(VR_OPTIM_ADAMW);
    s.recompute = VR_RECOMPUTE_BLOCK;
    both_modes("gpt block recompute in place", &m, &s);
    vr_model_config mm = et_mlp(8);
    memset(&s, 0, sizeof s);
    both_modes("mlp eval in place", &mm, &s);
    inplace = false;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt_plain),  cmocka_unit_test(gpt_recompute), cmocka_unit_test(gpt_norm_from_out),
        cmocka_unit_test(gpt_accum_clip), cmocka_unit_test(gpt_frozen),
        cmocka_unit_test(gpt_eval_and_backward_only), cmocka_unit_test(mlp_all),
        cmocka_unit_test(gpt_optim_state),  cmocka_unit_test(gpt_offload),
        cmocka_unit_test(in_place),         cmocka_unit_test(other_allocator_policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
