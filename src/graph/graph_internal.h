/* vram graph layer — helpers shared by the files of src/graph (not public). */
#ifndef VRAM_GRAPH_INTERNAL_H
#define VRAM_GRAPH_INTERNAL_H

#include "vram/graph.h"

/* Records the first error of a build (sticky) and returns -1. */
int vr_graph_fail(vr_graph *g, vr_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A tensor with the shape of `like` (dtype dt, role role) named name. */
int vr_graph_tensor_like(vr_graph *g, const char *name, int like, vr_dtype dt, vr_role role);

/* Pointer to a tensor / node by id (valid until the next tensor / node is added). */
static inline vr_tensor *vr_T(vr_graph *g, int id) { return &g->tensors[id]; }
static inline vr_node *vr_N(vr_graph *g, int id) { return &g->nodes[id]; }

/* Last dimension and the product of the others ("rows"). */
int64_t vr_tensor_lastdim(const vr_tensor *t);
int64_t vr_tensor_rows(const vr_tensor *t);

/* Sets the scratch tensor of node id from vr_node_scratch_bytes (none if 0, or if it has one already; call it
 * once the node's outputs are set: some kernels need scratch only for some outputs). */
void vr_graph_attach_scratch(vr_graph *g, int node);

/* Recomputation (recompute.c), used by autodiff.c. */
typedef struct vr_recomp vr_recomp;
vr_recomp *vr_recomp_new(vr_graph *g, vr_recompute policy, int layers, const bool *bwd_needed, const bool *needs_grad);
void vr_recomp_free(vr_recomp *r);
/* The tensor a backward node should read for forward tensor t: t itself when
 * saved, else its recomputed copy (emitting the recompute nodes now). */
int vr_recomp_get(vr_recomp *r, int t);
/* Called before the backward nodes of forward node n are emitted. */
void vr_recomp_before(vr_recomp *r, int n);

/* optimizer.c: the flat master/optimizer buffers and their per-parameter views
 * (before the backward), and the clipping and update nodes (after it; n0 = the
 * tensors that existed before the backward). */
void vr_optimizer_state(vr_graph *g, const vr_step_config *s);
void vr_optimizer_nodes(vr_graph *g, const vr_step_config *s, int n0);
/* The parameter tensors among the first n, in buffer order (ids into out, capacity n); their count, -1 with
 * g->err set when they leave a gap in the buffer. */
int vr_graph_param_order(vr_graph *g, int n, int *out);
/* ZeRO >= 1: the owners (tensor.owner) of the trainable parameters, and the pieces of those cut where one rank's
 * equal share of the trainable elements ends and the next begins (tensor.split, tensor.piece_of): cuts at
 * multiples of VR_PIECE_ALIGN elements of the parameter, no piece smaller. */
#define VR_PIECE_ALIGN 4096
void vr_graph_assign_owners(vr_graph *g, const vr_step_config *s);
/* Moves nodes [first, n_nodes) to right after node after[k] each (after[] sorted; -1: before node 0). */
void vr_graph_place_after(vr_graph *g, int first, const int *after);
/* ZeRO-3: the gathers before every read of a parameter this rank does not hold, and the parameter buffer
 * cut to this rank's parameters (zero3.c). */
vr_status vr_graph_zero3(vr_graph *g, const vr_step_config *s);

/* The forward tensors the backward of forward node n reads (slot order of the
 * backward op; -1 where not needed), given which inputs need a gradient. */
void vr_backward_reads(const vr_graph *g, int n, const bool *in_needs_grad, int reads[VR_NODE_MAX_IN]);

#endif
