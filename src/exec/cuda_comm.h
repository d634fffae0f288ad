/* vram exec — the collectives of a data-parallel step on CUDA (VR_OP_ALLREDUCE, VR_OP_REDUCE in the
 * backward; VR_OP_BROADCAST after the updates).
 *
 * A gradient's collective is queued on a communication stream of its own, after the compute stream's work so
 * far (an event marks the point), and records a "done" event; its fence (the previous collective's buffer)
 * makes the compute stream wait for the previous collective first, so that buffer's memory may be reused after
 * this node, as the plan says (the same rule as offload's copies). After the last one the compute stream waits
 * for it: the norm and the updates read finished gradients. So NCCL overlaps the rest of the backward. The
 * broadcasts of the new weights run on the compute stream (the next forward reads them). */
#ifndef VRAM_EXEC_CUDA_COMM_H
#define VRAM_EXEC_CUDA_COMM_H

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_comms {
    void *stream;  /* the communication stream; NULL: no collective in the backward */
    void *mark;    /* the compute stream's position before a collective */
    void **done;   /* per node: the collective's done event (NULL for other nodes) */
    int *prev;     /* per node: the previous backward collective (-1 none) */
    int last;      /* the last backward collective */
    int n_nodes;
} vr_cuda_comms;

vr_status vr__cuda_comms_init(vr_cuda_comms *c, const vr_exec *e);
void vr__cuda_comms_free(vr_cuda_comms *c);
/* Runs collective node a->node (ctx: the compute stream). */
vr_status vr__cuda_comm_run(vr_cuda_comms *c, const vr_cuda_ctx *ctx, const vr_exec_args *a);

#endif
