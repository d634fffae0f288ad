/* Exact bytes per role, from the model's formulas: params, master, grads,
 * optimizer state, inputs, and the activations llm.c keeps (per block
 * 16 BTC + 4 BT + B NH T floats), under each recompute policy, freezing,
 * accumulation, precision and no-grad evaluation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "plan_test_util.h"

#define B_ 2

static const vr_step_config adamw = {.train = true, .optim = VR_OPTIM_ADAMW};

typedef struct dims {
    uint64_t L, B, T, C, NH;
} dims;

static dims dims_of(const vr_graph *g)
{
    return (dims){(uint64_t)g->model.gpt.L, (uint64_t)g->model.B, (uint64_t)g->model.T, (uint64_t)g->model.gpt.C,
                  (uint64_t)g->model.gpt.NH};
}

/* Bytes of the activations saved without recomputation, fp32. */
static uint64_t acts_none(dims d)
{
    uint64_t BTC = d.B * d.T * d.C, BT = d.B * d.T;
    return 4 * (d.L * (16 * BTC + 4 * BT + d.B * d.NH * d.T) + BTC + 2 * BT);
}

static void persistent_roles(void **state)
{
    (void)state;
    built b = plan_gpt("tiny", B_, 0, adamw, NULL);
    const vr_plan *p = b.p;
    uint64_t n = (uint64_t)b.g->n_params;
    assert_int_equal(p->total[VR_ROLE_PARAM], 4 * n);
    assert_int_equal(p->count[VR_ROLE_PARAM], 1); /* one flat buffer */
    assert_int_equal(p->total[VR_ROLE_MASTER], 0);
    assert_int_equal(p->total[VR_ROLE_GRAD], 4 * n);
    assert_int_equal(p->count[VR_ROLE_GRAD], 2 + 12 * b.g->model.gpt.L + 2);
    assert_int_equal(p->total[VR_ROLE_OPTIM], 2 * 4 * n);
    assert_int_equal(p->total[VR_ROLE_INPUT], 2 * 4 * B_ * (uint64_t)b.g->model.T);
    /* params and optimizer state are live during every node; grads only from their producer on */
    for (int i = 0; i < p->n_nodes; i++) {
        assert_int_equal(vr_plan_live(p, i, VR_ROLE_PARAM), 4 * n);
        assert_int_equal(vr_plan_live(p, i, VR_ROLE_OPTIM), 8 * n);
    }
    assert_int_equal(vr_plan_live(p, 0, VR_ROLE_GRAD), 0);
    assert_int_equal(p->max_live[VR_ROLE_GRAD], 4 * n); /* all of them just before the first update */
    /* the at-peak column adds up to the peak */
    uint64_t sum = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        sum += p->at_peak[r];
    assert_int_equal(sum, p->peak);
    assert_int_equal(vr_plan_live(p, p->peak_node, VR_ROLE_COUNT), p->peak);
    built_free(&b);
}

/* Activations live when the backward starts (node n_forward, lnf's backward). */
static void activations_by_policy(void **state)
{
    (void)state;
    vr_step_config s = adamw;
    built none = plan_gpt("small", B_, 0, s, NULL);
    dims d = dims_of(none.g);
    uint64_t BTC4 = 4 * d.B * d.T * d.C, BT4 = 4 * d.B * d.T;
    int n0 = none.g->n_forward;
    assert_int_equal(none.p->total[VR_ROLE_ACT], acts_none(d));
    assert_int_equal(vr_plan_live(none.p, n0, VR_ROLE_ACT), acts_none(d));

    s.recompute = VR_RECOMPUTE_SELECTIVE; /* ln1, ln2 (BTC each) and gelu (4 BTC) are not kept */
    built sel = plan_gpt("small", B_, 0, s, NULL);
    assert_int_equal(vr_plan_live(sel.p, n0, VR_ROLE_ACT), acts_none(d) - d.L * 6 * BTC4);

    s.recompute = VR_RECOMPUTE_ACT; /* gelu (4 BTC) is not kept */
    built act = plan_gpt("small", B_, 0, s, NULL);
    assert_int_equal(vr_plan_live(act.p, n0, VR_ROLE_ACT), acts_none(d) - d.L * 4 * BTC4);

    s.recompute = VR_RECOMPUTE_BLOCK; /* only the residual stream x_0..x_L and lnf's statistics */
    built blk = plan_gpt("small", B_, 0, s, NULL);
    assert_int_equal(vr_plan_live(blk.p, n0, VR_ROLE_ACT), (d.L + 1) * BTC4 + 2 * BT4);

    print_message("  small B=%d peak: none %llu, act %llu, selective %llu, block %llu\n", B_,
                  (unsigned long long)none.p->peak, (unsigned long long)act.p->peak, (unsigned long long)sel.p->peak,
                  (unsigned long long)blk.p->peak);
    assert_true(blk.p->peak < sel.p->peak && sel.p->peak < act.p->peak && act.p->peak < none.p->peak);
    assert_true(blk.p->max_live[VR_ROLE_ACT] < sel.p->max_live[VR_ROLE_ACT]);
    built_free(&none);
    built_free(&sel);
    built_free(&act);
    built_free(&blk);
}

