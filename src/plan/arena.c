/* vram plan — the static arena: an exact byte offset for every tensor.
 *
 * Layout: [persistent region | packed region].
 *   The persistent region holds the tensors that live for the whole step
 *   (params, master, optim, accumulated grads, library workspace), one after
 *   another in tensor order, so the parameter buffer comes first.
 *   The packed region holds everything else, packed by lifetime (src/plan/pack.c): tensors whose
 *   lifetimes do not overlap may share bytes; tensors whose lifetimes overlap never do. The region is
 *   at least the aligned peak of the live bytes (at the peak node all of them are disjoint);
 *   vr_plan_arena_factor says how close the packing comes to it.
 *   A tensor computed in place occupies its base's bytes: the packing places
 *   bases, each live from its first use to the last use of any tensor on it.
 * Host tensors (offload) are not in it: they lie one after another in a host arena of their own. */
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"
#include "alloc/tree.h"
#include "plan/plan_internal.h"

vr_status vr__plan_arena(vr_plan *p)
{
    const vr_graph *g = p->graph;
    int T = p->n_tensors;
    uint64_t off = 0, host = 0;
    for (int t = 0; t < T; t++) {
        vr_plan_tensor *pt = &p->tensors[t];
        if (g->tensors[t].view_of < 0 && pt->persistent && pt->first >= 0) {
            uint64_t *at = pt->host ? &host : &off;
            pt->offset = *at;
            *at += pt->size;
        }
    }
    p->persistent_size = off;
    p->host_size = host;

    uint64_t top = 0;
    vr_status st = vr__plan_pack(p, &top);
    if (st)
        return st;
    for (int t = 0; t < T; t++)
        if (vr__plan_packed(p, t))
            p->tensors[t].offset += p->persistent_size;
    p->arena_size = p->persistent_size + top;
    /* in place: on their base's bytes */
    for (int t = 0; t < T; t++)
        if (g->tensors[t].view_of < 0 && p->tensors[t].base != t)
            p->tensors[t].offset = p->tensors[p->tensors[t].base].offset;
    /* views: inside their storage */
    for (int t = 0; t < T; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of >= 0)
            p->tensors[t].offset = p->tensors[x->view_of].offset + (uint64_t)x->view_offset * vr_dtype_size(x->dtype);
    }
    return VR_OK;
}

/* Tensors live at the same time never share bytes: a sweep over the nodes keeps the live bases (device
 * and host apart) in an AVL tree by offset (the allocator's, src/alloc/tree.h); they are disjoint, so a
 * base joining them is checked against its two neighbours only. O(n log n). A base is live from its first
 * use to the last use of any tensor on its bytes; tensors on one base (in place) are on its bytes. */
