/* vram exec — CUDA executor fusion of a residual add and the layer normalization after it (LayerNorm or
 * RMSNorm; cuda_fuse_ln_cuda.c). The graph, the plan and the CPU path do not know of it. */
#ifndef VRAM_EXEC_CUDA_FUSE_LN_H
#define VRAM_EXEC_CUDA_FUSE_LN_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_fuse_ln {
    unsigned char *pair; /* [n_nodes] 1: node i is an add whose sum node i + 1, a layernorm or rmsnorm,
                          * normalizes; NULL: no pair (or fusion off) */
    int pending;         /* the normalization node whose add was put off (-1: none) */
    void *a, *b, *sum;   /* that add's inputs and output */
    int64_t n;           /* its elements */
} vr_cuda_fuse_ln;

/* Finds the pairs once (the graph is static): fusion on (not vr_exec_config.unfused), planned memory,
 * no poison. f->pair stays NULL when there is none. */
vr_status vr__cuda_fuse_ln_init(vr_cuda_fuse_ln *f, const vr_exec *e);
void vr__cuda_fuse_ln_free(vr_cuda_fuse_ln *f);

/* The hook of the node dispatch, for every node: the add of a pair queues nothing (*idle) and is
 * remembered; its normalization runs both in one kernel. *handled: the node's work is done (or put off). */
vr_status vr__cuda_fuse_ln_node(vr_cuda_fuse_ln *f, const vr_cuda_ctx *c, const vr_exec_args *a,
                                vr_cuda_dtype dt, bool *handled, bool *idle);

#endif
