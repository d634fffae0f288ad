/* vram exec — per-node GPU time of the CUDA backend (vr_exec_config.profile, node-by-node mode only).
 *
 * A timing event is recorded on the executor's stream before every node and after the last one;
 * when the next step begins, the step just ended is read back (one wait per step, not per node) and
 * each node's time is added up. The first step (warm-up) is left out. At the end a table goes to
 * stderr: milliseconds per step by op, and by node name with the layer index taken out
 * ("h.6.attproj" -> "h.*.attproj"), largest first, with the step's total. */
#ifndef VRAM_EXEC_CUDA_PROF_H
#define VRAM_EXEC_CUDA_PROF_H

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

typedef struct vr_cuda_prof vr_cuda_prof;

/* A profiler for a graph of n_nodes nodes; *out NULL when not enabled (vr_exec_config.profile). */
vr_status vr__cuda_prof_new(int n_nodes, bool enabled, vr_cuda_prof **out);
/* Around node i's work on ctx's stream. */
vr_status vr__cuda_prof_before(vr_cuda_prof *p, const vr_cuda_ctx *ctx, int i);
vr_status vr__cuda_prof_after(vr_cuda_prof *p, const vr_cuda_ctx *ctx, int i);
/* Reads the last step, prints the table for graph g, frees p. */
void vr__cuda_prof_end(vr_cuda_prof *p, const vr_graph *g);

#endif
