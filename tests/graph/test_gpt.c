/* GPT builder: parameter count and llm.c layout, presets, and the shapes of every op. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "vram/graph.h"

static vr_graph *build(const char *preset, int B, int T, const vr_step_config *s)
{
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = B};
    int Tdef;
    assert_int_equal(vr_gpt_preset(preset, &m.gpt, &Tdef), VR_OK);
    m.T = T ? T : Tdef;
    vr_graph *g = NULL;
    vr_status st = vr_graph_build(&m, s, &g);
    if (st)
        fail_msg("build %s: %s", preset, vr_last_error());
    return g;
}

static void gpt2_param_count(void **state)
{
    (void)state;
    vr_gpt_config c;
    assert_int_equal(vr_gpt_preset("gpt2", &c, NULL), VR_OK);
    assert_int_equal(c.V, 50257);
    assert_int_equal(c.Vp, 50304);
    /* GPT-2 124M with its real vocabulary */
    vr_gpt_config u = c;
    u.Vp = u.V;
    assert_int_equal(vr_gpt_num_params(&u), 124439808);
    /* llm.c's padded layout (what its checkpoints hold) */
    assert_int_equal(vr_gpt_num_params(&c), 124475904);
    vr_step_config s = {.train = false};
    vr_graph *g = build("gpt2", 1, 64, &s);
    assert_int_equal(g->n_params, 124475904);
    assert_int_equal(vr_tensor_numel(&g->tensors[g->params]), 124475904);
    vr_graph_free(g);
    /* Vp = 0 means V rounded up to 128 */
    vr_gpt_config z = u;
    z.Vp = 0;
    assert_int_equal(vr_gpt_config_check(&z), VR_OK);
    assert_int_equal(z.Vp, 50304);
    assert_int_equal(vr_gpt_preset("gpt2-medium", &c, NULL), VR_OK);
    assert_int_equal(c.L, 24);
    assert_int_equal(c.C, 1024);
    assert_int_equal(c.NH, 16);
}

/* Parameter views tile the flat buffer in llm.c's order. */
static void llmc_layout(void **state)
{
    (void)state;
    vr_step_config s = {.train = false};
    vr_graph *g = build("tiny", 2, 0, &s);
    const vr_gpt_config *c = &g->model.gpt;
    int64_t L = c->L, C = c->C, Vp = c->Vp, maxT = c->maxT;
    int64_t base[16], size[16] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                                  L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    int64_t off = 0;
    for (int i = 0; i < 16; i++)
        base[i] = off, off += size[i];
    assert_int_equal(off, g->n_params);
    struct { const char *name; int k, layer; } want[] = {
        {"wte", 0, 0}, {"wpe", 1, 0}, {"h.0.ln_1.w", 2, 0}, {"h.1.ln_1.w", 2, 1}, {"h.1.ln_1.b", 3, 1},
        {"h.0.attn.c_attn.w", 4, 0}, {"h.1.attn.c_attn.w", 4, 1}, {"h.1.attn.c_attn.b", 5, 1},
        {"h.1.attn.c_proj.w", 6, 1}, {"h.0.attn.c_proj.b", 7, 0}, {"h.1.ln_2.w", 8, 1}, {"h.0.ln_2.b", 9, 0},
        {"h.1.mlp.c_fc.w", 10, 1}, {"h.1.mlp.c_fc.b", 11, 1}, {"h.1.mlp.c_proj.w", 12, 1},
        {"h.0.mlp.c_proj.b", 13, 0}, {"ln_f.w", 14, 0}, {"ln_f.b", 15, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int t = vr_graph_find(g, want[i].name);
        assert_true(t >= 0);
        int64_t per_layer = want[i].k >= 2 && want[i].k < 14 ? size[want[i].k] / L : 0;
        assert_int_equal(g->tensors[t].param_offset, base[want[i].k] + want[i].layer * per_layer);
        assert_int_equal(g->tensors[t].view_of, g->params);
        assert_int_equal(g->tensors[t].view_offset, g->tensors[t].param_offset);
    }
    /* every element of the buffer belongs to exactly one parameter */
    int64_t covered = 0;
    for (int64_t at = 0; at < g->n_params;) {
        int found = -1;
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].view_of == g->params && g->tensors[t].param_offset == at)
                found = t;
        assert_true(found >= 0);
        at += vr_tensor_numel(&g->tensors[found]);
        covered = at;
    }
    assert_int_equal(covered, g->n_params);
    /* init hints: residual projections scaled by 1/sqrt(2L) */
    int pw = vr_graph_find(g, "h.0.attn.c_proj.w"), fw = vr_graph_find(g, "h.0.mlp.c_fc.w");
    assert_int_equal(g->tensors[pw].init, VR_INIT_NORMAL);
    assert_true(g->tensors[pw].init_scale < g->tensors[fw].init_scale);
    assert_int_equal(g->tensors[vr_graph_find(g, "ln_f.w")].init, VR_INIT_ONES);
    vr_graph_free(g);
}

