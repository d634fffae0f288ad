/* Inside the executor: its state, and the backend interface (one "run node"
 * function per device kind) that the CPU backend (cpu_node.c) and the CUDA
 * backend (cuda_node_cuda.c) implement.
 *
 * Everything else is device-neutral: memory comes from vr_device_malloc or
 * vr_alloc, values move with vr_device_memcpy/memset, the clipping norm is
 * read back with vr_exec_read. The CUDA backend (over src/kernels/cuda) adds: a
 * vr_cuda_ctx per executor (stream, the graph's "workspace" tensor as cuBLAS
 * workspace), the dtype of each call from the graph (bf16/fp16 activations,
 * fp32 master weights), and it passes each kernel its node's scratch tensor,
 * sized by vr_node_scratch_bytes with the kernels' own functions
 * (kernels/scratch.h), so that the plan counts every byte; pick_backend() in
 * exec.c selects it. */
#ifndef VRAM_EXEC_INTERNAL_H
#define VRAM_EXEC_INTERNAL_H

#include "vram/exec.h"

/* Everything a backend needs to run one node: device pointers per slot
 * (NULL where the slot is unused), resolved accumulate flags, and for
 * optimizer nodes the hyperparameters. */
typedef struct vr_exec_args {
    const vr_graph *g;
    const vr_node *node;
    void *in[VR_NODE_MAX_IN];
    void *out[VR_NODE_MAX_OUT];
    int acc[VR_NODE_MAX_OUT];     /* 0: overwrite, 1: add (VR_ACC_MICRO already resolved) */
    void *scratch;                /* the node's workspace tensor, NULL if none */
    uint64_t scratch_bytes;
    const vr_optim_hparams *h;    /* optimizer nodes */
    float grad_scale;             /* optimizer nodes: clipping factor */
    float weight_decay;           /* optimizer nodes: this parameter's decay (0 for 1-D ones) */
    void *state;                  /* the backend's per-executor state (vr_exec.be_state) */
    bool last_sumsq;              /* sumsq nodes: the last one (a device-side clip computes the factor) */
    vr_exec *exec;                /* the executor (a backend may look at the other nodes: multi-tensor) */
    int micro;                    /* micro-batch index of this pass */
} vr_exec_args;

typedef struct vr_exec_backend {
    const char *name;
    /* Runs one node; VR_ERR_UNSUPPORTED for an op or dtype it lacks. */
    vr_status (*run_node)(const vr_exec_args *a);
    /* Optional: per-executor state (e->be_state), made once the persistent
     * tensors are bound (the workspace tensor has its address), and freed. */
    vr_status (*init)(vr_exec *e);
    void (*fini)(vr_exec *e);
    /* Optional: the clipping factor is computed on the device by the last sumsq
     * node and read by the optimizer nodes there (no host round trip); after the
     * step, clip_result reads back the norm and the factor. NULL: the executor
     * reads the squared norm after the last sumsq node (host). */
    vr_status (*clip_result)(vr_exec *e, double *norm, double *scale);
    /* Optional, CUDA graphs (vr_exec_config.cuda_graph): graph_ok says whether this executor can
     * (its init made a stream of its own); graph_scalars passes the step's lr and step to the device
     * before each step; capture_begin/capture_end (keep: instantiate, else discard) bracket one
     * step's node calls; replay queues the captured step. */
    bool (*graph_ok)(vr_exec *e);
    vr_status (*graph_scalars)(vr_exec *e, const vr_optim_hparams *h);
    vr_status (*capture_begin)(vr_exec *e);
    vr_status (*capture_end)(vr_exec *e, bool keep);
    vr_status (*replay)(vr_exec *e);
    /* Optional, offload (copy nodes; NULL where copies are synchronous, as on the CPU): host_wait blocks
     * the host until the device -> host copy of node `copy` has landed (before a host node reads it);
     * copies_done waits until every copy queued is done (the end of a step). */
    vr_status (*host_wait)(vr_exec *e, int copy);
    vr_status (*copies_done)(vr_exec *e);
    /* Optional (NULL: vr_device_memcpy, the host waiting for each): a step's small transfers through pinned
     * host memory. stage_in queues one of the step's inputs (slot 0 the tokens, 1 the targets) to the device
     * ahead of the step's work, src reusable on return; read_losses waits for the device work queued so far
     * and reads the losses (bytes), and on the step's last pass (last) the clipping result with them, which
     * the clip_result after it returns without another wait. */
    vr_status (*stage_in)(vr_exec *e, int slot, void *dst, const void *src, size_t bytes);
    vr_status (*read_losses)(vr_exec *e, float *dst, size_t bytes, bool last);
    /* Optional (with read_losses), a replayed step's readback in two halves, so that the next step can be
     * queued between them (vr_exec_step_start): losses_queue queues the losses (bytes) and the clipping result
     * down behind the step into a staging set of their own (*set) and marks when they have landed, after which
     * the next step's inputs and scalars go up through the other set (VR_ERR_UNSUPPORTED, nothing queued: no
     * staging for them); losses_wait waits for set's mark and reads the losses, and the clip_result after it
     * returns set's clipping result. */
    vr_status (*losses_queue)(vr_exec *e, size_t bytes, int *set);
    vr_status (*losses_wait)(vr_exec *e, int set, float *dst, size_t bytes);
    /* Optional: vr_exec_device_times, vr_exec_device_span. */
    bool (*device_times)(vr_exec *e);
    bool (*device_span)(vr_exec *e, int node, int pass, uint64_t *t0_ns, uint64_t *t1_ns, int *lane);
} vr_exec_backend;

