/* vram — the fitter: the largest batch that fits a memory budget, and the
 * fastest configuration (precision, recompute policy, optimizer-state format,
 * master weights or none, micro-batch × accumulation) that fits, found by planning candidates (vram/plan.h). Plans touch no memory,
 * so every candidate is exact and cheap.
 *
 * What "fits" means: the static arena of the step's plan (arena_size, what the
 * executor allocates once) is at most the capacity given. The capacity is the
 * bytes left to the step: the device's memory minus what is set aside before
 * the step runs (the CUDA context). A library workspace (cuBLAS: 32 MiB) is part
 * of the step: put it in vr_step_config.workspace_bytes and the plan counts it
 * as temp. `vram fit --device cuda` does both.
 *
 * The cost model (vr_fit_step_cost), deliberately simple and stated in full:
 *   - matmul-class nodes take FLOPs / throughput, the throughput being an
 *     effective TFLOP/s figure per precision:
 *       matmul        2·N·C·OC  (x (N,C), w (OC,C))
 *       matmul_bwd    2·N·C·OC per output computed (dx, dw): backward ≈ 2× forward
 *       attention     2·B·T²·C  (causal: half of QKᵀ and P·V, 4·B·T²·C, is computed)
 *       attention_bwd 5·B·T²·C  (flash attention's backward: 5 matmuls to the forward's 2)
 *       classifier    2·N·C·V per pass (logits; dx and dwte when training: ×3)
 *     recompute nodes are forward ops again and are counted again;
 *   - every other kernel (layernorm, gelu, adds, embedding, optimizer updates)
 *     takes the bytes of its inputs and outputs / memory bandwidth;
 *   - every node with a kernel costs a fixed launch time;
 *   - one optimizer step = accum × (forward + recompute + backward nodes)
 *     + 1 × the optimizer nodes;
 *   - offloaded (--offload optim), the host's nodes cost their elements / the
 *     host's update speed and the copies their bytes / the link's speed; the
 *     gradients' copies down overlap the backward, and the host's updates and
 *     the copies up overlap the last micro-batch's backward: the step costs
 *     max(0, host + copies up - that backward) more than its device nodes;
 *   - with ranks, each collective moves its buffer's bytes at the link's speed between GPUs
 *     (comm_gbs), an all-reduce twice: (W-1)/W x bytes (x 2) per collective, none of it hidden.
 * It ignores overlap and kernel efficiency by shape. It ranks
 * configurations; it does not predict a wall clock to better than ~2×. */
#ifndef VRAM_FIT_H
#define VRAM_FIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "vram/graph.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_FIT_MAX_BATCH (1 << 20) /* the search stops here (reported as capped) */
#define VR_FIT_MAX_ROWS 384        /* 4 recompute policies × 3 state formats × 8 precision, master and
                                    * placement choices (bf16: fp32 master on the device or the host, split on
                                    * the device, or none; fp32, fp16: on the device or the host) × 4 ZeRO
                                    * stages */
#define VR_FIT_SAME_SPEED 0.02     /* rows within 2% of the fastest's tokens/s count as equally fast: the best
                                    * is then the most exact of them (fp32 state before bf16 before 8-bit, an
                                    * fp32 master before none), then the one on the device */

/* One planned candidate. */
typedef struct vr_fit_point {
    int B;                 /* micro-batch rows (0: not planned) */
    uint64_t peak;         /* plan's peak: most raw bytes live during one node */
    uint64_t need;         /* plan's arena: the bytes the step allocates (with ranks: the largest rank's) */
    uint64_t host;         /* plan's host arena (offload): pinned host bytes, 0 none */
    bool fits;             /* need <= capacity */
} vr_fit_point;

