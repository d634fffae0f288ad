/* graph core: dtypes, tensors, views and reshape, shape errors, globs, enum parsers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram/graph.h"

static void dtypes_and_names(void **state)
{
    (void)state;
    assert_int_equal(vr_dtype_size(VR_F32), 4);
    assert_int_equal(vr_dtype_size(VR_BF16), 2);
    assert_int_equal(vr_dtype_size(VR_F16), 2);
    assert_int_equal(vr_dtype_size(VR_I32), 4);
    assert_string_equal(vr_dtype_name(VR_BF16), "bf16");
    assert_string_equal(vr_role_name(VR_ROLE_OPTIM), "optim");
    assert_string_equal(vr_op_name(VR_OP_MATMUL_BWD), "matmul_bwd");
    assert_string_equal(vr_op_get_info(VR_OP_CLASSIFIER)->kernel, "vr_cpu_classifier");
    assert_null(vr_op_get_info(VR_OP_RESHAPE)->kernel);
    for (int op = 0; op < VR_OP_COUNT; op++) { /* every op has a name and at least one slot of each kind, but
                                                * the collectives, which change their input in place */
        bool collective = op == VR_OP_ALLREDUCE || op == VR_OP_REDUCE || op == VR_OP_BROADCAST;
        assert_non_null(vr_op_get_info((vr_op)op)->name);
        assert_non_null(vr_op_get_info((vr_op)op)->in[0]);
        if (collective)
            assert_null(vr_op_get_info((vr_op)op)->out[0]);
        else
            assert_non_null(vr_op_get_info((vr_op)op)->out[0]);
    }
}

static void views_share_storage(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    int64_t s[2] = {4, 6};
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_ACT, 2, s);
    int64_t s2[1] = {12};
    int v = vr_graph_view(g, x, "x.half", 1, s2, 12);
    assert_true(v >= 0);
    assert_int_equal(g->tensors[v].view_of, x);
    assert_int_equal(g->tensors[v].view_offset, 12);
    assert_int_equal(vr_graph_storage(g, v), x);
    int vv = vr_graph_view(g, v, "x.q", 1, (int64_t[]){6}, 6); /* a view of a view: offsets add up */
    assert_int_equal(g->tensors[vv].view_of, x);
    assert_int_equal(g->tensors[vv].view_offset, 18);
    assert_int_equal(vr_graph_status(g), VR_OK);
    assert_int_equal(vr_graph_view(g, x, "x.bad", 1, s2, 13), -1); /* past the end */
    assert_int_equal(vr_graph_status(g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "x.bad"));
    vr_graph_free(g);
}

static void reshape_is_a_view_node(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 3, (int64_t[]){2, 3, 4});
    int y = vr_graph_reshape(g, "y", x, 2, (int64_t[]){6, 4});
    assert_true(y >= 0);
    assert_int_equal(g->n_nodes, 1);
    assert_int_equal(g->nodes[0].op, VR_OP_RESHAPE);
    assert_int_equal(g->nodes[0].out[0], y);
    assert_int_equal(vr_graph_storage(g, y), x);
    assert_int_equal(vr_tensor_bytes(&g->tensors[y]), 96);
    assert_int_equal(vr_graph_reshape(g, "z", x, 2, (int64_t[]){5, 5}), -1);
    assert_non_null(strstr(vr_last_error(), "z"));
    vr_graph_free(g);
}

static void shape_errors_name_the_node(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 2, (int64_t[]){8, 16});
    int w = vr_graph_tensor(g, "w", VR_F32, VR_ROLE_PARAM, 2, (int64_t[]){32, 15});
    assert_int_equal(vr_graph_linear(g, "fc_bad", x, w, -1), -1);
    assert_int_equal(vr_graph_status(g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "fc_bad"));
    assert_non_null(strstr(vr_last_error(), "(32, 15)"));
    /* sticky: later builders do nothing */
    int before = g->n_tensors;
    assert_int_equal(vr_graph_gelu(g, "g", x), -1);
    assert_int_equal(g->n_tensors, before);
    vr_graph_free(g);

    g = vr_graph_new(VR_PREC_FP32);
    int qkv = vr_graph_tensor(g, "qkv", VR_F32, VR_ROLE_ACT, 3, (int64_t[]){2, 8, 96});
    assert_int_equal(vr_graph_attention(g, "att", qkv, 5, NULL), -1);
    assert_non_null(strstr(vr_last_error(), "att"));
    vr_graph_free(g);
}

