/* The fitter: the largest batch's plan fits and the next one's does not (several
 * capacities and models), no fit below the smallest step, the cost model's FLOPs
 * against the hand formula and its monotonicity, the search's ranking and JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "plan/plan_test_util.h"
#include "vram/fit.h"

static const vr_step_config adamw = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW};

static vr_model_config gpt_model(const char *preset, int T)
{
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 1};
    int Tdef = 0;
    assert_int_equal(vr_gpt_preset(preset, &m.gpt, &Tdef), VR_OK);
    m.T = T ? T : Tdef;
    return m;
}

static vr_model_config mlp_model(const char *preset)
{
    vr_model_config m = {.kind = VR_MODEL_MLP, .B = 1, .T = 1};
    assert_int_equal(vr_mlp_preset(preset, &m.mlp), VR_OK);
    return m;
}

/* The arena of the step at micro-batch B. */
static uint64_t arena_at(const vr_model_config *m0, const vr_step_config *s, int B)
{
    vr_model_config m = *m0;
    m.B = B;
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    assert_int_equal(vr_graph_build(&m, s, &g), VR_OK);
    assert_int_equal(vr_plan_create(g, NULL, &p), VR_OK);
    uint64_t a = p->arena_size;
    vr_plan_free(p);
    vr_graph_free(g);
    return a;
}

/* For capacities around the arenas at B = 1, 3, 7, 20 (exactly, and a little above):
 * the answer's plan fits, B + 1's does not, and the reported needs are the plans'. */
static void check_boundaries(const vr_model_config *m, const vr_step_config *s)
{
    const int Bs[] = {1, 3, 7, 20};
    for (size_t i = 0; i < sizeof Bs / sizeof *Bs; i++) {
        uint64_t base = arena_at(m, s, Bs[i]);
        for (int extra = 0; extra < 2; extra++) {
            uint64_t cap = base + (uint64_t)extra * 100000;
            vr_fit_batch b;
            assert_int_equal(vr_fit_max_batch(m, s, cap, &b), VR_OK);
            assert_true(b.B >= Bs[i]);
            assert_false(b.capped);
            assert_int_equal(b.at.B, b.B);
            assert_int_equal(b.next.B, b.B + 1);
            assert_true(b.at.fits && !b.next.fits);
            assert_int_equal(b.at.need, arena_at(m, s, b.B));
            assert_int_equal(b.next.need, arena_at(m, s, b.B + 1));
            assert_true(b.at.need <= cap && b.next.need > cap);
            assert_true(b.at.peak <= b.at.need && b.next.peak <= b.next.need);
            if (!extra && arena_at(m, s, Bs[i] + 1) > base)
                assert_int_equal(b.B, Bs[i]); /* the capacity is exactly B's arena */
        }
    }
}

static void test_max_batch_tiny_gpt(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("tiny", 0);
    check_boundaries(&m, &adamw);
    vr_step_config s = adamw;
    s.recompute = VR_RECOMPUTE_BLOCK;
    s.precision = VR_PREC_BF16;
    check_boundaries(&m, &s);
    s = adamw;
    s.accum = 4;
    s.recompute = VR_RECOMPUTE_SELECTIVE;
    check_boundaries(&m, &s);
}

static void test_max_batch_small_gpt_and_mlp(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("small", 128);
    check_boundaries(&m, &adamw);
    vr_model_config mlp = mlp_model("mnist");
    vr_step_config sgd = {.train = true, .accum = 1, .optim = VR_OPTIM_SGD};
    check_boundaries(&mlp, &sgd);
    check_boundaries(&mlp, &adamw);
    vr_model_config tiny = mlp_model("tiny");
    vr_step_config eval = {.train = false};
    check_boundaries(&tiny, &eval);
}

