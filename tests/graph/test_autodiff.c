/* autodiff: gradients for trainable parameters only, acc flags, pruning, the
 * no-grad graph, recomputation policies, accumulation, precision, optimizers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "graph/graph_internal.h"
#include "kernels/scratch.h"
#include "vram/graph.h"

static vr_graph *gpt(const char *preset, int B, vr_step_config s)
{
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = B};
    assert_int_equal(vr_gpt_preset(preset, &m.gpt, &m.T), VR_OK);
    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g))
        fail_msg("build: %s", vr_last_error());
    return g;
}

static vr_graph *mlp(const char *preset, vr_op act, int B, vr_step_config s)
{
    vr_model_config m = {.kind = VR_MODEL_MLP, .B = B};
    assert_int_equal(vr_mlp_preset(preset, &m.mlp), VR_OK);
    m.mlp.act = act;
    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g))
        fail_msg("build: %s", vr_last_error());
    return g;
}

static bool is_param_view(const vr_graph *g, int t) { return g->tensors[t].view_of == g->params && t != g->params; }

static bool born_persistent(const vr_graph *g, int s)
{
    vr_role r = g->tensors[s].role;
    return r == VR_ROLE_PARAM || r == VR_ROLE_MASTER || r == VR_ROLE_OPTIM || r == VR_ROLE_INPUT;
}

/* Every tensor is written before it is read; acc = add only into something
 * written before; no backward or recompute node writes what it reads. */
static void check_dataflow(const vr_graph *g)
{
    bool *written = calloc((size_t)g->n_tensors, 1);
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        for (int k = 0; k < VR_NODE_MAX_IN; k++) {
            int s = vr_graph_storage(g, n->in[k]);
            if (s >= 0 && !born_persistent(g, s) && !written[s])
                fail_msg("node %d (%s) reads %s before anything writes it", i, n->name, g->tensors[n->in[k]].name);
        }
        for (int k = 0; k < VR_NODE_MAX_OUT; k++) {
            int s = vr_graph_storage(g, n->out[k]);
            if (s < 0)
                continue;
            if (n->phase != VR_PHASE_OPTIMIZER || n->op == VR_OP_SUMSQ) {
                if (n->acc[k] == VR_ACC_ADD && !written[s])
                    fail_msg("node %d (%s) adds into %s, never written before", i, n->name, g->tensors[s].name);
                if (n->acc[k] != VR_ACC_ADD && written[s] && n->op != VR_OP_RESHAPE)
                    fail_msg("node %d (%s) overwrites %s, written before", i, n->name, g->tensors[s].name);
            }
            if (n->phase == VR_PHASE_BACKWARD || n->phase == VR_PHASE_RECOMPUTE)
                for (int j = 0; j < VR_NODE_MAX_IN; j++)
                    if (n->in[j] >= 0 && vr_graph_storage(g, n->in[j]) == s && n->op != VR_OP_RESHAPE)
                        fail_msg("node %d (%s) writes %s, which it reads", i, n->name, g->tensors[s].name);
            written[s] = true;
        }
    }
    free(written);
}

static int count_op(const vr_graph *g, vr_op op)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += g->nodes[i].op == op;
    return c;
}

static void grads_for_trainable_params_only(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .freeze = "h.*.attn*"};
    vr_graph *g = gpt("tiny", 2, s);
    int trainable = 0, frozen = 0;
    int64_t n_trainable = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        if (!is_param_view(g, t))
            continue;
        const vr_tensor *p = &g->tensors[t];
        bool attn = strstr(p->name, ".attn.") != NULL;
        assert_int_equal(p->frozen, attn);
        if (p->frozen) {
            frozen++;
            assert_int_equal(p->grad, -1);
            assert_int_equal(p->optim[0], -1);
            assert_int_equal(p->optim[1], -1);
            continue;
        }
        trainable++;
        n_trainable += vr_tensor_numel(p);
        assert_true(p->grad >= 0);
        const vr_tensor *gr = &g->tensors[p->grad];
        assert_int_equal(gr->role, VR_ROLE_GRAD);
        assert_int_equal(gr->dtype, p->dtype);
        assert_int_equal(vr_tensor_numel(gr), vr_tensor_numel(p));
        assert_true(p->optim[0] >= 0 && p->optim[1] >= 0);
        int updates = 0;
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == VR_OP_ADAMW && g->nodes[i].out[0] == t) {
                updates++;
                assert_int_equal(g->nodes[i].in[0], p->grad);
                assert_int_equal(g->nodes[i].out[2], p->optim[0]);
            }
        assert_int_equal(updates, 1);
    }
    assert_int_equal(frozen, 4 * g->model.gpt.L);
    assert_int_equal(trainable, 2 + 8 * g->model.gpt.L + 2);
    assert_int_equal(n_trainable, g->n_trainable);
    assert_int_equal(vr_tensor_numel(&g->tensors[g->optim[0]]), n_trainable);
    assert_int_equal(count_op(g, VR_OP_ADAMW), trainable);
    check_dataflow(g);
    vr_graph_free(g);
}