static void op_shapes(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_BF16);
    int x = vr_graph_tensor(g, "x", VR_BF16, VR_ROLE_ACT, 3, (int64_t[]){2, 8, 64});
    int w = vr_graph_tensor(g, "w", VR_BF16, VR_ROLE_PARAM, 2, (int64_t[]){192, 64});
    int b = vr_graph_tensor(g, "b", VR_BF16, VR_ROLE_PARAM, 1, (int64_t[]){192});
    int q = vr_graph_linear(g, "q", x, w, b);
    char sh[64];
    assert_string_equal(vr_tensor_shape_str(&g->tensors[q], sh, sizeof sh), "(2, 8, 192)");
    assert_int_equal(g->tensors[q].dtype, VR_BF16);
    int lse;
    int y = vr_graph_attention(g, "y", q, 4, &lse);
    assert_string_equal(vr_tensor_shape_str(&g->tensors[y], sh, sizeof sh), "(2, 8, 64)");
    assert_string_equal(vr_tensor_shape_str(&g->tensors[lse], sh, sizeof sh), "(2, 4, 8)");
    assert_int_equal(g->tensors[lse].dtype, VR_F32); /* statistics stay fp32 */
    int lw = vr_graph_tensor(g, "lw", VR_BF16, VR_ROLE_PARAM, 1, (int64_t[]){64});
    int mean, rstd;
    int ln = vr_graph_layernorm(g, "ln", y, lw, lw, &mean, &rstd);
    assert_string_equal(vr_tensor_shape_str(&g->tensors[ln], sh, sizeof sh), "(2, 8, 64)");
    assert_string_equal(vr_tensor_shape_str(&g->tensors[mean], sh, sizeof sh), "(2, 8)");
    assert_int_equal(g->tensors[rstd].dtype, VR_F32);
    assert_int_equal(vr_graph_status(g), VR_OK);
    vr_graph_free(g);
}

static void globs(void **state)
{
    (void)state;
    assert_true(vr_glob_match("h.*.attn*", "h.3.attn.c_attn.w"));
    assert_true(vr_glob_match("h.*.attn*", "h.11.attn.c_proj.b"));
    assert_false(vr_glob_match("h.*.attn*", "h.3.mlp.c_fc.w"));
    assert_true(vr_glob_match("wte", "wte"));
    assert_false(vr_glob_match("wte", "wpe"));
    assert_true(vr_glob_match("w?e", "wpe"));
    assert_true(vr_glob_match("*", "anything"));
    assert_true(vr_glob_match("*.b", "fc0.b"));
    assert_false(vr_glob_match("*.b", "fc0.w"));
}

static void enum_parsers_name_the_flag(void **state)
{
    (void)state;
    vr_optim o;
    vr_recompute r;
    vr_precision p;
    assert_int_equal(vr_optim_parse("adamw", "--optim", &o), VR_OK);
    assert_int_equal(o, VR_OPTIM_ADAMW);
    assert_int_equal(vr_recompute_parse("selective", "--recompute", &r), VR_OK);
    assert_int_equal(r, VR_RECOMPUTE_SELECTIVE);
    assert_int_equal(vr_recompute_parse("act", "--recompute", &r), VR_OK);
    assert_int_equal(r, VR_RECOMPUTE_ACT);
    assert_int_equal(vr_precision_parse("bf16", "--precision", &p), VR_OK);
    assert_int_equal(p, VR_PREC_BF16);
    assert_int_equal(vr_optim_parse("lion", "--optim", &o), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "--optim"));
    assert_non_null(strstr(vr_last_error(), "adamw"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dtypes_and_names),
        cmocka_unit_test(views_share_storage),
        cmocka_unit_test(reshape_is_a_view_node),
        cmocka_unit_test(shape_errors_name_the_node),
        cmocka_unit_test(op_shapes),
        cmocka_unit_test(globs),
        cmocka_unit_test(enum_parsers_name_the_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
