/* vram graph — autodiff: appends the backward pass and the optimizer step.
 *
 * Walks the forward nodes from the loss back to the first, emitting for each
 * node whose outputs have a gradient and some of whose inputs need one the
 * backward node of its op (the rules below). Gradients are created by their
 * first contribution (acc = overwrite) and later contributions add into them
 * (acc = add), so no zero-fill nodes exist. What is not needed is not emitted:
 * no gradient for frozen parameters or inputs, and no backward for a part of
 * the graph where nothing before it needs a gradient.
 *
 * Residual connections (add) pass the gradient through without a copy: both
 * inputs' gradients become the same tensor as the output's (llm.c's single
 * dresidual buffer), when that is safe: every later write through one alias
 * must come after every read through the others (checked on the consumer and
 * producer indices); otherwise one side gets a copy (an acc node).
 *
 * The fused classifier computes its gradients in the forward pass: training
 * turns on its dx and dwte outputs. Recomputation (recompute.c) decides
 * which forward tensor a backward node reads: the saved one, or a copy
 * re-run just before. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct ad {
    vr_graph *g;
    const vr_step_config *s;
    int n0;              /* tensors that existed before the backward */
    bool *needs_grad;    /* [n0]: depends on a trainable parameter */
    bool *bwd_needed;    /* [n_forward]: the backward of this node will be emitted */
    int *last_cons;      /* scratch for alias checks */
    vr_recomp *rc;
    /* forward tensors by the storage of their gradient, as lists: head[storage] -> t -> next[t] -> ... -1.
     * A gradient is set once and its storage never changes, so the lists only grow; alias checks walk
     * one list instead of every tensor (that scan made deep models quadratic). */
    int *grad_head, *grad_next;
    int n_head;
} ad;

/* Records that forward tensor x now has a gradient (g->tensors[x].grad set). */
static void note_grad(ad *a, int x)
{
    vr_graph *g = a->g;
    int st = vr_graph_storage(g, g->tensors[x].grad);
    if (st >= a->n_head) {
        int n = a->n_head ? a->n_head : 256;
        while (n <= st)
            n *= 2;
        int *h = realloc(a->grad_head, sizeof(int) * (size_t)n);
        if (!h) {
            vr_graph_fail(g, VR_ERR_OOM, "autodiff: out of host memory");
            return;
        }
        for (int i = a->n_head; i < n; i++)
            h[i] = -1;
        a->grad_head = h;
        a->n_head = n;
    }
    a->grad_next[x] = a->grad_head[st];
    a->grad_head[st] = x;
}

static bool ng(const ad *a, int t) { return t >= 0 && t < a->n0 && a->needs_grad[t]; }

static bool is_param(const vr_graph *g, int t) { return g->tensors[t].role == VR_ROLE_PARAM; }

/* The gradient tensor receiving a contribution for forward tensor x, and the acc flag to write it with. */
static int contrib(ad *a, int x, uint8_t *acc)
{
    vr_graph *g = a->g;
    if (g->err)
        return -1;
    if (g->tensors[x].grad >= 0) {
        *acc = VR_ACC_ADD;
        return g->tensors[x].grad;
    }
    bool param = is_param(g, x);
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%s%.56s", param ? "grad." : "d.", g->tensors[x].name);
    int id = vr_graph_tensor_like(g, name, x, g->tensors[x].dtype, param ? VR_ROLE_GRAD : VR_ROLE_TEMP);
    if (id < 0)
        return -1;
    bool micro = param && a->s->accum > 1;
    g->tensors[id].persistent = micro;
    g->tensors[x].grad = id;
    note_grad(a, x);
    *acc = micro ? VR_ACC_MICRO : VR_ACC_OVERWRITE;
    return id;
}

/* A backward node for forward node n (copies layer, marks src). */
static int bwd_node(ad *a, vr_op op, int n)
{
    vr_graph *g = a->g;
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%.58s.bwd", g->nodes[n].name);
    int id = vr_graph_node(g, op, VR_PHASE_BACKWARD, name);
    if (id >= 0) {
        g->nodes[id].layer = g->nodes[n].layer;
        g->nodes[id].src = n;
    }
    return id;
}