static void acc_flags_and_shared_buffers(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW};
    vr_graph *g = gpt("tiny", 2, s);
    check_dataflow(g);
    int wte = vr_graph_find(g, "wte"), dwte = g->tensors[wte].grad;
    const vr_node *cls = &g->nodes[g->loss_node];
    assert_int_equal(cls->out[2], dwte);
    assert_int_equal(cls->acc[2], VR_ACC_OVERWRITE);
    assert_true(cls->out[1] >= 0); /* dx of lnf */
    assert_true(cls->loss_scale == 1.0f / (float)(2 * g->model.T));
    /* the embedding's backward is two kernel calls: dwte adds to the classifier's
     * (tied head), dwpe is written for the first time */
    int emb = -1, emb_pe = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == VR_OP_EMBEDDING_BWD) {
            assert_true(g->nodes[i].out[0] < 0 || g->nodes[i].out[1] < 0);
            if (g->nodes[i].out[0] >= 0)
                emb = i;
            else
                emb_pe = i;
        }
    assert_true(emb > g->loss_node && emb_pe > g->loss_node);
    assert_int_equal(g->nodes[emb].out[0], dwte);
    assert_int_equal(g->nodes[emb].acc[0], VR_ACC_ADD);
    assert_int_equal(g->nodes[emb_pe].out[1], g->tensors[vr_graph_find(g, "wpe")].grad);
    assert_int_equal(g->nodes[emb_pe].acc[1], VR_ACC_OVERWRITE);
    /* the residual stream's gradient is one buffer: written by lnf's backward,
     * added to by every block's two layernorm backwards, read by the embedding's */
    int dres = g->nodes[emb].in[0];
    int adds = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == VR_OP_LAYERNORM_BWD && g->nodes[i].out[0] == dres)
            adds += g->nodes[i].acc[0] == VR_ACC_ADD;
    assert_int_equal(adds, 2 * g->model.gpt.L);
    assert_int_equal(count_op(g, VR_OP_ACC), 0); /* no copies needed in a GPT */
    vr_graph_free(g);
}

static void frozen_parts_are_not_differentiated(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .freeze = "wte,wpe"};
    vr_graph *g = gpt("tiny", 2, s);
    assert_int_equal(count_op(g, VR_OP_EMBEDDING_BWD), 0);
    assert_int_equal(g->nodes[g->loss_node].out[2], -1);
    check_dataflow(g);
    vr_graph_free(g);

    s.freeze = "wte,wpe,h.0.*";
    g = gpt("tiny", 2, s);
    for (int i = g->n_forward; i < g->n_nodes; i++)
        assert_int_not_equal(g->nodes[i].layer, 0);
    for (int i = g->n_forward; i < g->n_nodes; i++) /* block 1's input needs no gradient */
        if (g->nodes[i].op == VR_OP_LAYERNORM_BWD && g->nodes[i].layer == 1 &&
            strstr(g->nodes[i].name, "ln1"))
            assert_int_equal(g->nodes[i].out[0], -1);
    check_dataflow(g);
    vr_graph_free(g);

    /* the kept bias's gradient alone: the CPU kernel needs no scratch for it, the CUDA one its partial sums */
    s.freeze = "h.*.ln_1.w";
    for (int k = VR_KERNELS_CPU; k <= VR_KERNELS_CUDA; k++) {
        s.kernels = (vr_kernels)k;
        g = gpt("tiny", 2, s);
        int seen = 0;
        for (int i = g->n_forward; i < g->n_nodes; i++)
            if (g->nodes[i].op == VR_OP_LAYERNORM_BWD && strstr(g->nodes[i].name, "ln1")) {
                seen++;
                assert_int_equal(g->nodes[i].out[1], -1);
                assert_true(g->nodes[i].out[2] >= 0);
                int sc = g->nodes[i].scratch;
                if (k == VR_KERNELS_CPU) {
                    assert_int_equal(sc, -1);
                } else {
                    int64_t N = (int64_t)g->model.B * g->model.T, C = g->model.gpt.C;
                    assert_true(sc >= 0);
                    assert_int_equal(vr_tensor_bytes(&g->tensors[sc]), vr_scratch_cuda_layernorm_bwd(N, C));
                }
            }
        assert_int_equal(seen, g->model.gpt.L);
        check_dataflow(g);
        vr_graph_free(g);
    }
    s.kernels = VR_KERNELS_CPU;

    s.freeze = "nothing.matches";
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 1};
    assert_int_equal(vr_gpt_preset("tiny", &m.gpt, &m.T), VR_OK);
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_step_config.freeze: "));
}