/* Fills a backend's arguments for node i as the step loop does (run.c): a backend that runs several
 * nodes at once (multi-tensor apply) gets every node's addresses exactly as its own call would. */
void vr__exec_node_args(vr_exec *e, int i, int micro, const vr_optim_hparams *h, float grad_scale,
                        vr_exec_args *a);

/* What a step's passes share: the clipping factor, the factor the updates apply, the norm, and (fp16 on
 * the host) whether the update is skipped. */
typedef struct vr_pass_state {
    float grad_scale;    /* the clipping factor */
    float update_scale;  /* what the update nodes multiply the gradients by: grad_scale / the loss scale */
    double grad_norm;
    bool skip;           /* fp16 on the host (offload): the norm overflowed, the update nodes do not run */
} vr_pass_state;

/* Runs node i of pass `micro` (host_phase.c): on the device, or on the host after the copy that brought
 * its gradient down; nothing for a node that does not run in this pass; after the last sumsq node on the
 * host, the clipping factor into ps. Errors name the node. */
vr_status vr__exec_run_node(vr_exec *e, int i, int micro, const vr_optim_hparams *h, vr_pass_state *ps);

/* The host's phase of an offloaded step on a thread of its own (host_phase.c), where copies are
 * asynchronous (CUDA): started before the last pass's first node, it runs nodes [opt_start, n_nodes)
 * (each host node once the main thread has queued its copy down and the copy has landed; the copies up),
 * recording their host times in host_t0/host_t1, while the main thread queues the forward and backward;
 * issued tells it how far the main thread got; join waits for it (its status); cancel stops it. */
bool vr__host_worker_wanted(const vr_exec *e);
vr_status vr__host_worker_start(vr_exec *e, int micro, const vr_optim_hparams *h, vr_pass_state *ps);
void vr__host_worker_issued(vr_exec *e, int node);
vr_status vr__host_worker_join(vr_exec *e);
void vr__host_worker_cancel(vr_exec *e);

/* Data parallel (comm_node.c): the communicator fits the step (none needed without ranks); whether op is a
 * collective; runs collective node a (on stream: NCCL's, NULL on the CPU); under ZeRO 2 (norm_sharded)
 * sums the squared norm over the ranks, in place (otherwise nothing); also offloaded under ZeRO >= 1. */
vr_status vr__exec_comm_check(const vr_exec *e);
/* The index of an update node's first element in the stream of stochastic rounding of its optimizer state:
 * the parameter's element in the model's flat weights (param_offset), so that a rank holding a share of the
 * state rounds each element as one process does; an offloaded update (the host copy, no param_offset) keeps
 * the state buffer's own index. */
uint64_t vr__exec_state_index(const vr_graph *g, const vr_node *n);
bool vr__exec_is_comm(vr_op op);
/* A collective over a gradient (all-reduce, reduce): the last micro-batch's only. */
bool vr__exec_is_grad_comm(vr_op op);
vr_status vr__exec_comm_node(const vr_exec_args *a, void *stream);
bool vr__exec_norm_sharded(const vr_exec *e);
vr_status vr__exec_comm_normsq(vr_exec *e, float *normsq, void *stream);
/* The same for a norm in host memory, whatever the engine (the host's phase of an offloaded step). */
vr_status vr__exec_comm_normsq_host(vr_exec *e, float *normsq);

/* The CPU backend (cpu_node.c). */
const vr_exec_backend *vr__exec_backend_cpu(void);

/* The host's nodes of an offloaded step (sumsq and updates over host tensors in the params' dtype, the
 * fp32 master and state updated in place) and its copies where the device is the host (cpu_node.c). */
vr_status vr__exec_host_node(const vr_exec_args *a);

/* The CUDA backend (cuda_node_cuda.c); NULL in builds without CUDA (cuda_node_nocuda.c). */
const vr_exec_backend *vr__exec_backend_cuda(void);

