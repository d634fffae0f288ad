/* vram — the executor: runs a planned step graph on a device.
 *
 * An executor binds every tensor of a plan (vram/plan.h) to device memory and
 * runs the graph's nodes through a backend (the CPU kernels today; a CUDA
 * backend slots in beside it: one "run node" function per device kind).
 *
 * Memory, in one of two modes:
 *   planned  one allocation from the device holds the whole arena; every
 *            tensor lives at the plan's offset. Nothing is allocated per step.
 *   dynamic  PyTorch-eager-like: the persistent tensors are allocated once;
 *            every other tensor comes from the caching allocator (vram/alloc.h)
 *            just before the first node that uses it and goes back right after
 *            the last one, found by counting its remaining uses at run time.
 *            An output the plan computes in place (vr_plan_tensor.base) takes
 *            its dying input's memory in both modes.
 * In both modes the executor measures what it really holds: the raw bytes of
 * every live tensor per role during each node (the timeline), their peak, the
 * device's own used-bytes figure, and in dynamic mode the allocator's
 * statistics, so that tests can hold the plan to what the run allocated.
 *
 * One step: for each of the graph's accum micro-batches, the inputs are copied
 * in and the nodes before the optimizer run (gradients overwrite on the first
 * micro-batch and add on the others); then the optimizer nodes run once.
 * With clipping, the squared norm the graph's sumsq nodes compute is read back
 * and folded into the update as grad_scale = min(1, clip / (norm + 1e-6)),
 * which is torch.nn.utils.clip_grad_norm_'s factor.
 *
 * Tensor values live on the device: use vr_exec_read / vr_exec_write to move
 * them (parameters in and out, optimizer state for checkpoints, gradients in
 * tests). Only fp32 graphs run on the CPU; the CUDA backend (cuda_node_cuda.c)
 * runs fp32, bf16 and fp16 (fp32 master and optimizer state), its clipping
 * factor computed on the device. fp16 trains with dynamic loss scaling
 * (torch.amp.GradScaler's rules): the loss gradient is multiplied by the scale
 * S, the global norm of the scaled gradients (always computed under fp16) is
 * divided by S on the device, which also folds 1/S into the update; a norm that
 * is inf or NaN skips the update on the device (nothing changes: params,
 * master, moments) and halves S; window good steps in a row double it. The parameter buffer of a 16-bit graph may also be
 * read and written as n_params fp32 values: written, they are rounded into the
 * params and copied into the master; read, they are the master's values (the
 * widened params where there is no master). */
#ifndef VRAM_EXEC_H
#define VRAM_EXEC_H

#include <stdbool.h>
#include <stdint.h>
#include "vram/alloc.h"
#include "vram/device.h"
#include "vram/dist.h"
#include "vram/graph.h"
#include "vram/plan.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_exec vr_exec;

/* The cuBLAS(Lt) workspace a CUDA step holds (as PyTorch on Hopper): the graph's workspace tensor
 * (vr_step_config.workspace_bytes, role temp) on a CUDA device. */
#define VR_CUDA_WORKSPACE_BYTES ((uint64_t)32 << 20)

