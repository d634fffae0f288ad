/* The static arena on several models, batches and strategies: no two tensors
 * live at the same time share a byte, every offset is aligned, and the arena
 * is at least the aligned peak and close to it (the factor is printed). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "plan_test_util.h"
#include "vram/util.h"

typedef struct strategy {
    const char *name;
    vr_step_config s;
} strategy;

static const strategy strategies[] = {
    {"adamw", {.train = true, .optim = VR_OPTIM_ADAMW}},
    {"block", {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = VR_RECOMPUTE_BLOCK}},
    {"selective", {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = VR_RECOMPUTE_SELECTIVE}},
    {"eval", {.train = false}},
    {"accum4", {.train = true, .optim = VR_OPTIM_SGD, .accum = 4}},
    {"bf16+clip", {.train = true, .optim = VR_OPTIM_ADAM, .precision = VR_PREC_BF16, .grad_clip = 1.0f}},
    {"momentum", {.train = true, .optim = VR_OPTIM_MOMENTUM}},
};
#define NSTRAT (int)(sizeof strategies / sizeof *strategies)

static double worst = 1.0;

static void check(built *b, const char *what)
{
    vr_plan *p = b->p;
    if (vr_plan_check(p) != VR_OK)
        fail_msg("%s: %s", what, vr_last_error());
    assert_true(p->arena_size >= p->peak_aligned);
    assert_true(p->peak_aligned >= p->peak);
    double f = vr_plan_arena_factor(p);
    if (f > worst)
        worst = f;
    print_message("  %-28s peak %12llu  arena %12llu  factor %.4f\n", what, (unsigned long long)p->peak_aligned,
                  (unsigned long long)p->arena_size, f);
    assert_true(f < 1.10);
}

static void gpt_models(void **state)
{
    (void)state;
    const char *presets[] = {"tiny", "small"};
    int batches[] = {1, 4};
    for (int ip = 0; ip < 4; ip++) /* in place off/on, greedy by size / in time order (src/plan/pack.c) */
        for (int m = 0; m < 2; m++)
            for (int bi = 0; bi < 2; bi++)
                for (int s = 0; s < NSTRAT; s++) {
                    vr_plan_config pc = {.inplace = ip % 2, .greedy_max = ip / 2 ? -1 : 0};
                    built b = plan_gpt(presets[m], batches[bi], 0, strategies[s].s, &pc);
                    char what[64];
                    snprintf(what, sizeof what, "%s B=%d %s%s%s", presets[m], batches[bi], strategies[s].name,
                             ip % 2 ? " inplace" : "", ip / 2 ? " in time" : "");
                    check(&b, what);
                    if (ip % 2)
                        assert_true(b.p->n_inplace > 0);
                    built_free(&b);
                }
}

static void gpt2_124m(void **state)
{
    (void)state;
    for (int s = 0; s < 2 * NSTRAT; s++) {
        vr_plan_config pc = {.greedy_max = s < NSTRAT ? 0 : -1};
        built b = plan_gpt("gpt2", 4, 1024, strategies[s % NSTRAT].s, &pc);
        char what[64];
        snprintf(what, sizeof what, "gpt2 B=4 %s%s", strategies[s % NSTRAT].name, s < NSTRAT ? "" : " in time");
        check(&b, what);
        built_free(&b);
    }
}

static void mlp_models(void **state)
{
    (void)state;
    vr_op acts[] = {VR_OP_RELU, VR_OP_GELU};
    for (int a = 0; a < 4; a++)
        for (int s = 0; s < NSTRAT; s++) {
            vr_plan_config pc = {.inplace = s % 2, .greedy_max = a / 2 ? -1 : 0};
            built b = plan_mlp("mnist", acts[a % 2], 64, strategies[s].s, &pc);
            char what[64];
            snprintf(what, sizeof what, "mnist %s B=64 %s%s%s", vr_op_name(acts[a % 2]), strategies[s].name,
                     pc.inplace ? " inplace" : "", a / 2 ? " in time" : "");
            check(&b, what);
            built_free(&b);
        }
    print_message("  worst arena / aligned peak: %.4f\n", worst);
}

static void other_alignments(void **state)
{
    (void)state;
    vr_plan_config pc = {.align = 512};
    built b = plan_gpt("tiny", 3, 0, strategies[0].s, &pc);
    assert_int_equal(b.p->align, 512);
    for (int t = 0; t < b.p->n_tensors; t++)
        if (b.g->tensors[t].view_of < 0 && b.p->tensors[t].first >= 0)
            assert_int_equal(b.p->tensors[t].offset % 512, 0);
    assert_int_equal(vr_plan_check(b.p), VR_OK);
    vr_plan *bad = NULL;
    pc.align = 300;
    assert_int_equal(vr_plan_create(b.g, &pc, &bad), VR_ERR_INVALID);
    assert_null(bad);
    built_free(&b);
}

