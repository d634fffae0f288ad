/* vram — the graph: the description of one training step, nothing allocated.
 *
 * A graph is a list of tensors (name, dtype, shape, role) and a list of nodes
 * in execution order. Model builders (GPT, MLP) emit the forward nodes;
 * vr_graph_backward() appends the recompute, backward and optimizer nodes.
 * Tensors hold no data and no addresses: the plan (vram/plan.h) decides where
 * every one of them lives and how many bytes each role needs.
 *
 * Nodes map 1:1 onto kernels (src/kernels/cpu/kernels_cpu.h): each op has
 * fixed input and output slots, listed in the op table (vr_op_get_info) and
 * in the enum below. An unused slot is -1; the executor passes NULL there
 * (a backward node leaves an input slot at -1 when no output it computes
 * needs it, e.g. matmul_bwd's inp when dw is not wanted).
 * Backward nodes carry one accumulate flag per output (VR_ACC_*), so no
 * zero-fill nodes are needed: the first write of a gradient overwrites, later
 * ones add.
 *
 * Vocabulary of ids: tensors and nodes are referred to by their index in
 * g->tensors / g->nodes (int; -1 = none). The arrays may move while the graph
 * is being built: keep ids, not pointers.
 *
 * Parameters live in one flat buffer (g->params) in llm.c's order; each
 * parameter tensor is a view into it and records its element offset
 * (param_offset), so an llm.c checkpoint maps onto the buffer directly.
 * The graph holds no values: parameter initialisation (GPT-2: normal(0,0.02),
 * residual projections 0.02/sqrt(2L), biases 0, LayerNorm weights 1) is done
 * by whoever fills the buffer (src/train), from the init/init_scale hints each
 * parameter tensor carries. */
#ifndef VRAM_GRAPH_H
#define VRAM_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_MAX_DIMS 4
#define VR_NODE_MAX_IN 6
#define VR_NODE_MAX_OUT 6
#define VR_NAME_MAX 64
/* The most data-parallel ranks a step may have (vr_step_config.world). */
#define VR_MAX_RANKS 4096
/* Data parallel: gradients are communicated in buckets of about this many bytes (PyTorch DDP's 25 MiB). */
#define VR_DIST_BUCKET_BYTES ((int64_t)25 << 20)
#define VR_MLP_MAX_SIZES 16

/* U8: the codes of 8-bit optimizer state (indices into a 256-entry quantization map). U16: the low 16 bits of
 * a split fp32 master (vr_step_config.split_master). */
typedef enum vr_dtype { VR_F32, VR_BF16, VR_F16, VR_I32, VR_U8, VR_U16, VR_DTYPE_COUNT } vr_dtype;

/* Bytes per element (4, 2, 2, 4, 1, 2) and a short name ("f32", "bf16", "f16", "i32", "u8", "u16"). */
size_t vr_dtype_size(vr_dtype dt);
const char *vr_dtype_name(vr_dtype dt);

/* What a tensor's bytes are for (DESIGN.md "roles"). Builders declare
 * intermediates VR_ROLE_ACT ("may be saved"); the plan resolves each to act
 * (a forward tensor read by a backward or recompute node) or temp. */
typedef enum vr_role {
    VR_ROLE_PARAM,   /* weights, trainable or frozen */
    VR_ROLE_MASTER,  /* fp32 master copy of the trainable weights (bf16/fp16) */
    VR_ROLE_GRAD,    /* parameter gradients */
    VR_ROLE_OPTIM,   /* optimizer state (momentum; Adam m, v; loss scale) */
    VR_ROLE_INPUT,   /* data copied in for the step: token ids, targets, features */
    VR_ROLE_ACT,     /* activations saved by the forward for the backward */
    VR_ROLE_TEMP,    /* everything short-lived: unsaved intermediates, activation
                      * gradients, kernel scratch, library workspaces, the losses */
    VR_ROLE_COUNT
} vr_role;

/* "params", "master", "grads", "optim", "inputs", "acts", "temp". */
const char *vr_role_name(vr_role r);

