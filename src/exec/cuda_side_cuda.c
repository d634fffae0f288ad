/* vram exec — a side stream beside the compute stream (see cuda_side.h). */
#include <stdlib.h>

#include "exec/cuda_side.h"

vr_status vr__cuda_side_init(vr_cuda_side *s, const vr_graph *g, bool (*on_side)(const vr_node *n))
{
    int N = g->n_nodes, prev = -1;
    *s = (vr_cuda_side){.last = -1, .n_nodes = N};
    for (int i = 0; i < N; i++)
        if (on_side(&g->nodes[i]))
            s->last = i;
    if (s->last < 0)
        return VR_OK;
    s->done = calloc((size_t)N + 1, sizeof *s->done);
    s->prev = malloc(sizeof(int) * ((size_t)N + 1));
    if (!s->done || !s->prev)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    vr_status st = vr_cuda_copy_stream_create(&s->stream);
    if (!st)
        st = vr_cuda_events_create(&s->mark, 1);
    for (int i = 0; i < N && !st; i++) {
        s->prev[i] = -1;
        if (!on_side(&g->nodes[i]))
            continue;
        s->prev[i] = prev;
        prev = i;
        st = vr_cuda_events_create(&s->done[i], 1);
    }
    return st;
}

void vr__cuda_side_free(vr_cuda_side *s)
{
    if (s->stream)
        vr_cuda_stream_wait_host(s->stream);
    for (int i = 0; s->done && i < s->n_nodes; i++)
        if (s->done[i])
            vr_cuda_events_destroy(&s->done[i], 1);
    if (s->mark)
        vr_cuda_events_destroy(&s->mark, 1);
    vr_cuda_stream_destroy(s->stream);
    free(s->done);
    free(s->prev);
    *s = (vr_cuda_side){.last = -1};
}

void *vr__cuda_side_fence(const vr_cuda_side *s, const vr_graph *g, int i)
{
    return g->nodes[i].in[1] >= 0 && s->prev[i] >= 0 ? s->done[s->prev[i]] : NULL;
}
