/* vram graph — activation checkpointing: which forward tensors are not kept,
 * and the recompute nodes that make them again inside the backward.
 *
 * Policies
 *   none       every forward tensor a backward node reads is kept (saved).
 *   block      only what crosses a block boundary is kept (each block's input, i.e.
 *              the residual stream); right before the first backward node of block l
 *              the forward nodes of block l that produce what its backward reads are
 *              re-run, in forward order (recompute phase).
 *   selective  the outputs of cheap ops whose inputs are kept anyway (GELU, SwiGLU,
 *              and LayerNorm's / RMSNorm's normalised output: its input and
 *              statistics are saved for its own backward) are dropped, and re-run just
 *              before the first backward node that reads them.
 *   act        selective's for the activation functions only (GELU, SwiGLU): the
 *              widest of those outputs (4C a row in GPT-2's MLP against the norms' C)
 *              for one elementwise pass each, the norms kept.
 * With a number of layers N (vr_step_config.recompute_layers), the policy applies to blocks 0..N-1 only, the
 * other blocks keeping everything: memory and recompute time in between, block by block.
 * A recompute node writes fresh tensors (named "<name>@re"): it never overwrites
 * a saved one, so a saved tensor's lifetime is exactly its readers'. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

struct vr_recomp {
    vr_graph *g;
    vr_recompute policy;
    const bool *bwd_needed;  /* [n_forward] */
    const bool *needs_grad;  /* [n0] */
    int n0;                  /* forward tensors have ids below n0 */
    bool *dropped;           /* [n0] */
    int *copy;               /* [n0]: recomputed copy, -1 */
    int block;               /* block whose recompute was emitted last (block policy) */
};

/* Is tensor t read by a forward node outside block `layer`? */
static bool read_outside(const vr_graph *g, int t, int layer)
{
    for (int n = 0; n < g->n_forward; n++)
        if (g->nodes[n].layer != layer)
            for (int k = 0; k < VR_NODE_MAX_IN; k++)
                if (g->nodes[n].in[k] == t)
                    return true;
    return false;
}

vr_recomp *vr_recomp_new(vr_graph *g, vr_recompute policy, int layers, const bool *bwd_needed, const bool *needs_grad)
{
    vr_recomp *r = calloc(1, sizeof *r);
    int n0 = g->n_tensors;
    if (r) {
        r->dropped = calloc((size_t)n0 + 1, 1);
        r->copy = malloc(sizeof(int) * ((size_t)n0 + 1));
    }
    if (!r || !r->dropped || !r->copy) {
        vr_recomp_free(r);
        vr_graph_fail(g, VR_ERR_OOM, "recompute: out of host memory");
        return NULL;
    }
    r->g = g;
    r->policy = policy;
    r->bwd_needed = bwd_needed;
    r->needs_grad = needs_grad;
    r->n0 = n0;
    r->block = -1;
    for (int i = 0; i < n0; i++)
        r->copy[i] = -1;
    int blocks = 0;
    for (int n = 0; n < g->n_forward; n++)
        if (g->nodes[n].layer + 1 > blocks)
            blocks = g->nodes[n].layer + 1;
    if (layers > blocks) {
        vr_recomp_free(r);
        vr_graph_fail(g, VR_ERR_INVALID, "vr_step_config.recompute_layers: %d, but the model has %d block%s", layers,
                      blocks, blocks == 1 ? "" : "s");
        return NULL;
    }
    for (int n = 0; n < g->n_forward; n++) {
        const vr_node *f = &g->nodes[n];
        if (f->op == VR_OP_CLASSIFIER || f->op == VR_OP_SOFTMAX_XENT)
            continue; /* the loss is never re-run */
        if (layers && !(f->layer >= 0 && f->layer < layers))
            continue; /* outside the blocks recomputed */
        for (int k = 0; k < VR_NODE_MAX_OUT; k++) {
            int t = f->out[k];
            if (t < 0 || g->tensors[t].role != VR_ROLE_ACT || g->tensors[t].output)
                continue;
            if (policy == VR_RECOMPUTE_BLOCK)
                r->dropped[t] = f->layer >= 0 && !read_outside(g, t, f->layer);
            else if (policy == VR_RECOMPUTE_SELECTIVE || policy == VR_RECOMPUTE_ACT)
                r->dropped[t] = k == 0 && (f->op == VR_OP_GELU || f->op == VR_OP_SWIGLU ||
                                           (policy == VR_RECOMPUTE_SELECTIVE &&
                                            (f->op == VR_OP_LAYERNORM || f->op == VR_OP_RMSNORM)));
        }
    }
    return r;
}

void vr_recomp_free(vr_recomp *r)
{
    if (!r)
        return;
    free(r->dropped);
    free(r->copy);
    free(r);
}

/* Re-runs forward node n: its inputs through vr_recomp_get, fresh outputs. */
static void emit(vr_recomp *r, int n)
{
    vr_graph *g = r->g;
    vr_node f = g->nodes[n];
    int in[VR_NODE_MAX_IN];
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        in[k] = vr_recomp_get(r, f.in[k]);
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%.58s@re", f.name);
    int id = vr_graph_node(g, f.op, VR_PHASE_RECOMPUTE, name);
    if (id < 0)
        return;
    vr_node *re = &g->nodes[id];
    memcpy(re->in, in, sizeof in);
    re->layer = f.layer;
    re->nh = f.nh;
    re->vocab = f.vocab;
    re->nkv = f.nkv;
    re->eps = f.eps;
    re->rope = f.rope;
    re->src = n;
    for (int k = 0; k < VR_NODE_MAX_OUT; k++) {
        int o = f.out[k];
        if (o < 0)
            continue;
        snprintf(name, sizeof name, "%.58s@re", g->tensors[o].name);
        int c = f.op == VR_OP_RESHAPE
                    ? vr_graph_view(g, in[0], name, g->tensors[o].ndim, g->tensors[o].shape, 0)
                    : vr_graph_tensor_like(g, name, o, g->tensors[o].dtype, VR_ROLE_ACT);
        if (c < 0)
            return;
        g->tensors[c].producer = id;
        g->nodes[id].out[k] = c;
        if (r->dropped[o])
            r->copy[o] = c;
    }
    vr_graph_attach_scratch(g, id);
}

int vr_recomp_get(vr_recomp *r, int t)
{
    if (!r || t < 0 || t >= r->n0 || !r->dropped[t])
        return t;
    if (r->copy[t] < 0 && r->g->tensors[t].producer >= 0 && !r->g->err)
        emit(r, r->g->tensors[t].producer);
    return r->copy[t] >= 0 ? r->copy[t] : t;
}

void vr_recomp_before(vr_recomp *r, int n)
{
    if (!r || r->policy != VR_RECOMPUTE_BLOCK)
        return;
    vr_graph *g = r->g;
    int layer = g->nodes[n].layer;
    if (layer < 0 || layer == r->block)
        return;
    r->block = layer;
    /* everything this block's backward will read, made again now, in forward order */
    for (int m = 0; m < g->n_forward; m++) {
        if (g->nodes[m].layer != layer || !r->bwd_needed[m])
            continue;
        bool in_ng[VR_NODE_MAX_IN];
        for (int k = 0; k < VR_NODE_MAX_IN; k++) {
            int t = g->nodes[m].in[k];
            in_ng[k] = t >= 0 && t < r->n0 && r->needs_grad[t];
        }
        int reads[VR_NODE_MAX_IN];
        vr_backward_reads(g, m, in_ng, reads);
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            vr_recomp_get(r, reads[k]);
    }
}