/* Ops. Slots: in[...] -> out[...]; shapes with N = rows (B*T), C channels. */
typedef enum vr_op {
    VR_OP_EMBEDDING,      /* in: tok(B,T) i32, wte(Vp,C), wpe(maxT,C)        out: x(B,T,C) */
    VR_OP_EMBEDDING_BWD,  /* in: dx(B,T,C), tok                               out: dwte, dwpe (one acc: a tied
                           * wte that adds while wpe overwrites gets two nodes, one output each) */
    VR_OP_LAYERNORM,      /* in: x(N,C), w(C), b(C)                           out: y(N,C), mean(N), rstd(N) */
    VR_OP_LAYERNORM_BWD,  /* in: dy, x, w, mean, rstd (from_out: y, b for x, mean) out: dx, dw, db (acc dw == acc db;
                           * only one of dw, db wanted: the scratch (C) takes the other) */
    VR_OP_MATMUL,         /* in: x(N,C), w(OC,C), b(OC)                       out: y(N,OC) */
    VR_OP_MATMUL_BWD,     /* in: dy(N,OC), x, w                               out: dx, dw, db (acc dw == acc db) */
    VR_OP_ATTENTION,      /* in: qkv(B,T,3C)                                  out: y(B,T,C), lse(B,NH,T) f32 */
    VR_OP_ATTENTION_BWD,  /* in: dy, qkv, y, lse                              out: dqkv */
    VR_OP_GELU,           /* in: x                                            out: y */
    VR_OP_GELU_BWD,       /* in: dy, x                                        out: dx */
    VR_OP_RELU,           /* in: x                                            out: y */
    VR_OP_RELU_BWD,       /* in: dy, y (the forward's output)                 out: dx */
    VR_OP_ADD,            /* in: a, b                                         out: y = a + b */
    VR_OP_ACC,            /* in: src                                          out: dst (=|+=) src */
    VR_OP_RESHAPE,        /* in: x                                            out: view of x (no kernel) */
    VR_OP_CLASSIFIER,     /* in: x(N,C), wte(Vp,C), targets(N) i32            out: losses(N) f32, dx, dwte;
                           * tied head + softmax + cross-entropy, and when training the
                           * gradients in the same pass; scratch (R,V) f32. Only the first
                           * V rows of wte are read: with acc dwte = overwrite the executor
                           * zeroes rows [V,Vp) of dwte (the kernel writes V rows) */
    VR_OP_SOFTMAX_XENT,   /* in: logits(N,V), targets(N) i32                  out: losses(N) f32, probs(N,V) */
    VR_OP_SOFTMAX_XENT_BWD, /* in: probs, targets                             out: dlogits */
    VR_OP_SUMSQ,          /* in: g                                            out: normsq(1) f32 (+= sum g^2) */
    VR_OP_SGD,            /* in: grad, normsq                                 out: param, master */
    VR_OP_SGD_MOMENTUM,   /* in: grad, normsq                                 out: param, master, momentum,
                           *                                                   -, absmax(momentum) */
    VR_OP_ADAM,           /* in: grad, normsq                                 out: param, master, m, v,
                           *                                                   absmax(m), absmax(v) */
    VR_OP_ADAMW,          /* in: grad, normsq                                 out: as adam.
                           * The state's dtype says its format: f32; bf16 (stochastic rounding); u8 codes of
                           * 8-bit block-wise state with one f32 absmax per VR_Q8_BLOCK elements in the
                           * absmax slots (vram/optim_state.h). master -1 with bf16 params: no master copy,
                           * the weights are updated with stochastic rounding. */
    VR_OP_RMSNORM,        /* in: x(N,C), w(C)                                 out: y(N,C), rstd(N) f32; eps */
    VR_OP_RMSNORM_BWD,    /* in: dy, x|y, w, rstd                             out: dx, dw (own acc each) */
    VR_OP_ROPE,           /* in: qkv(B,T,(NH+2NKV)*hd)                        out: y (q, k rotated); nh, nkv, rope */
    VR_OP_ROPE_BWD,       /* in: dy                                           out: dx */
    VR_OP_SWIGLU,         /* in: x(N,2I) = [gate | up]                        out: y(N,I) = silu(gate) * up */
    VR_OP_SWIGLU_BWD,     /* in: dy, x                                        out: dx */
    VR_OP_COPY,           /* in: src, fence                                   out: dst (same dtype and size).
                           * Offload: device -> host (a gradient after its last writer; the fence is the
                           * previous copy's source: that copy has finished before this node ends, so its
                           * source's bytes may be reused after it) and host -> device (the updated weights).
                           * A device -> host copy in the backward runs on the last micro-batch only */
    VR_OP_ALLREDUCE,      /* in: x, fence                                     x = the mean of every rank's x, in
                           * place (data parallel; ZeRO-1). Runs on the last micro-batch only; on CUDA on the
                           * communication stream. fence: as VR_OP_COPY's (the previous collective's buffer) */
    VR_OP_REDUCE,         /* in: x, fence                                     rank `root`'s x = the mean of every
                           * rank's x, in place (ZeRO-2: a gradient to its owner; the others' copy dies here) */
    VR_OP_BROADCAST,      /* in: x                                            every rank's x = rank `root`'s x, in
                           * place (ZeRO-1/2: the owner's updated weights to every rank) */
    VR_OP_GATHER,         /* in: w0..w5 (each on its owner; -1 elsewhere)     out: every rank's copy of w0, w1,
                           * ... one after the other, each broadcast from its own owner (node.part says which
                           * tensor each slot is on every rank). ZeRO-3: sharded parameters (or the pieces of
                           * one) brought to every rank a layer before the nodes that read them, through views
                           * of the copy, which dies after the last. Runs on every micro-batch */
    VR_OP_COUNT
} vr_op;

