/* vram graph — ZeRO-3: each trainable parameter held by its owner only.
 *
 * Under ZeRO 3 (vr_step_config.zero, with ranks) a trainable parameter, or each piece of one cut at the ranks'
 * shares, lives on its owner alone (the owner of its master and optimizer state: vr_graph_assign_owners, as
 * vr_optimizer_state set them; a no-grad graph's are assigned here, the same). Before every node outside the
 * optimizer that reads such a parameter, a gather node gives every rank a copy of it in a temporary of the
 * parameter's shape, role params, which dies after that node; the node reads the copy. Each part of a gather
 * (a whole parameter, or a piece: node.part) is sent by its own owner, so a split parameter is assembled from
 * its pieces. So a weight is gathered once in the forward, once more in the backward (and in a recompute). The
 * parameter buffer then holds this rank's parameters and pieces (and the frozen parameters, which every rank
 * keeps) in buffer order; the other parameter tensors (and the split ones) stop being views of it and, read by
 * no node, take no memory. Their param_offset still places every parameter in the model's flat weights
 * (initialisation and checkpoints see all of them).
 *
 * The gathers are the same nodes in the same order on every rank (only their inputs differ: a part on its
 * owner, none elsewhere). Each is placed one layer ahead of its reader (prefetch), so that on a GPU the
 * next layer's weights arrive while this one computes (exec/cuda_comm.h); the plan counts the copies from
 * there, so a rank holds its share plus about two layers' weights. */
#include <stdio.h>
#include <stdlib.h>

#include "graph/graph_internal.h"

typedef struct use {
    int reader, param; /* node reader reads sharded parameter param (one entry per parameter a node reads) */
} use;

/* The reads of sharded parameters by the nodes outside the optimizer, in node order; their count. */
static int find_uses(const vr_graph *g, const bool *sharded, use *u)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *nd = &g->nodes[i];
        if (nd->phase == VR_PHASE_OPTIMIZER)
            continue;
        for (int k = 0; k < VR_NODE_MAX_IN; k++) {
            int p = nd->in[k], seen = 0;
            for (int j = 0; j < k; j++)
                seen |= nd->in[j] == p;
            if (p >= 0 && sharded[p] && !seen)
                u[n++] = (use){i, p};
        }
    }
    return n;
}

/* K: the most reads of one layer's forward (the prefetch distance: one layer). */
static int layer_reads(const vr_graph *g, const use *u, int nu)
{
    int *per = calloc((size_t)g->n_nodes + 1, sizeof(int)), K = 1;
    for (int k = 0; per && k < nu; k++) {
        const vr_node *r = &g->nodes[u[k].reader];
        if (r->phase == VR_PHASE_FORWARD && r->layer >= 0 && r->layer < g->n_nodes && ++per[r->layer] > K)
            K = per[r->layer];
    }
    free(per);
    return K;
}

/* The parts of parameter p, which a gather assembles: its pieces (split: part[p]..part[p]+nparts[p]-1 of the
 * parameter order), or itself. */
typedef struct parts {
    const int *order; /* the parameter order (pieces in place of split parameters) */
    int *first, *count; /* per tensor: its first part's index in order, and how many */
} parts;

static int part_count(const parts *pp, int p) { return pp->count[p] > 0 ? pp->count[p] : 1; }
static int part_of(const parts *pp, int p, int j) { return pp->count[p] > 0 ? pp->order[pp->first[p] + j] : p; }

/* One gather for the reads u[a..b) (one dtype, at most VR_NODE_MAX_IN parts): a flat copy of their parameters in
 * that order (a split one's pieces one after the other make it whole), each reader rewired to its parameter's
 * view of it; placed after node `at`. */
static void gather_chunk(vr_graph *g, const vr_step_config *s, const parts *pp, const use *u, int a, int b, int at,
                         int *after, int *na)
{
    vr_tensor p0 = g->tensors[u[a].param];
    int64_t n = 0;
    for (int k = a; k < b; k++)
        n += vr_tensor_numel(&g->tensors[u[k].param]);
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "gathered.%.48s%s", p0.name, b - a > 1 ? "+" : "");
    int64_t shape[1] = {n};
    int flat = vr_graph_tensor(g, name, p0.dtype, VR_ROLE_PARAM, 1, shape);
    snprintf(name, sizeof name, "gather.%.48s%s", p0.name, b - a > 1 ? "+" : "");
    int id = vr_graph_node(g, VR_OP_GATHER, g->nodes[u[a].reader].phase, name);
    if (flat < 0 || id < 0)
        return;
    g->tensors[flat].persistent = false;
    g->tensors[flat].producer = id;
    g->nodes[id].out[0] = flat;
    g->nodes[id].layer = g->nodes[u[a].reader].layer;
    int64_t off = 0;
    for (int k = a, slot = 0; k < b && !g->err; k++) {
        for (int j = 0; j < part_count(pp, u[k].param); j++, slot++) {
            int q = part_of(pp, u[k].param, j);
            g->nodes[id].part[slot] = q;
            g->nodes[id].in[slot] = g->tensors[q].owner == s->rank ? q : -1;
        }
        vr_tensor pt = g->tensors[u[k].param]; /* vr_graph_view may move g->tensors */
        snprintf(name, sizeof name, "gathered.%.48s", pt.name);
        int v = vr_graph_view(g, flat, name, pt.ndim, pt.shape, off);
        if (v < 0)
            return;
        g->tensors[v].producer = id;
        off += vr_tensor_numel(&pt);
        vr_node *r = &g->nodes[u[k].reader];
        for (int j = 0; j < VR_NODE_MAX_IN; j++)
            if (r->in[j] == u[k].param)
                r->in[j] = v;
    }
    g->nodes[id].root = g->tensors[g->nodes[id].part[0]].owner; /* (each part has its own) */
    after[(*na)++] = at;
}