static void no_grad_graph_saves_nothing(void **state)
{
    (void)state;
    vr_step_config s = {.train = false};
    vr_graph *g = gpt("tiny", 2, s);
    assert_int_equal(g->n_nodes, g->n_forward);
    assert_int_equal(vr_graph_count_phase(g, VR_PHASE_BACKWARD), 0);
    assert_int_equal(vr_graph_count_phase(g, VR_PHASE_OPTIMIZER), 0);
    assert_int_equal(g->nodes[g->loss_node].out[1], -1);
    assert_int_equal(g->nodes[g->loss_node].out[2], -1);
    for (int t = 0; t < g->n_tensors; t++) {
        assert_false(vr_graph_is_saved(g, t));
        assert_int_equal(g->tensors[t].grad, -1);
    }
    check_dataflow(g);
    vr_graph_free(g);
    /* the training graph does save activations */
    s.train = true;
    s.optim = VR_OPTIM_SGD;
    g = gpt("tiny", 2, s);
    assert_true(vr_graph_is_saved(g, vr_graph_find(g, "h.0.qkv")));
    assert_false(vr_graph_is_saved(g, vr_graph_find(g, "h.0.attproj"))); /* add's backward needs nothing */
    assert_false(vr_graph_is_saved(g, vr_graph_find(g, "lnf"))); /* fused classifier: done in forward */
    vr_graph_free(g);
}

/* In block mode the backward of block l reads no forward tensor made inside block l. */
static void block_recompute(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = VR_RECOMPUTE_BLOCK};
    vr_graph *g = gpt("small", 2, s);
    int L = g->model.gpt.L;
    check_dataflow(g);
    for (int l = 0; l < L; l++) {
        int first_bwd = -1, n_re = 0, last_re = -1;
        for (int i = g->n_forward; i < g->n_nodes; i++) {
            const vr_node *n = &g->nodes[i];
            if (n->layer != l)
                continue;
            if (n->phase == VR_PHASE_RECOMPUTE) {
                n_re++;
                last_re = i;
                assert_int_equal(first_bwd, -1); /* all before the block's backward */
            } else if (n->phase == VR_PHASE_BACKWARD && first_bwd < 0) {
                first_bwd = i;
            }
            if (n->phase != VR_PHASE_BACKWARD)
                continue;
            for (int k = 0; k < VR_NODE_MAX_IN; k++) {
                int t = n->in[k];
                if (t < 0 || g->tensors[t].producer < 0)
                    continue;
                const vr_node *p = &g->nodes[g->tensors[t].producer];
                if (p->phase == VR_PHASE_FORWARD && p->layer == l)
                    fail_msg("%s reads %s, stored from block %d", n->name, g->tensors[t].name, l);
            }
        }
        assert_int_equal(n_re, 8); /* the block's 10 forward nodes less fcproj and the last add (no backward reads their outputs) */
        assert_int_equal(last_re + 1, first_bwd);
    }
    vr_graph_free(g);
}

/* The recompute nodes of selective (ln: layernorm too) or act (gelu only): of those ops alone, and no backward node
 * reads a stored output of them. Returns how many; *ln_read: the backward's reads of stored layernorm outputs. */
static int recomputed(const vr_graph *g, bool ln, int *ln_read)
{
    int re = 0;
    *ln_read = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->phase == VR_PHASE_RECOMPUTE) {
            re++;
            assert_true(n->op == VR_OP_GELU || (ln && n->op == VR_OP_LAYERNORM));
        }
        if (n->phase != VR_PHASE_BACKWARD)
            continue;
        for (int k = 0; k < VR_NODE_MAX_IN; k++) {
            int t = n->in[k];
            if (t < 0 || g->tensors[t].producer < 0)
                continue;
            const vr_node *p = &g->nodes[g->tensors[t].producer];
            bool stored = p->phase == VR_PHASE_FORWARD && p->out[0] == t;
            if (stored && (p->op == VR_OP_GELU || (ln && p->op == VR_OP_LAYERNORM)))
                fail_msg("%s reads the stored %s", n->name, g->tensors[t].name);
            *ln_read += stored && p->op == VR_OP_LAYERNORM;
        }
    }
    return re;
}