/* The largest micro-batch that fits (vr_fit_max_batch). */
typedef struct vr_fit_batch {
    int B;                 /* largest micro-batch that fits; 0: not even B = 1 */
    vr_fit_point at;       /* the plan at B (zeroed when B = 0) */
    vr_fit_point next;     /* the plan at B + 1, the first that does not fit (unplanned when capped) */
    bool capped;           /* B = VR_FIT_MAX_BATCH fits: the search stopped there */
    int plans;             /* plans made */
} vr_fit_batch;

/* The largest micro-batch B (T, model and step as given in m and s) whose plan's
 * arena fits in capacity bytes: exponential then binary search over B, one
 * plan per probe. Needs need(B) to grow with B (it does: every tensor does). */
vr_status vr_fit_max_batch(const vr_model_config *m, const vr_step_config *s, uint64_t capacity,
                           vr_fit_batch *out);

/* ------------------------------------------------------------------ cost model */

typedef struct vr_fit_cost_model {
    double tflops[3];      /* effective matmul TFLOP/s, indexed by vr_precision (fp32/tf32, bf16, fp16) */
    double bandwidth_gbs;  /* effective memory bandwidth for the other kernels, GB/s (1e9 B/s) */
    double launch_us;      /* fixed cost per kernel node, µs */
    double host_elems_per_s; /* offload: parameters the host updates per second (AdamW, fp32 state) */
    double link_gbs;       /* offload: host <-> device copy speed, GB/s */
    double comm_gbs;       /* data parallel: a collective's bus speed between GPUs, GB/s */
} vr_fit_cost_model;

/* H100 SXM effective figures: fp32 (tf32) 150, bf16 400, fp16 400 TFLOP/s;
 * 2500 GB/s; 5 µs per kernel; offload as measured on the lent H100 host (16 cores): the host updates
 * 2.2e9 parameters/s, the link copies 50 GB/s; NVLink collectives 300 GB/s. */
vr_fit_cost_model vr_fit_cost_h100(void);

/* The cost of one optimizer step of graph g (whose step.accum micro-batches it counts). */
typedef struct vr_fit_cost {
    double flops;          /* matmul-class FLOPs per optimizer step */
    double bytes;          /* bytes moved by the other kernels per optimizer step */
    int64_t launches;      /* kernels launched per optimizer step */
    double host_seconds;   /* offload: the host's nodes */
    double copy_seconds;   /* offload: the copies (down and up) */
    double comm_seconds;   /* data parallel: the collectives */
    double seconds;        /* flops / throughput + bytes / bandwidth + launches × launch (+ offload's part
                            * that the backward does not hide) */
} vr_fit_cost;

/* FLOPs of one node under the table above (0 for the non-matmul ops). */
double vr_fit_node_flops(const vr_graph *g, const vr_node *n);

/* The cost of one optimizer step of g under the model cm. */
vr_fit_cost vr_fit_step_cost(const vr_graph *g, const vr_fit_cost_model *cm);

/* ------------------------------------------------------------------ search */

typedef struct vr_fit_options {
    uint64_t capacity;         /* bytes for the step (device memory minus the CUDA context) */
    int global_batch;          /* rows per optimizer step = micro × accum; 0: the largest micro-batch
                                * that fits, with the step config's accum */
    unsigned precisions;       /* bit (1u << vr_precision) per precision to try; 0: fp32 and bf16 */
    unsigned recomputes;       /* bit (1u << vr_recompute) per policy; 0: none, act, selective, block */
    unsigned optim_states;     /* bit (1u << vr_optim_state) per state format; 0: all three when the optimizer
                                * has state (fp32 only otherwise) */
    unsigned masters;          /* bit 0: fp32 master, bit 1: none, bit 2: split (bf16 only, not offloaded); 0: all */
    unsigned offloads;         /* bit (1u << vr_offload) per placement; 0: both when training with an optimizer */
    unsigned zeros;            /* with ranks (step.world > 1): bit (1u << stage) per ZeRO stage; 0: all four */
    uint64_t host_capacity;    /* host bytes an offloaded row may pin (0: no limit) */
    bool norm_backward_pinned; /* the step's norm backward (vr_step_config.norm_from_out) only: the best row does not
                                * take the norms' backward from their output to spare recompute */
    vr_fit_cost_model cost;    /* throughput figures (all 0: vr_fit_cost_h100) */
} vr_fit_options;