/* Static facts about an op: its name, the kernel it maps to, slot names. */
typedef struct vr_op_info {
    const char *name;                    /* "matmul_bwd" */
    const char *kernel;                  /* "vr_cpu_matmul_bwd" (NULL: no kernel, e.g. reshape) */
    const char *in[VR_NODE_MAX_IN];      /* slot names, NULL past the last */
    const char *out[VR_NODE_MAX_OUT];
} vr_op_info;

/* The op table entry (never NULL for a valid op). */
const vr_op_info *vr_op_get_info(vr_op op);
const char *vr_op_name(vr_op op);

typedef enum vr_phase { VR_PHASE_FORWARD, VR_PHASE_RECOMPUTE, VR_PHASE_BACKWARD, VR_PHASE_OPTIMIZER } vr_phase;

/* "forward", "recompute", "backward", "optimizer". */
const char *vr_phase_name(vr_phase p);

/* Accumulate flags of node outputs. */
enum {
    VR_ACC_OVERWRITE = 0, /* out = value */
    VR_ACC_ADD = 1,       /* out += value */
    VR_ACC_MICRO = 2,     /* parameter gradients under accumulation: overwrite on the
                           * first micro-batch of a step, add on the others */
};

/* Initialisation hints for parameters (the graph never touches values). */
typedef enum vr_init { VR_INIT_NONE, VR_INIT_ZEROS, VR_INIT_ONES, VR_INIT_NORMAL, VR_INIT_UNIFORM } vr_init;

typedef struct vr_tensor {
    char name[VR_NAME_MAX];
    vr_dtype dtype;
    int ndim;
    int64_t shape[VR_MAX_DIMS];
    vr_role role;            /* declared role (see vr_role) */
    int view_of;             /* storage tensor this one is a view of (no bytes of its own); -1: owns */
    int64_t view_offset;     /* element offset into view_of */
    int64_t param_offset;    /* params: element offset in the flat buffer (llm.c order); -1 otherwise */
    int grad;                /* its gradient tensor after vr_graph_backward; -1 none */
    int master;              /* params: view of the fp32 master copy; -1 none */
    int optim[2];            /* params: views of the optimizer state (momentum | m, v); -1 none */
    int absmax[2];           /* params with 8-bit state: views of the per-block absmax of optim[0], optim[1] */
    bool frozen;             /* params: no gradient, no optimizer state */
    int owner;               /* params under ZeRO >= 1: the rank that updates it and holds its master and
                              * optimizer state (vr_step_config.zero); -1: every rank (or split: its pieces') */
    bool split;              /* params under ZeRO >= 1: cut into pieces at the ranks' shard boundaries; the forward
                              * and backward read it, the optimizer sees its pieces instead (no owner, no state) */
    int piece_of;            /* params: a piece of parameter piece_of (a view of a range of its elements, shape
                              * (1, n) for a matrix's so that it decays as the matrix does, (n) otherwise), with
                              * an owner, a gradient (a view of piece_of's) and state of its own; -1 none */
    bool host;               /* lives in (pinned) host memory, not on the device: offloaded master, optimizer
                              * state and the gradients' host copies (always persistent) */
    bool persistent;         /* lives across the whole step: params, master, optim, and the
                              * gradients when they accumulate over micro-batches */
    bool output;             /* read after the step (the losses): lives to the last node */
    int producer;            /* first node that writes it; -1 for params and inputs */
    vr_init init;            /* params: how to initialise */
    float init_scale;        /* std (normal) or bound (uniform) */
} vr_tensor;

/* Rotary positions (HF rope_theta and rope_scaling of type llama3; scaling 0 = none). */
typedef struct vr_rope_config {
    double theta;      /* rope_theta */
    int scaling;       /* 0: none, 1: llama3 */
    double factor;     /* llama3 factor */
    double low_freq;   /* low_freq_factor */
    double high_freq;  /* high_freq_factor */
    double orig_max_t; /* original_max_position_embeddings */
} vr_rope_config;