/* The gathers: consecutive reads of one dtype whose parts (parameters, or a split parameter's pieces, which always
 * go together) continue one owner's run, up to VR_NODE_MAX_IN parts, share one (fewer, larger broadcasts; runs
 * of one owner keep the copies short-lived); each is placed one layer ahead of its first reader (after the
 * reader K reads earlier, the first K before node 0) and before it. */
static void gathers(vr_graph *g, const vr_step_config *s, const parts *pp, const use *u, int nu, int *after, int *na)
{
    int K = layer_reads(g, u, nu);
    for (int a = 0, b; a < nu && !g->err; a = b) {
        const vr_tensor *pa = &g->tensors[u[a].param];
        int slots = part_count(pp, u[a].param);
        if (slots > VR_NODE_MAX_IN) {
            vr_graph_fail(g, VR_ERR_INVALID, "zero: stage 3: parameter %s is cut into %d pieces, more than one "
                          "gather assembles (%d); use fewer ranks", pa->name, slots, VR_NODE_MAX_IN);
            return;
        }
        for (b = a + 1; b < nu; b++) {
            const vr_tensor *pb = &g->tensors[u[b].param];
            int last = part_of(pp, u[b - 1].param, part_count(pp, u[b - 1].param) - 1), next = part_of(pp, u[b].param, 0);
            if (pb->dtype != pa->dtype || slots + part_count(pp, u[b].param) > VR_NODE_MAX_IN ||
                g->tensors[next].owner != g->tensors[last].owner)
                break;
            slots += part_count(pp, u[b].param);
        }
        int early = a >= K ? u[a - K].reader : -1;
        gather_chunk(g, s, pp, u, a, b, early < u[a].reader - 1 ? early : u[a].reader - 1, after, na);
    }
}

vr_status vr_graph_zero3(vr_graph *g, const vr_step_config *s)
{
    if (g->err || g->params < 0)
        return g->err;
    /* a training graph's owners (and pieces) are those its optimizer state was made for (vr_optimizer_state
     * assigned them); a no-grad graph has none yet, so they are assigned here, as a training graph's would be */
    bool owned = false;
    for (int t = 0; t < g->n_tensors && !owned; t++)
        owned = g->tensors[t].param_offset >= 0 && g->tensors[t].owner >= 0;
    if (!owned)
        vr_graph_assign_owners(g, s);
    int T = g->n_tensors, N = g->n_nodes;
    int *order = malloc(sizeof(int) * (size_t)(T + 1));
    bool *sharded = calloc((size_t)T + 1, sizeof(bool));
    parts pp = {order, calloc((size_t)T + 1, sizeof(int)), calloc((size_t)T + 1, sizeof(int))};
    int *after = NULL;
    use *uses = NULL;
    if (!order || !sharded || !pp.first || !pp.count) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        goto out;
    }
    int no = g->err ? -1 : vr_graph_param_order(g, T, order);
    if (no < 0)
        goto out;
    for (int k = 0; k < no; k++) { /* what the nodes read: whole parameters, or the split ones of the pieces */
        const vr_tensor *x = &g->tensors[order[k]];
        if (x->owner < 0)
            continue;
        int p = x->piece_of >= 0 ? x->piece_of : order[k];
        sharded[p] = true;
        if (x->piece_of >= 0 && pp.count[p]++ == 0)
            pp.first[p] = k;
    }
    for (int i = 0; i < N; i++) {
        const vr_node *n = &g->nodes[i];
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (n->out[k] >= 0 && sharded[n->out[k]] && n->phase != VR_PHASE_OPTIMIZER) {
                vr_graph_fail(g, VR_ERR_INVALID, "zero: stage 3: node %s writes parameter %s outside the optimizer",
                              n->name, g->tensors[n->out[k]].name);
                goto out;
            }
    }
    uses = malloc(sizeof(use) * ((size_t)N * VR_NODE_MAX_IN + 1));
    after = malloc(sizeof(int) * ((size_t)N * VR_NODE_MAX_IN + 1));
    if (!uses || !after) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        goto out;
    }
    int na = 0;
    gathers(g, s, &pp, uses, find_uses(g, sharded, uses), after, &na);
    if (!g->err)
        vr_graph_place_after(g, N, after);
    /* the parameter buffer: this rank's parameters and pieces and the frozen ones, in buffer order */
    int64_t off = 0;
    for (int k = 0; k < no && !g->err; k++) {
        vr_tensor *x = &g->tensors[order[k]];
        if (x->owner >= 0 && x->owner != s->rank) {
            x->view_of = -1;
            x->view_offset = 0;
            x->persistent = false;
            continue;
        }
        x->view_offset = off;
        off += vr_tensor_numel(x);
    }
    for (int t = 0; t < T && !g->err; t++) /* a split parameter is whole in its gathered copies only */
        if (g->tensors[t].split) {
            g->tensors[t].view_of = -1;
            g->tensors[t].view_offset = 0;
            g->tensors[t].persistent = false;
        }
    if (!g->err && off == 0)
        vr_graph_fail(g, VR_ERR_INVALID, "zero: stage 3: rank %d of %d holds no parameter (there are fewer "
                      "parameters than ranks); use fewer ranks", s->rank, s->world);
    else if (!g->err)
        g->tensors[g->params].shape[0] = off;
out:
    free(order);
    free(sharded);
    free(pp.first);
    free(pp.count);
    free(after);
    free(uses);
    return g->err;
}
