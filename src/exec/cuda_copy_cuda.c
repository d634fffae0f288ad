/* vram exec — the offload copies of the CUDA backend (see cuda_copy.h). */
#include <stdlib.h>

#include "exec/cuda_copy.h"

vr_status vr__cuda_copies_init(vr_cuda_copies *c, const vr_exec *e)
{
    const vr_graph *g = e->g;
    int N = g->n_nodes, prev = -1;
    bool any = false;
    for (int i = 0; i < N; i++)
        any = any || g->nodes[i].op == VR_OP_COPY;
    c->n_nodes = N;
    if (!any)
        return VR_OK;
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
    if (!c->done[i]) /* up: the host wrote the source already */
        return vr_cuda_copy_up(c->stream, a->out[0], a->in[0], bytes);
    void *fence = n->in[1] >= 0 && c->prev[i] >= 0 ? c->done[c->prev[i]] : NULL;
    return vr_cuda_copy_down(ctx, c->stream, c->mark, fence, c->done[i], a->out[0], a->in[0], bytes);
}

vr_status vr__cuda_copy_wait(vr_cuda_copies *c, int i)
{
    if (i < 0 || i >= c->n_nodes || !c->done || !c->done[i])
        return vr_error(VR_ERR_INVALID, "cuda: node %d is not a copy down", i);
    return vr_cuda_event_wait(c->done[i]);
}

vr_status vr__cuda_copies_done(vr_cuda_copies *c) { return c->stream ? vr_cuda_stream_wait_host(c->stream) : VR_OK; }