/* Sets output slot k of node id to the gradient of x (if x needs one). */
static void set_grad_out(ad *a, int id, int k, int x)
{
    if (id < 0 || !ng(a, x))
        return;
    uint8_t acc;
    int gt = contrib(a, x, &acc);
    if (gt >= 0) {
        a->g->nodes[id].out[k] = gt;
        a->g->nodes[id].acc[k] = acc;
    }
}

void vr_backward_reads(const vr_graph *g, int n, const bool *in_ng, int reads[VR_NODE_MAX_IN])
{
    const vr_node *f = &g->nodes[n];
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        reads[k] = -1;
    switch (f->op) {
    case VR_OP_LAYERNORM: /* dout, inp, w, mean, rstd; from the output: dout, out, w, b, rstd */
        if (g->step.norm_from_out) {
            reads[1] = f->out[0];
            reads[2] = f->in[1];
            reads[3] = f->in[2];
            reads[4] = f->out[2];
            break;
        }
        reads[1] = f->in[0];
        reads[2] = in_ng[0] ? f->in[1] : -1;
        reads[3] = f->out[1];
        reads[4] = f->out[2];
        break;
    case VR_OP_MATMUL: /* dout, inp, w */
        reads[1] = in_ng[1] || (f->in[2] >= 0 && in_ng[2]) ? f->in[0] : -1;
        reads[2] = in_ng[0] ? f->in[1] : -1;
        break;
    case VR_OP_ATTENTION: /* dout, qkv, out, lse */
        reads[1] = f->in[0];
        reads[2] = f->out[0];
        reads[3] = f->out[1];
        break;
    case VR_OP_GELU: /* dout, inp */
    case VR_OP_SWIGLU:
        reads[1] = f->in[0];
        break;
    case VR_OP_RMSNORM: /* dout, inp | out, w, rstd */
        reads[1] = g->step.norm_from_out ? f->out[0] : f->in[0];
        reads[2] = g->step.norm_from_out || in_ng[0] ? f->in[1] : -1; /* x-hat = out / w */
        reads[3] = f->out[1];
        break;
    case VR_OP_RELU: /* dout, out */
        reads[1] = f->out[0];
        break;
    case VR_OP_EMBEDDING: /* dout, tok */
        reads[1] = f->in[0];
        break;
    case VR_OP_SOFTMAX_XENT: /* probs, targets */
        reads[0] = f->out[1];
        reads[1] = f->in[1];
        break;
    default: /* add, reshape: nothing saved; classifier: done in the forward */
        break;
    }
}

/* Index of the last forward node below `before` reading tensor t (-1 if none). */
static int last_consumer_below(const vr_graph *g, int t, int before)
{
    for (int i = before - 1; i >= 0; i--)
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (g->nodes[i].in[k] == t)
                return i;
    return -1;
}

/* May forward tensor z (an input of add node k) share the gradient buffer beta?
 * Every tensor still open on beta (its producer not yet differentiated) and z
 * must have all their remaining writers (consumers below k) run before every
 * other one's reader (its producer's backward). */
static bool alias_ok(ad *a, int k, int z, int beta)
{
    vr_graph *g = a->g;
    if (is_param(g, z))
        return false;
    int open[64], n = 0;
    int bs = vr_graph_storage(g, beta);
    for (int t = bs < a->n_head ? a->grad_head[bs] : -1; t >= 0; t = a->grad_next[t])
        if (t != z && g->tensors[t].producer >= 0 && g->tensors[t].producer < k) {
            if (n == 63)
                return false;
            open[n++] = t;
        }
    open[n++] = z;
    for (int i = 0; i < n; i++) {
        int w = last_consumer_below(g, open[i], k);
        for (int j = 0; j < n; j++)
            if (i != j && w >= 0 && w >= g->tensors[open[j]].producer)
                return false;
    }
    return true;
}