static void selective_recompute(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = VR_RECOMPUTE_SELECTIVE};
    vr_graph *g = gpt("small", 2, s);
    check_dataflow(g);
    int ln_read;
    assert_int_equal(recomputed(g, true, &ln_read), 3 * g->model.gpt.L); /* ln1, ln2, gelu per block (not lnf's) */
    vr_graph_free(g);
}

/* act: the GELU outputs alone are re-run (one per block); the layernorms' outputs stay stored. */
static void act_recompute(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = VR_RECOMPUTE_ACT};
    vr_graph *g = gpt("small", 2, s);
    check_dataflow(g);
    int ln_read;
    assert_int_equal(recomputed(g, false, &ln_read), g->model.gpt.L);
    assert_int_equal(ln_read, 2 * g->model.gpt.L); /* qkv's and fch's matmul_bwd read ln1, ln2 as stored */
    vr_graph_free(g);
}

/* recompute_layers N: each policy's recompute nodes in blocks 0..N-1 only, as many per block as without the limit,
 * the other blocks' saved tensors read as stored; N over the model's blocks, negative, or without a policy: refused. */
static void recompute_in_first_blocks(void **state)
{
    (void)state;
    const vr_recompute pol[3] = {VR_RECOMPUTE_ACT, VR_RECOMPUTE_SELECTIVE, VR_RECOMPUTE_BLOCK};
    for (int p = 0; p < 3; p++) {
        vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = pol[p]};
        vr_graph *all = gpt("small", 2, s);
        int L = all->model.gpt.L, per_block[16] = {0};
        assert_true(L >= 2 && L <= 16);
        for (int i = 0; i < all->n_nodes; i++)
            if (all->nodes[i].phase == VR_PHASE_RECOMPUTE)
                per_block[all->nodes[i].layer]++;
        vr_graph_free(all);
        for (int N = 1; N < L; N++) {
            s.recompute_layers = N;
            vr_graph *g = gpt("small", 2, s);
            check_dataflow(g);
            int got[16] = {0};
            for (int i = 0; i < g->n_nodes; i++)
                if (g->nodes[i].phase == VR_PHASE_RECOMPUTE)
                    got[g->nodes[i].layer]++;
            for (int l = 0; l < L; l++)
                assert_int_equal(got[l], l < N ? per_block[l] : 0);
            vr_graph_free(g);
        }
    }
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 2};
    assert_int_equal(vr_gpt_preset("small", &m.gpt, &m.T), VR_OK);
    const struct { vr_recompute rc; int n; const char *msg; } bad[3] = {
        {VR_RECOMPUTE_ACT, m.gpt.L + 1, "but the model has"},
        {VR_RECOMPUTE_ACT, -1, "is negative"},
        {VR_RECOMPUTE_NONE, 1, "needs a recompute policy"}};
    for (int i = 0; i < 3; i++) {
        vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .recompute = bad[i].rc,
                            .recompute_layers = bad[i].n};
        vr_graph *g = NULL;
        assert_int_equal(vr_graph_build(&m, &s, &g), VR_ERR_INVALID);
        assert_null(g);
        assert_non_null(strstr(vr_last_error(), "vr_step_config.recompute_layers"));
        assert_non_null(strstr(vr_last_error(), bad[i].msg));
    }
}

static void accumulation_keeps_grads(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .accum = 4};
    vr_graph *g = gpt("tiny", 2, s);
    check_dataflow(g);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].role == VR_ROLE_GRAD)
            assert_true(g->tensors[t].persistent);
    const vr_node *cls = &g->nodes[g->loss_node];
    assert_int_equal(cls->acc[2], VR_ACC_MICRO);
    assert_true(cls->loss_scale == 1.0f / (float)(2 * g->model.T * 4));
    vr_graph_free(g);
    s.accum = 1;
    g = gpt("tiny", 2, s);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].role == VR_ROLE_GRAD)
            assert_false(g->tensors[t].persistent);
    vr_graph_free(g);
}

