/* vram exec — the offload copies of the CUDA backend (see cuda_copy.h). */
#include <stdlib.h>

#include "exec/cuda_copy.h"
#include "vram/util.h"

/* Events for device times: the start, one after every node, one before every copy. */
static vr_status times_init(vr_cuda_copies *c, const vr_graph *g)
{
    int N = g->n_nodes;
    c->end = calloc((size_t)N + 1, sizeof *c->end);
    c->begin = calloc((size_t)N + 1, sizeof *c->begin);
    if (!c->end || !c->begin)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    vr_status st = vr_cuda_events_create(&c->start, 1);
    for (int i = 0; i < N && !st; i++)
        if (g->nodes[i].op != VR_OP_RESHAPE && !g->nodes[i].host) {
            st = vr_cuda_events_create(&c->end[i], 1);
            if (!st && g->nodes[i].op == VR_OP_COPY)
                st = vr_cuda_events_create(&c->begin[i], 1);
        }
    return st;
}

/* A copy down: on the copy stream's chain (an offload graph has one for every copy up). */
static bool copy_down(const vr_node *n) { return n->op == VR_OP_COPY && n->phase == VR_PHASE_BACKWARD; }

vr_status vr__cuda_copies_init(vr_cuda_copies *c, const vr_exec *e)
{
    c->n_nodes = e->g->n_nodes;
    c->side = (vr_cuda_side){.last = -1};
    vr_status st = e->cfg.device_times ? times_init(c, e->g) : VR_OK;
    return st ? st : vr__cuda_side_init(&c->side, e->g, copy_down);
}

void vr__cuda_copies_free(vr_cuda_copies *c)
{
    vr__cuda_side_free(&c->side);
    for (int i = 0; c->end && i < c->n_nodes; i++) {
        vr_cuda_events_destroy(&c->end[i], c->end[i] ? 1 : 0);
        vr_cuda_events_destroy(&c->begin[i], c->begin[i] ? 1 : 0);
    }
    if (c->start)
        vr_cuda_events_destroy(&c->start, 1);
    free(c->end);
    free(c->begin);
    *c = (vr_cuda_copies){.side.last = -1};
}

vr_status vr__cuda_copy_run(vr_cuda_copies *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *after)
{
    const vr_node *n = a->node;
    int i = (int)(n - a->g->nodes);
    size_t bytes = (size_t)vr_tensor_bytes(&a->g->tensors[n->out[0]]);
    vr_cuda_side *s = &c->side;
    if (!s->stream)
        return vr_error(VR_ERR_INVALID, "cuda: copy node %s without a copy stream", n->name);
    void *begin = c->begin ? c->begin[i] : NULL, *end = c->end ? c->end[i] : NULL;
    if (!s->done[i]) /* up: the host wrote the source already */
        return vr_cuda_copy_up(s->stream, begin, end, a->out[0], a->in[0], bytes);
    if (after) {
        vr_cuda_ctx on = *ctx;
        on.stream = s->stream;
        vr_status st = vr_cuda_stream_join(&on, after);
        if (st)
            return st;
    }
    return vr_cuda_copy_down(ctx, s->stream, s->mark, vr__cuda_side_fence(s, a->g, i), begin, s->done[i], a->out[0],
                             a->in[0], bytes);
}

vr_status vr__cuda_times_before(vr_cuda_copies *c, const vr_cuda_ctx *ctx, int i, int micro)
{
    if (!c->start || i != 0 || micro != 0)
        return VR_OK;
    c->host_t0 = vr_now_ns();
    return vr_cuda_event_record(ctx, c->start);
}

vr_status vr__cuda_times_after(vr_cuda_copies *c, const vr_cuda_ctx *ctx, int i)
{
    if (!c->end || !c->end[i] || c->begin[i]) /* copies record their own */
        return VR_OK;
    return vr_cuda_event_record(ctx, c->end[i]);
}

bool vr__cuda_times_span(vr_cuda_copies *c, const vr_graph *g, int i, uint64_t *t0, uint64_t *t1, int *lane)
{
    if (!c->end || i < 0 || i >= c->n_nodes || !c->end[i])
        return false;
    void *from = c->begin[i];
    *lane = from ? 1 : 0;
    for (int k = i - 1; !from && k >= 0; k--) /* a compute node starts where the previous one ended */
        if (c->end[k] && !c->begin[k])
            from = c->end[k];
    void *to = c->side.done && c->side.done[i] ? c->side.done[i] : c->end[i]; /* a copy down: its done event */
    float a = 0, b = 0;
    if ((from && vr_cuda_event_ms(c->start, from, &a)) || vr_cuda_event_ms(c->start, to, &b))
        return false;
    (void)g;
    *t0 = c->host_t0 + (uint64_t)(a > 0 ? (double)a * 1e6 : 0);
    *t1 = c->host_t0 + (uint64_t)(b > 0 ? (double)b * 1e6 : 0);
    return true;
}

vr_status vr__cuda_copy_wait(vr_cuda_copies *c, int i)
{
    if (i < 0 || i >= c->n_nodes || !c->side.done || !c->side.done[i])
        return vr_error(VR_ERR_INVALID, "cuda: node %d is not a copy down", i);
    return vr_cuda_event_wait(c->side.done[i]);
}

vr_status vr__cuda_copies_done(vr_cuda_copies *c)
{
    return c->side.stream ? vr_cuda_stream_wait_host(c->side.stream) : VR_OK;
}
