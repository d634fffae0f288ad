/* vram exec — the collectives of a data-parallel step on CUDA (VR_OP_ALLREDUCE, VR_OP_REDUCE in the
 * backward; VR_OP_BROADCAST after the updates; VR_OP_GATHER, ZeRO-3's weights before a node reads them).
 *
 * A gradient's collective is queued on a communication stream of its own (cuda_side.h: after the compute
 * stream's work so far, recording a done event, fenced by the previous collective as offload's copies are).
 * After the last one the compute stream waits for it: the norm and the updates read finished gradients. So
 * NCCL overlaps the rest of the backward. A gather runs on the same stream (the graph places it a layer
 * ahead of its reader: graph/zero3.c), and the node that reads its copy waits for its done event first, so
 * the next layer's weights arrive while this layer computes. The broadcasts of the new weights run on the
 * compute stream (the next forward reads them). */
#ifndef VRAM_EXEC_CUDA_COMM_H
#define VRAM_EXEC_CUDA_COMM_H

#include "exec/cuda_side.h"

/* The communication stream: the backward's collectives and the gathers (stream NULL: none). */
vr_status vr__cuda_comms_init(vr_cuda_side *c, const vr_exec *e);
/* Runs collective node a->node (ctx: the compute stream); begin, end (timing, may be NULL): events recorded
 * on the communication stream around its work there. */
vr_status vr__cuda_comm_run(vr_cuda_side *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *begin, void *end);
/* Offload with ranks: the done event of the collective over the gradient that copy node a->node sends down
 * (placed just before it), NULL when none. */
void *vr__cuda_comm_before_copy(const vr_cuda_side *c, const vr_exec_args *a);
/* Before node a->node: the compute stream waits for the gathers whose copies it reads. */
vr_status vr__cuda_comm_wait(const vr_cuda_side *c, const vr_cuda_ctx *ctx, const vr_exec_args *a);

#endif