static void mlp_backward(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_MOMENTUM};
    vr_graph *g = mlp("tiny", VR_OP_RELU, 5, s);
    check_dataflow(g);
    assert_int_equal(g->n_params, vr_mlp_num_params(&g->model.mlp));
    assert_int_equal(count_op(g, VR_OP_SOFTMAX_XENT_BWD), 1);
    assert_int_equal(count_op(g, VR_OP_RELU_BWD), 2);
    assert_int_equal(count_op(g, VR_OP_MATMUL_BWD), 3);
    assert_int_equal(count_op(g, VR_OP_SGD_MOMENTUM), 6);
    assert_true(g->optim[0] >= 0 && g->optim[1] < 0); /* momentum: one state buffer */
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->op == VR_OP_SOFTMAX_XENT_BWD)
            assert_true(n->loss_scale == 1.0f / 5.0f);
        if (n->op == VR_OP_RELU_BWD) /* reads the forward's output */
            assert_int_equal(n->in[1], g->nodes[n->src].out[0]);
        if (n->op == VR_OP_MATMUL_BWD && n->layer == 0) {
            assert_int_equal(n->out[0], -1); /* the features need no gradient */
            assert_int_equal(n->in[1], g->tokens);
            assert_int_equal(n->in[2], -1); /* so w is not read */
        }
    }
    vr_graph_free(g);
    s.optim = VR_OPTIM_SGD;
    g = mlp("mnist", VR_OP_GELU, 5, s);
    assert_int_equal(count_op(g, VR_OP_GELU_BWD), 2);
    assert_true(g->optim[0] < 0);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == VR_OP_SGD)
            assert_int_equal(g->nodes[i].out[2], -1);
    vr_graph_free(g);
}

static void mixed_precision(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_BF16, .freeze = "wpe"};
    vr_graph *g = gpt("tiny", 2, s);
    check_dataflow(g);
    assert_int_equal(g->tensors[g->params].dtype, VR_BF16);
    assert_true(g->master >= 0);
    assert_int_equal(g->tensors[g->master].dtype, VR_F32);
    assert_int_equal(vr_tensor_numel(&g->tensors[g->master]), g->n_trainable);
    assert_int_equal(g->tensors[g->optim[0]].dtype, VR_F32);
    for (int t = 0; t < g->n_tensors; t++) {
        if (!is_param_view(g, t))
            continue;
        const vr_tensor *p = &g->tensors[t];
        assert_int_equal(p->master >= 0, !p->frozen);
        if (!p->frozen) {
            assert_int_equal(g->tensors[p->master].dtype, VR_F32);
            assert_int_equal(g->tensors[p->grad].dtype, VR_BF16);
        }
    }
    assert_int_equal(g->tensors[vr_graph_find(g, "h.0.qkv")].dtype, VR_BF16);
    assert_int_equal(g->tensors[vr_graph_find(g, "h.0.ln1.rstd")].dtype, VR_F32);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == VR_OP_ADAMW)
            assert_int_equal(g->nodes[i].out[1], g->tensors[g->nodes[i].out[0]].master);
    vr_graph_free(g);
}

static void clipping_reads_every_grad_first(void **state)
{
    (void)state;
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAM, .grad_clip = 1.0f};
    vr_graph *g = gpt("tiny", 2, s);
    check_dataflow(g);
    int norm = vr_graph_find(g, "grad.normsq"), last_sumsq = -1, first_update = -1;
    assert_true(norm >= 0);
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op == VR_OP_SUMSQ)
            last_sumsq = i;
        if (g->nodes[i].op == VR_OP_ADAM) {
            if (first_update < 0)
                first_update = i;
            assert_int_equal(g->nodes[i].in[1], norm);
        }
    }
    assert_int_equal(count_op(g, VR_OP_SUMSQ), count_op(g, VR_OP_ADAM));
    assert_true(last_sumsq < first_update);
    vr_graph_free(g);
}

/* y = a + gelu(a): the gelu backward reads dy while a's gradient would be
 * written: autodiff must copy instead of sharing the buffer. */
