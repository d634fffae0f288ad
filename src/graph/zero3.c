/* vram graph — ZeRO-3: each trainable parameter held by its owner only.
 *
 * Under ZeRO 3 (vr_step_config.zero, with ranks) a trainable parameter lives on its owner alone (the owner of
 * its master and optimizer state: whole parameters, vr_graph_assign_owners). Before every node outside the
 * optimizer that reads such a parameter, a gather node gives every rank a copy of it (the owner sends) in a
 * temporary of the parameter's shape, role params, which dies after that node; the node reads the copy. So a
 * weight is gathered once in the forward, once more in the backward (and in a recompute). The parameter buffer then holds this rank's
 * parameters (and the frozen ones, which every rank keeps) in buffer order; the other parameter tensors stop
 * being views of it and, read by no node, take no memory. Their param_offset still places every parameter in
 * the model's flat weights (initialisation and checkpoints see all of them).
 *
 * The gathers are the same nodes in the same order on every rank (only their input differs: the parameter on
 * its owner, none elsewhere). Each is placed one layer ahead of its reader (prefetch), so that on a GPU the
 * next layer's weights arrive while this one computes (exec/cuda_comm.h); the plan counts the copies from
 * there, so a rank holds its share plus about two layers' weights. */
#include <stdio.h>
#include <stdlib.h>

#include "graph/graph_internal.h"

/* The gathers for node i's reads of sharded parameters (one per parameter, whatever the slots reading it). */
static void gather_reads(vr_graph *g, const vr_step_config *s, int i, const bool *sharded, int *reader, int *na)
{
    for (int k = 0; k < VR_NODE_MAX_IN && !g->err; k++) {
        int p = g->nodes[i].in[k];
        if (p < 0 || !sharded[p])
            continue;
        vr_tensor pt = g->tensors[p]; /* vr_graph_tensor may move g->tensors */
        char name[VR_NAME_MAX];
        snprintf(name, sizeof name, "gathered.%.48s", pt.name);
        int copy = vr_graph_tensor(g, name, pt.dtype, VR_ROLE_PARAM, pt.ndim, pt.shape);
        snprintf(name, sizeof name, "gather.%.48s", pt.name);
        int id = vr_graph_node(g, VR_OP_GATHER, g->nodes[i].phase, name);
        if (copy < 0 || id < 0)
            return;
        g->tensors[copy].persistent = false;
        g->nodes[id].in[0] = pt.owner == s->rank ? p : -1;
        g->nodes[id].out[0] = copy;
        g->nodes[id].root = pt.owner;
        g->nodes[id].layer = g->nodes[i].layer;
        g->tensors[copy].producer = id;
        for (int j = k; j < VR_NODE_MAX_IN; j++)
            if (g->nodes[i].in[j] == p)
                g->nodes[i].in[j] = copy;
        reader[(*na)++] = i;
    }
}

/* Where the gathers go (reader[u]: the node that reads gather u's copy, non-decreasing; turned into the node
 * each is placed after): one layer ahead, i.e. K gathers earlier, K the most gathers of one layer's forward:
 * gather u right after the reader of gather u - K (the first K before the first node), and before its own. */
static void prefetch(const vr_graph *g, int N, int *reader, int na)
{
    int *per = calloc((size_t)N + 1, sizeof(int)), K = 1;
    for (int u = 0; per && u < na; u++) {
        const vr_node *r = &g->nodes[reader[u]];
        if (r->phase == VR_PHASE_FORWARD && r->layer >= 0 && r->layer < N && ++per[r->layer] > K)
            K = per[r->layer];
    }
    free(per);
    for (int u = na - 1; u >= 0; u--) { /* from the end: reader[u - K] is still a reader */
        int early = u >= K ? reader[u - K] : -1;
        reader[u] = early < reader[u] - 1 ? early : reader[u] - 1;
    }
}

vr_status vr_graph_zero3(vr_graph *g, const vr_step_config *s)
{
    if (g->err || g->params < 0)
        return g->err;
    int T = g->n_tensors, N = g->n_nodes;
    int *order = malloc(sizeof(int) * (size_t)(T + 1));
    bool *sharded = calloc((size_t)T + 1, sizeof(bool));
    int *after = NULL;
    if (!order || !sharded) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        goto out;
    }
    int no = vr_graph_param_order(g, T, order);
    if (no < 0)
        goto out;
    vr_graph_assign_owners(g, s, order, no);
    int reads = 0;
    for (int k = 0; k < no; k++)
        sharded[order[k]] = g->tensors[order[k]].owner >= 0;
    for (int i = 0; i < N; i++) {
        const vr_node *n = &g->nodes[i];
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            reads += n->in[k] >= 0 && sharded[n->in[k]] && n->phase != VR_PHASE_OPTIMIZER;
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (n->out[k] >= 0 && sharded[n->out[k]] && n->phase != VR_PHASE_OPTIMIZER) {
                vr_graph_fail(g, VR_ERR_INVALID, "zero: stage 3: node %s writes parameter %s outside the optimizer",
                              n->name, g->tensors[n->out[k]].name);
                goto out;
            }
    }
    if (!(after = malloc(sizeof(int) * (size_t)(reads + 1)))) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        goto out;
    }
    int na = 0;
    for (int i = 0; i < N && !g->err; i++)
        if (g->nodes[i].phase != VR_PHASE_OPTIMIZER)
            gather_reads(g, s, i, sharded, after, &na);
    prefetch(g, N, after, na);
    if (!g->err)
        vr_graph_place_after(g, N, after);
    /* the parameter buffer: this rank's parameters and the frozen ones, in buffer order */
    int64_t off = 0;
    for (int k = 0; k < no && !g->err; k++) {
        vr_tensor *x = &g->tensors[order[k]];
        if (sharded[order[k]] && x->owner != s->rank) {
            x->view_of = -1;
            x->view_offset = 0;
            x->persistent = false;
            continue;
        }
        x->view_offset = off;
        off += vr_tensor_numel(x);
    }
    if (!g->err && off == 0)
        vr_graph_fail(g, VR_ERR_INVALID, "zero: stage 3: rank %d of %d holds no parameter (there are fewer "
                      "parameters than ranks); use fewer ranks", s->rank, s->world);
    else if (!g->err)
        g->tensors[g->params].shape[0] = off;
out:
    free(order);
    free(sharded);
    free(after);
    return g->err;
}
