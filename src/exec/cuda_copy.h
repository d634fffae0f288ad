/* vram exec — the offload copies of the CUDA backend (VR_OP_COPY nodes).
 *
 * A copy down (device gradient -> pinned host) is queued on a stream of its own after the compute
 * stream's work so far (an event marks the point), and records a "done" event that the host waits for
 * before the host node reading the copy runs; its fence (the previous copy's source) makes the compute
 * stream wait for the previous copy first, so that memory may be reused after the node, as the plan
 * says. A copy up (the host's new weights -> device parameter) is queued on the same stream once the
 * host has written them. At the end of a step the host waits for the copy stream: the weights are on
 * the device before the next step's forward is queued. With device times (cuda_times.h) a copy records the
 * events it is given around its work on the copy stream. */
#ifndef VRAM_EXEC_CUDA_COPY_H
#define VRAM_EXEC_CUDA_COPY_H

#include <pthread.h>

#include "exec/cuda_side.h"

typedef struct vr_cuda_copies {
    vr_cuda_side side; /* the copy stream: the copies down are its chain of done events; the copies up
                        * run on it too (side.stream NULL: the graph has no copy node) */
    int n_nodes;
    /* the copies down are queued by the main thread, the copies up by the host's update thread: each copy's
     * events and transfer go onto the stream together (else a trace could show one inside the other) */
    pthread_mutex_t lock;
    bool locked_init;
} vr_cuda_copies;

/* Sets c up for e's graph (nothing when it has no copy node). */
vr_status vr__cuda_copies_init(vr_cuda_copies *c, const vr_exec *e);
void vr__cuda_copies_free(vr_cuda_copies *c);
/* Queues copy node a (down or up) after the work on ctx's stream (a copy down also after event `after`, when
 * given: the collective over its gradient, on the communication stream); begin, end (timing, may be NULL):
 * events recorded on the copy stream right before and after the copy. */
vr_status vr__cuda_copy_run(vr_cuda_copies *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *after, void *begin,
                            void *end);
/* The host waits for copy node i (down) to land. */
vr_status vr__cuda_copy_wait(vr_cuda_copies *c, int i);
/* The host waits for every copy queued. */
vr_status vr__cuda_copies_done(vr_cuda_copies *c);

#endif