static void eval_saves_nothing(void **state)
{
    (void)state;
    vr_step_config s = {.train = false};
    built ev = plan_gpt("small", B_, 0, s, NULL);
    built tr = plan_gpt("small", B_, 0, adamw, NULL);
    assert_int_equal(ev.p->count[VR_ROLE_ACT], 0);
    assert_int_equal(ev.p->total[VR_ROLE_ACT], 0);
    assert_int_equal(ev.p->total[VR_ROLE_GRAD], 0);
    assert_int_equal(ev.p->total[VR_ROLE_OPTIM], 0);
    assert_int_equal(ev.p->total[VR_ROLE_PARAM], tr.p->total[VR_ROLE_PARAM]);
    /* the eval peak is the gelu: residual (B,T,C), its input and output (B,T,4C) each */
    dims d = dims_of(ev.g);
    assert_int_equal(ev.p->at_peak[VR_ROLE_TEMP], 4 * 9 * d.B * d.T * d.C);
    assert_int_equal(ev.g->nodes[ev.p->peak_node].op, VR_OP_GELU);
    print_message("  small B=%d: eval peak %llu vs training peak %llu\n", B_, (unsigned long long)ev.p->peak,
                  (unsigned long long)tr.p->peak);
    assert_true(ev.p->peak * 3 < tr.p->peak);
    /* in place, gelu writes over its input and the adds over their dying operand:
     * the peak moves to the fc matmul with residual, ln2 output and fch (6 BTC) */
    vr_plan_config pc = {.inplace = true};
    built ip = plan_gpt("small", B_, 0, s, &pc);
    assert_int_equal(ip.p->at_peak[VR_ROLE_TEMP], 4 * 6 * d.B * d.T * d.C);
    assert_int_equal(ip.p->n_inplace, 3 * (int)d.L); /* per block: the gelu and both adds */
    built_free(&ip);
    built_free(&ev);
    built_free(&tr);
}

static void freezing_drops_grads_and_state(void **state)
{
    (void)state;
    vr_step_config s = adamw;
    s.freeze = "h.*.attn*";
    built fr = plan_gpt("small", B_, 0, s, NULL);
    built all = plan_gpt("small", B_, 0, adamw, NULL);
    dims d = dims_of(fr.g);
    uint64_t frozen = d.L * (3 * d.C * d.C + 3 * d.C + d.C * d.C + d.C); /* c_attn and c_proj, w and b */
    assert_int_equal((uint64_t)fr.g->n_trainable, (uint64_t)fr.g->n_params - frozen);
    assert_int_equal(fr.p->total[VR_ROLE_GRAD], all.p->total[VR_ROLE_GRAD] - 4 * frozen);
    assert_int_equal(fr.p->total[VR_ROLE_OPTIM], all.p->total[VR_ROLE_OPTIM] - 8 * frozen);
    assert_int_equal(fr.p->total[VR_ROLE_PARAM], all.p->total[VR_ROLE_PARAM]);
    /* with c_attn.w frozen its matmul's backward needs w (for dx), not its input: ln1's output is not kept */
    assert_true(fr.p->total[VR_ROLE_ACT] < all.p->total[VR_ROLE_ACT]);
    built_free(&fr);
    built_free(&all);
}

