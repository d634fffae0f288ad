/* vram plan layer — the steps of vr_plan_create, one file each (not public). */
#ifndef VRAM_PLAN_INTERNAL_H
#define VRAM_PLAN_INTERNAL_H

#include "vram/plan.h"

/* lifetime.c: first/last node, resolved role and bytes of every tensor; the
 * timeline, the peaks and the per-role totals. */
vr_status vr__plan_lifetimes(vr_plan *p);

/* arena.c: offsets in the static arena. */
vr_status vr__plan_arena(vr_plan *p);

/* dynamic.c: the replay through the caching allocator. */
vr_status vr__plan_dynamic(vr_plan *p);

/* For every base tensor (tensors[t].base == t, owning storage, used): the
 * last node any tensor on its bytes is live; -1 elsewhere. Caller frees. */
int *vr__plan_unit_last(const vr_plan *p);

static inline uint64_t vr__align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

#endif
