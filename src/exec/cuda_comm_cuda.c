/* vram exec — the collectives of a data-parallel step on CUDA (see cuda_comm.h). */
#include <stdlib.h>

#include "exec/cuda_comm.h"

vr_status vr__cuda_comms_init(vr_cuda_comms *c, const vr_exec *e)
{
    const vr_graph *g = e->g;
    int N = g->n_nodes, prev = -1;
    *c = (vr_cuda_comms){.last = -1, .n_nodes = N};
    for (int i = 0; i < N; i++)
        if (vr__exec_is_comm(g->nodes[i].op) && g->nodes[i].phase == VR_PHASE_BACKWARD)
            c->last = i;
    if (c->last < 0)
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
        if (!vr__exec_is_comm(g->nodes[i].op) || g->nodes[i].phase != VR_PHASE_BACKWARD)
            continue;
        c->prev[i] = prev;
        prev = i;
        st = vr_cuda_events_create(&c->done[i], 1);
    }
    return st;
}

void vr__cuda_comms_free(vr_cuda_comms *c)
{
    if (c->stream)
        vr_cuda_stream_wait_host(c->stream);
    for (int i = 0; c->done && i < c->n_nodes; i++)
        if (c->done[i])
            vr_cuda_events_destroy(&c->done[i], 1);
    if (c->mark)
        vr_cuda_events_destroy(&c->mark, 1);
    vr_cuda_stream_destroy(c->stream);
    free(c->done);
    free(c->prev);
    *c = (vr_cuda_comms){.last = -1};
}

vr_status vr__cuda_comm_run(vr_cuda_comms *c, const vr_cuda_ctx *ctx, const vr_exec_args *a)
{
    const vr_node *n = a->node;
    int i = (int)(n - a->g->nodes);
    if (n->phase != VR_PHASE_BACKWARD || !c->stream || !c->done[i])
        return vr__exec_comm_node(a, ctx->stream);
    void *fence = n->in[1] >= 0 && c->prev[i] >= 0 ? c->done[c->prev[i]] : NULL;
    vr_status st = vr_cuda_stream_fork(ctx, c->stream, c->mark, fence);
    if (!st)
        st = vr__exec_comm_node(a, c->stream);
    if (!st)
        st = vr_cuda_stream_record(c->stream, c->done[i]);
    if (!st && i == c->last)
        st = vr_cuda_stream_join(ctx, c->done[i]);
    return st;
}
