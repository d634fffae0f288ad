/* vram exec — the offload copies of the CUDA backend (see cuda_copy.h). */
#include <stdlib.h>

#include "exec/cuda_copy.h"
#include "vram/util.h"

/* A copy down: on the copy stream's chain (an offload graph has one for every copy up). */
static bool copy_down(const vr_node *n) { return n->op == VR_OP_COPY && n->phase == VR_PHASE_BACKWARD; }

vr_status vr__cuda_copies_init(vr_cuda_copies *c, const vr_exec *e)
{
    c->n_nodes = e->g->n_nodes;
    c->side = (vr_cuda_side){.last = -1};
    if (pthread_mutex_init(&c->lock, NULL))
        return vr_error(VR_ERR_OOM, "cuda: cannot make the copy stream's lock");
    c->locked_init = true;
    return vr__cuda_side_init(&c->side, e->g, copy_down);
}

void vr__cuda_copies_free(vr_cuda_copies *c)
{
    vr__cuda_side_free(&c->side);
    if (c->locked_init)
        pthread_mutex_destroy(&c->lock);
    *c = (vr_cuda_copies){.side.last = -1};
}

static vr_status copy_run(vr_cuda_copies *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *after, void *begin,
                          void *end)
{
    const vr_node *n = a->node;
    int i = (int)(n - a->g->nodes);
    size_t bytes = (size_t)vr_tensor_bytes(&a->g->tensors[n->out[0]]);
    vr_cuda_side *s = &c->side;
    if (!s->stream)
        return vr_error(VR_ERR_INVALID, "cuda: copy node %s without a copy stream", n->name);
    if (!s->done[i]) /* up: the host wrote the source already */
        return vr_cuda_copy_up(s->stream, begin, end, a->out[0], a->in[0], bytes);
    if (after) {
        vr_cuda_ctx on = *ctx;
        on.stream = s->stream;
        vr_status st = vr_cuda_stream_join(&on, after);
        if (st)
            return st;
    }
    vr_status st = vr_cuda_copy_down(ctx, s->stream, s->mark, vr__cuda_side_fence(s, a->g, i), begin, s->done[i],
                                     a->out[0], a->in[0], bytes);
    return st || !end ? st : vr_cuda_stream_record(s->stream, end);
}

vr_status vr__cuda_copy_run(vr_cuda_copies *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *after, void *begin,
                            void *end)
{
    pthread_mutex_lock(&c->lock);
    vr_status st = copy_run(c, ctx, a, after, begin, end);
    pthread_mutex_unlock(&c->lock);
    return st;
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
