/* vram exec — CUDA: a Linear and the GELU beside it run as one cuBLASLt product (an epilogue), so that
 * the GELU's own kernels and their trips through memory go. The graph, the plan and the books stay as
 * they are: every tensor is still bound, counted and let go at its nodes; a fused pair only writes its
 * tensors at other moments.
 *
 *   forward   matmul (out pre) then gelu (pre -> post): the matmul node queues nothing, the gelu
 *             node runs the product with the GELU_AUX(_BIAS) epilogue, writing post and pre.
 *   backward  matmul_bwd (dout -> dinp = d_post, dw, db) then gelu_bwd (d_post, pre -> d_pre): the
 *             matmul_bwd node runs dw and db only, the gelu_bwd node runs the dinp product with the
 *             DGELU epilogue (aux = pre), writing d_pre; d_post is never written.
 *
 * The work moves to the pair's second node because that node's outputs are bound only there (dynamic
 * memory allocates them there; poisoning fills them there). A pair is fused only where the work can
 * move: the two nodes adjacent, on the device, before the optimizer; nothing accumulated; one float
 * dtype; the matmul's inputs intact at the second node (read by a later node, or persistent; or, in
 * planned memory, dead after the first node but on bytes apart from the second node's output, the
 * only tensor bound before it runs: selective recompute drops the fch's input); the second node's
 * output not on the bytes of anything the product reads (in place); under the backward,
 * d_post read by no other node. The pairs are found once, when the executor is made (the graph does
 * not change); where cuBLASLt has no algorithm for a shape, that pair's second node runs the two
 * products one after the other (the same values), from then on. */
#ifndef VRAM_EXEC_CUDA_FUSE_H
#define VRAM_EXEC_CUDA_FUSE_H

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_fuse {
    unsigned char *part; /* [n_nodes]: the node's part in a fused pair (cuda_fuse_cuda.c), 0: none */
    int fwd, bwd;        /* pairs fused: forward (and recompute), backward */
} vr_cuda_fuse;

/* Node n refers to storage tensor s: as an input, an output or its scratch. */
bool vr__cuda_node_refers(const vr_exec *e, const vr_node *n, int s);
/* Tensors a and b are on bytes apart in the planned arena (false in dynamic memory or on the host). */
bool vr__cuda_arena_disjoint(const vr_exec *e, int a, int b);
/* Tensor t's address in the planned arena, bound or not (a tensor before its node, or one that died, whose
 * bytes the caller knows to be its own); NULL in dynamic memory or on the host. */
void *vr__cuda_arena_ptr(const vr_exec *e, int t);

/* Finds the pairs of e's graph (none when e->cfg.unfused). */
vr_status vr__cuda_fuse_init(vr_cuda_fuse *f, const vr_exec *e);
void vr__cuda_fuse_free(vr_cuda_fuse *f);

/* Node a of a fused pair: queues its part (*handled true; *idle: it queued nothing). *handled false
 * for a node of no pair (the caller runs it). dt: the node's dtype. */
vr_status vr__cuda_fuse_run(vr_cuda_fuse *f, const vr_exec_args *a, const vr_cuda_ctx *c, vr_cuda_dtype dt,
                            bool *handled, bool *idle);

#endif