/* acc node: dst (=|+=) src. */
static void acc_node(ad *a, int n, int dst, uint8_t acc, int src)
{
    int id = bwd_node(a, VR_OP_ACC, n);
    if (id < 0)
        return;
    a->g->nodes[id].in[0] = src;
    a->g->nodes[id].out[0] = dst;
    a->g->nodes[id].acc[0] = acc;
}

static void backward_add(ad *a, int n)
{
    vr_graph *g = a->g;
    vr_node f = g->nodes[n];
    int dy = g->tensors[f.out[0]].grad;
    for (int k = 0; k < 2; k++) {
        int x = f.in[k];
        if (!ng(a, x))
            continue;
        if (g->tensors[x].grad >= 0) {
            acc_node(a, n, g->tensors[x].grad, VR_ACC_ADD, dy);
        } else if (alias_ok(a, n, x, dy)) {
            g->tensors[x].grad = dy;
            note_grad(a, x);
        } else {
            uint8_t acc;
            int gt = contrib(a, x, &acc);
            acc_node(a, n, gt, acc, dy);
        }
    }
}

static void backward_reshape(ad *a, int n)
{
    vr_graph *g = a->g;
    vr_node f = g->nodes[n];
    int x = f.in[0], dy = g->tensors[f.out[0]].grad;
    if (!ng(a, x))
        return;
    if (g->tensors[x].grad >= 0 || is_param(g, x)) {
        uint8_t acc;
        int gt = contrib(a, x, &acc);
        acc_node(a, n, gt, acc, dy);
        return;
    }
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "d.%.56s", g->tensors[x].name);
    int id = bwd_node(a, VR_OP_RESHAPE, n);
    int v = vr_graph_view(g, dy, name, g->tensors[x].ndim, g->tensors[x].shape, 0);
    if (id < 0 || v < 0)
        return;
    g->nodes[id].in[0] = dy;
    g->nodes[id].out[0] = v;
    g->tensors[x].grad = v;
    note_grad(a, x);
}

/* Kernels take one acc flag for a pair of outputs (embedding: dwte and dwpe;
 * matmul/layernorm: dw and db). When the two differ, output k2 moves to a
 * second node with the same inputs, so each node is one kernel call. */
static int split_acc(ad *a, int id, int k1, int k2)
{
    vr_graph *g = a->g;
    if (id < 0 || g->nodes[id].out[k1] < 0 || g->nodes[id].out[k2] < 0 ||
        g->nodes[id].acc[k1] == g->nodes[id].acc[k2])
        return -1;
    vr_node first = g->nodes[id];
    int id2 = vr_graph_node(g, first.op, VR_PHASE_BACKWARD, first.name);
    if (id2 < 0)
        return -1;
    vr_node *second = &g->nodes[id2];
    memcpy(second->in, first.in, sizeof first.in);
    second->layer = first.layer;
    second->src = first.src;
    second->out[k2] = first.out[k2];
    second->acc[k2] = first.acc[k2];
    g->nodes[id].out[k2] = -1;
    g->nodes[id].acc[k2] = 0;
    return id2;
}