/* The largest rank's arena at micro-batch B (every rank planned). */
static uint64_t arena_ranks(const vr_model_config *m, const vr_step_config *s0, int B)
{
    uint64_t most = 0;
    for (int r = 0; r < s0->world; r++) {
        vr_step_config s = *s0;
        s.rank = r;
        uint64_t a = arena_at(m, &s, B);
        most = a > most ? a : most;
    }
    return most;
}

/* With ranks: the answer is every rank's (the largest arena at B fits, at B + 1 it does not), found with
 * one rank planned per probe after the first (not every rank at every probe). */
static void test_max_batch_ranks(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("tiny", 0);
    for (int zero = 1; zero <= 3; zero += 2) {
        vr_step_config s = adamw;
        s.world = 4;
        s.zero = zero;
        const int Bs[] = {3, 20};
        for (size_t i = 0; i < sizeof Bs / sizeof *Bs; i++) {
            uint64_t cap = arena_ranks(&m, &s, Bs[i]);
            vr_fit_batch b;
            assert_int_equal(vr_fit_max_batch(&m, &s, cap, &b), VR_OK);
            assert_true(b.B >= Bs[i]);
            assert_int_equal(b.next.B, b.B + 1);
            assert_true(b.at.fits && !b.next.fits);
            assert_int_equal(b.at.need, arena_ranks(&m, &s, b.B));
            assert_int_equal(b.next.need, arena_ranks(&m, &s, b.B + 1));
            int probes = 2; /* the doubling and the halving: at most 2 log2(B + 1) + 2 probes */
            for (int x = b.B + 1; x > 1; x /= 2)
                probes += 2;
            assert_true(b.plans <= 3 * s.world + probes);
        }
    }
}

/* A capacity far above any step stops at the cap, every probe fitting. */
static void test_max_batch_capped(void **state)
{
    (void)state;
    vr_model_config m = mlp_model("tiny");
    vr_step_config eval = {.train = false};
    vr_fit_batch b;
    assert_int_equal(vr_fit_max_batch(&m, &eval, UINT64_MAX / 2, &b), VR_OK);
    assert_true(b.capped);
    assert_int_equal(b.B, VR_FIT_MAX_BATCH);
    assert_int_equal(b.next.B, 0);
}

/* Below the smallest step (B = 1, block recompute): no batch, no configuration. */
static void test_no_fit(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("tiny", 0);
    vr_step_config s = adamw;
    s.recompute = VR_RECOMPUTE_BLOCK;
    uint64_t smallest = arena_at(&m, &s, 1);
    vr_fit_batch b;
    assert_int_equal(vr_fit_max_batch(&m, &s, smallest - 1, &b), VR_OK);
    assert_int_equal(b.B, 0);
    assert_int_equal(b.at.B, 0);
    assert_int_equal(b.next.B, 1);
    assert_int_equal(b.next.need, smallest);
    assert_false(b.next.fits);

    /* on a model this small, B = 1 without recompute can be smaller still (the re-run
     * block's temporaries against a few saved activations): go below all four */
    uint64_t least = smallest;
    for (int rc = VR_RECOMPUTE_NONE; rc <= VR_RECOMPUTE_ACT; rc++) {
        vr_step_config t = adamw;
        t.recompute = (vr_recompute)rc;
        uint64_t a = arena_at(&m, &t, 1);
        least = a < least ? a : least;
    }
    vr_fit_options o = {.capacity = least - 1, .precisions = 1u << VR_PREC_FP32, .optim_states = 1u << VR_OSTATE_FP32,
                        .offloads = 1u};
    vr_fit_result *r = calloc(1, sizeof *r);
    assert_int_equal(vr_fit_search(&m, &adamw, &o, r), VR_OK);
    assert_int_equal(r->n_rows, 4);
    assert_int_equal(r->best, -1);
    for (int i = 0; i < r->n_rows; i++) {
        assert_false(r->rows[i].fits);
        assert_int_equal(r->rows[i].micro, 0);
        assert_int_equal(r->rows[i].point.B, 1);
        assert_true(r->rows[i].point.need > o.capacity);
        assert_true(r->smallest_need <= r->rows[i].point.need);
        if (i)
            assert_true(r->rows[i - 1].point.need <= r->rows[i].point.need); /* ranked by need */
    }
    assert_int_equal(r->smallest_need, least);
    /* at exactly the smallest step, block recompute fits at B = 1 */
    o.capacity = smallest;
    o.recomputes = 1u << VR_RECOMPUTE_BLOCK;
    assert_int_equal(vr_fit_search(&m, &adamw, &o, r), VR_OK);
    assert_int_equal(r->best, 0);
    assert_int_equal(r->rows[0].micro, 1);
    free(r);
}