static bool same(const vr_graph *g, int a, int b)
{
    if (a < 0 || b < 0)
        return a == b;
    const vr_tensor *x = &g->tensors[a], *y = &g->tensors[b];
    return x->ndim == y->ndim && !memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim);
}

static void expect_shape(const vr_graph *g, int t, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t d[3] = {d0, d1, d2};
    assert_true(t >= 0);
    assert_int_equal(g->tensors[t].ndim, ndim);
    for (int i = 0; i < ndim; i++)
        assert_int_equal(g->tensors[t].shape[i], d[i]);
}

/* Checks every node's slots against its op's shape rules. */
static void check_shapes(const vr_graph *g)
{
    const vr_gpt_config *c = &g->model.gpt;
    int64_t B = g->model.B, T = g->model.T, C = c->C, NH = c->NH;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        const vr_node *f = n->src >= 0 ? &g->nodes[n->src] : NULL;
        switch (n->op) {
        case VR_OP_EMBEDDING:
            expect_shape(g, n->in[0], 2, B, T, 0);
            expect_shape(g, n->in[1], 2, c->Vp, C, 0);
            expect_shape(g, n->in[2], 2, c->maxT, C, 0);
            expect_shape(g, n->out[0], 3, B, T, C);
            break;
        case VR_OP_LAYERNORM:
            expect_shape(g, n->in[0], 3, B, T, C);
            expect_shape(g, n->in[1], 1, C, 0, 0);
            assert_true(same(g, n->out[0], n->in[0]));
            expect_shape(g, n->out[1], 2, B, T, 0);
            expect_shape(g, n->out[2], 2, B, T, 0);
            break;
        case VR_OP_MATMUL: {
            const vr_tensor *w = &g->tensors[n->in[1]];
            expect_shape(g, n->in[0], 3, B, T, w->shape[1]);
            expect_shape(g, n->out[0], 3, B, T, w->shape[0]);
            expect_shape(g, n->in[2], 1, w->shape[0], 0, 0);
            assert_true(w->shape[0] == C || w->shape[0] == 3 * C || w->shape[0] == 4 * C);
            break;
        }
        case VR_OP_ATTENTION:
            expect_shape(g, n->in[0], 3, B, T, 3 * C);
            expect_shape(g, n->out[0], 3, B, T, C);
            expect_shape(g, n->out[1], 3, B, NH, T);
            assert_int_equal(n->nh, NH);
            break;
        case VR_OP_GELU:
        case VR_OP_ADD:
            expect_shape(g, n->out[0], 3, B, T, n->op == VR_OP_GELU ? 4 * C : C);
            assert_true(same(g, n->out[0], n->in[0]));
            if (n->op == VR_OP_ADD)
                assert_true(same(g, n->in[1], n->in[0]));
            break;
        case VR_OP_CLASSIFIER:
            expect_shape(g, n->in[0], 3, B, T, C);
            expect_shape(g, n->out[0], 2, B, T, 0);
            assert_true(same(g, n->out[1], n->out[1] >= 0 ? n->in[0] : -1));
            assert_true(same(g, n->out[2], n->out[2] >= 0 ? n->in[1] : -1));
            assert_int_equal(n->vocab, c->V);
            expect_shape(g, n->scratch, 1, (B * T < 128 ? B * T : 128) * c->V, 0, 0);
            break;
        case VR_OP_LAYERNORM_BWD:
        case VR_OP_MATMUL_BWD:
            assert_true(same(g, n->in[0], f->out[0]));
            for (int k = 0; k < 3; k++)
                if (n->out[k] >= 0)
                    assert_true(same(g, n->out[k], f->in[k]));
            break;
        case VR_OP_ATTENTION_BWD:
            assert_true(same(g, n->in[0], f->out[0]));
            assert_true(same(g, n->out[0], f->in[0]));
            break;
        case VR_OP_GELU_BWD:
            assert_true(same(g, n->in[0], f->out[0]) && same(g, n->out[0], f->in[0]));
            break;
        case VR_OP_EMBEDDING_BWD:
            assert_true(same(g, n->in[0], f->out[0]));
            if (n->out[0] >= 0)
                assert_true(same(g, n->out[0], f->in[1]));
            if (n->out[1] >= 0)
                assert_true(same(g, n->out[1], f->in[2]));
            break;
        case VR_OP_ACC:
            assert_int_equal(vr_tensor_numel(&g->tensors[n->in[0]]), vr_tensor_numel(&g->tensors[n->out[0]]));
            break;
        case VR_OP_ADAMW:
        case VR_OP_ADAM:
        case VR_OP_SGD:
        case VR_OP_SGD_MOMENTUM:
            for (int k = 1; k < 4; k++)
                if (n->out[k] >= 0)
                    assert_true(same(g, n->out[k], n->out[0]));
            assert_true(same(g, n->in[0], n->out[0]));
            break;
        default:
            break;
        }
        if (n->phase == VR_PHASE_RECOMPUTE)
            for (int k = 0; k < VR_NODE_MAX_OUT; k++)
                assert_true(same(g, n->out[k], f->out[k]));
    }
}

