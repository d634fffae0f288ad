/* vram plan — lifetimes, resolved roles, the live-bytes timeline and the peak.
 *
 * A storage tensor is live during node i when first <= i <= last, where first
 * and last are the first and last node referring to it or to a view of it (as
 * an input, an output or the node's scratch). Persistent tensors are live
 * during every node, inputs from node 0, outputs up to the last node. So a
 * tensor is allocated just before the node that first needs it and freed
 * right after the node that last needs it, and "live during node i" is exactly
 * what is allocated while node i runs.
 *
 * In place (opt-in): a gelu, relu or add (forward or recompute) whose input
 * dies at that node and has the output's dtype and size writes its output
 * over it. The output then sits on the input's base; it is counted from the
 * node after (during the node the bytes are the input's), so the live bytes
 * never count the shared bytes twice. */
#include <stdlib.h>
#include <string.h>

#include "vram/util.h"
#include "plan/plan_internal.h"

static void touch(vr_plan *p, int t, int node)
{
    int s = vr_graph_storage(p->graph, t);
    vr_plan_tensor *pt = &p->tensors[s];
    if (pt->first < 0 || node < pt->first)
        pt->first = node;
    if (node > pt->last)
        pt->last = node;
}

/* May node i write its output over x (an input that dies there)? */
static bool can_overwrite(const vr_plan *p, int i, int x, int o)
{
    const vr_graph *g = p->graph;
    if (x < 0 || o < 0 || x == o || g->tensors[x].view_of >= 0 || g->tensors[o].view_of >= 0)
        return false;
    const vr_tensor *tx = &g->tensors[x], *to = &g->tensors[o];
    bool scratch_role = tx->role == VR_ROLE_ACT || tx->role == VR_ROLE_TEMP;
    return scratch_role && !tx->persistent && !tx->output && !to->persistent && !to->output &&
           tx->dtype == to->dtype && vr_tensor_numel(tx) == vr_tensor_numel(to) && p->tensors[x].last == i &&
           p->tensors[o].first == i;
}

static void reuse_in_place(vr_plan *p)
{
    const vr_graph *g = p->graph;
    for (int i = 0; i < p->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if ((n->phase != VR_PHASE_FORWARD && n->phase != VR_PHASE_RECOMPUTE) ||
            (n->op != VR_OP_GELU && n->op != VR_OP_RELU && n->op != VR_OP_ADD))
            continue;
        for (int k = 0; k < (n->op == VR_OP_ADD ? 2 : 1); k++)
            if (can_overwrite(p, i, n->in[k], n->out[0])) {
                p->tensors[n->out[0]].base = p->tensors[n->in[k]].base;
                p->n_inplace++;
                break;
            }
    }
}

int *vr__plan_unit_last(const vr_plan *p)
{
    int *last = malloc(sizeof(int) * ((size_t)p->n_tensors + 1));
    if (!last)
        return NULL;
    for (int t = 0; t < p->n_tensors; t++)
        last[t] = -1;
    for (int t = 0; t < p->n_tensors; t++) {
        const vr_plan_tensor *pt = &p->tensors[t];
        if (p->graph->tensors[t].view_of < 0 && pt->first >= 0 && pt->last > last[pt->base])
            last[pt->base] = pt->last;
    }
    return last;
}

bool vr__plan_bucket(const vr_plan *p, const int *ulast, bool by_last, vr__plan_buckets *b)
{
    int N = p->n_nodes, T = p->n_tensors;
    b->start = calloc((size_t)N + 2, sizeof(int));
    b->ids = malloc(sizeof(int) * ((size_t)T + 1));
    int *fill = calloc((size_t)N + 1, sizeof(int));
    if (!b->start || !b->ids || !fill) {
        free(fill);
        return false;
    }
    for (int t = 0; t < T; t++)
        if (vr__plan_packed(p, t))
            b->start[(by_last ? ulast[t] : p->tensors[t].first) + 1]++;
    for (int i = 0; i < N; i++)
        b->start[i + 1] += b->start[i];
    for (int t = 0; t < T; t++)
        if (vr__plan_packed(p, t)) {
            int k = by_last ? ulast[t] : p->tensors[t].first;
            b->ids[b->start[k] + fill[k]++] = t;
        }
    free(fill);
    return true;
}

