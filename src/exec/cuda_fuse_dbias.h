/* vram exec — CUDA executor fusion of a Linear's bias gradient into the layernorm backward before it
 * (cuda_fuse_dbias_cuda.c). The graph, the plan and the CPU path do not know of it. */
#ifndef VRAM_EXEC_CUDA_FUSE_DBIAS_H
#define VRAM_EXEC_CUDA_FUSE_DBIAS_H

#include <stdbool.h>

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_fuse_dbias {
    int *to;             /* [n_nodes] layernorm_bwd node i: the matmul_bwd node j > i whose bias gradient it
                          * also writes (-1: none); NULL: no pair (or fusion off) */
    unsigned char *done; /* [n_nodes] matmul_bwd node j: its bias gradient was written this pass */
    int pairs;           /* pairs found (less those that fell back) */
} vr_cuda_fuse_dbias;

/* Finds the pairs once (the graph is static): fusion on, planned memory, no poison. */
vr_status vr__cuda_fuse_dbias_init(vr_cuda_fuse_dbias *f, const vr_exec *e);
void vr__cuda_fuse_dbias_free(vr_cuda_fuse_dbias *f);

/* The layernorm_bwd node of a pair: runs its kernels with the matmul_bwd's bias gradient (*handled true);
 * where the one-pass kernel does not take the shape, nothing (*handled false: the node runs alone and the
 * pair is dropped from then on). */
vr_status vr__cuda_fuse_dbias_ln(vr_cuda_fuse_dbias *f, const vr_cuda_ctx *c, const vr_exec_args *a,
                                 vr_cuda_dtype dt, bool *handled);

/* The matmul_bwd node of a pair whose bias gradient was written: *a with its bias gradient slot empty, in
 * *own (returns own); otherwise a itself. */
const vr_exec_args *vr__cuda_fuse_dbias_mm(vr_cuda_fuse_dbias *f, const vr_exec_args *a, vr_exec_args *own);

#endif