/* The backward of forward node n (not add/reshape/classifier). */
static void backward_op(ad *a, int n)
{
    vr_graph *g = a->g;
    vr_node f = g->nodes[n];
    /* The ops with a backward rule; 0 (= VR_OP_EMBEDDING, itself differentiable) marks the others. */
    static const vr_op bwd_of[VR_OP_COUNT] = {
        [VR_OP_EMBEDDING] = VR_OP_EMBEDDING_BWD, [VR_OP_LAYERNORM] = VR_OP_LAYERNORM_BWD,
        [VR_OP_MATMUL] = VR_OP_MATMUL_BWD,       [VR_OP_ATTENTION] = VR_OP_ATTENTION_BWD,
        [VR_OP_GELU] = VR_OP_GELU_BWD,           [VR_OP_RELU] = VR_OP_RELU_BWD,
        [VR_OP_SOFTMAX_XENT] = VR_OP_SOFTMAX_XENT_BWD,
        [VR_OP_RMSNORM] = VR_OP_RMSNORM_BWD,     [VR_OP_ROPE] = VR_OP_ROPE_BWD,
        [VR_OP_SWIGLU] = VR_OP_SWIGLU_BWD,
    };
    if ((unsigned)f.op >= VR_OP_COUNT || bwd_of[f.op] == VR_OP_EMBEDDING) {
        vr_graph_fail(g, VR_ERR_UNSUPPORTED, "backward: forward node %s is a %s, an op autodiff has no backward "
                      "rule for", f.name, vr_op_name(f.op));
        return;
    }
    bool in_ng[VR_NODE_MAX_IN];
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        in_ng[k] = ng(a, f.in[k]);
    int reads[VR_NODE_MAX_IN];
    vr_backward_reads(g, n, in_ng, reads);
    for (int k = 0; k < VR_NODE_MAX_IN; k++) /* may emit recompute nodes */
        reads[k] = vr_recomp_get(a->rc, reads[k]);

    int id = bwd_node(a, bwd_of[f.op], n);
    if (id < 0)
        return;
    vr_node *b = &g->nodes[id];
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        b->in[k] = reads[k];
    if (f.op != VR_OP_SOFTMAX_XENT)
        b->in[0] = g->tensors[f.out[0]].grad;
    b->nh = f.nh;
    b->vocab = f.vocab;
    b->nkv = f.nkv;
    b->eps = f.eps;
    b->rope = f.rope;
    b->from_out = g->step.norm_from_out && (f.op == VR_OP_LAYERNORM || f.op == VR_OP_RMSNORM);
    int id2 = -1; /* a second node when two outputs of one kernel call accumulate differently */
    switch (f.op) {
    case VR_OP_EMBEDDING:
        set_grad_out(a, id, 0, f.in[1]);
        set_grad_out(a, id, 1, f.in[2]);
        id2 = split_acc(a, id, 0, 1); /* tied wte adds, wpe overwrites: two kernel calls */
        break;
    case VR_OP_LAYERNORM:
    case VR_OP_MATMUL:
        set_grad_out(a, id, 0, f.in[0]);
        set_grad_out(a, id, 1, f.in[1]);
        if (f.in[2] >= 0)
            set_grad_out(a, id, 2, f.in[2]);
        id2 = split_acc(a, id, 1, 2);
        break;
    case VR_OP_RMSNORM: /* dinp and dw have their own acc flags */
        set_grad_out(a, id, 0, f.in[0]);
        set_grad_out(a, id, 1, f.in[1]);
        break;
    case VR_OP_SOFTMAX_XENT:
        g->nodes[id].loss_scale = 1.0f / (float)((double)vr_tensor_numel(&g->tensors[f.in[1]]) * a->s->accum);
        set_grad_out(a, id, 0, f.in[0]);
        break;
    default: /* attention, gelu, relu, rope, swiglu: one input */
        set_grad_out(a, id, 0, f.in[0]);
        break;
    }
    /* scratch as the kernels need it for the outputs each node computes (kernels/scratch.h) */
    vr_graph_attach_scratch(g, id);
    vr_graph_attach_scratch(g, id2);
}

/* Turns on the classifier's gradient outputs (it is forward and backward in one node). */
static void seed_classifier(ad *a, int n)
{
    vr_graph *g = a->g;
    vr_node f = g->nodes[n];
    g->nodes[n].loss_scale = 1.0f / (float)((double)vr_tensor_numel(&g->tensors[f.in[2]]) * a->s->accum);
    set_grad_out(a, n, 1, f.in[0]);
    set_grad_out(a, n, 2, f.in[1]);
}

