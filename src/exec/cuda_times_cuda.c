/* vram exec — every node's span on the GPU from CUDA events (see cuda_times.h). */
#include <stdlib.h>
#include <string.h>

#include "exec/cuda_times.h"
#include "vram/util.h"

#define NO_WORK 255

vr_status vr__cuda_times_init(vr_cuda_times *t, const vr_exec *e, bool copy, const vr_cuda_side *comms)
{
    *t = (vr_cuda_times){0};
    if (!e->cfg.device_times || e->cfg.cuda_graph)
        return VR_OK;
    const vr_graph *g = e->g;
    int n = g->n_nodes, passes = g->step.train && g->step.accum > 1 ? g->step.accum : 1;
    size_t np = (size_t)passes * (size_t)n;
    t->n = n;
    t->passes = passes;
    t->ev = calloc(2 * np + 1, sizeof *t->ev);
    t->rec = calloc(np + 1, 1);
    t->lane = calloc((size_t)n + 1, 1);
    t->ns = calloc(2 * np + 1, sizeof *t->ns);
    if (!t->ev || !t->rec || !t->lane || !t->ns) {
        vr__cuda_times_free(t);
        return vr_error(VR_ERR_OOM, "exec: device times: out of host memory");
    }
    for (int i = 0; i < n; i++) {
        const vr_node *nd = &g->nodes[i];
        t->lane[i] = nd->host || nd->op == VR_OP_RESHAPE                 ? NO_WORK
                     : nd->op == VR_OP_COPY && copy                       ? VR_CUDA_LANE_COPY
                     : comms->stream && comms->done && comms->done[i] ? VR_CUDA_LANE_COMM
                                                                          : VR_CUDA_LANE_COMPUTE;
    }
    vr_status st = vr_cuda_events_create(&t->start, 1);
    if (st) {
        t->start = NULL;
        vr__cuda_times_free(t);
    }
    return st;
}

void vr__cuda_times_free(vr_cuda_times *t)
{
    size_t np = (size_t)t->passes * (size_t)t->n;
    for (size_t k = 0; t->ev && k < 2 * np; k++)
        if (t->ev[k])
            vr_cuda_events_destroy(&t->ev[k], 1);
    if (t->start)
        vr_cuda_events_destroy(&t->start, 1);
    free(t->ev);
    free(t->rec);
    free(t->lane);
    free(t->ns);
    *t = (vr_cuda_times){0};
}

static bool on(const vr_cuda_times *t, int i, int p)
{
    return t->start && i >= 0 && i < t->n && p >= 0 && p < t->passes && t->lane[i] != NO_WORK;
}

/* Node i's pair of pass p, made when first used. */
static vr_status pair(vr_cuda_times *t, int i, int p, void ***ev)
{
    void **e = &t->ev[2 * ((size_t)p * (size_t)t->n + (size_t)i)];
    vr_status st = VR_OK;
    for (int k = 0; k < 2 && !st; k++)
        if (!e[k] && (st = vr_cuda_events_create(&e[k], 1)))
            e[k] = NULL;
    *ev = e;
    return st;
}

vr_status vr__cuda_times_before(vr_cuda_times *t, const vr_cuda_ctx *ctx, int i, int p)
{
    if (!t->start)
        return VR_OK;
    if (i == 0 && p == 0) { /* a step starts: the anchor */
        memset(t->rec, 0, (size_t)t->passes * (size_t)t->n);
        t->read = t->ok = false;
        vr_status st = vr_cuda_event_record(ctx, t->start);
        if (!st)
            st = vr_cuda_event_wait(t->start);
        if (st)
            return st;
        t->host_t0 = vr_now_ns();
    }
    if (!on(t, i, p) || t->lane[i] != VR_CUDA_LANE_COMPUTE)
        return VR_OK;
    void **e;
    vr_status st = pair(t, i, p, &e);
    return st ? st : vr_cuda_event_record(ctx, e[0]);
}

vr_status vr__cuda_times_events(vr_cuda_times *t, int i, int p, void **before, void **after)
{
    *before = *after = NULL;
    if (!on(t, i, p) || t->lane[i] == VR_CUDA_LANE_COMPUTE)
        return VR_OK;
    void **e;
    vr_status st = pair(t, i, p, &e);
    if (!st) {
        *before = e[0];
        *after = e[1];
    }
    return st;
}

vr_status vr__cuda_times_after(vr_cuda_times *t, const vr_cuda_ctx *ctx, int i, int p, bool work)
{
    if (!on(t, i, p))
        return VR_OK;
    vr_status st = VR_OK;
    if (t->lane[i] == VR_CUDA_LANE_COMPUTE) {
        void **e;
        if ((st = pair(t, i, p, &e)) || (st = vr_cuda_event_record(ctx, e[1])))
            return st;
    }
    t->rec[(size_t)p * (size_t)t->n + (size_t)i] = work;
    return st;
}

/* The step's spans: the host waits for each after event (the first waits for the GPU, the rest are done),
 * then each event's time from the start. */
static bool read_step(vr_cuda_times *t)
{
    if (t->read)
        return t->ok;
    t->read = true;
    size_t np = (size_t)t->passes * (size_t)t->n;
    for (size_t k = 0; k < np; k++) {
        if (!t->rec[k])
            continue;
        float a = 0, b = 0;
        if (vr_cuda_event_wait(t->ev[2 * k + 1]) || vr_cuda_event_elapsed(t->start, t->ev[2 * k], &a) ||
            vr_cuda_event_elapsed(t->start, t->ev[2 * k + 1], &b))
            return false;
        t->ns[2 * k] = t->host_t0 + (uint64_t)(a > 0 ? (double)a * 1e6 : 0);
        t->ns[2 * k + 1] = t->host_t0 + (uint64_t)(b > 0 ? (double)b * 1e6 : 0);
    }
    t->ok = true;
    return true;
}

bool vr__cuda_times_span(vr_cuda_times *t, int i, int p, uint64_t *t0, uint64_t *t1, int *lane)
{
    if (!on(t, i, p) || !t->rec[(size_t)p * (size_t)t->n + (size_t)i] || !read_step(t))
        return false;
    size_t k = (size_t)p * (size_t)t->n + (size_t)i;
    *t0 = t->ns[2 * k];
    *t1 = t->ns[2 * k + 1];
    *lane = t->lane[i];
    return true;
}