static void shapes_of_every_op(void **state)
{
    (void)state;
    vr_recompute rc[] = {VR_RECOMPUTE_NONE, VR_RECOMPUTE_BLOCK, VR_RECOMPUTE_SELECTIVE, VR_RECOMPUTE_ACT};
    for (int r = 0; r < 4; r++) {
        vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = rc[r]};
        vr_graph *g = build("tiny", 3, 0, &s);
        assert_int_equal(g->n_forward, 1 + 10 * g->model.gpt.L + 2);
        check_shapes(g);
        vr_graph_free(g);
    }
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAM, .accum = 2};
    vr_graph *g = build("gpt2", 2, 128, &s);
    assert_int_equal(g->n_forward, 123);
    check_shapes(g);
    vr_graph_free(g);
}

static void bad_configs_name_the_flag(void **state)
{
    (void)state;
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 1, .T = 65};
    assert_int_equal(vr_gpt_preset("tiny", &m.gpt, NULL), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW};
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID); /* T > maxT */
    assert_null(g);
    assert_non_null(strstr(vr_last_error(), "vr_model_config.T: "));
    m.T = 8;
    m.gpt.NH = 3;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_gpt_config.NH: "));
    assert_int_equal(vr_gpt_preset("gpt5", &m.gpt, NULL), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_gpt_preset: "));
    assert_non_null(strstr(vr_last_error(), "gpt2-medium"));
}

/* Shapes whose products overflow 64 bits are refused before anything is built (were signed overflow). */
static void overflowing_shapes_are_refused(void **state)
{
    (void)state;
    vr_gpt_config c = {.L = 2000, .C = 2000000000, .NH = 1, .V = 2000000000, .maxT = 2000000000};
    assert_int_equal(vr_gpt_config_check(&c), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "overflows"));
    vr_gpt_config big = {.L = VR_GPT_MAX_LAYERS + 1, .C = 64, .NH = 4, .V = 256, .maxT = 64};
    assert_int_equal(vr_gpt_config_check(&big), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_gpt_config.L: "));
    vr_gpt_config v = {.L = 1, .C = 64, .NH = 4, .V = 2147483647, .maxT = 64};
    assert_int_equal(vr_gpt_config_check(&v), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_gpt_config.V: "));
    /* activations: B * T * C overflows */
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 2000000000, .T = 64};
    assert_int_equal(vr_gpt_preset("tiny", &m.gpt, NULL), VR_OK);
    m.gpt.maxT = 2000000000;
    m.T = 2000000000;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW};
    vr_graph *g = NULL;
    assert_int_not_equal(vr_graph_build(&m, &s, &g), VR_OK);
    assert_null(g);
    if (!strstr(vr_last_error(), "overflows"))
        fail_msg("activations: %s", vr_last_error());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_param_count),
        cmocka_unit_test(llmc_layout),
        cmocka_unit_test(shapes_of_every_op),
        cmocka_unit_test(bad_configs_name_the_flag),
        cmocka_unit_test(overflowing_shapes_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