/* The check itself catches an overlap and a misaligned offset. */
static void check_catches_errors(void **state)
{
    (void)state;
    built b = plan_gpt("tiny", 2, 0, strategies[0].s, NULL);
    int qkv = vr_graph_find(b.g, "h.0.qkv"), atty = vr_graph_find(b.g, "h.0.atty");
    uint64_t saved = b.p->tensors[atty].offset, qkv_off = b.p->tensors[qkv].offset;
    b.p->tensors[atty].offset = b.p->tensors[qkv].offset; /* both live during the attention */
    assert_int_equal(vr_plan_check(b.p), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "overlap"));
    b.p->tensors[atty].offset = b.p->tensors[qkv].offset + b.p->tensors[qkv].size - 256; /* its last 256 B */
    assert_int_equal(vr_plan_check(b.p), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "overlap"));
    b.p->tensors[qkv].offset = saved + b.p->tensors[atty].size - 256; /* the other way round */
    b.p->tensors[atty].offset = saved;
    assert_int_equal(vr_plan_check(b.p), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "overlap"));
    b.p->tensors[qkv].offset = qkv_off;
    b.p->tensors[atty].offset = saved + 8;
    assert_int_equal(vr_plan_check(b.p), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "aligned"));
    b.p->tensors[atty].offset = saved;
    assert_int_equal(vr_plan_check(b.p), VR_OK);
    built_free(&b);
}

/* Persistent tensors come first, parameter buffer at offset 0; views inside their storage. */
static void layout(void **state)
{
    (void)state;
    built b = plan_gpt("tiny", 2, 0, strategies[0].s, NULL);
    const vr_plan *p = b.p;
    assert_int_equal(p->tensors[b.g->params].offset, 0);
    int wpe = vr_graph_find(b.g, "wpe");
    assert_int_equal(p->tensors[wpe].offset, (uint64_t)b.g->tensors[wpe].param_offset * 4);
    uint64_t persistent = 0;
    for (int t = 0; t < p->n_tensors; t++)
        if (b.g->tensors[t].view_of < 0 && p->tensors[t].persistent && p->tensors[t].first >= 0)
            persistent += p->tensors[t].size;
    assert_int_equal(persistent, p->persistent_size);
    built_free(&b);
}

/* The deepest model the flags accept (VR_GPT_MAX_LAYERS tiny layers: ~80k packed tensors, above
 * VR_PLAN_GREEDY_MAX, so packed in time order, O(n log n), and checked by the O(n log n) sweep) plans in
 * well under a second; the bound is generous (sanitizer builds), the point is "not minutes". */
static void deep_models_plan_quickly(void **state)
{
    (void)state;
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 1, .T = 64};
    assert_int_equal(vr_gpt_preset("tiny", &m.gpt, NULL), VR_OK);
    m.gpt.L = VR_GPT_MAX_LAYERS;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW};
    vr_plan_config pc = {0};
    uint64_t t0 = vr_now_ns();
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    assert_int_equal(vr_plan_create(g, &pc, &p), VR_OK);
    double secs = (double)(vr_now_ns() - t0) / 1e9;
    assert_int_equal(vr_plan_check(p), VR_OK);
    int packed = 0;
    for (int t = 0; t < p->n_tensors; t++)
        packed += g->tensors[t].view_of < 0 && !p->tensors[t].persistent && p->tensors[t].first >= 0 &&
                  p->tensors[t].base == t;
    assert_true(packed > VR_PLAN_GREEDY_MAX);
    print_message("  %d layers, %d packed tensors: planned and checked in %.2f s, factor %.4f\n", m.gpt.L, packed,
                  secs, vr_plan_arena_factor(p));
    assert_true(vr_plan_arena_factor(p) < 1.05);
    if (secs > 60.0)
        fail_msg("%d layers took %.1f s to plan", m.gpt.L, secs);
    vr_plan_free(p);
    vr_graph_free(g);
    m.gpt.L = VR_GPT_MAX_LAYERS + 1; /* above the bound: refused at once */
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_gpt_config.L: "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt_models),
        cmocka_unit_test(gpt2_124m),
        cmocka_unit_test(mlp_models),
        cmocka_unit_test(other_alignments),
        cmocka_unit_test(check_catches_errors),
        cmocka_unit_test(layout),
        cmocka_unit_test(deep_models_plan_quickly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
