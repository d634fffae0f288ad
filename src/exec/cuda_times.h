/* vram exec — every node's span on the GPU, from CUDA events (vr_exec_config.device_times: the trace).
 *
 * Around each node that queues device work an event is recorded before and after it on the stream it runs
 * on (compute; offload's copies: the copy stream; data parallel's collectives: the communication stream),
 * one pair per node and pass (micro-batch) of a step. Nothing waits for them while the step is queued. At
 * the start of a step (node 0 of pass 0) a start event is recorded on the compute stream and the host
 * waits for it, once per step, at a point where the stream is idle (the previous step ended with the
 * loss read back): the host clock right after that wait anchors the step. After the step the events are
 * read back once (vr__cuda_times_span's first call: the host waits for the after events, then takes each
 * one's elapsed time from the start event), and a node's span is the anchor plus those times. Nodes that
 * queue nothing (reshapes, host nodes, the members of a multi-tensor group after the first, which queues
 * the group's kernel) have no span. Off under CUDA graph capture (no host wait may happen in a capture). */
#ifndef VRAM_EXEC_CUDA_TIMES_H
#define VRAM_EXEC_CUDA_TIMES_H

#include "exec/cuda_side.h"

enum { VR_CUDA_LANE_COMPUTE, VR_CUDA_LANE_COPY, VR_CUDA_LANE_COMM };

typedef struct vr_cuda_times {
    int n, passes;         /* nodes, passes per step (micro-batches) */
    void *start;           /* the step's start (compute stream); NULL: device times off */
    void **ev;             /* [passes * n * 2]: before and after node i of pass p, made when first used */
    unsigned char *rec;    /* [passes * n]: recorded with device work this step */
    unsigned char *lane;   /* [n]: the stream node i runs on (VR_CUDA_LANE_*); 255: no device work */
    uint64_t *ns;          /* [passes * n * 2]: the spans in the host's clock, once read */
    uint64_t host_t0;      /* the host clock when the start event was seen complete */
    bool read, ok;         /* the step was read back (successfully) */
} vr_cuda_times;

/* Sets t up for e's graph (nothing unless e->cfg.device_times, and not under CUDA graphs). copy: the graph's
 * copies run on a copy stream; comms: the collectives' side stream (its done events say which nodes use it). */
vr_status vr__cuda_times_init(vr_cuda_times *t, const vr_exec *e, bool copy, const vr_cuda_side *comms);
void vr__cuda_times_free(vr_cuda_times *t);
/* Before node i of pass p: at the step's start, the anchor; a compute-stream node's before event. */
vr_status vr__cuda_times_before(vr_cuda_times *t, const vr_cuda_ctx *ctx, int i, int p);
/* The events a copy or a collective records on its own stream around its work (NULL, NULL when off). */
vr_status vr__cuda_times_events(vr_cuda_times *t, int i, int p, void **before, void **after);
/* After node i of pass p: a compute-stream node's after event; work: whether the node queued device work. */
vr_status vr__cuda_times_after(vr_cuda_times *t, const vr_cuda_ctx *ctx, int i, int p, bool work);
/* Node i's span in pass p of the last step: host-clock ns, its lane; false: none. */
bool vr__cuda_times_span(vr_cuda_times *t, int i, int p, uint64_t *t0, uint64_t *t1, int *lane);

#endif