static void accumulation(void **state)
{
    (void)state;
    vr_step_config s = adamw;
    built big = plan_gpt("small", 8, 0, s, NULL);
    s.accum = 4;
    built acc = plan_gpt("small", 2, 0, s, NULL);
    assert_int_equal(big.p->total[VR_ROLE_ACT], 4 * acc.p->total[VR_ROLE_ACT]);
    assert_int_equal(big.p->max_live[VR_ROLE_ACT], 4 * acc.p->max_live[VR_ROLE_ACT]);
    assert_int_equal(acc.p->total[VR_ROLE_GRAD], big.p->total[VR_ROLE_GRAD]);
    /* accumulated gradients live through the whole step */
    assert_int_equal(vr_plan_live(acc.p, 0, VR_ROLE_GRAD), acc.p->total[VR_ROLE_GRAD]);
    assert_int_equal(vr_plan_live(big.p, 0, VR_ROLE_GRAD), 0);
    print_message("  small: B=8 peak %llu, B=2 x accum 4 peak %llu\n", (unsigned long long)big.p->peak,
                  (unsigned long long)acc.p->peak);
    assert_true(acc.p->peak < big.p->peak);
    built_free(&big);
    built_free(&acc);
}

static void mixed_precision_bytes(void **state)
{
    (void)state;
    vr_step_config s = adamw;
    s.precision = VR_PREC_BF16;
    s.freeze = "wpe";
    built b = plan_gpt("tiny", B_, 0, s, NULL);
    uint64_t n = (uint64_t)b.g->n_params, tr = (uint64_t)b.g->n_trainable;
    assert_true(tr < n);
    assert_int_equal(b.p->total[VR_ROLE_PARAM], 2 * n);
    assert_int_equal(b.p->total[VR_ROLE_MASTER], 4 * tr);
    assert_int_equal(b.p->total[VR_ROLE_GRAD], 2 * tr);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], 8 * tr);
    built_free(&b);
    s.precision = VR_PREC_FP16;
    s.freeze = NULL;
    s.optim = VR_OPTIM_SGD;
    b = plan_gpt("tiny", B_, 0, s, NULL);
    assert_int_equal(b.p->total[VR_ROLE_MASTER], 4 * (uint64_t)b.g->n_params);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], 0);
    built_free(&b);
}

/* Optimizer state in fewer bytes, from the tiny GPT's shapes by hand (L=2, C=64, V=Vp=256, maxT=64):
 * tensors of >= 4096 elements quantize (wte 16384, wpe 4096, per layer qkvw 12288, attprojw 4096, fcw and
 * fcprojw 16384: 118784 elements in 464 blocks of 256); the rest (norms and biases, 832 per layer + 128)
 * keep f32 state: 1792 elements. */
