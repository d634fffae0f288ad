/* vram plan — vr_plan_create: lifetimes, then the arena, then (dynamic mode) the replay. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

vr_status vr_plan_create(const vr_graph *g, const vr_plan_config *config, vr_plan **out)
{
    *out = NULL;
    if (!g || g->err)
        return vr_error(VR_ERR_INVALID, "plan: the graph is missing or failed to build");
    vr_plan_config c = {0};
    if (config)
        c = *config;
    uint64_t align = c.align ? c.align : VR_PLAN_ALIGN;
    if (align & (align - 1))
        return vr_error(VR_ERR_INVALID, "plan: alignment %llu is not a power of two", (unsigned long long)align);
    vr_plan *p = calloc(1, sizeof *p);
    if (!p)
        return vr_error(VR_ERR_OOM, "plan: out of host memory");
    p->graph = g;
    p->config = c;
    p->align = align;
    p->n_tensors = g->n_tensors;
    p->n_nodes = g->n_nodes;
    p->tensors = calloc((size_t)g->n_tensors + 1, sizeof *p->tensors);
    p->live = calloc(((size_t)g->n_nodes + 1) * VR_ROLE_COUNT, sizeof *p->live);
    p->live_aligned = calloc((size_t)g->n_nodes + 1, sizeof *p->live_aligned);
    vr_status st = VR_OK;
    if (!p->tensors || !p->live || !p->live_aligned)
        st = vr_error(VR_ERR_OOM, "plan: out of host memory");
    if (!st)
        st = vr__plan_lifetimes(p);
    if (!st)
        st = vr__plan_arena(p);
    if (!st && c.memory == VR_MEMORY_DYNAMIC) {
        p->has_dynamic = true;
        st = vr__plan_dynamic(p);
    }
    if (st) {
        vr_plan_free(p);
        return st;
    }
    *out = p;
    return VR_OK;
}

void vr_plan_free(vr_plan *p)
{
    if (!p)
        return;
    free(p->tensors);
    free(p->live);
    free(p->live_aligned);
    free(p->dynamic.allocated);
    free(p->dynamic.reserved);
    free(p->dynamic.snapshot);
    free(p);
}