typedef struct vr_node {
    vr_op op;
    vr_phase phase;
    int layer;                       /* block (GPT) or layer (MLP) index; -1 outside one */
    char name[VR_NAME_MAX];
    int in[VR_NODE_MAX_IN];          /* tensor ids read, per the op's slots; -1 unused */
    int out[VR_NODE_MAX_OUT];        /* tensor ids written; -1 not computed (NULL) */
    uint8_t acc[VR_NODE_MAX_OUT];    /* per output: VR_ACC_* (backward and sumsq nodes) */
    int scratch;                     /* workspace tensor used by this node only; -1 none */
    int nh;                          /* attention, rope: (query) heads */
    int nkv;                         /* attention, rope: kv heads (NH % NKV == 0); 0 = nh (attention
                                      * built by vr_graph_attention: qkv is (B,T,3C)) */
    float eps;                       /* rmsnorm: epsilon */
    vr_rope_config rope;             /* rope: theta and scaling */
    int vocab;                       /* classifier / softmax_xent: real vocabulary V (wte may
                                      * have padded rows; their gradient stays 0) */
    float loss_scale;                /* classifier / xent backward: dL/dlosses[i] = 1/(N*accum) */
    int src;                         /* recompute and backward nodes: the forward node they
                                      * re-run / differentiate; -1 otherwise */
    bool host;                       /* runs on the host over host tensors (offloaded sumsq and updates) */
    bool from_out;                   /* layernorm_bwd, rmsnorm_bwd: in[1] is the forward's output y, not its input,
                                      * and layernorm_bwd's in[3] its bias (-1: none) instead of mean
                                      * (vr_step_config.norm_from_out) */
    int root;                        /* reduce, broadcast: the rank that receives / sends */
    int part[VR_NODE_MAX_IN];        /* gather: the parameters or pieces it assembles, in order, on every rank
                                      * (in[k] is part[k] on its owner, -1 elsewhere); each comes from its
                                      * own owner. -1 unused */
} vr_node;

typedef enum vr_precision { VR_PREC_FP32, VR_PREC_BF16, VR_PREC_FP16 } vr_precision;
typedef enum vr_optim { VR_OPTIM_NONE, VR_OPTIM_SGD, VR_OPTIM_MOMENTUM, VR_OPTIM_ADAM, VR_OPTIM_ADAMW } vr_optim;
/* Activation checkpointing (src/graph/recompute.c): none; block (only each block's input kept); selective (the
 * outputs of GELU / SwiGLU and of the norms re-run in the backward); act (those of GELU / SwiGLU only). */
typedef enum vr_recompute { VR_RECOMPUTE_NONE, VR_RECOMPUTE_BLOCK, VR_RECOMPUTE_SELECTIVE, VR_RECOMPUTE_ACT } vr_recompute;
/* How optimizer state is stored: fp32; bf16 with stochastic rounding; 8-bit block-wise (vram/optim_state.h). */
typedef enum vr_optim_state { VR_OSTATE_FP32, VR_OSTATE_BF16, VR_OSTATE_8BIT } vr_optim_state;
/* Where the fp32 master and the optimizer state live: on the device, or in pinned host memory with the
 * update run by the host (ZeRO-Offload: gradients go down as the backward finishes them, the new weights
 * come back up before the next step). */
typedef enum vr_offload { VR_OFFLOAD_NONE, VR_OFFLOAD_OPTIM } vr_offload;
typedef enum vr_model_kind { VR_MODEL_GPT, VR_MODEL_MLP, VR_MODEL_LLAMA } vr_model_kind;
/* "gpt", "mlp", "llama". */
const char *vr_model_kind_name(vr_model_kind k);
/* Whose kernels will run the graph: it sizes the nodes' scratch by their formulas. */
typedef enum vr_kernels { VR_KERNELS_CPU, VR_KERNELS_CUDA } vr_kernels;
/* Which attention kernels a CUDA step runs (vr_step_config.attention): auto (0, the default) cuDNN's fused
 * flash attention where libcudnn loads and takes the shape (16-bit activations, head size a multiple of 8
 * up to 128), else vram's own; vram: vram's own; cudnn: cuDNN's, or the executor refuses the graph. The
 * choice sizes attention_bwd's scratch (vr_node_scratch_bytes): auto plans the larger of the two needs. */
typedef enum vr_attention { VR_ATTENTION_AUTO, VR_ATTENTION_VRAM, VR_ATTENTION_CUDNN } vr_attention;

/* Names of the enums above, and their parsers (VR_ERR_INVALID naming `what`). */
const char *vr_precision_name(vr_precision p);
const char *vr_optim_name(vr_optim o);
const char *vr_recompute_name(vr_recompute r);
const char *vr_optim_state_name(vr_optim_state o); /* "fp32", "bf16", "8bit" */
/* The master weights of 16-bit params: "none" (no_master), "split" (split_master) or "fp32". */
const char *vr_master_name(bool no_master, bool split_master);
vr_status vr_optim_state_parse(const char *s, const char *what, vr_optim_state *out);
const char *vr_offload_name(vr_offload o); /* "none", "optim" */
vr_status vr_offload_parse(const char *s, const char *what, vr_offload *out);
const char *vr_attention_name(vr_attention a); /* "auto", "vram", "cudnn" */
vr_status vr_attention_parse(const char *s, const char *what, vr_attention *out);
vr_status vr_precision_parse(const char *s, const char *what, vr_precision *out);
vr_status vr_optim_parse(const char *s, const char *what, vr_optim *out);
vr_status vr_recompute_parse(const char *s, const char *what, vr_recompute *out);

