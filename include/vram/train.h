/* vram — the training loop.
 *
 * A trainer owns one training step (graph, plan, executor) and, when asked
 * to evaluate, a second no-grad graph of the same model that shares the
 * training executor's parameter buffer. Each optimizer step takes `accum`
 * micro-batches from the training split, runs them through the executor
 * (losses normalised by B*T*accum, so the update equals the large batch's),
 * and applies the optimizer with the learning rate of the schedule and,
 * with --clip, the global-norm clipping factor folded into the update.
 *
 * Parameters start from GPT-2's initialisation (normal(0, 0.02), residual
 * projections 0.02/sqrt(2L), biases 0, LayerNorm weights 1, as llm.c and
 * nanoGPT; MLPs: PyTorch's nn.Linear uniform), deterministic from the seed,
 * or from an llm.c checkpoint (--init), or from a vram state file (--resume),
 * which restores parameters, optimizer state, step, RNG and data position so
 * that the run continues bit-exactly.
 *
 * Data: GPT models read token batches (vram/data.h: the generated corpus, a
 * text file or an llm.c token file), with the tail held out for evaluation;
 * MLPs train on a generated classification task (features from a seeded
 * normal, labels from a fixed random teacher), held-out batches drawn from a
 * separate stream. */
#ifndef VRAM_TRAIN_H
#define VRAM_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "vram/data.h"
#include "vram/dist.h"
#include "vram/exec.h"
#include "vram/graph.h"
#include "vram/plan.h"
#include "vram/progress.h"
#include "vram/schedule.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_train_config {
    vr_model_config model;        /* the model and the micro-batch (B rows of T tokens) */
    vr_step_config step;          /* accum, optim, recompute, freeze, grad_clip (train is forced on) */
    vr_optim_hparams hp;          /* peak lr, betas, eps, weight decay, momentum (step is the loop's) */
    vr_lr_kind lr_kind;           /* constant or cosine */
    int64_t warmup;               /* linear warmup steps */
    double min_lr_frac;           /* cosine: final lr / peak lr */
    int64_t steps;                /* optimizer steps of the whole run (a resumed run continues to it) */
    uint64_t seed;                /* initialisation and data seed */
    const char *device;           /* device spec: "cpu", "cpu:2GiB", "cuda"... (NULL = "cpu") */
    vr_memory_mode memory;        /* planned arena or dynamic caching allocator */
    const char *alloc_policy;     /* dynamic mode's allocator policy (NULL = pytorch; vram train passes
                                   * stitch on cuda) */
    bool inplace;                 /* plan gelu/relu/add outputs over their dying inputs (vram/plan.h) */
    const char *data;             /* --data: NULL/"generated", a text file, or an llm.c .bin token file */
    vr_data_order data_order;
    int eval_batches;             /* held-out batches per evaluation (0 = 8) */
    const char *init;             /* checkpoint to start from (GPT: llm.c file; Llama: HF directory), or NULL */
    const char *resume;           /* vram state to continue, or NULL */
    float loss_scale;             /* fp16: the first dynamic loss scale (0: 65536) */
    int loss_scale_window;        /* fp16: good steps before it doubles (0: 2000) */
    bool poison;                  /* executor poisoning (tests) */
    bool cuda_graph;              /* CUDA: replay the step as a CUDA graph (vr_exec_config.cuda_graph) */
    bool per_node_optimizer;      /* CUDA: no multi-tensor apply (vr_exec_config.per_node_optimizer) */
    bool unfused;                 /* CUDA: no executor fusion (vr_exec_config.unfused) */
    bool matmul_tune;             /* CUDA: measured matmul algorithms (vr_exec_config.matmul_tune) */
    bool profile;                 /* CUDA: GPU time per node, printed at the end (vr_exec_config.profile) */
    bool device_times;            /* CUDA: every node's span on the GPU kept for the trace (vr_exec_config) */
    unsigned attention_v1;        /* CUDA: the first attention kernels (vr_exec_config.attention_v1) */
    uint64_t max_memory;          /* --max-memory: device bytes this process may use in all, the CUDA context
                                   * included (0 = the device's free memory). A planned arena larger than
                                   * max_memory - context is refused before anything is allocated, with the
                                   * plan's numbers and the largest batch that fits; in dynamic mode the
                                   * caching allocator is capped at max_memory - context; on cuda the process's
                                   * device use (NVML) is checked after every step against max_memory. */
    uint64_t max_host_memory;     /* --max-host-memory: host bytes an offloaded plan may pin (0: the host's
                                   * available memory); a plan over it is refused before anything is allocated */
    const char *dump_batches;     /* GPT: write every training micro-batch as B rows of T+1 int32 tokens
                                   * (inputs then the last target), the batches of the run in order, or NULL */
    void (*on_node)(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns);
    void *on_node_ctx;            /* the training executor's per-node hook (vram/exec.h's on_node), e.g.
                                   * vram/prof.h's trace writer; NULL: none */
    vr_comm *comm;                /* data parallel (step.world >= 1): the ranks' communicator (the caller's).
                                   * model.B is the micro-batch of one rank: the data's global batch is
                                   * world x B rows, rank r trains on rows [r B, (r+1) B); the losses reported
                                   * are the mean over the ranks; a state is saved as one file per rank
                                   * (PATH.rankR when world > 1) */
} vr_train_config;

/* Defaults: a GPT "tiny", B 8, adamw lr 1e-3, cosine to 10% after `steps`, seed 1337, cpu, planned. */
vr_train_config vr_train_config_default(void);

typedef struct vr_trainer vr_trainer;