static void unsafe_alias_gets_a_copy(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    vr_graph_param_buffer(g, 16 * 16);
    int w = vr_graph_param(g, "w", 2, (int64_t[]){16, 16}, 0, VR_INIT_NORMAL, 0.02f);
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 2, (int64_t[]){4, 16});
    int lab = vr_graph_tensor(g, "labels", VR_I32, VR_ROLE_INPUT, 1, (int64_t[]){4});
    int a = vr_graph_linear(g, "a", x, w, -1);
    int b = vr_graph_gelu(g, "b", a);
    int y = vr_graph_add(g, "y", a, b);
    int loss = vr_graph_softmax_xent(g, "loss", y, lab, NULL);
    assert_int_equal(vr_graph_set_loss(g, loss), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD};
    assert_int_equal(vr_graph_backward(g, &s), VR_OK);
    check_dataflow(g);
    assert_int_equal(count_op(g, VR_OP_ACC), 1);
    assert_int_not_equal(vr_graph_storage(g, g->tensors[a].grad), vr_graph_storage(g, g->tensors[b].grad));
    assert_true(g->tensors[w].grad >= 0);
    vr_graph_free(g);
}

/* A loss autodiff does not know is an error naming it, not a graph with no backward. */
static void unknown_loss_is_an_error(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    vr_graph_param_buffer(g, 4);
    int64_t ws[1] = {4};
    int w = vr_graph_param(g, "w", 1, ws, 0, VR_INIT_UNIFORM, 1.0f);
    int y = vr_graph_gelu(g, "act", w);
    assert_int_equal(vr_graph_set_loss(g, y), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD};
    assert_int_equal(vr_graph_backward(g, &s), VR_ERR_UNSUPPORTED);
    assert_non_null(strstr(vr_last_error(), "act"));
    assert_non_null(strstr(vr_last_error(), "gelu"));
    vr_graph_free(g);
}

/* ZeRO 3: the gathers follow the owners the optimizer state was made for (vr_graph_zero3 does not assign
 * them again), and a no-grad graph, which has no optimizer state, gets owners there. */
static void zero3_takes_the_owners_set(void **state)
{
    (void)state;
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    vr_graph_param_buffer(g, 32);
    int64_t ws[2] = {4, 4};
    int a = vr_graph_param(g, "a", 2, ws, 0, VR_INIT_UNIFORM, 1.0f);
    int b = vr_graph_param(g, "b", 2, ws, 16, VR_INIT_UNIFORM, 1.0f);
    int64_t xs[2] = {2, 4}, ts[1] = {2};
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 2, xs);
    int t = vr_graph_tensor(g, "t", VR_I32, VR_ROLE_INPUT, 1, ts);
    assert_int_equal(vr_graph_set_inputs(g, x, t), VR_OK);
    int y = vr_graph_linear(g, "y", vr_graph_linear(g, "h", x, a, -1), b, -1);
    int probs = -1;
    assert_int_equal(vr_graph_set_loss(g, vr_graph_softmax_xent(g, "loss", y, t, &probs)), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_SGD, .world = 2, .rank = 0, .zero = 3};
    assert_int_equal(vr_graph_backward(g, &s), VR_OK);
    assert_int_equal(g->tensors[a].owner, 0);
    assert_int_equal(g->tensors[b].owner, 1);
    g->tensors[b].owner = 0; /* set otherwise than vr_graph_assign_owners would */
    assert_int_equal(vr_graph_zero3(g, &s), VR_OK);
    assert_int_equal(g->tensors[b].owner, 0);
    assert_int_equal(g->tensors[b].view_of, g->params); /* rank 0 holds it in its parameter buffer */
    assert_int_equal(g->tensors[g->params].shape[0], 32);
    vr_graph_free(g);

    vr_step_config e = {.train = false, .world = 2, .rank = 0, .zero = 3};
    g = gpt("tiny", 2, e);
    int sharded = 0;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].param_offset >= 0 && g->tensors[i].ndim > 0 && i != g->params)
            sharded += g->tensors[i].owner == 1 && g->tensors[i].view_of < 0;
    assert_true(sharded > 0);
    assert_true(count_op(g, VR_OP_GATHER) > 0);
    vr_graph_free(g);
}

/* A linear classifier whose weight w (4 x 4096) ranks' shares cut into pieces, and a bias b of 4 (a whole
 * parameter): built with `world` ranks, this rank `rank`, ZeRO `zero`. */
