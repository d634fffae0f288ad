/* Dynamic mode: the step replayed through the caching allocator on a meta
 * device. The bytes requested at the peak are exactly the plan's raw peak;
 * allocated (512-byte blocks) and reserved (cached segments) are at least that. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "plan_test_util.h"

static const vr_step_config adamw = {.train = true, .optim = VR_OPTIM_ADAMW};

static void matches_the_plan(void **state)
{
    (void)state;
    vr_plan_config pc = {.memory = VR_MEMORY_DYNAMIC};
    vr_recompute rc[] = {VR_RECOMPUTE_NONE, VR_RECOMPUTE_BLOCK, VR_RECOMPUTE_SELECTIVE};
    for (int r = 0; r < 3; r++) {
        vr_step_config s = adamw;
        s.recompute = rc[r];
        built b = plan_gpt("small", 4, 0, s, &pc);
        const vr_plan *p = b.p;
        assert_true(p->has_dynamic);
        assert_int_equal(p->dynamic.status, VR_OK);
        assert_int_equal(p->dynamic.peak_requested, p->peak);
        assert_true(p->dynamic.peak_allocated >= p->peak);
        assert_true(p->dynamic.peak_reserved >= p->dynamic.peak_allocated);
        for (int i = 0; i < p->n_nodes; i++)
            assert_true(p->dynamic.allocated[i] >= vr_plan_live(p, i, VR_ROLE_COUNT));
        print_message("  small B=4 %-9s planned arena %11llu | dynamic allocated %11llu reserved %11llu (%lld "
                      "segments)\n", vr_recompute_name(rc[r]), (unsigned long long)p->arena_size,
                      (unsigned long long)p->dynamic.peak_allocated, (unsigned long long)p->dynamic.peak_reserved,
                      (long long)p->dynamic.device_allocs);
        built_free(&b);
    }
}

static void eval_and_mlp(void **state)
{
    (void)state;
    vr_plan_config pc = {.memory = VR_MEMORY_DYNAMIC, .steps = 3};
    vr_step_config ev = {.train = false};
    built b = plan_gpt("tiny", 2, 0, ev, &pc);
    assert_int_equal(b.p->dynamic.peak_requested, b.p->peak);
    built_free(&b);
    pc.inplace = true; /* one block per base: the replay follows the plan's in-place decisions */
    b = plan_gpt("small", 2, 0, ev, &pc);
    assert_true(b.p->n_inplace > 0);
    assert_int_equal(b.p->dynamic.peak_requested, b.p->peak);
    built_free(&b);
    pc.inplace = false;
    b = plan_mlp("mnist", VR_OP_GELU, 64, adamw, &pc);
    assert_int_equal(b.p->dynamic.peak_requested, b.p->peak);
    built_free(&b);
}

static void runs_out_of_capacity(void **state)
{
    (void)state;
    vr_plan_config pc = {.memory = VR_MEMORY_DYNAMIC};
    built ok = plan_gpt("small", 4, 0, adamw, &pc);
    pc.capacity = ok.p->peak / 2;
    built b = plan_gpt("small", 4, 0, adamw, &pc);
    assert_int_equal(b.p->dynamic.status, VR_ERR_OOM);
    assert_true(b.p->dynamic.error[0] != '\0');
    assert_true(b.p->dynamic.oom_node >= 0);
    assert_true(b.p->dynamic.peak_reserved <= pc.capacity);
    built_free(&b);
    built_free(&ok);
}

static void policies(void **state)
{
    (void)state;
    vr_plan_config pc = {.memory = VR_MEMORY_DYNAMIC, .alloc_policy = "expandable"};
    vr_graph *g = NULL;
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 4};
    assert_int_equal(vr_gpt_preset("small", &m.gpt, &m.T), VR_OK);
    assert_int_equal(vr_graph_build(&m, &adamw, &g), VR_OK);
    vr_plan *p = NULL;
    vr_status st = vr_plan_create(g, &pc, &p);
    if (st == VR_OK) {
        assert_int_equal(p->dynamic.peak_requested, p->peak);
        print_message("  expandable: allocated %llu reserved %llu\n", (unsigned long long)p->dynamic.peak_allocated,
                      (unsigned long long)p->dynamic.peak_reserved);
        vr_plan_free(p);
    } else {
        print_message("  expandable policy unavailable here: %s\n", vr_last_error());
    }
    pc.alloc_policy = "no-such-policy";
    assert_int_not_equal(vr_plan_create(g, &pc, &p), VR_OK);
    vr_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_the_plan),
        cmocka_unit_test(eval_and_mlp),
        cmocka_unit_test(runs_out_of_capacity),
        cmocka_unit_test(policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