/* The FLOPs of a tiny GPT step against the formula: per block 24·N·C² of matmuls and
 * 2·B·T²·C of causal attention forward; backward 2× the matmuls, 2.5× attention; the
 * classifier 2·N·C·V forward and twice more for dx and dwte. */
static void test_cost_flops(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("tiny", 0);
    m.B = 3;
    const double B = 3, T = m.T, C = m.gpt.C, L = m.gpt.L, V = m.gpt.V, N = B * T;
    vr_fit_cost_model cm = vr_fit_cost_h100();
    vr_step_config s = adamw;
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    vr_fit_cost none = vr_fit_step_cost(g, &cm);
    assert_true(none.flops == L * (3 * 24 * N * C * C + 7 * B * T * T * C) + 3 * 2 * N * C * V);
    vr_graph_free(g);

    vr_step_config eval = {.train = false};
    assert_int_equal(vr_graph_build(&m, &eval, &g), VR_OK);
    vr_fit_cost fwd = vr_fit_step_cost(g, &cm);
    assert_true(fwd.flops == L * (24 * N * C * C + 2 * B * T * T * C) + 2 * N * C * V);
    vr_graph_free(g);

    /* recompute: block re-runs every block's forward matmuls and attention; selective none */
    s.recompute = VR_RECOMPUTE_BLOCK;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    vr_fit_cost block = vr_fit_step_cost(g, &cm);
    vr_graph_free(g);
    s.recompute = VR_RECOMPUTE_SELECTIVE;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    vr_fit_cost sel = vr_fit_step_cost(g, &cm);
    vr_graph_free(g);
    assert_true(block.flops > none.flops);
    assert_true(block.flops <= none.flops + L * (24 * N * C * C + 2 * B * T * T * C));
    assert_true(sel.flops == none.flops);
    assert_true(block.seconds > sel.seconds && sel.seconds > none.seconds);
    assert_true(block.launches > sel.launches && sel.launches > none.launches);

    /* accumulation: 4 micro-batches are 4× the FLOPs, the optimizer once */
    s.recompute = VR_RECOMPUTE_NONE;
    s.accum = 4;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    vr_fit_cost acc = vr_fit_step_cost(g, &cm);
    int opt_nodes = vr_graph_count_phase(g, VR_PHASE_OPTIMIZER);
    vr_graph_free(g);
    assert_true(acc.flops == 4 * none.flops);
    assert_int_equal(acc.launches, 4 * (none.launches - opt_nodes) + opt_nodes);

    /* bf16 at the higher throughput is faster than fp32 */
    s.accum = 1;
    s.precision = VR_PREC_BF16;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    vr_fit_cost bf = vr_fit_step_cost(g, &cm);
    vr_graph_free(g);
    assert_true(bf.flops == none.flops && bf.seconds < none.seconds);
}

static void check_ranked(const vr_fit_result *r)
{
    for (int i = 1; i < r->n_rows; i++) {
        const vr_fit_row *a = &r->rows[i - 1], *b = &r->rows[i];
        assert_true(a->fits || !b->fits);
        if (a->fits && b->fits)
            assert_true(a->tokens_per_s >= b->tokens_per_s);
    }
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        if (!w->fits)
            continue;
        assert_true(w->point.need <= r->options.capacity);
        assert_true(w->cost.seconds > 0 && w->tokens_per_s > 0);
        assert_true(w->micro >= 1 && w->micro <= w->max_micro);
    }
}