static vr_graph *pieces_graph(int world, int rank, int zero, int *w, int *b)
{
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    vr_graph_param_buffer(g, 4 * 4096 + 4);
    *w = vr_graph_param(g, "w", 2, (int64_t[]){4, 4096}, 0, VR_INIT_NORMAL, 0.02f);
    *b = vr_graph_param(g, "b", 1, (int64_t[]){4}, 4 * 4096, VR_INIT_ZEROS, 0.0f);
    int x = vr_graph_tensor(g, "x", VR_F32, VR_ROLE_INPUT, 2, (int64_t[]){2, 4096});
    int t = vr_graph_tensor(g, "t", VR_I32, VR_ROLE_INPUT, 1, (int64_t[]){2});
    assert_int_equal(vr_graph_set_inputs(g, x, t), VR_OK);
    int y = vr_graph_linear(g, "y", x, *w, *b);
    assert_int_equal(vr_graph_set_loss(g, vr_graph_softmax_xent(g, "loss", y, t, NULL)), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .world = world, .rank = rank, .zero = zero};
    assert_int_equal(vr_graph_backward(g, &s), VR_OK);
    if (zero == 3)
        assert_int_equal(vr_graph_zero3(g, &s), VR_OK);
    return g;
}

/* The pieces: cut at multiples of VR_PIECE_ALIGN of the parameter nearest each rank's equal share, each with its
 * share's owner, a matrix's pieces (1, n) matrices (weight decay goes by ndim), a gradient that is the view of
 * the parameter's at the same offset; the parameter order tiles the buffer with the pieces (not the split
 * parameter), and its gap check still holds. */
static void pieces_at_the_shares(void **state)
{
    (void)state;
    int w, b;
    vr_graph *g = pieces_graph(3, 0, 2, &w, &b); /* shares of 5462: cuts at 4096 and 12288 */
    assert_true(g->tensors[w].split);
    assert_int_equal(g->tensors[w].owner, -1);
    assert_int_equal(g->tensors[b].owner, 2);
    int order[64], no = vr_graph_param_order(g, g->n_tensors, order);
    assert_int_equal(no, 4);
    const int64_t at[3] = {0, 4096, 12288}, len[3] = {4096, 8192, 4096};
    for (int k = 0; k < 3; k++) {
        const vr_tensor *p = &g->tensors[order[k]];
        assert_int_equal(p->piece_of, w);
        assert_int_equal(p->owner, k);
        assert_int_equal(p->param_offset, at[k]);
        assert_int_equal(p->view_of, g->params);
        assert_int_equal(p->view_offset, at[k]);
        assert_int_equal(p->ndim, 2);
        assert_int_equal(p->shape[0], 1);
        assert_int_equal(p->shape[1], len[k]);
        const vr_tensor *gr = &g->tensors[p->grad];
        assert_int_equal(vr_graph_storage(g, p->grad), vr_graph_storage(g, g->tensors[w].grad));
        assert_int_equal(gr->view_offset - (g->tensors[g->tensors[w].grad].view_of >= 0
                                                ? g->tensors[g->tensors[w].grad].view_offset : 0), at[k]);
    }
    assert_int_equal(order[3], b);
    /* one reduce per piece, to its owner; this rank updates its piece only */
    int reduces = 0, updates = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->op == VR_OP_REDUCE && g->tensors[n->in[0]].view_of >= 0 &&
            vr_graph_storage(g, n->in[0]) == vr_graph_storage(g, g->tensors[w].grad)) {
            reduces++;
            assert_int_equal(n->root, g->tensors[order[(g->tensors[n->in[0]].view_offset >= 12288) +
                                                     (g->tensors[n->in[0]].view_offset >= 4096)]].owner);
        }
        if (n->op == VR_OP_ADAMW) {
            updates++;
            assert_int_equal(n->out[0], order[0]);
        }
    }
    assert_int_equal(reduces, 3);
    assert_int_equal(updates, 1);
    /* the gap check: a piece missing leaves elements no parameter covers */
    g->tensors[order[1]].split = true;
    assert_int_equal(vr_graph_param_order(g, g->n_tensors, order), -1);
    assert_non_null(strstr(vr_last_error(), "no parameter starts at element 4096"));
    vr_graph_free(g);

    /* two ranks: shares of 8194, one cut at 8192; a cut leaving under VR_PIECE_ALIGN is not made */
    g = pieces_graph(2, 1, 1, &w, &b);
    no = vr_graph_param_order(g, g->n_tensors, order);
    assert_int_equal(no, 3);
    assert_int_equal(g->tensors[order[0]].owner, 0);
    assert_int_equal(g->tensors[order[1]].owner, 1);
    assert_int_equal(g->tensors[order[1]].param_offset, 8192);
    assert_int_equal(count_op(g, VR_OP_BROADCAST), 3); /* ZeRO 1: each piece and b from its owner */
    vr_graph_free(g);
    g = pieces_graph(5, 0, 1, &w, &b); /* shares of 3277.6: cuts near 3277, 6555, 9832, 13110 */
    no = vr_graph_param_order(g, g->n_tensors, order);
    for (int k = 0; k < no; k++) {
        const vr_tensor *p = &g->tensors[order[k]];
        if (p->piece_of < 0)
            continue;
        assert_int_equal(p->param_offset % VR_PIECE_ALIGN, 0);
        assert_true(vr_tensor_numel(p) >= VR_PIECE_ALIGN);
    }
    assert_int_equal(no, 4 + 1); /* w in 4 pieces of 4096 (ranks 0, 1, 2, 3 or 4 by their middles), and b */
    vr_graph_free(g);
}