/* GPT-2 architecture (llm.c's GPT2Config). */
/* The most layers a GPT config may have (planning is n log n in the nodes; this keeps a typo from planning for minutes). */
#define VR_GPT_MAX_LAYERS 2048

typedef struct vr_gpt_config {
    int L;      /* layers */
    int C;      /* channels */
    int NH;     /* heads (C % NH == 0) */
    int V;      /* vocabulary */
    int Vp;     /* rows of wte: V padded (llm.c pads 50257 to 50304); 0 = V rounded up to 128 */
    int maxT;   /* rows of wpe: the longest sequence */
} vr_gpt_config;

/* MLP: sizes[0] inputs, sizes[1..n-2] hidden, sizes[n-1] classes; act is VR_OP_RELU or VR_OP_GELU. */
typedef struct vr_mlp_config {
    int n_sizes;
    int sizes[VR_MLP_MAX_SIZES];
    vr_op act;
} vr_mlp_config;

/* Llama-family architecture (Llama 3, Qwen2, SmolLM): HF config.json fields in brackets. */
typedef struct vr_llama_config {
    int L;          /* layers [num_hidden_layers] */
    int C;          /* hidden size [hidden_size] */
    int NH;         /* query heads [num_attention_heads] */
    int NKV;        /* kv heads [num_key_value_heads], divides NH */
    int hd;         /* head dim [head_dim], even; 0 = C / NH */
    int I;          /* MLP width [intermediate_size] */
    int V;          /* vocabulary [vocab_size] */
    int Vp;         /* rows of embed_tokens / lm_head: 0 = V rounded up to 128 */
    int maxT;       /* longest sequence [max_position_embeddings] */
    float rms_eps;  /* [rms_norm_eps] */
    vr_rope_config rope; /* [rope_theta, rope_scaling] */
    bool tied;      /* [tie_word_embeddings]: lm_head is embed_tokens */
    bool qkv_bias;  /* q, k, v projections have biases (Qwen2) */
} vr_llama_config;

/* The model and the micro-batch: B rows (sequences), T positions each (GPT, Llama). */
typedef struct vr_model_config {
    vr_model_kind kind;
    vr_gpt_config gpt;
    vr_mlp_config mlp;
    vr_llama_config llama;
    int B;
    int T;
} vr_model_config;

/* What one step does besides the forward pass. */
typedef struct vr_step_config {
    bool train;               /* false: no-grad evaluation graph (forward only, nothing saved) */
    int accum;                /* micro-batches per optimizer step (0 or 1: none). With accum > 1
                               * the gradients persist across micro-batches (VR_ACC_MICRO);
                               * otherwise each lives from its producer to its optimizer node */
    vr_optim optim;           /* VR_OPTIM_NONE: backward only */
    vr_recompute recompute;
    int recompute_layers;     /* recompute act, selective or block in the first N blocks only (0: every block):
                               * each block recomputed saves its share of the activations for its share of the
                               * recompute */
    vr_precision precision;   /* bf16/fp16: params, grads, acts in 16 bits, fp32 master + optim */
    vr_optim_state optim_state; /* how Adam/momentum state is stored (fp32 default); needs a stateful optim */
    bool no_master;           /* bf16: no fp32 master copy (weights updated with stochastic rounding) */
    bool split_master;        /* bf16: the fp32 master kept as its 16 low bits beside the bf16 weights, which are
                               * its high half (rounded to nearest, ties away from zero): the same fp32 values as
                               * a full master in 2 bytes per weight instead of 4 (kernels/optim_math.h) */
    vr_offload offload;       /* optim: master (fp32, also for fp32 params) and state in host memory, the
                               * update on the host; needs an optimizer and a master */
    const char *freeze;       /* comma-separated globs over parameter names ('h.*.attn*,wte'); NULL none */
    bool norm_from_out;       /* the LayerNorm / RMSNorm backward reads the norm's output y (x-hat = (y - b) / w,
                               * kernels/norm_math.h) instead of its input, which then need not be kept: the
                               * residual stream's bytes (GPT-2: 2 of the 16 C a token and block saved). A weight
                               * that reaches 0 loses its gradient (its input cannot be recovered) */
    int classifier_rows;      /* CUDA: rows of logits in each chunk of the fused classifier (its scratch, role temp,
                               * rows x V padded to 64, in the activations' dtype); 0: the default (kernels/
                               * scratch.h: 4096, fewer where those take over 512 MiB). Fewer rows: less memory
                               * where the classifier sets the peak, more and smaller products, and wte's gradient
                               * added up over more chunks in its dtype (16 bits: a rounding a chunk). The CPU
                               * kernels' chunk is fixed (128 rows of fp32): refused with them */
    float grad_clip;          /* > 0: global-norm clipping (sumsq nodes feed every optimizer node) */
    uint64_t workspace_bytes; /* library workspace held for the step (cuBLAS: 32 MiB), role temp; 0 none */
    vr_kernels kernels;       /* whose kernels will run the step, CPU (0) or CUDA: sizes every node's scratch
                               * (vr_node_scratch_bytes); a CUDA executor refuses a graph sized for the CPU
                               * whose scratch is too small for its kernels */
    vr_attention attention;   /* CUDA: whose attention kernels run (auto: cuDNN's where it can, else vram's);
                               * sizes attention_bwd's scratch */
    int world;                /* data-parallel ranks: 0 none; >= 1 the step of rank `rank` of `world`, with
                               * its collectives (a world of 1 too: it runs them, over one rank) */
    int rank;                 /* this rank, [0, world) */
    int zero;                 /* ZeRO stage with world >= 1: 0 gradients all-reduced; 1 + master and optimizer
                               * state sharded (each parameter, or piece of one, updated by its owner, then
                               * broadcast);
                               * 2 + gradients reduced to their owner only (the others free theirs);
                               * 3 + parameters held by their owner only, gathered before each use (zero3.c) */
} vr_step_config;

