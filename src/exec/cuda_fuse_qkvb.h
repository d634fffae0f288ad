/* vram exec — CUDA: the bias gradient of attention's q|k|v projection from the attention's identities
 * (cuda_fuse_qkvb_cuda.c), a third of the column sums. The graph, the plan and the CPU path do not know of it. */
#ifndef VRAM_EXEC_CUDA_FUSE_QKVB_H
#define VRAM_EXEC_CUDA_FUSE_QKVB_H

#include <stdbool.h>

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_fuse_qkvb {
    int *proj; /* [n_nodes] matmul_bwd node j of a q|k|v projection: the matmul_bwd node p < j of the Linear
                * that reads the attention's output, whose bias gradient and weight give j's (-1: none);
                * NULL: no such node (or fusion off) */
    int nodes; /* how many */
} vr_cuda_fuse_qkvb;

/* Finds the nodes once (the graph is static): fusion on, one rank. */
vr_status vr__cuda_fuse_qkvb_init(vr_cuda_fuse_qkvb *f, const vr_exec *e);
void vr__cuda_fuse_qkvb_free(vr_cuda_fuse_qkvb *f);

/* A matmul_bwd node of f: runs its products without the bias gradient, then that by vr_cuda_qkv_bias_bwd
 * (*handled true); any other node: nothing (*handled false). */
vr_status vr__cuda_fuse_qkvb_run(vr_cuda_fuse_qkvb *f, const vr_cuda_ctx *c, const vr_exec_args *a,
                                 vr_cuda_dtype dt, bool *handled);

#endif