/* Large models: every rank's share of the trainable elements within a few VR_PIECE_ALIGN of 1/N (a wte larger
 * than a share is cut too, so no rank is left without a parameter), on 8 and 64 ranks. */
static void shares_are_equal(void **state)
{
    (void)state;
    int worlds[] = {3, 8, 64};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        int W = worlds[i];
        vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .world = W, .rank = W - 1, .zero = 1,
                            .freeze = "wpe"};
        vr_graph *g = gpt("gpt2", 1, s);
        int64_t *own = calloc((size_t)W, sizeof(int64_t));
        int pieces = 0;
        for (int t = 0; t < g->n_tensors; t++) {
            const vr_tensor *x = &g->tensors[t];
            if (x->param_offset < 0 || x->split || t == g->params)
                continue;
            if (!strcmp(x->name, "wpe")) {
                assert_int_equal(x->owner, -1); /* frozen: whole, every rank's */
                assert_false(x->split);
                continue;
            }
            assert_true(x->owner >= 0 && x->owner < W);
            own[x->owner] += vr_tensor_numel(x);
            pieces += x->piece_of >= 0;
            if (x->piece_of >= 0)
                assert_int_equal(x->ndim, g->tensors[x->piece_of].ndim >= 2 ? 2 : 1);
        }
        double share = (double)g->n_trainable / W;
        for (int r = 0; r < W; r++)
            if (own[r] < share - 3 * VR_PIECE_ALIGN || own[r] > share + 3 * VR_PIECE_ALIGN)
                fail_msg("%d ranks: rank %d updates %lld elements, the share is %.0f", W, r, (long long)own[r], share);
        assert_true(pieces >= W - 1);
        free(own);
        vr_graph_free(g);
    }
}

/* ZeRO 3 with pieces: the gather of a split parameter assembles its pieces, each slot from its own owner (in[k]
 * only where this rank owns part[k]); the parameter buffer holds this rank's piece. */
static void zero3_gathers_pieces(void **state)
{
    (void)state;
    int w, b;
    vr_graph *g = pieces_graph(3, 1, 3, &w, &b);
    assert_int_equal(g->tensors[g->params].shape[0], 8192); /* rank 1's piece [4096, 12288) */
    assert_true(g->tensors[w].view_of < 0);
    int found = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->op != VR_OP_GATHER || n->part[0] < 0 || g->tensors[n->part[0]].piece_of != w)
            continue;
        found++;
        for (int k = 0; k < 3; k++) {
            assert_int_equal(g->tensors[n->part[k]].piece_of, w);
            assert_int_equal(g->tensors[n->part[k]].owner, k);
            assert_int_equal(n->in[k], k == 1 ? n->part[k] : -1);
        }
        assert_true(vr_tensor_numel(&g->tensors[n->out[0]]) >= 4 * 4096);
    }
    assert_true(found >= 1);
    vr_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grads_for_trainable_params_only),
        cmocka_unit_test(acc_flags_and_shared_buffers),
        cmocka_unit_test(frozen_parts_are_not_differentiated),
        cmocka_unit_test(no_grad_graph_saves_nothing),
        cmocka_unit_test(block_recompute),
        cmocka_unit_test(selective_recompute),
        cmocka_unit_test(act_recompute),
        cmocka_unit_test(recompute_in_first_blocks),
        cmocka_unit_test(accumulation_keeps_grads),
        cmocka_unit_test(mlp_backward),
        cmocka_unit_test(mixed_precision),
        cmocka_unit_test(clipping_reads_every_grad_first),
        cmocka_unit_test(unsafe_alias_gets_a_copy),
        cmocka_unit_test(unknown_loss_is_an_error),
        cmocka_unit_test(zero3_takes_the_owners_set),
        cmocka_unit_test(pieces_at_the_shares),
        cmocka_unit_test(shares_are_equal),
        cmocka_unit_test(zero3_gathers_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