/* A global batch: every fitting row does micro × accum = G with the largest micro-batch
 * dividing G that fits; the fastest comes first; tighter memory needs more recompute. */
static void test_search_global_batch(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("small", 128);
    vr_step_config s4 = adamw;
    s4.accum = 4;
    vr_fit_options o = {.global_batch = 24, .capacity = arena_at(&m, &s4, 5), .optim_states = 1u, .masters = 1u, .offloads = 1u};
    vr_fit_result *r = calloc(1, sizeof *r);
    assert_int_equal(vr_fit_search(&m, &adamw, &o, r), VR_OK);
    assert_int_equal(r->n_rows, 8); /* fp32, bf16 x none, act, selective, block */
    assert_int_equal(r->best, 0);
    check_ranked(r);
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        assert_true(w->fits);
        assert_int_equal(w->micro * w->accum, 24);
        assert_int_equal(w->tokens, 24 * 128);
        if (w->accum > 1) /* no larger divisor of 24 fits */
            for (int d = w->micro + 1; d <= w->max_micro && d < 24; d++)
                assert_true(24 % d != 0);
        if (w->precision == VR_PREC_FP32 && w->recompute == VR_RECOMPUTE_NONE)
            assert_int_equal(w->micro, 4); /* 5 fits at accum > 1, 4 is the divisor */
    }
    /* same tokens per step: ranking by tokens/s is ranking by step time */
    for (int i = 1; i < r->n_rows; i++)
        assert_true(r->rows[i - 1].cost.seconds <= r->rows[i].cost.seconds);
    free(r);
}

/* The default search tries every state format, under bf16 no master and a split master, and both placements of
 * the master and state (an offloaded row keeps its full master: no "none" or "split" there); each row's plan is the plan of its configuration,
 * an offloaded row has host bytes and host time; the best is the most exact of the rows within
 * VR_FIT_SAME_SPEED of the fastest. */
static void test_search_state_formats(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("tiny", 0);
    vr_fit_options o = {.capacity = 4 * VR_PLAN_ALIGN * 4096};
    vr_fit_result *r = calloc(1, sizeof *r);
    assert_int_equal(vr_fit_search(&m, &adamw, &o, r), VR_OK);
    /* on the device: fp32 4 recompute x 3 formats, bf16 x 3 masters; offloaded: fp32 and bf16 x 4 x 3 */
    assert_int_equal(r->n_rows, 4 * 3 * 3 + 4 * 3 + 2 * 4 * 3);
    check_ranked(r);
    int seen[3] = {0}, no_master = 0, split = 0, offloaded = 0;
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        seen[w->optim_state]++;
        no_master += w->no_master;
        split += w->split_master;
        assert_true(!w->split_master || (w->precision == VR_PREC_BF16 && !w->offload && !w->no_master));
        offloaded += w->offload == VR_OFFLOAD_OPTIM;
        assert_true((w->point.host > 0) == (w->offload == VR_OFFLOAD_OPTIM));
        assert_true(!w->fits || (w->cost.host_seconds > 0) == (w->offload == VR_OFFLOAD_OPTIM));
        assert_true(!w->no_master || w->precision == VR_PREC_BF16);
        vr_step_config s = adamw;
        s.precision = w->precision;
        s.recompute = w->recompute;
        s.optim_state = w->optim_state;
        s.no_master = w->no_master;
        s.split_master = w->split_master;
        s.offload = w->offload;
        if (w->micro)
            assert_true(arena_at(&m, &s, w->micro) == w->point.need);
    }
    assert_int_equal(seen[0], 24);
    assert_int_equal(seen[1], 24);
    assert_int_equal(seen[2], 24);
    assert_int_equal(offloaded, 24);
    assert_int_equal(no_master, 12);
    assert_int_equal(split, 12);
    assert_true(r->best >= 0);
    const vr_fit_row *b = &r->rows[r->best];
    assert_true(b->tokens_per_s >= (1.0 - VR_FIT_SAME_SPEED) * r->rows[0].tokens_per_s);
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        if (w->fits && w->tokens_per_s >= (1.0 - VR_FIT_SAME_SPEED) * r->rows[0].tokens_per_s)
            assert_true(2 * ((int)w->optim_state + w->no_master) + (int)w->offload >=
                        2 * ((int)b->optim_state + b->no_master) + (int)b->offload);
    }
    /* an optimizer without state: fp32 state only (on the device and offloaded); pinned formats are honoured */
    vr_step_config sgd = adamw;
    sgd.optim = VR_OPTIM_SGD;
    vr_fit_options o2 = {.capacity = o.capacity, .precisions = 1u << VR_PREC_FP32};
    assert_int_equal(vr_fit_search(&m, &sgd, &o2, r), VR_OK);
    assert_int_equal(r->n_rows, 8);
    for (int i = 0; i < r->n_rows; i++)
        assert_int_equal(r->rows[i].optim_state, VR_OSTATE_FP32);
    vr_fit_options o3 = {.capacity = o.capacity, .precisions = 1u << VR_PREC_BF16, .optim_states = 1u << VR_OSTATE_8BIT,
                         .masters = 2u}; /* no master: on the device only */
    assert_int_equal(vr_fit_search(&m, &adamw, &o3, r), VR_OK);
    assert_int_equal(r->n_rows, 4); /* a row per recompute policy */
    for (int i = 0; i < r->n_rows; i++)
        assert_true(r->rows[i].optim_state == VR_OSTATE_8BIT && r->rows[i].no_master);
    free(r);
}

