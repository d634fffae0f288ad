/* Graph ops of the Llama family: a tiny block built by hand (rmsnorm -> qkv linear -> rope -> GQA
 * attention -> rmsnorm -> gate/up linear -> swiglu -> classifier) differentiates into the right
 * backward nodes carrying the node parameters (eps, kv heads, rope), and bad shapes fail with a
 * message naming the node. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram/graph.h"

static const vr_node *only_op(const vr_graph *g, vr_op op)
{
    const vr_node *found = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op) {
            if (found)
                fail_msg("more than one %s node", vr_op_name(op));
            found = &g->nodes[i];
        }
    if (!found)
        fail_msg("no %s node", vr_op_name(op));
    return found;
}

static void llama_block_backward(void **state)
{
    (void)state;
    // B 2, T 5, C 16, NH 4, NKV 2, hd 8: qkv width (4 + 2*2) * 8 = 64; I 24; V 10
    int64_t B = 2, T = 5, C = 16, W = 64, I = 24, V = 10;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    int64_t off = 0;
    vr_graph_param_buffer(g, C + W * C + C + 2 * I * C + V * I);
    int n1 = vr_graph_param(g, "n1", 1, (int64_t[]){C}, off, VR_INIT_ONES, 0), wqkv;
    off += C;
    wqkv = vr_graph_param(g, "wqkv", 2, (int64_t[]){W, C}, off, VR_INIT_NORMAL, 0.02f);
    off += W * C;
    int n2 = vr_graph_param(g, "n2", 1, (int64_t[]){C}, off, VR_INIT_ONES, 0);
    off += C;
    int wgu = vr_graph_param(g, "wgu", 2, (int64_t[]){2 * I, C}, off, VR_INIT_NORMAL, 0.02f);
    off += 2 * I * C;
    int wte = vr_graph_param(g, "wte", 2, (int64_t[]){V, I}, off, VR_INIT_NORMAL, 0.02f);
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 3, (int64_t[]){B, T, C});
    int h = vr_graph_rmsnorm(g, "ln1", x, n1, 1e-6f, NULL);
    int qkv = vr_graph_linear(g, "qkv", h, wqkv, -1);
    vr_rope_config rope = {500000.0, 1, 32.0, 1.0, 4.0, 8192.0};
    int qr = vr_graph_rope(g, "rope", qkv, 4, 2, &rope);
    int a = vr_graph_attention_gqa(g, "attn", qr, 4, 2, NULL);
    assert_int_equal(g->tensors[a].shape[2], 32); // NH * hd, not C
    // (B,T,NH*hd) = (2,5,32) seen as (2,10,16) so that the C-wide norm applies (no o_proj here)
    int a2 = vr_graph_reshape(g, "attn.view", a, 3, (int64_t[]){B, T * 2, C});
    int h2 = vr_graph_rmsnorm(g, "ln2", a2, n2, 1e-6f, NULL);
    int gu = vr_graph_linear(g, "gate_up", h2, wgu, -1);
    int m = vr_graph_swiglu(g, "swiglu", gu);
    assert_int_equal(g->tensors[m].shape[2], I);
    int lab2 = vr_graph_tensor(g, "labels", VR_I32, VR_ROLE_INPUT, 2, (int64_t[]){B, T * 2});
    int loss = vr_graph_classifier(g, "cls", m, wte, lab2, V);
    if (loss < 0)
        fail_msg("build: %s", vr_last_error());
    assert_int_equal(vr_graph_set_loss(g, loss), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW};
    if (vr_graph_backward(g, &s))
        fail_msg("backward: %s", vr_last_error());
    const vr_node *rb = only_op(g, VR_OP_ROPE_BWD), *ab = only_op(g, VR_OP_ATTENTION_BWD);
    assert_int_equal(rb->nh, 4);
    assert_int_equal(rb->nkv, 2);
    assert_true(rb->rope.theta == 500000.0 && rb->rope.scaling == 1 && rb->rope.factor == 32.0);
    assert_int_equal(ab->nkv, 2);
    assert_true(only_op(g, VR_OP_SWIGLU_BWD)->in[1] == gu); // reads the forward's input
    int nrms = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == VR_OP_RMSNORM_BWD) {
            nrms++;
            assert_true(g->nodes[i].eps == 1e-6f);
            assert_true(g->nodes[i].out[1] >= 0); // dw of the norm weight
        }
    assert_int_equal(nrms, 2);
    assert_true(g->tensors[n1].grad >= 0 && g->tensors[wqkv].grad >= 0 && g->tensors[wgu].grad >= 0);
    vr_graph_free(g);
}

static void bad_shapes_fail(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    vr_graph_param_buffer(g, 64);
    int w = vr_graph_param(g, "w", 1, (int64_t[]){7}, 0, VR_INIT_ONES, 0);
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 3, (int64_t[]){2, 3, 60});
    assert_int_equal(vr_graph_rmsnorm(g, "norm", x, w, 1e-5f, NULL), -1);
    assert_non_null(strstr(vr_last_error(), "norm: rmsnorm wants"));
    vr_graph_free(g);
    g = vr_graph_new(VR_PREC_FP32);
    x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 3, (int64_t[]){2, 3, 60});
    assert_int_equal(vr_graph_attention_gqa(g, "att", x, 4, 3, NULL), -1); // 4 % 3 != 0
    assert_non_null(strstr(vr_last_error(), "att: attention wants"));
    vr_graph_free(g);
    g = vr_graph_new(VR_PREC_FP32);
    x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 3, (int64_t[]){2, 3, 60}); // hd = 60/10 = 6
    vr_rope_config r = {10000.0, 1, 8.0, 4.0, 1.0, 8192.0};                      // high <= low
    assert_int_equal(vr_graph_rope(g, "rope", x, 6, 2, &r), -1);
    assert_non_null(strstr(vr_last_error(), "rope: llama3 rope scaling"));
    vr_graph_free(g);
    g = vr_graph_new(VR_PREC_FP32);
    x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 2, (int64_t[]){2, 7});
    assert_int_equal(vr_graph_swiglu(g, "sw", x), -1);
    assert_non_null(strstr(vr_last_error(), "sw: swiglu wants"));
    vr_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_block_backward),
        cmocka_unit_test(bad_shapes_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