typedef struct vr_graph {
    vr_tensor *tensors;
    int n_tensors, cap_tensors;
    vr_node *nodes;
    int n_nodes, cap_nodes;
    int n_forward;            /* nodes [0, n_forward) are the forward pass (set by the builders) */
    vr_model_config model;
    vr_step_config step;      /* freeze points into freeze_buf */
    char freeze_buf[256];
    vr_dtype param_dtype;     /* params and their grads */
    vr_dtype act_dtype;       /* activations; LayerNorm statistics, lse and losses stay f32 */
    int params;               /* flat parameter buffer (n_params elements, llm.c order) */
    int master;               /* flat fp32 master buffer over the trainable params; -1 */
    int optim[2];             /* flat optimizer state buffers over the trainable params; -1. With 8-bit
                               * state: the u8 codes of the tensors that quantize (vr_q8_quantized) */
    int absmax[2];            /* 8-bit state: flat f32 per-block absmax of optim[0], optim[1]; -1 */
    int optim32[2];           /* 8-bit state: flat f32 state of the tensors too small to quantize; -1 */
    int host_grads;           /* offload: the gradients' host copy (param dtype, over the trainable params),
                               * which the update overwrites with the new weights to send back; -1 */
    int tokens, targets;      /* inputs (GPT: tok, targets (B,T); MLP: features (B,D), labels (B)) */
    int losses;               /* per-row losses, f32 */
    int loss_node;            /* the node computing losses */
    int64_t n_params;         /* elements of the parameter buffer */
    int64_t n_trainable;      /* of which not frozen */
    vr_status err;            /* first error while building (sticky); see vr_graph_status */
} vr_graph;

/* ------------------------------------------------------------------ presets and counts */

/* GPT presets: "gpt2" (124M: L=12 C=768 NH=12 V=50257 Vp=50304 maxT=1024), "gpt2-medium"
 * (L=24 C=1024 NH=16), "gpt2-large" (L=36 C=1280 NH=20), "gpt2-xl" (L=48 C=1600 NH=25),
 * "small" (L=4 C=256 NH=4 V=512 maxT=256), "tiny" (L=2 C=64 NH=4 V=256 byte-level maxT=64).
 * *T_default gets the preset's usual sequence length (may be NULL). */
vr_status vr_gpt_preset(const char *name, vr_gpt_config *out, int *T_default);

/* MLP presets: "mnist" (784-256-256-10 relu), "tiny" (16-32-32-4 relu). */
vr_status vr_mlp_preset(const char *name, vr_mlp_config *out);

/* The preset names, as "gpt2, gpt2-medium, ..." (for help and errors). */
const char *vr_gpt_preset_names(void);
const char *vr_mlp_preset_names(void);

/* Fills Vp when 0 and checks the fields; VR_ERR_INVALID naming the field. */
vr_status vr_gpt_config_check(vr_gpt_config *c);

/* The parameter count into *n; false when it, or its fp32 bytes, overflows int64 (or a field is negative). */
bool vr_gpt_num_params_checked(const vr_gpt_config *c, int64_t *n);

/* Element counts of the 16 parameter tensors in llm.c's order (wte, wpe, ln1w, ... lnfb; Vp 0 = V rounded up to 128). */
void vr_gpt_param_sizes(const vr_gpt_config *c, int64_t sizes[16]);

/* Number of parameters (elements of the flat buffer, wte counted with Vp rows). */
int64_t vr_gpt_num_params(const vr_gpt_config *c);
int64_t vr_mlp_num_params(const vr_mlp_config *c);

/* ------------------------------------------------------------------ whole-step builder */

/* Checks the step config's fields and their combinations (optim_state needs a stateful optimizer, no
 * master needs bf16); VR_ERR_INVALID naming the field. vr_graph_build calls it first. */
vr_status vr_step_config_check(const vr_step_config *s);