static vr_status check_disjoint(const vr_plan *p)
{
    const vr_graph *g = p->graph;
    int T = p->n_tensors, N = p->n_nodes;
    int *ulast = vr__plan_unit_last(p);
    int *by_first = calloc((size_t)N + 2, sizeof(int)), *by_last = calloc((size_t)N + 2, sizeof(int));
    int *ids = malloc(sizeof(int) * 2 * ((size_t)T + 1));
    vr_block *nodes = calloc((size_t)T + 1, sizeof(vr_block));
    vr_status st = VR_OK;
    if (!ulast || !by_first || !by_last || !ids || !nodes) {
        st = vr_error(VR_ERR_OOM, "plan: out of host memory");
        goto out;
    }
    /* bases bucketed by first use (ids[0..T)) and by last use (ids[T..2T)); empty ones hold no byte */
    for (int t = 0; t < T; t++)
        if (ulast[t] < 0 || p->tensors[t].size == 0)
            ulast[t] = -1;
    for (int t = 0; t < T; t++)
        if (ulast[t] >= 0) {
            by_first[p->tensors[t].first + 1]++;
            by_last[ulast[t] + 1]++;
        }
    for (int i = 0; i < N; i++) {
        by_first[i + 1] += by_first[i];
        by_last[i + 1] += by_last[i];
    }
    for (int t = 0; t < T; t++)
        if (ulast[t] >= 0) {
            ids[by_first[p->tensors[t].first]++] = t;
            ids[T + by_last[ulast[t]]++] = t;
        }
    vra_tree live;
    vra_tree_init(&live, VRA_BY_ADDR);
    for (int i = 0, f = 0, l = 0; i < N && !st; i++) {
        for (; f < by_first[i] && !st; f++) {
            int t = ids[f];
            vr_block *b = &nodes[t];
            b->stream = p->tensors[t].host;
            b->addr = p->tensors[t].offset;
            b->size = p->tensors[t].size;
            vr_block *nb[2] = {vra_tree_lower_bound(&live, b), vra_tree_prev(&live, b)};
            for (int k = 0; k < 2 && !st; k++) {
                if (!nb[k] || nb[k]->stream != b->stream || nb[k]->addr >= b->addr + b->size ||
                    b->addr >= nb[k]->addr + nb[k]->size)
                    continue;
                int u = (int)(nb[k] - nodes);
                st = vr_error(VR_ERR_INVALID, "arena: %s [%llu,%llu) and %s [%llu,%llu) overlap in memory while "
                              "both live (nodes %d..%d and %d..%d)", g->tensors[u].name,
                              (unsigned long long)nb[k]->addr, (unsigned long long)(nb[k]->addr + nb[k]->size),
                              g->tensors[t].name, (unsigned long long)b->addr,
                              (unsigned long long)(b->addr + b->size), p->tensors[u].first, ulast[u],
                              p->tensors[t].first, ulast[t]);
            }
            if (!st)
                vra_tree_insert(&live, b);
        }
        for (; l < by_last[i] && !st; l++)
            vra_tree_remove(&live, &nodes[ids[T + l]]);
    }
out:
    free(ulast);
    free(by_first);
    free(by_last);
    free(ids);
    free(nodes);
    return st;
}

vr_status vr_plan_check(const vr_plan *p)
{
    const vr_graph *g = p->graph;
    int T = p->n_tensors;
    for (int t = 0; t < T; t++) {
        const vr_plan_tensor *a = &p->tensors[t];
        if (g->tensors[t].view_of >= 0 || a->first < 0)
            continue;
        if (a->base != t && (a->offset != p->tensors[a->base].offset || a->bytes != p->tensors[a->base].bytes))
            return vr_error(VR_ERR_INVALID, "arena: %s is in place over %s but not on its bytes",
                            g->tensors[t].name, g->tensors[a->base].name);
        if (a->offset % p->align || a->size % p->align || a->size < a->bytes)
            return vr_error(VR_ERR_INVALID, "arena: %s at %llu (%llu bytes) is not %llu-byte aligned",
                            g->tensors[t].name, (unsigned long long)a->offset, (unsigned long long)a->size,
                            (unsigned long long)p->align);
        uint64_t end = a->host ? p->host_size : p->arena_size;
        if (a->offset + a->size > end)
            return vr_error(VR_ERR_INVALID, "arena: %s ends at %llu, past the %s arena (%llu)", g->tensors[t].name,
                            (unsigned long long)(a->offset + a->size), a->host ? "host" : "device",
                            (unsigned long long)end);
        if (a->host && !a->persistent)
            return vr_error(VR_ERR_INVALID, "arena: host tensor %s is not persistent", g->tensors[t].name);
        if (!a->host && a->persistent != (a->offset < p->persistent_size))
            return vr_error(VR_ERR_INVALID, "arena: %s is in the wrong region", g->tensors[t].name);
    }
    vr_status st = check_disjoint(p);
    if (st)
        return st;
    if (p->arena_size < p->peak_aligned)
        return vr_error(VR_ERR_INVALID, "arena: %llu bytes, less than the aligned peak %llu",
                        (unsigned long long)p->arena_size, (unsigned long long)p->peak_aligned);
    return VR_OK;
}

double vr_plan_arena_factor(const vr_plan *p)
{
    return p->peak_aligned ? (double)p->arena_size / (double)p->peak_aligned : 1.0;
}