typedef struct vr_exec_config {
    vr_memory_mode memory;        /* planned (arena) or dynamic (caching allocator) */
    const char *alloc_policy;     /* dynamic: allocator policy (NULL = "pytorch") */
    bool poison;                  /* fill every tensor with 0xFF bytes (NaN; -1 for ids) when it becomes
                                   * live, so a kernel reading bytes nothing wrote shows up (tests) */
    const vr_exec *params_from;   /* use this executor's parameter buffer instead of owning one (an
                                   * evaluation graph beside a training graph of the same model) */
    bool cuda_graph;              /* CUDA, planned memory, no poison, one micro-batch, a training graph:
                                   * the first step runs node by node, the second is captured into a
                                   * CUDA graph, later steps replay it (lr and step reach the optimizers
                                   * through device memory; other hyperparameters changing recapture).
                                   * Same results; the bookkeeping (live bytes per node) still runs.
                                   * vr_exec_cuda_graph_state: whether it is on, and why not. */
    bool per_node_optimizer;      /* CUDA: one sumsq and one update launch per parameter tensor, as the
                                   * graph's nodes, instead of the default multi-tensor apply (the global
                                   * norm over all gradients in one pass, the update of all parameters in
                                   * one launch, from a table of addresses in the step's workspace). Same
                                   * results: the update bit for bit, the norm to fp32 summation order. */
    bool profile;                 /* CUDA, node by node: GPU time per node (events), printed at the end */
    bool matmul_tune;             /* CUDA: large matrix products take cuBLASLt's fastest candidate, timed at
                                   * first use, where it is clearly faster than the heuristic's first; a
                                   * near tie may pick differently run to run (default off: runs repeat) */
    bool unfused;                 /* CUDA: every node runs its own kernels, instead of the default fusion of a
                                   * residual add into the layernorm node right after it (one kernel, planned
                                   * memory without poison; the same bytes) and of a Linear and the GELU
                                   * after it (forward: matmul + gelu; backward: the matmul_bwd's dinp
                                   * product + gelu_bwd) into one cuBLASLt product with a GELU epilogue,
                                   * where the graph allows (vr_exec_fused_pairs). Same tensors, same plan;
                                   * results equal to rounding. */
    unsigned attention_v1;        /* CUDA: bit 0 forward, bit 1 backward run the first attention kernels
                                   * (deterministic backward) instead of the default ones */
    float loss_scale;             /* fp16 training: the first dynamic loss scale (0: 65536, as
                                   * torch.amp.GradScaler); ignored for fp32/bf16 */
    int loss_scale_window;        /* fp16: good steps before the scale doubles (0: 2000) */
    /* Called after each node of every pass ran, before the tensors it used last are let go (so an
     * allocator's figures are those during the node) (NULL: none), with the node index and the host's
     * monotonic clock (vr_now_ns) before and after it: the node's time on the CPU; on CUDA the
     * launch's (the device runs asynchronously). vr_exec_live(e, node, r) then holds its live
     * bytes. For profilers (vram/prof.h); not called for the nodes of a replayed CUDA graph. */
    void (*on_node)(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns);
    void *on_node_ctx;
    bool device_times;            /* CUDA, node by node (not with cuda_graph): events before and after every
                                   * node on its stream, so that the last step's spans on the GPU can be read
                                   * (vr_exec_device_span); the host waits once per step, at its start */
    vr_comm *comm;                /* a graph of a data-parallel step (vr_step_config.world >= 1): its ranks'
                                   * communicator (of that size and rank; the caller's: freed by it) */
} vr_exec_config;

/* Optimizer hyperparameters of one step (torch.optim's meanings). */
typedef struct vr_optim_hparams {
    float lr;
    float beta1, beta2, eps;      /* adam, adamw */
    float weight_decay;           /* applied to parameters of 2+ dimensions only (matrices, embeddings),
                                   * as nanoGPT: biases and LayerNorm weights are not decayed */
    float momentum, dampening;    /* momentum */
    bool nesterov;
    int64_t step;                 /* 1-based index of this optimizer step (bias correction) */
} vr_optim_hparams;

/* Defaults: lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 for adamw (else 0),
 * momentum 0.9, dampening 0, step 1. */
vr_optim_hparams vr_optim_hparams_default(vr_optim o);

/* One micro-batch of inputs, in host memory. */
typedef struct vr_exec_batch {
    const void *inputs;           /* GPT: tokens (B,T) int32; MLP: features (B,D) float */
    const int32_t *targets;       /* GPT: next tokens (B,T); MLP: labels (B); -1 = ignore the row */
} vr_exec_batch;

/* What one step computed. */
typedef struct vr_exec_result {
    double loss;                  /* mean loss over every row of every micro-batch */
    double grad_norm;             /* global L2 norm of the gradients (when clipping), else NAN */
    double grad_scale;            /* factor clipping applied to the gradients (1: none) */
    double loss_scale;            /* fp16: the loss scale this step ran with (1 otherwise) */
    bool skipped;                 /* fp16: a gradient overflowed (inf/NaN): the optimizer changed nothing,
                                   * and the loss scale is halved for the next step */
} vr_exec_result;

/* Whether the executor keeps device times (vr_exec_config.device_times on a backend that has them: CUDA,
 * node by node). */
bool vr_exec_device_times(vr_exec *e);
/* With device times: node's span on the device in pass `pass` (micro-batch, from 0; the optimizer's nodes
 * run in the last) of the last step, in the host's clock (vr_now_ns: the step's start event is anchored to
 * it when the host waits for it), and its lane (0: the compute stream, 1: offload's copy stream, 2: data
 * parallel's communication stream). The first call after a step waits for the step's work on the device
 * (once). false where the node queued no device work (host nodes, reshapes, the members of a multi-tensor
 * group after the first, which runs the group; the matmul of a fused forward Linear + GELU pair, whose gelu
 * runs the product: vr_exec_fused_pairs) or the backend keeps no times. */
bool vr_exec_device_span(vr_exec *e, int node, int pass, uint64_t *t0_ns, uint64_t *t1_ns, int *lane);

