/* vram plan — the static arena: an exact byte offset for every tensor.
 *
 * Layout: [persistent region | packed region].
 *   The persistent region holds the tensors that live for the whole step
 *   (params, master, optim, accumulated grads, library workspace), one after
 *   another in tensor order, so the parameter buffer comes first.
 *   The packed region holds everything else. Offsets come from greedy-by-size
 *   interval packing: tensors sorted by size (largest first; ties: earlier
 *   first use, then id), each placed at the smallest gap, among the tensors
 *   already placed whose lifetimes overlap its own, that fits it (best fit;
 *   the lowest such gap on ties), or on top of them when none does. Tensors
 *   whose lifetimes do not overlap may share bytes; tensors whose lifetimes
 *   overlap never do. The region is at least the aligned peak of the live
 *   bytes (at the peak node all of them are disjoint); vr_plan_arena_factor
 *   says how close the packing comes to it.
 *   A tensor computed in place occupies its base's bytes: the packing places
 *   bases, each live from its first use to the last use of any tensor on it.
 * Host tensors (offload) are not in it: they lie one after another in a host arena of their own. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

typedef struct span {
    uint64_t off, end;
} span;

typedef struct key {
    uint64_t size;
    int first, id;
} key;

static int by_size(const void *a, const void *b)
{
    const key *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool lifetimes_overlap(const vr_plan_tensor *a, const vr_plan_tensor *b)
{
    return a->first <= b->last && b->first <= a->last;
}

static bool spans_overlap(int f1, int l1, int f2, int l2) { return f1 <= l2 && f2 <= l1; }

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

    /* The placed tensors are kept sorted by offset (one array per field, scanned in a tight loop), so the
     * gap search is one pass over them with no sort per tensor: ties in offset do not change the result
     * (a gap opens only where a span starts past every earlier end). */
    key *order = malloc(sizeof(key) * ((size_t)T + 1));
    span *spans = malloc(sizeof(span) * ((size_t)T + 1));
    int *life = malloc(sizeof(int) * 2 * ((size_t)T + 1)); /* first, unit last of each placed, by offset */
    int *ulast = vr__plan_unit_last(p);
    if (!order || !spans || !life || !ulast) {
        free(order);
        free(spans);
        free(life);
        free(ulast);
        return vr_error(VR_ERR_OOM, "plan: out of host memory");
    }
    int n = 0, np = 0;
    for (int t = 0; t < T; t++)
        if (g->tensors[t].view_of < 0 && !p->tensors[t].persistent && p->tensors[t].first >= 0 &&
            p->tensors[t].base == t)
            order[n++] = (key){p->tensors[t].size, p->tensors[t].first, t};
    qsort(order, (size_t)n, sizeof(key), by_size);
    uint64_t top = 0;
    for (int i = 0; i < n; i++) {
        int id = order[i].id;
        vr_plan_tensor *pt = &p->tensors[id];
        int f = pt->first, l = ulast[id];
        uint64_t cursor = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
        for (int j = 0; j < np; j++) {
            if (!spans_overlap(f, l, life[2 * j], life[2 * j + 1]))
                continue;
            if (spans[j].off > cursor) {
                uint64_t gap = spans[j].off - cursor;
                if (gap >= pt->size && gap < best_gap) {
                    best_gap = gap;
                    best = cursor;
                }
            }
            if (spans[j].end > cursor)
                cursor = spans[j].end;
        }
        pt->offset = best != UINT64_MAX ? best : cursor;
        if (pt->offset + pt->size > top)
            top = pt->offset + pt->size;
        /* insert after the placed spans at offsets <= this one */
        int lo = 0, hi = np;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (spans[mid].off <= pt->offset)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(spans + lo + 1, spans + lo, (size_t)(np - lo) * sizeof *spans);
        memmove(life + 2 * (lo + 1), life + 2 * lo, (size_t)(np - lo) * 2 * sizeof *life);
        spans[lo] = (span){pt->offset, pt->offset + pt->size};
        life[2 * lo] = f;
        life[2 * lo + 1] = l;
        np++;
    }
    for (int i = 0; i < n; i++)
        p->tensors[order[i].id].offset += p->persistent_size;
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
    free(order);
    free(spans);
    free(life);
    free(ulast);
    return VR_OK;
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
        for (int u = t + 1; u < T; u++) {
            const vr_plan_tensor *b = &p->tensors[u];
            if (g->tensors[u].view_of >= 0 || b->first < 0 || !lifetimes_overlap(a, b) || a->base == b->base ||
                a->host != b->host)
                continue;
            if (a->offset < b->offset + b->size && b->offset < a->offset + a->size)
                return vr_error(VR_ERR_INVALID, "arena: %s [%llu,%llu) and %s [%llu,%llu) overlap in memory while "
                                "both live (nodes %d..%d and %d..%d)", g->tensors[t].name,
                                (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size),
                                g->tensors[u].name, (unsigned long long)b->offset,
                                (unsigned long long)(b->offset + b->size), a->first, a->last, b->first, b->last);
        }
    }
    if (p->arena_size < p->peak_aligned)
        return vr_error(VR_ERR_INVALID, "arena: %llu bytes, less than the aligned peak %llu",
                        (unsigned long long)p->arena_size, (unsigned long long)p->peak_aligned);
    return VR_OK;
}

double vr_plan_arena_factor(const vr_plan *p)
{
    return p->peak_aligned ? (double)p->arena_size / (double)p->peak_aligned : 1.0;
}
