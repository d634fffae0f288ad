/* vram exec — a side stream beside the compute stream (CUDA backend), for the nodes that run there in graph
 * order: offload's copies down (cuda_copy.h) and data parallel's gradient collectives (cuda_comm.h).
 *
 * Each such node records a "done" event on the side stream. Its fence (the node's in[1], when set) is the
 * previous such node's done event: the compute stream waits for it before the node is queued, so the previous
 * node's buffer may be reused after this node, as the plan says. */
#ifndef VRAM_EXEC_CUDA_SIDE_H
#define VRAM_EXEC_CUDA_SIDE_H

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_side {
    void *stream;  /* NULL: the graph has no node on the side stream */
    void *mark;    /* the compute stream's position before a side node */
    void **done;   /* [n_nodes]: each side node's done event (NULL for other nodes) */
    int *prev;     /* [n_nodes]: side node -> the previous side node, -1 */
    int last;      /* the last side node, -1 */
    int n_nodes;
} vr_cuda_side;

/* Sets s up for graph g: the nodes for which on_side is true run on a side stream (made only if there is one). */
vr_status vr__cuda_side_init(vr_cuda_side *s, const vr_graph *g, bool (*on_side)(const vr_node *n));
/* Waits for the side stream, then frees it and its events. */
void vr__cuda_side_free(vr_cuda_side *s);
/* Side node i's fence: the previous side node's done event when node i has a fence input, else NULL. */
void *vr__cuda_side_fence(const vr_cuda_side *s, const vr_graph *g, int i);

#endif