/* What one optimizer step did. */
typedef struct vr_train_step_info {
    int64_t step;                 /* optimizer steps completed, 1-based */
    double loss;                  /* mean training loss of the step's micro-batches */
    double lr;
    double grad_norm;             /* with clipping: the norm before clipping; else NAN */
    double loss_scale;            /* fp16: the loss scale of this step; 1 otherwise */
    bool skipped;                 /* fp16: the gradients overflowed, the update was skipped */
    int64_t skipped_total;        /* fp16: skipped steps so far in this run (a resumed run's included) */
    double ms;                    /* wall time */
    uint64_t tokens;              /* B*T*accum (x the ranks: the global batch) */
} vr_train_step_info;

/* Builds graph, plan and executor, loads the data, fills the parameters
 * (seeded init, a checkpoint (vr_train_config.init), or a resumed state
 * (vr_train_config.resume)). Errors name the configuration field at fault by
 * its C name ("vr_train_config.hp.lr: ..."), or the file; the vram command
 * shows each field as the flag that sets it (src/cli/errors.c). */
vr_status vr_trainer_create(const vr_train_config *c, vr_trainer **out);

void vr_trainer_free(vr_trainer *t);

/* Runs one optimizer step (accum micro-batches from the training split). */
vr_status vr_trainer_step(vr_trainer *t, vr_train_step_info *info);

/* on: each vr_trainer_step also starts the step after its own before waiting for it (vr_exec_step_start; on a
 * replayed CUDA graph the GPU then does not wait for the host between steps; the same results). While a step
 * is so queued only vr_trainer_step (which runs it) and vr_trainer_free may follow: turn it off for the step
 * after which the weights are evaluated, saved or read. Off by default; vr_train_run turns it on wherever the
 * next step follows directly. */
void vr_trainer_lookahead(vr_trainer *t, bool on);

/* Mean loss of the no-grad graph over the first eval_batches held-out batches
 * (the eval graph and its memory are set up on the first call). */
vr_status vr_trainer_eval(vr_trainer *t, double *val_loss);

/* Saves the parameters as the model's checkpoint, atomically: GPT in llm.c's format (a file), Llama as a
 * Hugging Face directory (config.json + model.safetensors, fp32); an MLP has none (use the state). With ranks
 * every rank calls it (the weights are gathered: vr_trainer_read_params) and rank 0 writes. */
vr_status vr_trainer_save_model(vr_trainer *t, const char *path);

/* Checks before the first step that vr_trainer_save_model(path) can write there (a Llama's directory is
 * created; on rank 0 only, the one that writes). Errors name the path. */
vr_status vr_trainer_check_save(const vr_trainer *t, const char *path);

/* Saves the resumable state (params, optimizer state, step, RNG, data position), atomically. */
vr_status vr_trainer_save_state(vr_trainer *t, const char *path);

/* Copies the n_params parameters (llm.c / flat order) to host memory, fp32 (the master's values where there is
 * one). Under ZeRO >= 1 with ranks the weights are gathered from their owners: every rank must call it. */
vr_status vr_trainer_read_params(vr_trainer *t, float *host, int64_t n);

/* The CUDA context (or whatever the process held on the device before the run, NVML) and the most device
 * memory this process was seen to use (NVML, sampled after each step with max_memory, else at the end);
 * 0 when unknown (cpu, no NVML). */
uint64_t vr_trainer_context_bytes(const vr_trainer *t);
uint64_t vr_trainer_process_peak(vr_trainer *t);

/* Optimizer steps completed so far (after --resume: the state's). */
int64_t vr_trainer_steps_done(const vr_trainer *t);

/* The pieces, for reports and tests. The eval ones are NULL before the first eval. */
const vr_graph *vr_trainer_graph(const vr_trainer *t);
const vr_plan *vr_trainer_plan(const vr_trainer *t);
vr_exec *vr_trainer_exec(vr_trainer *t);
const vr_plan *vr_trainer_eval_plan(const vr_trainer *t);
vr_exec *vr_trainer_eval_exec(vr_trainer *t);

/* Fills params[0..n_params) with the initialisation described above (seeded). */
void vr_train_init_params(const vr_graph *g, uint64_t seed, float *params);

/* --------------------------------------------------------------- the whole run */

typedef struct vr_train_run_opts {
    vr_progress_mode progress;    /* AUTO, LINES, JSON, QUIET ... */
    int64_t eval_every;           /* evaluate every N steps and at the end (0 = only at the end; -1 never) */
    int64_t save_every;           /* also save every N steps (0 = only at the end) */
    const char *save;             /* llm.c checkpoint to write, or NULL */
    const char *save_init;        /* llm.c checkpoint of the initial parameters (before step 1), or NULL */
    const char *save_state;       /* vram state to write, or NULL */
    bool print_plan;              /* print the plan's memory table first */
    void (*on_event)(void *ctx, const char *what); /* told "checkpoint PATH" after each save (a trace's
                                                    * instant events); NULL: none */
    void *on_event_ctx;
} vr_train_run_opts;

typedef struct vr_train_summary {
    int64_t steps;                /* steps run by this call */
    double loss_first, loss_last; /* training loss of the first and last step run */
    double val_loss;              /* the last evaluation (NAN if none) */
    double tokens_per_s;          /* training tokens per second over the steps run */
    double seconds;
    int64_t skipped;              /* fp16: steps whose update an overflow skipped (whole run, resumed included) */
    double loss_scale;            /* fp16: the loss scale after the last step; 0 otherwise */
} vr_train_summary;

/* What `vram train` does: the memory table, progress per step, evaluations,
 * saves, and a final summary (loss first -> last, tokens/s, and planned vs
 * really allocated bytes per role), written to `out`. */
vr_status vr_train_run(const vr_train_config *c, const vr_train_run_opts *o, FILE *out, vr_train_summary *sum);

/* Prints the planned-vs-measured table of a trainer's executor. */
void vr_train_print_memory(vr_trainer *t, FILE *out);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