/* Whether s may keep its fp32 master split (vr_step_config.split_master): bf16 weights, a master, no offload
 * (the other fields as they are); vr_step_config_check refuses split_master otherwise. */
bool vr_step_config_split_master_ok(const vr_step_config *s);

/* Builds the graph of one step: the model's forward, then (when s->train) the
 * backward (with recomputation as configured) and the optimizer nodes.
 * VR_ERR_INVALID naming the field at fault. Free with vr_graph_free. */
vr_status vr_graph_build(const vr_model_config *m, const vr_step_config *s, vr_graph **out);

void vr_graph_free(vr_graph *g);

/* ------------------------------------------------------------------ lower level */

/* An empty graph for precision p (sets param_dtype and act_dtype). */
vr_graph *vr_graph_new(vr_precision p);

/* The first error recorded while building (VR_OK if none). Builder calls
 * after an error do nothing and return -1, so a builder checks once at the end. */
vr_status vr_graph_status(const vr_graph *g);

/* Emits the GPT forward into an empty graph: params, inputs (B,T) and the
 * forward nodes up to the fused classifier (losses (B,T)). */
vr_status vr_gpt_forward(vr_graph *g, const vr_gpt_config *c, int B, int T);

/* Emits the Llama forward (src/graph/llama.c): params, tokens and targets (B,T), losses (B,T). */
vr_status vr_llama_forward(vr_graph *g, const vr_llama_config *c, int B, int T);

/* Llama presets (published config.json shapes): llama3.2-1b, llama3.2-3b, llama3.1-8b, smollm2-135m,
 * smollm2-360m, qwen2.5-0.5b, and "tiny" (L2 C64 NH4 NKV2 hd16 I96 V300). *T_default may be NULL. */
vr_status vr_llama_preset(const char *name, vr_llama_config *out, int *T_default);
const char *vr_llama_preset_names(void);
/* Checks a config (VR_ERR_INVALID naming the flag) and fills hd = C/NH and Vp when 0. */
vr_status vr_llama_config_check(vr_llama_config *c);

/* One HF tensor of the flat parameter buffer: its HF name without "model." (e.g.
 * "layers.0.self_attn.q_proj.weight", "lm_head.weight"), element offset and shape (rows, cols; cols 1
 * for vectors). The rows of embed_tokens / lm_head beyond V are padding (HF has V rows). */
typedef struct vr_llama_tensor {
    char name[64];
    int64_t offset, rows, cols;
} vr_llama_tensor;
/* Number of HF tensors; fills out[0..n) when out is not NULL (in buffer order). */
int vr_llama_tensors(const vr_llama_config *c, vr_llama_tensor *out);
/* Elements of the parameter buffer. */
int64_t vr_llama_num_params(const vr_llama_config *c);

/* Emits the MLP forward: features (B,sizes[0]), labels (B), losses (B). */
vr_status vr_mlp_forward(vr_graph *g, const vr_mlp_config *c, int B);

/* Marks the parameters whose name matches one of the comma-separated globs
 * ('*' any run, '?' one char) as frozen. VR_ERR_INVALID when a glob matches
 * nothing (it names the glob). Call before vr_graph_backward. */
vr_status vr_graph_freeze(vr_graph *g, const char *patterns);

/* Appends recompute, backward and optimizer nodes (s->train must be true). */
vr_status vr_graph_backward(vr_graph *g, const vr_step_config *s);

/* True when name matches the glob ('*' any run of characters, '?' one). */
bool vr_glob_match(const char *glob, const char *name);

/* A new tensor (shape has ndim <= 4 entries, each >= 1); returns its id or -1. */
int vr_graph_tensor(vr_graph *g, const char *name, vr_dtype dt, vr_role role, int ndim, const int64_t *shape);

/* A view of `src` (same dtype) with a new shape starting at element `offset`
 * of src's storage, no copy; returns its id or -1 (out of bounds). */
int vr_graph_view(vr_graph *g, int src, const char *name, int ndim, const int64_t *shape, int64_t offset);

/* The flat parameter buffer of n elements (g->params, g->n_params); once per graph. */
int vr_graph_param_buffer(vr_graph *g, int64_t n);

/* A parameter: a view of the buffer at element `offset`, with its init hint. */
int vr_graph_param(vr_graph *g, const char *name, int ndim, const int64_t *shape, int64_t offset,
                   vr_init init, float init_scale);

/* Ends the forward pass: `losses` (made by the last node) is the step's output,
 * what autodiff differentiates. Builders call it last. */
vr_status vr_graph_set_loss(vr_graph *g, int losses);

/* Declares the step's inputs, the tensors vr_exec_batch fills (g->tokens, g->targets): `inputs` any
 * tensor of role VR_ROLE_INPUT, `targets` one of dtype VR_I32 (class ids, -1 ignores a row). For a
 * model built tensor by tensor; the builders declare theirs. VR_ERR_INVALID naming the tensor. */
