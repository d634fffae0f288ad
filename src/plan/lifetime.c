/* vram plan — lifetimes, resolved roles, the live-bytes timeline and the peak.
 *
 * A storage tensor is live during node i when first <= i <= last, where first
 * and last are the first and last node referring to it or to a view of it (as
 * an input, an output or the node's scratch). Persistent tensors are live
 * during every node, inputs from node 0, outputs up to the last node. So a
 * tensor is allocated just before the node that first needs it and freed
 * right after the node that last needs it, and "live during node i" is exactly
 * what is allocated while node i runs. */
#include <stdlib.h>
#include <string.h>

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
    /* storage tensors: bytes, the lifetime rules, the resolved role */
    for (int t = 0; t < T; t++) {
        const vr_tensor *x = &g->tensors[t];
        vr_plan_tensor *pt = &p->tensors[t];
        if (x->view_of >= 0)
            continue;
        pt->bytes = vr_tensor_bytes(x);
        pt->size = vr__align_up(pt->bytes, p->align);
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
        p->count[pt->role]++;
        p->total[pt->role] += pt->bytes;
        int64_t *d0 = diff + (size_t)pt->first * (VR_ROLE_COUNT + 1);
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