/* No global batch: the largest micro-batch per configuration; JSON parses. */
static void test_search_json(void **state)
{
    (void)state;
    vr_model_config m = gpt_model("tiny", 0);
    vr_fit_options o = {.capacity = 4 * VR_PLAN_ALIGN * 4096, .optim_states = 1u, .masters = 1u, .offloads = 1u};
    vr_fit_result *r = calloc(1, sizeof *r);
    assert_int_equal(vr_fit_search(&m, &adamw, &o, r), VR_OK);
    assert_int_equal(r->n_rows, 8);
    check_ranked(r);
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        assert_int_equal(w->accum, 1);
        assert_int_equal(w->micro, w->max_micro);
        vr_step_config s = adamw;
        s.precision = w->precision;
        s.recompute = w->recompute;
        if (w->micro) {
            assert_true(arena_at(&m, &s, w->micro) <= o.capacity);
            assert_true(arena_at(&m, &s, w->micro + 1) > o.capacity);
        }
    }
    cJSON *j = vr_fit_json(r);
    assert_non_null(j);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    cJSON *back = cJSON_Parse(text);
    free(text);
    assert_non_null(back);
    cJSON *rows = cJSON_GetObjectItem(back, "rows");
    assert_int_equal(cJSON_GetArraySize(rows), r->n_rows);
    cJSON *first = cJSON_GetArrayItem(rows, 0);
    assert_int_equal((int)cJSON_GetObjectItem(first, "micro_batch")->valuedouble, r->rows[0].micro);
    assert_true(cJSON_GetObjectItem(first, "need")->valuedouble == (double)r->rows[0].point.need);
    assert_int_equal((int)cJSON_GetObjectItem(back, "best")->valuedouble, 0);
    cJSON_Delete(back);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_batch_tiny_gpt),   cmocka_unit_test(test_max_batch_small_gpt_and_mlp),
        cmocka_unit_test(test_max_batch_capped),     cmocka_unit_test(test_no_fit),
        cmocka_unit_test(test_max_batch_ranks),
        cmocka_unit_test(test_cost_flops),           cmocka_unit_test(test_search_global_batch),
        cmocka_unit_test(test_search_json),
        cmocka_unit_test(test_search_state_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