vr_status vr_graph_set_inputs(vr_graph *g, int inputs, int targets);

/* A new node (slots all -1); returns its id or -1. Builders fill the slots. An op outside the
 * enum is VR_ERR_INVALID; autodiff refuses (VR_ERR_UNSUPPORTED) a forward node of an op it has no
 * backward rule for, naming it. */
int vr_graph_node(vr_graph *g, vr_op op, vr_phase phase, const char *name);

/* Forward op builders: each checks shapes (VR_ERR_INVALID naming the node and
 * the shapes), adds the node and its output tensors, and returns the id of the
 * main output (-1 after an error). Extra outputs come back through pointers. */
int vr_graph_embedding(vr_graph *g, const char *name, int tok, int wte, int wpe /* -1: none */);
int vr_graph_layernorm(vr_graph *g, const char *name, int x, int w, int b, int *mean, int *rstd);
int vr_graph_linear(vr_graph *g, const char *name, int x, int w, int b /* -1: none */);
int vr_graph_attention(vr_graph *g, const char *name, int qkv, int NH, int *lse);
int vr_graph_gelu(vr_graph *g, const char *name, int x);
/* Grouped-query attention: qkv (B,T,(NH+2*NKV)*hd), NH % NKV == 0; out (B,T,NH*hd), lse (B,NH,T). */
int vr_graph_attention_gqa(vr_graph *g, const char *name, int qkv, int NH, int NKV, int *lse);
/* RMSNorm: x (...,C), w (C); rstd (rows) f32 through *rstd. */
int vr_graph_rmsnorm(vr_graph *g, const char *name, int x, int w, float eps, int *rstd);
/* Rotary embedding of the q and k heads of qkv (B,T,(NH+2*NKV)*hd) at positions 0..T-1. */
int vr_graph_rope(vr_graph *g, const char *name, int qkv, int NH, int NKV, const vr_rope_config *rope);
/* SwiGLU: x (...,2I) = [gate | up] -> (...,I). */
int vr_graph_swiglu(vr_graph *g, const char *name, int x);
int vr_graph_relu(vr_graph *g, const char *name, int x);
int vr_graph_add(vr_graph *g, const char *name, int a, int b);
int vr_graph_reshape(vr_graph *g, const char *name, int x, int ndim, const int64_t *shape);
/* x (...,C), wte (Vp,C), targets (...) i32 with numel(x) = numel(targets) * C; V <= Vp. */
int vr_graph_classifier(vr_graph *g, const char *name, int x, int wte, int targets, int V);
int vr_graph_softmax_xent(vr_graph *g, const char *name, int logits, int targets, int *probs);

/* ------------------------------------------------------------------ queries */

/* Elements / bytes (numel × dtype size) of a tensor. */
int64_t vr_tensor_numel(const vr_tensor *t);
uint64_t vr_tensor_bytes(const vr_tensor *t);

/* "(16, 1024, 768)" into buf; returns buf. */
char *vr_tensor_shape_str(const vr_tensor *t, char *buf, size_t cap);

/* The tensor owning id's storage (id itself when not a view). */
int vr_graph_storage(const vr_graph *g, int id);

/* The id of the tensor called name, or -1. */
int vr_graph_find(const vr_graph *g, const char *name);

/* True when a node of phase backward or recompute reads tensor id's storage
 * and a forward (or recompute) node wrote it: an activation saved for backward. */
bool vr_graph_is_saved(const vr_graph *g, int id);

/* Scratch bytes the kernel of node n takes when kernels k run it (0 for most ops), computed by the
 * kernels' own size functions (src/kernels/scratch.h); the graph gives such a node a scratch tensor
 * of that size (role temp, node->scratch), so the plan counts it. The CPU kernels: the classifier's
 * chunk of min(N,128) rows of V fp32 logits. The CUDA kernels: the classifier's min(N,1024) rows of
 * Vw padded to 64 in the activation dtype; attention_bwd's delta (B,NH,T) fp32, and with 16-bit
 * activations and head size 64 every head's fp32 dQ beside it (the fused backward); the partial sums
 * of layernorm_bwd's dw/db and rmsnorm_bwd's dw (slices of 128 rows, at most 128); embedding_bwd's
 * sort of the B*T rows by token for dwte. */
uint64_t vr_node_scratch_bytes_for(const vr_graph *g, const vr_node *n, vr_kernels k);
/* The same for the kernels the graph was built for (g->step.kernels). */
uint64_t vr_node_scratch_bytes(const vr_graph *g, const vr_node *n);

/* Counts nodes of a phase. */
int vr_graph_count_phase(const vr_graph *g, vr_phase p);

/* Writes one line per node: index, phase, op, name, and each slot's tensor with its shape. */
void vr_graph_print(const vr_graph *g, FILE *f);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
