/* vram plan layer — the steps of vr_plan_create, one file each (not public). */
#ifndef VRAM_PLAN_INTERNAL_H
#define VRAM_PLAN_INTERNAL_H

#include "vram/plan.h"

/* lifetime.c: first/last node, resolved role and bytes of every tensor; the
 * timeline, the peaks and the per-role totals. */
vr_status vr__plan_lifetimes(vr_plan *p);

/* arena.c: offsets in the static arena. */
vr_status vr__plan_arena(vr_plan *p);

/* pack.c: offsets of the packed tensors from 0 (greedy by size or in time order); *top = the region's
 * size. */
vr_status vr__plan_pack(vr_plan *p, uint64_t *top);

/* dynamic.c: the replay through the caching allocator. */
vr_status vr__plan_dynamic(vr_plan *p);

/* For every base tensor (tensors[t].base == t, owning storage, used): the
 * last node any tensor on its bytes is live; -1 elsewhere. Caller frees. */
int *vr__plan_unit_last(const vr_plan *p);

/* A tensor the arena packs and dynamic mode allocates per node: a base (owning storage: not a view, not
 * computed in place on another) that is used and does not live for the whole step. */
static inline bool vr__plan_packed(const vr_plan *p, int t)
{
    const vr_plan_tensor *pt = &p->tensors[t];
    return p->graph->tensors[t].view_of < 0 && !pt->persistent && pt->first >= 0 && pt->base == t;
}

/* The packed tensors bucketed by node: ids[start[i] .. start[i+1]) are those first used by node i
 * (by_last: whose bytes are last used by node i, ulast from vr__plan_unit_last). Free both arrays. */
typedef struct vr__plan_buckets {
    int *start, *ids;
} vr__plan_buckets;
bool vr__plan_bucket(const vr_plan *p, const int *ulast, bool by_last, vr__plan_buckets *b);

static inline uint64_t vr__align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

#endif
