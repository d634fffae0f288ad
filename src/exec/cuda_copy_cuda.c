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

vr_status vr__cuda_copies_init(vr_cuda_copies *c, const vr_exec *e)
{
    const vr_graph *g = e->g;
    int N = g->n_nodes, prev = -1;
    bool any = false;
    for (int i = 0; i < N; i++)
        any = any || g->nodes[i].op == VR_OP_COPY;
    c->n_nodes = N;
    vr_status st0 = e->cfg.device_times ? times_init(c, g) : VR_OK;
    if (!any || st0)
        return st0;
    c->done = calloc((size_t)N + 1, sizeof *c->done);
    c->prev = malloc(sizeof(int) * ((size_t)N + 1));
    if (!c->done || !c->prev)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    vr_status st = vr_cuda_copy_stream_create(&c->stream);
    if (!st)
        st = vr_cuda_events_create(&c->mark, 1);
    for (int i = 0; i < N && !st; i++) {
        c->prev[i] = -1;
        const vr_node *n = &g->nodes[i];
        if (n->op != VR_OP_COPY || n->phase != VR_PHASE_BACKWARD)
            continue;
        c->prev[i] = prev;
        prev = i;
        st = vr_cuda_events_create(&c->done[i], 1);
    }
    return st;
}

void vr__cuda_copies_free(vr_cuda_copies *c)
{
    if (c->stream)
        vr_cuda_stream_wait_host(c->stream);
    for (int i = 0; c->done && i < c->n_nodes; i++)
        vr_cuda_events_destroy(&c->done[i], c->done[i] ? 1 : 0);
    if (c->mark)
        vr_cuda_events_destroy(&c->mark, 1);
    for (int i = 0; c->end && i < c->n_nodes; i++) {
        vr_cuda_events_destroy(&c->end[i], c->end[i] ? 1 : 0);
        vr_cuda_events_destroy(&c->begin[i], c->begin[i] ? 1 : 0);
    }
    if (c->start)
        vr_cuda_events_destroy(&c->start, 1);
    free(c->end);
    free(c->begin);
    vr_cuda_stream_destroy(c->stream);
    free(c->done);
    free(c->prev);
    *c = (vr_cuda_copies){0};
}

vr_status vr__cuda_copy_run(vr_cuda_copies *c, const vr_cuda_ctx *ctx, const vr_exec_args *a)
{
    const vr_node *n = a->node;
    int i = (int)(n - a->g->nodes);
    size_t bytes = (size_t)vr_tensor_bytes(&a->g->tensors[n->out[0]]);
    if (!c->stream)
        return vr_error(VR_ERR_INVALID, "cuda: copy node %s without a copy stream", n->name);
    void *begin = c->begin ? c->begin[i] : NULL, *end = c->end ? c->end[i] : NULL;
    if (!c->done[i]) /* up: the host wrote the source already */
        return vr_cuda_copy_up(c->stream, begin, end, a->out[0], a->in[0], bytes);
    void *fence = n->in[1] >= 0 && c->prev[i] >= 0 ? c->done[c->prev[i]] : NULL;
    return vr_cuda_copy_down(ctx, c->stream, c->mark, fence, begin, c->done[i], a->out[0], a->in[0], bytes);
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
    void *to = c->done && c->done[i] ? c->done[i] : c->end[i]; /* a copy down ends at its done event */
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
    if (i < 0 || i >= c->n_nodes || !c->done || !c->done[i])
        return vr_error(VR_ERR_INVALID, "cuda: node %d is not a copy down", i);
    return vr_cuda_event_wait(c->done[i]);
}

vr_status vr__cuda_copies_done(vr_cuda_copies *c) { return c->stream ? vr_cuda_stream_wait_host(c->stream) : VR_OK; }
