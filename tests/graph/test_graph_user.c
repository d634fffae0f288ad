/* A model built tensor by tensor through the public calls (as examples/mlp_classifier.c does): inputs
 * declared with vr_graph_set_inputs, and what the op set does not cover refused when the graph is built,
 * naming the node, instead of running something else. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram/graph.h"

enum { B = 4, D = 3, K = 2 };

/* features (B,D), labels (B), one linear layer's w (K,D) and b (K) in a parameter buffer; logits (B,K). */
static vr_graph *linear_model(int *x, int *y, int *logits)
{
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    assert_non_null(g);
    vr_graph_param_buffer(g, K * D + K);
    *x = vr_graph_tensor(g, "features", VR_F32, VR_ROLE_INPUT, 2, (int64_t[]){B, D});
    *y = vr_graph_tensor(g, "labels", VR_I32, VR_ROLE_INPUT, 1, (int64_t[]){B});
    int w = vr_graph_param(g, "w", 2, (int64_t[]){K, D}, 0, VR_INIT_UNIFORM, 0.5f);
    int b = vr_graph_param(g, "b", 1, (int64_t[]){K}, K * D, VR_INIT_ZEROS, 0);
    *logits = vr_graph_linear(g, "logits", *x, w, b);
    assert_int_equal(vr_graph_status(g), VR_OK);
    return g;
}

static void inputs_are_declared_and_checked(void **state)
{
    (void)state;
    int x, y, logits;
    vr_graph *g = linear_model(&x, &y, &logits);
    assert_int_equal(g->tokens, -1); /* nothing declared yet: vr_exec_batch would fill nothing */
    assert_int_equal(vr_graph_set_inputs(g, x, y), VR_OK);
    assert_int_equal(g->tokens, x);
    assert_int_equal(g->targets, y);
    int losses = vr_graph_softmax_xent(g, "losses", logits, y, NULL);
    assert_int_equal(vr_graph_set_loss(g, losses), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD};
    assert_int_equal(vr_graph_backward(g, &s), VR_OK);
    assert_int_equal(vr_graph_count_phase(g, VR_PHASE_OPTIMIZER), 2); /* w and b */
    int dw = g->tensors[vr_graph_find(g, "w")].grad;
    assert_true(dw >= 0);
    vr_graph_free(g);

    g = linear_model(&x, &y, &logits); /* a parameter is not an input */
    assert_int_equal(vr_graph_set_inputs(g, vr_graph_find(g, "w"), y), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "inputs"));
    vr_graph_free(g);
    g = linear_model(&x, &y, &logits); /* targets are class ids: i32 */
    assert_int_equal(vr_graph_set_inputs(g, y, x), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "targets"));
    assert_int_equal(vr_graph_status(g), VR_ERR_INVALID); /* sticky, as every builder error */
    vr_graph_free(g);
    g = linear_model(&x, &y, &logits);
    assert_int_equal(vr_graph_set_inputs(g, x, 99), VR_ERR_INVALID);
    vr_graph_free(g);
}

static void an_op_outside_the_enum_is_refused(void **state)
{
    (void)state;
    int x, y, logits;
    vr_graph *g = linear_model(&x, &y, &logits);
    assert_int_equal(vr_graph_node(g, VR_OP_COUNT, VR_PHASE_FORWARD, "mystery"), -1);
    assert_int_equal(vr_graph_status(g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "mystery"));
    vr_graph_free(g);
    g = linear_model(&x, &y, &logits);
    assert_int_equal(vr_graph_node(g, (vr_op)-1, VR_PHASE_FORWARD, "negative"), -1);
    assert_int_equal(vr_graph_status(g), VR_ERR_INVALID);
    vr_graph_free(g);
}

/* A forward node of an op autodiff has no rule for (here acc, a copy) between the model and the loss:
 * vr_graph_backward names it rather than emitting some other op's backward. */
static void a_forward_op_without_backward_is_refused(void **state)
{
    (void)state;
    int x, y, logits;
    vr_graph *g = linear_model(&x, &y, &logits);
    assert_int_equal(vr_graph_set_inputs(g, x, y), VR_OK);
    int copy = vr_graph_tensor(g, "copied", VR_F32, VR_ROLE_ACT, 2, (int64_t[]){B, K});
    int n = vr_graph_node(g, VR_OP_ACC, VR_PHASE_FORWARD, "my_copy");
    assert_true(n >= 0 && copy >= 0);
    g->nodes[n].in[0] = logits;
    g->nodes[n].out[0] = copy;
    g->tensors[copy].producer = n;
    int losses = vr_graph_softmax_xent(g, "losses", copy, y, NULL);
    assert_int_equal(vr_graph_set_loss(g, losses), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD};
    assert_int_equal(vr_graph_backward(g, &s), VR_ERR_UNSUPPORTED);
    assert_non_null(strstr(vr_last_error(), "my_copy"));
    assert_non_null(strstr(vr_last_error(), "acc"));
    vr_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inputs_are_declared_and_checked),
        cmocka_unit_test(an_op_outside_the_enum_is_refused),
        cmocka_unit_test(a_forward_op_without_backward_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