/* Which forward nodes reach the loss, and which need a backward. */
static void mark_needed(ad *a)
{
    vr_graph *g = a->g;
    for (int t = 0; t < a->n0; t++) {
        const vr_tensor *x = &g->tensors[t];
        a->needs_grad[t] = x->role == VR_ROLE_PARAM && t != g->params && !x->frozen;
    }
    for (int n = 0; n < g->n_forward; n++) { /* forward order: needs_grad flows to outputs */
        bool any = false;
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            any |= ng(a, g->nodes[n].in[k]);
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (g->nodes[n].out[k] >= 0)
                a->needs_grad[g->nodes[n].out[k]] = any;
    }
    bool *contributes = calloc((size_t)a->n0, 1);
    if (!contributes) {
        vr_graph_fail(g, VR_ERR_OOM, "autodiff: out of host memory");
        return;
    }
    for (int n = g->n_forward - 1; n >= 0; n--) { /* reverse: who feeds the loss */
        const vr_node *f = &g->nodes[n];
        bool reach = n == g->loss_node;
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            reach |= f->out[k] >= 0 && contributes[f->out[k]];
        bool any_ng = false;
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            any_ng |= ng(a, f->in[k]);
        a->bwd_needed[n] = reach && any_ng;
        if (reach)
            for (int k = 0; k < VR_NODE_MAX_IN; k++)
                if (f->in[k] >= 0)
                    contributes[f->in[k]] = true;
    }
    free(contributes);
}

vr_status vr_graph_backward(vr_graph *g, const vr_step_config *s)
{
    if (g->err)
        return g->err;
    if (g->loss_node < 0 || g->n_forward != g->n_nodes)
        return vr_graph_fail(g, VR_ERR_INVALID, "backward: the graph has no forward pass to differentiate"), g->err;
    vr_op loss_op = g->nodes[g->loss_node].op;
    if (loss_op != VR_OP_CLASSIFIER && loss_op != VR_OP_SOFTMAX_XENT) /* nothing would seed a gradient */
        return vr_graph_fail(g, VR_ERR_UNSUPPORTED, "backward: loss node %s is a %s, not a loss autodiff knows "
                             "(classifier, softmax_xent)", g->nodes[g->loss_node].name, vr_op_name(loss_op)), g->err;
    g->step = *s;
    if (g->step.accum < 1)
        g->step.accum = 1;
    s = &g->step;
    vr_optimizer_state(g, s);

    ad a = {.g = g, .s = s, .n0 = g->n_tensors};
    a.needs_grad = calloc((size_t)a.n0, 1);
    a.bwd_needed = calloc((size_t)g->n_forward + 1, 1);
    a.grad_next = malloc(sizeof(int) * ((size_t)a.n0 + 1));
    if (!a.needs_grad || !a.bwd_needed || !a.grad_next) {
        free(a.needs_grad);
        free(a.bwd_needed);
        free(a.grad_next);
        return vr_graph_fail(g, VR_ERR_OOM, "autodiff: out of host memory"), g->err;
    }
    mark_needed(&a);
    a.rc = vr_recomp_new(g, s->recompute, s->recompute_layers, a.bwd_needed, a.needs_grad);
    for (int n = g->loss_node; n >= 0 && !g->err; n--) {
        vr_op op = g->nodes[n].op;
        if (op == VR_OP_CLASSIFIER) {
            seed_classifier(&a, n);
            continue;
        }
        if (!a.bwd_needed[n])
            continue;
        bool has_dy = op == VR_OP_SOFTMAX_XENT;
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            has_dy |= g->nodes[n].out[k] >= 0 && g->tensors[g->nodes[n].out[k]].grad >= 0;
        if (!has_dy)
            continue;
        vr_recomp_before(a.rc, n);
        if (op == VR_OP_ADD)
            backward_add(&a, n);
        else if (op == VR_OP_RESHAPE)
            backward_reshape(&a, n);
        else
            backward_op(&a, n);
    }
    vr_recomp_free(a.rc);
    free(a.needs_grad);
    free(a.bwd_needed);
    free(a.grad_head);
    free(a.grad_next);
    vr_optimizer_nodes(g, s, a.n0);

    /* producers of everything the backward created (first writer; the classifier's dx, dwte too) */
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < VR_NODE_MAX_OUT; k++) {
            int t = g->nodes[i].out[k];
            if (t >= 0 && g->tensors[t].producer < 0 && g->tensors[t].role != VR_ROLE_PARAM)
                g->tensors[t].producer = i;
        }
    return g->err;
}