/* What the run really held. Live bytes are raw (numel x dtype size), counted
 * when a tensor is bound to memory and uncounted when it is let go. */
typedef struct vr_exec_memory {
    uint64_t max_live[VR_ROLE_COUNT]; /* most bytes of role r live during one node, over all passes */
    uint64_t at_peak[VR_ROLE_COUNT];  /* bytes of each role live during the peak node */
    uint64_t peak;                    /* most raw bytes live during one node */
    int peak_node;                    /* where (-1 before the first step) */
    uint64_t arena;                   /* planned: bytes of this executor's arena allocation (0 dynamic) */
    uint64_t device_used;             /* the device's used_by_us now (everything on it, not only ours) */
    uint64_t device_peak;             /* the most used_by_us seen during any node */
    /* dynamic mode: the caching allocator's own statistics (0 in planned mode) */
    uint64_t peak_allocated;          /* max_memory_allocated */
    uint64_t peak_reserved;           /* max_memory_reserved */
    uint64_t peak_requested;          /* most bytes asked for at once */
    int64_t device_allocs;            /* segments obtained from the device */
    /* offload: host memory (none of it is in the figures above) */
    uint64_t host[VR_ROLE_COUNT];     /* raw bytes of the host tensors bound, per role */
    uint64_t host_arena;              /* bytes of the host arena allocation (pinned on a GPU) */
} vr_exec_memory;

/* Binds the plan's tensors to memory on `dev` (planned: allocates the arena;
 * dynamic: creates the allocator and allocates the persistent tensors),
 * zeroes the optimizer state, and picks the backend for the device. The plan
 * and its graph must outlive the executor. Errors: VR_ERR_UNSUPPORTED for a
 * device or precision with no backend, VR_ERR_OOM when the device runs out. */
vr_status vr_exec_create(const vr_plan *plan, vr_device *dev, const vr_exec_config *cfg, vr_exec **out);

/* Frees everything the executor holds (NULL is fine). */
void vr_exec_free(vr_exec *e);

/* Runs one step: micro[0 .. accum) micro-batches, then the optimizer nodes with
 * hyperparameters h (may be NULL for graphs without optimizer nodes). It first makes
 * the executor's device the calling thread's current one (vr_device_use), as
 * vr_exec_create did, so executors on two GPUs of one process may take turns. */
vr_status vr_exec_step(vr_exec *e, const vr_exec_batch *micro, const vr_optim_hparams *h, vr_exec_result *res);

/* vr_exec_step in two halves: start queues the step (a replayed CUDA graph with its losses' readback: the host
 * does not wait; otherwise the whole step runs), finish waits for it and gives its result. Between the two, a
 * second step may be started where vr_exec_can_start_ahead allows (its inputs are copied on start), so that the
 * GPU does not wait for the host between steps; finish then gives the first step's result, the next finish the
 * second's; vr_exec_step refuses while one is in flight. Outputs (vr_exec_read) are the last started step's, once
 * it has finished. */
vr_status vr_exec_step_start(vr_exec *e, const vr_exec_batch *micro, const vr_optim_hparams *h);
vr_status vr_exec_step_finish(vr_exec *e, vr_exec_result *res);
/* Whether a step may be started now with one in flight: exactly one is, no dynamic loss scaling (fp16: the next
 * step's scale and count depend on the result of this one), no ranks. */
bool vr_exec_can_start_ahead(const vr_exec *e);
/* Whether the step in flight is still queued on the device (a replayed CUDA graph): only then does starting the
 * next one before finishing it save anything (otherwise the step already ran on start). */
bool vr_exec_step_queued(const vr_exec *e);

/* Copies tensor t (a storage tensor or a view) to / from host memory: bytes
 * must equal the tensor's. VR_ERR_INVALID when t is not bound to memory now
 * (persistent tensors always are; outputs stay bound until the next step). */
vr_status vr_exec_read(vr_exec *e, int t, void *host, uint64_t bytes);
vr_status vr_exec_write(vr_exec *e, int t, const void *host, uint64_t bytes);

/* The device address of tensor t, or NULL when it is not bound now. */
void *vr_exec_tensor_ptr(const vr_exec *e, int t);

/* CUDA graphs (vr_exec_config.cuda_graph): whether they were asked for. *on (may be NULL): steps run as a
 * CUDA graph (from the second step on: captured once, then replayed); false when asked for but not possible
 * for this step (dynamic memory, accumulation, offload, ranks, a device without them) or after a capture
 * failed (the step that failed, and every later one, then run node by node with the same results). *reason
 * (may be NULL): why not, as it reads after "off" ("after a failed capture: <the error>", "with dynamic
 * memory (vr_exec_config.memory)"); "" when on or not asked. Valid while the executor lives. */
