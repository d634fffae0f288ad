/* vram exec — the collectives of a data-parallel step on CUDA (see cuda_comm.h). */
#include "exec/cuda_comm.h"

/* A collective over a gradient (in the backward): on the communication stream. */
static bool gradient_collective(const vr_node *n) { return vr__exec_is_grad_comm(n->op) && n->phase == VR_PHASE_BACKWARD; }

vr_status vr__cuda_comms_init(vr_cuda_side *c, const vr_exec *e) { return vr__cuda_side_init(c, e->g, gradient_collective); }

vr_status vr__cuda_comm_run(vr_cuda_side *c, const vr_cuda_ctx *ctx, const vr_exec_args *a)
{
    int i = (int)(a->node - a->g->nodes);
    if (!c->stream || !c->done[i])
        return vr__exec_comm_node(a, ctx->stream);
    vr_status st = vr_cuda_stream_fork(ctx, c->stream, c->mark, vr__cuda_side_fence(c, a->g, i));
    if (!st)
        st = vr__exec_comm_node(a, c->stream);
    if (!st)
        st = vr_cuda_stream_record(c->stream, c->done[i]);
    if (!st && i == c->last)
        st = vr_cuda_stream_join(ctx, c->done[i]);
    return st;
}