static void optim_state_bytes(void **state)
{
    (void)state;
    const uint64_t q = 118784, blocks = 464, small = 1792;
    vr_step_config s = adamw;
    s.optim_state = VR_OSTATE_8BIT;
    built b = plan_gpt("tiny", B_, 0, s, NULL);
    assert_int_equal((uint64_t)b.g->n_params, q + small);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], 2 * (q + 4 * blocks + 4 * small));
    assert_int_equal(b.p->count[VR_ROLE_OPTIM], 6); /* codes, absmax, f32 state for m and v */
    assert_int_equal(b.g->tensors[b.g->optim[0]].dtype, VR_U8);
    for (int i = 0; i < b.p->n_nodes; i++)
        assert_int_equal(vr_plan_live(b.p, i, VR_ROLE_OPTIM), b.p->total[VR_ROLE_OPTIM]);
    /* every parameter's views: codes + absmax when it quantizes, f32 otherwise */
    for (int t = 0; t < b.g->n_tensors; t++) {
        const vr_tensor *x = &b.g->tensors[t];
        if (x->view_of != b.g->params || x->param_offset < 0)
            continue;
        bool quant = vr_tensor_numel(x) >= 4096;
        for (int k = 0; k < 2; k++) {
            assert_int_equal(b.g->tensors[x->optim[k]].dtype, quant ? VR_U8 : VR_F32);
            if (quant)
                assert_int_equal(vr_tensor_numel(&b.g->tensors[x->absmax[k]]), (vr_tensor_numel(x) + 255) / 256);
            else
                assert_int_equal(x->absmax[k], -1);
        }
    }
    built_free(&b);
    s.optim = VR_OPTIM_MOMENTUM; /* one state tensor */
    b = plan_gpt("tiny", B_, 0, s, NULL);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], q + 4 * blocks + 4 * small);
    built_free(&b);
    s.optim = VR_OPTIM_ADAMW;
    s.optim_state = VR_OSTATE_BF16;
    s.precision = VR_PREC_BF16;
    s.no_master = true;
    b = plan_gpt("tiny", B_, 0, s, NULL);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], 2 * 2 * (q + small));
    assert_int_equal(b.p->total[VR_ROLE_MASTER], 0);
    assert_int_equal(b.p->total[VR_ROLE_PARAM], 2 * (q + small));
    for (int i = 0; i < b.p->n_nodes; i++) /* the updates write no master */
        if (b.g->nodes[i].phase == VR_PHASE_OPTIMIZER && b.g->nodes[i].op == VR_OP_ADAMW)
            assert_int_equal(b.g->nodes[i].out[1], -1);
    built_free(&b);
    /* a split master: 2 bytes a weight (u16), with any state format */
    s.no_master = false;
    s.split_master = true;
    b = plan_gpt("tiny", B_, 0, s, NULL);
    assert_int_equal(b.p->total[VR_ROLE_MASTER], 2 * (q + small));
    assert_int_equal(b.g->tensors[b.g->master].dtype, VR_U16);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], 2 * 2 * (q + small));
    built_free(&b);
    /* 8-bit state with frozen parameters: only the trainable ones have state */
    s = adamw;
    s.optim_state = VR_OSTATE_8BIT;
    s.freeze = "wte";
    b = plan_gpt("tiny", B_, 0, s, NULL);
    assert_int_equal(b.p->total[VR_ROLE_OPTIM], 2 * ((q - 16384) + 4 * (blocks - 64) + 4 * small));
    built_free(&b);
}

/* The state format needs a stateful optimizer; no master needs bf16: refused with the field named. */
static void optim_state_refused(void **state)
{
    (void)state;
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 1};
    int T = 0;
    assert_int_equal(vr_gpt_preset("tiny", &m.gpt, &T), VR_OK);
    m.T = T;
    vr_graph *g = NULL;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD, .optim_state = VR_OSTATE_8BIT};
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "optim_state"));
    s = (vr_step_config){.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_FP16, .no_master = true};
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "master"));
    assert_null(g);
    /* a split master: bf16 with a master only, and not offloaded */
    vr_step_config bad[] = {{.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_FP16, .split_master = true},
                            {.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_FP32, .split_master = true},
                            {.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_BF16, .split_master = true,
                             .no_master = true},
                            {.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_BF16, .split_master = true,
                             .offload = VR_OFFLOAD_OPTIM}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(vr_graph_build(&m, &bad[i], &g), VR_ERR_INVALID);
        assert_non_null(strstr(vr_last_error(), "vr_step_config.split_master"));
        assert_null(g);
    }
}

static void mlp_bytes(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD};
    built b = plan_mlp("mnist", VR_OP_RELU, 32, s, NULL);
    uint64_t B = 32;
    assert_int_equal(b.g->n_params, 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
    assert_int_equal(b.p->total[VR_ROLE_INPUT], 4 * B * 784 + 4 * B);
    /* saved: relu outputs (2 x B x 256) and the softmax probabilities (B x 10); the
     * features are an input, the pre-activations die at their relu */
    assert_int_equal(b.p->total[VR_ROLE_ACT], 4 * (2 * B * 256 + B * 10));
    built_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(persistent_roles),
        cmocka_unit_test(activations_by_policy),
        cmocka_unit_test(eval_saves_nothing),
        cmocka_unit_test(freezing_drops_grads_and_state),
        cmocka_unit_test(accumulation),
        cmocka_unit_test(mixed_precision_bytes),
        cmocka_unit_test(mlp_bytes),
        cmocka_unit_test(optim_state_bytes),
        cmocka_unit_test(optim_state_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