bool vr_exec_cuda_graph_state(const vr_exec *e, bool *on, const char **reason);

/* The cuDNN the CUDA attention loads at run time (the first libcudnn.so.9 the loader finds): its version
 * (91900 = 9.19.0), or 0 with *why (may be NULL) saying why none loads (not found, below 9.0, a CUDA-less
 * build). Loads it on first use. */
int vr_exec_cudnn_version(const char **why);

/* CUDA: whose attention kernels the step's attention nodes run (vr_step_config.attention), decided when the
 * executor was made (cuDNN's plans are built then): "cudnn 9.19.0" (the version loaded), "vram", or
 * "vram (cuDNN not used: <why>)" under
 * auto when cuDNN could not run them; "" without attention nodes or on the CPU. Valid while the executor
 * lives. */
const char *vr_exec_attention_kernels(const vr_exec *e);

/* CUDA: the Linear + GELU pairs this executor runs as one cuBLASLt product (vr_exec_config.unfused),
 * found when it was made: *fwd forward ones (matmul + gelu, recompute's too), *bwd backward ones
 * (matmul_bwd + gelu_bwd; a pair for whose shape cuBLASLt turned out to have no DGELU algorithm, at its
 * first step, runs the two products one after the other and is no longer counted); either may be NULL.
 * 0 and 0 on the CPU or when unfused. */
void vr_exec_fused_pairs(const vr_exec *e, int *fwd, int *bwd);

/* CUDA: the Linear bias gradients this executor sums in the layernorm_bwd before their matmul_bwd (the
 * residual stream's gradient, vr_exec_config.unfused), less any whose shape the one-pass kernel turned out
 * not to take at the first step. 0 on the CPU or when unfused. */
int vr_exec_fused_bias_grads(const vr_exec *e);

/* CUDA: the q|k|v projections whose bias gradient this executor takes from the attention's identities (a third
 * of the column sums: the keys' third is 0, the values' the output projection's bias gradient times its weight;
 * vr_exec_config.unfused; one rank). 0 on the CPU or when unfused. */
int vr_exec_fused_qkv_bias(const vr_exec *e);

/* fp16 dynamic loss scaling: the scale the next step runs with and the good steps counted toward
 * its growth (1 and 0 without scaling); set restores them (a resumed run). */
void vr_exec_get_loss_scale(const vr_exec *e, float *scale, int *good);
vr_status vr_exec_set_loss_scale(vr_exec *e, float scale, int good);

/* The measured memory figures (see vr_exec_memory). */
void vr_exec_get_memory(vr_exec *e, vr_exec_memory *out);

/* Live raw bytes of role r during node i in the last pass that ran node i
 * (r = VR_ROLE_COUNT: all roles); 0 for a node that has not run. */
uint64_t vr_exec_live(const vr_exec *e, int node, int role);

/* Resets the measured peaks (max_live, at_peak, peak, device_peak, allocator peaks). */
void vr_exec_reset_peaks(vr_exec *e);

/* The allocator of a dynamic executor (NULL in planned mode), e.g. for its summary. */
vr_alloc *vr_exec_allocator(vr_exec *e);

/* --- threads of the CPU backend ---
 * The CPU kernels run OpenMP loops and call OpenBLAS, which keeps its own pool
 * of threads. With libgomp's default (active) waiting, OpenMP threads spin
 * after each loop and starve OpenBLAS's threads: on 2 cores a training step
 * ran 40x slower than with OMP_WAIT_POLICY=passive (OPENBLAS_THREAD_TIMEOUT=4,
 * OpenBLAS's shortest poll before its threads sleep, adds ~10%). Both libraries
 * read these when they load, so they must be in the environment before: the
 * vram command sets them and re-executes itself (src/cli/threads.c); programs
 * linking libvram should export them themselves. */

/* Sets the threads of OpenMP and OpenBLAS for this process (n >= 1). */
void vr_exec_cpu_set_threads(int n);

/* OpenMP's thread count (omp_get_max_threads). */
int vr_exec_cpu_threads(void);

/* True when the wait policy cannot hurt: one thread, or OMP_WAIT_POLICY=passive. */
bool vr_exec_cpu_wait_policy_ok(void);

/* The plan and device the executor runs, and the backend's name ("cpu"). */
const vr_plan *vr_exec_plan(const vr_exec *e);
vr_device *vr_exec_device(const vr_exec *e);
const char *vr_exec_backend_name(const vr_exec *e);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
