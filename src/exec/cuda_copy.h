/* vram exec — the offload copies of the CUDA backend (VR_OP_COPY nodes).
 *
 * A copy down (device gradient -> pinned host) is queued on a stream of its own after the compute
 * stream's work so far (an event marks the point), and records a "done" event that the host waits for
 * before the host node reading the copy runs; its fence (the previous copy's source) makes the compute
 * stream wait for the previous copy first, so that memory may be reused after the node, as the plan
 * says. A copy up (the host's new weights -> device parameter) is queued on the same stream once the
 * host has written them. At the end of a step the host waits for the copy stream: the weights are on
 * the device before the next step's forward is queued.
 *
 * Device times (vr_exec_config.device_times): an event at the start of a step's first pass and after every
 * node on the compute stream, and around every copy on the copy stream, read after the step: each node's
 * span on the GPU, aligned to the host clock at the start event (vr_exec_device_span). */
#ifndef VRAM_EXEC_CUDA_COPY_H
#define VRAM_EXEC_CUDA_COPY_H

#include "exec/cuda_side.h"

typedef struct vr_cuda_copies {
    vr_cuda_side side; /* the copy stream: the copies down are its chain of done events; the copies up
                        * run on it too (side.stream NULL: the graph has no copy node) */
    int n_nodes;
    /* device times (NULL / 0 when off) */
    void *start;    /* the step's start on the compute stream */
    void **end;     /* [n_nodes]: after each device node (compute) or copy (copy stream) */
    void **begin;   /* [n_nodes]: before each copy (copy stream) */
    uint64_t host_t0; /* host clock when start was recorded */
} vr_cuda_copies;

/* Sets c up for e's graph (nothing when it has no copy node and no device times are asked). */
vr_status vr__cuda_copies_init(vr_cuda_copies *c, const vr_exec *e);
/* Device times: before node i of pass `micro` (the start event), and after a device node i. */
vr_status vr__cuda_times_before(vr_cuda_copies *c, const vr_cuda_ctx *ctx, int i, int micro);
vr_status vr__cuda_times_after(vr_cuda_copies *c, const vr_cuda_ctx *ctx, int i);
/* Node i's span in the last step (its events complete): host-clock ns, lane 0 compute, 1 copies; false none. */
bool vr__cuda_times_span(vr_cuda_copies *c, const vr_graph *g, int i, uint64_t *t0, uint64_t *t1, int *lane);
void vr__cuda_copies_free(vr_cuda_copies *c);
/* Queues copy node a (down or up) after the work on ctx's stream (a copy down also after event `after`, when
 * given: the collective over its gradient, on the communication stream). */
vr_status vr__cuda_copy_run(vr_cuda_copies *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *after);
/* The host waits for copy node i (down) to land. */
vr_status vr__cuda_copy_wait(vr_cuda_copies *c, int i);
/* The host waits for every copy queued. */
vr_status vr__cuda_copies_done(vr_cuda_copies *c);

#endif