vr_status vr__plan_lifetimes(vr_plan *p)
{
    const vr_graph *g = p->graph;
    int T = p->n_tensors, N = p->n_nodes;
    bool *saved = calloc((size_t)T + 1, 1);
    int64_t *diff = calloc(((size_t)N + 1) * (VR_ROLE_COUNT + 1), sizeof *diff);
    if (!saved || !diff) {
        free(saved);
        free(diff);
        return vr_error(VR_ERR_OOM, "plan: out of host memory");
    }
    for (int t = 0; t < T; t++) {
        p->tensors[t].first = p->tensors[t].last = -1;
        p->tensors[t].role = g->tensors[t].role;
        p->tensors[t].base = t;
    }
    for (int i = 0; i < N; i++) {
        const vr_node *n = &g->nodes[i];
        bool reads_saved = n->phase == VR_PHASE_BACKWARD || n->phase == VR_PHASE_RECOMPUTE;
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (n->in[k] >= 0) {
                touch(p, n->in[k], i);
                if (reads_saved)
                    saved[vr_graph_storage(g, n->in[k])] = true;
            }
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (n->out[k] >= 0)
                touch(p, n->out[k], i);
        if (n->scratch >= 0)
            touch(p, n->scratch, i);
    }
        if (p->config.inplace)
        reuse_in_place(p);
    /* storage tensors: bytes, the lifetime rules, the resolved role */
    int64_t sum_size = 0;
    for (int t = 0; t < T; t++) {
        const vr_tensor *x = &g->tensors[t];
        vr_plan_tensor *pt = &p->tensors[t];
        if (x->view_of >= 0)
            continue;
        pt->bytes = vr_tensor_bytes(x);
        pt->size = vr__align_up(pt->bytes, p->align);
        /* the timeline sums these sizes in int64: a sum that fits keeps every partial sum in range */
        if (pt->size > (uint64_t)INT64_MAX || !vr_add_i64(sum_size, (int64_t)pt->size, &sum_size)) {
            free(saved);
            free(diff);
            return vr_error(VR_ERR_INVALID, "plan: tensor %s: the summed tensor bytes overflow 64 bits", x->name);
        }
        pt->persistent = x->persistent;
        if (x->persistent && N > 0) {
            pt->first = 0;
            pt->last = N - 1;
        } else if (pt->first >= 0) {
            if (x->role == VR_ROLE_INPUT)
                pt->first = 0;
            if (x->output)
                pt->last = N - 1;
        }
        if (x->role == VR_ROLE_ACT)
            pt->role = saved[t] ? VR_ROLE_ACT : VR_ROLE_TEMP;
        if (pt->first < 0)
            continue;
        pt->host = x->host;
        if (pt->host) { /* host memory: not in the device's timeline */
            p->host_count[pt->role]++;
            p->host_total[pt->role] += pt->bytes;
            continue;
        }
        p->count[pt->role]++;
        p->total[pt->role] += pt->bytes;
        int from = pt->base == t ? pt->first : pt->first + 1; /* in place: the input's until then */
        if (from > pt->last)
            continue;
        int64_t *d0 = diff + (size_t)from * (VR_ROLE_COUNT + 1);
        int64_t *d1 = diff + (size_t)(pt->last + 1) * (VR_ROLE_COUNT + 1);
        d0[pt->role] += (int64_t)pt->bytes;
        d1[pt->role] -= (int64_t)pt->bytes;
        d0[VR_ROLE_COUNT] += (int64_t)pt->size;
        d1[VR_ROLE_COUNT] -= (int64_t)pt->size;
    }
    /* views share their storage's lifetime and role */
    for (int t = 0; t < T; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of < 0)
            continue;
        const vr_plan_tensor *s = &p->tensors[x->view_of];
        vr_plan_tensor *pt = &p->tensors[t];
        pt->first = s->first;
        pt->last = s->last;
        pt->role = s->role;
        pt->persistent = s->persistent;
        pt->host = s->host;
        pt->base = s->base;
        pt->bytes = pt->size = 0;
    }
    /* timeline and peaks */
    int64_t run[VR_ROLE_COUNT + 1] = {0};
    p->peak_node = p->peak_aligned_node = N > 0 ? 0 : -1;
    for (int i = 0; i < N; i++) {
        uint64_t total = 0;
        for (int r = 0; r <= VR_ROLE_COUNT; r++)
            run[r] += diff[(size_t)i * (VR_ROLE_COUNT + 1) + r];
        for (int r = 0; r < VR_ROLE_COUNT; r++) {
            p->live[(size_t)i * VR_ROLE_COUNT + r] = (uint64_t)run[r];
            total += (uint64_t)run[r];
            if ((uint64_t)run[r] > p->max_live[r])
                p->max_live[r] = (uint64_t)run[r];
        }
        p->live_aligned[i] = (uint64_t)run[VR_ROLE_COUNT];
        if (total > p->peak) {
            p->peak = total;
            p->peak_node = i;
        }
        if (p->live_aligned[i] > p->peak_aligned) {
            p->peak_aligned = p->live_aligned[i];
            p->peak_aligned_node = i;
        }
    }
    if (N > 0)
        for (int r = 0; r < VR_ROLE_COUNT; r++)
            p->at_peak[r] = p->live[(size_t)p->peak_node * VR_ROLE_COUNT + r];
    free(saved);
    free(diff);
    return VR_OK;
}

uint64_t vr_plan_live(const vr_plan *p, int node, int role)
{
    if (node < 0 || node >= p->n_nodes)
        return 0;
    if (role >= 0 && role < VR_ROLE_COUNT)
        return p->live[(size_t)node * VR_ROLE_COUNT + role];
    uint64_t s = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        s += p->live[(size_t)node * VR_ROLE_COUNT + r];
    return s;
}