/* One configuration: the best batching for a precision and recompute policy. */
typedef struct vr_fit_row {
    vr_precision precision;
    vr_recompute recompute;
    int recompute_layers;      /* the best row: recompute in the first N blocks only, the fewest that fit (0: all) */
    bool norm_from_out;        /* the best row: the norms' backward from their output (vr_step_config.norm_from_out,
                                * not pinned), where that spares recompute: none, or fewer blocks of it */
    vr_optim_state optim_state;
    bool no_master;
    bool split_master;
    vr_offload offload;
    int zero;                  /* ZeRO stage (with ranks) */
    int micro, accum;          /* micro-batch rows and micro-batches per step; micro 0: none fits */
    bool fits;
    vr_fit_point point;        /* the plan at micro (at 1 when none fits) */
    int max_micro;             /* largest micro-batch that fits at this accumulation (0: none) */
    int64_t tokens;            /* tokens per optimizer step: micro × accum × T (MLP: rows) */
    vr_fit_cost cost;          /* per optimizer step (fitting rows only) */
    double tokens_per_s;       /* tokens / cost.seconds (0 when it does not fit) */
} vr_fit_row;

typedef struct vr_fit_result {
    vr_model_config model;     /* as given (B is each row's micro) */
    vr_step_config step;       /* as given (precision, recompute, accum are each row's) */
    vr_fit_options options;    /* with the defaults filled in */
    int n_rows;
    vr_fit_row rows[VR_FIT_MAX_ROWS]; /* ranked: fitting rows by tokens/s (highest first), then the
                                       * rest by need at micro-batch 1 (smallest first) */
    int best;                  /* the chosen row (VR_FIT_SAME_SPEED), -1 when none fits */
    uint64_t smallest_need;    /* least need over all rows (at their micro-batch, 1 when none fits) */
    int plans;                 /* plans made by the whole search */
} vr_fit_result;

/* For every precision × recompute policy × state format × master choice in o: the largest micro-batch that fits
 * (with o->global_batch: the largest divisor of it that fits, accum = G / micro;
 * under the cost model a larger micro-batch is never slower, the FLOPs being the
 * same), its plan and its cost; ranked, fastest first. A configuration that fits
 * nowhere is a row with fits = false, not an error. The best row, when it recomputes, does so in the fewest
 * first blocks that still fit (its recompute_layers); a GPT or Llama training step's best row that recomputes
 * then takes the norms' backward from their output (its norm_from_out) where the same batching needs no recompute
 * with it, or fewer blocks (the norms' inputs not kept: the residual stream's bytes), unless s has it already or
 * o->norm_backward_pinned. */
vr_status vr_fit_search(const vr_model_config *m, const vr_step_config *s, const vr_fit_options *o,
                        vr_fit_result *out);

/* s with row w's choices: precision, recompute (and its blocks), optimizer state, master, offload, accumulation,
 * ZeRO stage (with ranks). */
void vr_fit_row_step(const vr_fit_row *w, vr_step_config *s);

/* The ranked table: config, micro × accum, peak, need, fits, est. step time, est. tokens/s. */
void vr_fit_print(const vr_fit_result *r, FILE *f);

/* The same as a cJSON object (caller deletes); NULL when out of memory. Declared
 * as void * so this header does not need cJSON's. */
void *vr_fit_json(const vr_fit_result *r);

/* The max-batch result as a cJSON object {"batch", "capped", "plans", "at": {batch, peak, need,
 * fits}, "next": {...}} (caller deletes); NULL when out of memory. */
void *vr_fit_batch_json(const vr_fit_batch *b);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