/* A step started and not yet finished (vr_exec_step_start): queued on the device with its readback (queued:
 * the losses in staging set `set`, read by the finish), or done (its result). */
typedef struct vr_exec_pending {
    bool queued;
    int set;
    vr_pass_state ps;
    vr_exec_result res;
} vr_exec_pending;

struct vr_exec {
    const vr_plan *plan;
    const vr_graph *g;
    vr_device *dev;
    vr_exec_config cfg;
    const vr_exec_backend *be;

    vr_alloc *alloc;              /* dynamic mode */
    void *arena;                  /* planned mode: covers plan offsets [arena_lo, arena_size) */
    void *host_arena;             /* offload: the plan's host tensors (host_size bytes, pinned on a GPU) */
    uint64_t arena_lo, arena_bytes;
    int shared_params;            /* storage id bound to params_from's buffer, -1 */

    void **ptr;                   /* [n_tensors] storage address while bound, else NULL */
    bool *live;                   /* [n_tensors] storage bound */
    bool *counted;                /* [n_tensors] its bytes are in live_bytes */
    void **block;                 /* [n_tensors] by base (plan's tensors[].base): the memory */
    int *holders;                 /* [n_tensors] by base: bound tensors on it (in place: several) */
    int *inplace;                 /* [n_tensors] scratch list of in-place outputs of a node */
    int *uses_all, *uses_pre;     /* [n_tensors] references in nodes [0,N) / [0,opt_start) */
    int *left;                    /* [n_tensors] references left in the current pass */
    int *pending;                 /* [n_tensors] scratch list of ids */
    int opt_start;                /* first optimizer node (n_nodes when none) */
    int last_sumsq;               /* last sumsq node, -1 */
    uint64_t live_bytes[VR_ROLE_COUNT]; /* device bytes bound per role */
    uint64_t host_bytes[VR_ROLE_COUNT]; /* host bytes bound per role (offload) */
    uint64_t *timeline;           /* [n_nodes * VR_ROLE_COUNT] live bytes of the last pass */
    float *losses;                /* host copy of the losses (rows) */
    int64_t rows;                 /* elements of the losses tensor */
    vr_exec_memory mem;
    void *be_state;               /* the backend's (CUDA: its vr_cuda_ctx and clip scalars) */
    int64_t steps_run;            /* steps completed */
    bool graph;                   /* CUDA graph mode on (cfg.cuda_graph and the backend can) */
    bool graph_asked;             /* cfg.cuda_graph as the caller gave it */
    char graph_off[512];          /* asked for but off: why, as it reads after "off" (vr_exec_cuda_graph_state) */
    bool graph_captured;          /* a captured step is ready to replay */
    char attention[512];          /* CUDA: whose attention kernels the nodes run (vr_exec_attention_kernels) */
    vr_optim_hparams graph_h;     /* the hyperparameters baked into it (lr and step are not) */
    bool multi_tensor;            /* the backend runs the optimizer phase multi-tensor (CUDA: set by its
                                   * init, cleared if it falls back to node by node) */
    int fused_fwd, fused_bwd;     /* CUDA: Linear + GELU pairs run as one product (vr_exec_fused_pairs) */
    int fused_dbias;              /* CUDA: bias gradients summed by a layernorm_bwd (vr_exec_fused_bias_grads) */
    int fused_qkvb;               /* CUDA: q|k|v bias gradients from attention's identities (vr_exec_fused_qkv_bias) */
    bool scaling;                 /* fp16 training: dynamic loss scaling on */
    float loss_scale;             /* the scale the next step runs with (1 without scaling) */
    int scale_good;               /* good steps since the scale last changed */
    float graph_scale;            /* the loss scale baked into the captured step */
    struct vr_host_worker *worker; /* offload on a GPU: the host phase's thread (host_phase.c), NULL */
    vr_exec_pending pend[2];      /* steps started, not finished: pend[pend_first], then the next */
    int pend_first, n_pend;
    uint64_t *host_t0, *host_t1;  /* [n_nodes]: host times of the nodes the worker ran */
};

/* Makes storage tensor s live: gives it its address (arena offset or a block
 * from the allocator), adds its bytes to its role, poisons it if asked.
 * A tensor the plan computes in place (its base is another tensor) takes the
 * base's memory instead and is not counted until vr__exec_count: during its
 * node the bytes are still the input's (the plan's rule). node is the node
 * needing it (-1 at creation), for error messages. */
vr_status vr__exec_bind(vr_exec *e, int s, int node);

/* Counts the bytes of a bound in-place tensor (after its node). */
void vr__exec_count(vr_exec *e, int s);

/* Lets storage tensor s go: uncounts its bytes, and returns the memory when no
 * other tensor is on its base. */
void vr__exec_unbind(vr_exec *e, int s);

#endif
