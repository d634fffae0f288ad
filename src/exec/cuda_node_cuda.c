/* vram exec — the CUDA backend: one graph node -> one call of src/kernels/cuda.
 *
 * Per executor a vr_cuda_ctx (the legacy default stream, so that the device
 * layer's copies and memsets order with the kernels; the cuBLASLt handle) whose
 * cuBLASLt workspace is the graph's "workspace" tensor, which the plan counts
 * as temp: nothing is allocated outside the plan. The kernels that take scratch
 * (the classifier's logits, attention's delta and dQ, the norms' partial sums,
 * the embedding's sort) get their node's scratch tensor, which the graph sized
 * with the kernels' own functions (kernels/scratch.h) and the plan counts: the
 * executor checks every node's against its kernel's need before the first
 * step, and makes its device the current one there and at every step (two
 * GPUs in one process). The workspace's last 256 bytes hold the two
 * fp32 scalars of device-side clipping (factor, norm): the last sumsq node
 * turns the squared norm into the factor (vr_cuda_clip_scale) and every
 * optimizer node reads it there, so a step never waits on the host for it.
 * Under fp16 the same kernel unscales the norm by the executor's loss scale
 * and sets the int32 skip flag beside them on an overflow, which the optimizer
 * kernels read (dev_skip); the classifier's loss gradient carries the scale.
 *
 * Multi-tensor apply (default; vr_exec_config.per_node_optimizer turns it off): the first sumsq node sums the squares of
 * every sumsq node's gradient in one pass (and computes the clip factor), the
 * first update node updates every parameter in one launch; the other nodes of
 * those groups queue nothing (the executor's books still run node by node).
 * Both read a table of {grad, param, master, m, v, numel, decay} per tensor
 * (vr_cuda_mt_tensor), built on the host from the nodes' own arguments at the
 * group's first node (every gradient is live from the end of the backward to
 * its update), kept in the workspace just below the clip tail (so the plan
 * counts it), and uploaded only when an address changed: once per executor in
 * planned mode, whenever the allocator moved a gradient in dynamic mode. A
 * captured CUDA graph keeps the table's address; a table that would change
 * during a capture fails the capture (node by node from then on). The region
 * is carved out whether or not multi-tensor is on, so both modes give the
 * kernels the same workspace.
 *
 * Dtypes come from the graph: activations, params and grads of the node's
 * dtype (fp32 or bf16), statistics fp32, and under mixed precision the
 * optimizer updates the fp32 master and rounds it into the params.
 *
 * Attention: vr_step_config.attention picks vram's kernels or cuDNN's fused flash attention
 * (kernels/cuda/attention_cudnn_cuda.c); attention_choose decides per node before the first step,
 * building cuDNN's plans then, so a step never meets a plan it cannot build or a workspace it was not
 * given: cuDNN's plan workspace comes from the step's library workspace (checked against it), its
 * backward's dQ accumulator and softmax_sum from the node's planned scratch (sized for the choice by
 * kernels/scratch.h). vr_exec_attention_kernels says what was chosen.
 *
 * Linear + GELU (vr_exec_config.unfused turns it off): a matmul and the gelu after it, a matmul_bwd and
 * the gelu_bwd after it, run as one cuBLASLt product with a GELU epilogue, queued by the pair's second
 * node (cuda_fuse.h); vr_exec_fused_pairs says how many. A residual add and the layernorm after it run as
 * one kernel at the layernorm node (cuda_fuse_ln.h; the same switch), and a Linear's bias gradient whose dout
 * a layernorm_bwd wrote is summed by that layernorm_bwd's kernel (cuda_fuse_dbias.h; the same switch).
 *
 * As on the CPU, the embedding backward zeroes rows T..maxT-1 of dwpe and the
 * classifier rows V..Vp-1 of dwte when they overwrite (the CUDA classifier's products
 * cover the padded rows and write 0 there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda_comm.h"
#include "exec/cuda_copy.h"
#include "exec/cuda_dtype.h"
#include "exec/cuda_fuse_dbias.h"
#include "exec/cuda_fuse_qkvb.h"
#include "exec/cuda_fuse_ln.h"
#include "exec/cuda_fuse.h"
#include "exec/cuda_prof.h"
#include "exec/cuda_times.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/scratch.h"
#include "vram/util.h"

#define VR_CLIP_BYTES 256 /* tail of the workspace: clip factor, norm (fp32) */

/* One group of nodes run multi-tensor (the sumsq nodes, or the update nodes). */
typedef struct mt_group {
    int first;                 /* its first node, -1: none */
    int count;                 /* its nodes */
    vr_cuda_mt_tensor *dev;    /* device table (workspace tail), count entries */
    vr_cuda_mt_tensor *host;   /* what dev holds when uploaded */
    int len;                   /* entries in it */
    int64_t chunks;
    bool uploaded;
    bool done;                 /* this pass: the first node ran the whole group */
} mt_group;

/* Pinned host memory for a step's small transfers, so that the GPU does not wait for the host between steps
 * (H100, GPT-2 medium: ~0.15 ms a step went to pageable copies and their waits): the optimizer's scalars, the
 * inputs (queued without a wait), the losses and the clipping result (read back with one wait). Two sets of the
 * regions: a replayed step's losses come down through the set its inputs went up by while the next step's go up
 * through the other (vr_exec_step_start ahead of the finish). */
enum { IO_SCALARS, IO_TOKENS, IO_TARGETS, IO_LOSSES, IO_CLIP, IO_N };
typedef struct io_stage {
    vr_device *dev;
    unsigned char *buf;     /* NULL: none (the executor's plain copies) */
    size_t off[IO_N + 1];   /* region k of a set: [off[k], off[k+1]) from the set's start, set s at s off[IO_N] */
    int set;                /* the set the next copies go through */
    bool dirty[2][IO_TARGETS + 1]; /* a copy up from the region was queued and may not have run yet */
    bool clip_read;         /* IO_CLIP of set clip_set holds this step's clipping result */
    int clip_set;
    void *landed[2];        /* events: the losses queued down into set s have landed */
} io_stage;

static unsigned char *io_region(const io_stage *io, int set, int k)
{
    return io->buf + (size_t)set * io->off[IO_N] + io->off[k];
}

/* Whether the staging holds `bytes` of losses (else the executor's plain copies). */
static bool io_holds_losses(const io_stage *io, size_t bytes)
{
    return io->buf && bytes <= io->off[IO_LOSSES + 1] - io->off[IO_LOSSES];
}

typedef struct cuda_state {
    vr_cuda_ctx ctx;
    void *ws;          /* the whole workspace tensor (NULL: none) */
    size_t ws_bytes;   /* usable by kernels (less the clip tail) */
    float *clip;       /* [0] factor, [1] norm, [2] fp16 skip flag (int32), [4..7] the step's optimizer
                        * scalars (graph mode);
                        * NULL without a workspace */
    float max_norm;
    void *stream;      /* graph mode: a stream of its own (ctx.stream), else NULL (legacy stream) */
    void *graph;       /* graph mode: the captured step (cudaGraphExec_t), NULL until captured */
    bool capturing;    /* between capture_begin and capture_end */
    bool mt;           /* multi-tensor apply on */
    mt_group sq, opt;  /* the sumsq nodes, the update nodes */
    float *partials;   /* device, VR_CUDA_MT_MAX_PARTIALS floats (workspace tail) */
    vr_cuda_mt_tensor *build; /* host scratch table */
    vr_cuda_prof *prof;       /* cfg.profile: per-node GPU time, NULL otherwise */
    unsigned char *cudnn;     /* [n_nodes] 1: the attention node runs cuDNN's kernels (attention_choose) */
    vr_cuda_copies copies;    /* offload: the copy nodes' stream and events */
    vr_cuda_side comms;       /* data parallel: the collectives' stream and events */
    vr_cuda_times times;      /* cfg.device_times: every node's span on the GPU (the trace) */
    vr_cuda_fuse fuse;        /* Linear + GELU pairs run as one product (cuda_fuse.h) */
    bool idle;                /* the node being run queued no device work (a multi-tensor group's member) */
    vr_cuda_fuse_ln fuse_ln;  /* residual add + layernorm in one kernel (cuda_fuse_ln_cuda.c) */
    vr_cuda_fuse_dbias fuse_dbias; /* a Linear's bias gradient in the layernorm_bwd before it */
    vr_cuda_fuse_qkvb fuse_qkvb;   /* attention's q|k|v bias gradient from its identities */
    io_stage io;                   /* the step's small transfers through pinned memory */
} cuda_state;

static const vr_tensor *T_(const vr_exec_args *a, int id) { return &a->g->tensors[id]; }
static int64_t numel(const vr_exec_args *a, int id) { return vr_tensor_numel(T_(a, id)); }
static int lastdim(const vr_exec_args *a, int id) { return (int)T_(a, id)->shape[T_(a, id)->ndim - 1]; }
static int rows(const vr_exec_args *a, int id) { return (int)(numel(a, id) / lastdim(a, id)); }

static vr_status dtype_of(const vr_exec_args *a, int id, vr_cuda_dtype *out)
{
    if (vr__cuda_dtype(T_(a, id)->dtype, out))
        return VR_OK;
    return vr_error(VR_ERR_UNSUPPORTED, "cuda: tensor %s has dtype %s, not a float", T_(a, id)->name,
                    vr_dtype_name(T_(a, id)->dtype));
}

#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))
#define I32(p) ((const int32_t *)(p))

static int t_last(const vr_tensor *t) { return (int)t->shape[t->ndim - 1]; }
static int t_rows(const vr_tensor *t) { return (int)(vr_tensor_numel(t) / t->shape[t->ndim - 1]); }

/* The scratch the CUDA kernel of node n cannot run without, from the kernels' size functions with the
 * arguments run_kernels passes them: the classifier one row of logits, attention_bwd its delta (the
 * plan gives both more, vr_node_scratch_bytes_for: chunks of many rows, the fused backward), the
 * others what the plan gives. 0 for the ops that take none. */
static size_t cuda_scratch_need(const vr_graph *g, const vr_node *n)
{
    const vr_tensor *in0 = n->in[0] >= 0 ? &g->tensors[n->in[0]] : NULL;
    switch (n->op) {
    case VR_OP_CLASSIFIER: { /* x (N,C), wte (Vw,C) */
        const vr_tensor *w = &g->tensors[n->in[1]];
        vr_cuda_dtype dt = VR_CUDA_F32; /* not a float: the run fails at the node, naming it */
        (void)vr__cuda_dtype(in0->dtype, &dt);
        return vr_cuda_classifier_scratch_bytes(1, t_rows(w), dt);
    }
    case VR_OP_ATTENTION_BWD: { /* qkv (B,T,(NH+2NKV)hd) */
        const vr_tensor *q = &g->tensors[n->in[1]];
        int nkv = n->nkv > 0 ? n->nkv : n->nh, hd = n->nh > 0 ? (int)(q->shape[2] / (n->nh + 2 * nkv)) : 0;
        return vr_cuda_attention_scratch_bytes((int)q->shape[0], (int)q->shape[1], n->nh * hd, n->nh);
    }
    case VR_OP_LAYERNORM_BWD: /* dout (N,C): partial sums of dw and db when either is wanted */
        return n->out[1] >= 0 || n->out[2] >= 0
                   ? vr_cuda_layernorm_bwd_scratch_bytes(t_rows(in0), t_last(in0))
                   : 0;
    case VR_OP_RMSNORM_BWD: /* dout (N,C): dw's partial sums */
        return n->out[1] >= 0 ? vr_cuda_rmsnorm_bwd_scratch_bytes(t_rows(in0), t_last(in0)) : 0;
    case VR_OP_EMBEDDING_BWD: { /* tokens (B,T): dwte's sort */
        const vr_tensor *tok = &g->tensors[n->in[1]];
        return n->out[0] >= 0 && tok->ndim >= 2
                   ? vr_cuda_embedding_bwd_scratch_bytes((int)tok->shape[0], (int)tok->shape[1],
                                                         t_rows(&g->tensors[n->out[0]]))
                   : 0;
    }
    default:
        return 0;
    }
}

/* Node n's planned scratch (the graph's scratch tensor, role temp) holds what its kernel needs? Else an
 * error naming the node: the graph was sized for other kernels. Nothing else gives a kernel scratch. */
static vr_status scratch_check(const vr_graph *g, const vr_node *n, uint64_t bytes)
{
    size_t need = cuda_scratch_need(g, n);
    if (need && bytes < need)
        return vr_error(VR_ERR_INVALID, "cuda: node %s (%s) needs %zu bytes of scratch, its planned scratch holds "
                        "%llu: the graph was sized for other kernels (build it with vr_step_config.kernels "
                        "VR_KERNELS_CUDA)", n->name, vr_op_name(n->op), need, (unsigned long long)bytes);
    return VR_OK;
}

/* fp16 loss scaling: the multiplier of the loss gradient, and the skip flag (clip tail [2], int32) that the
 * clip factor's kernel sets on an overflow and the optimizers read; NULL without scaling. */
static float loss_scale(const vr_exec_args *a) { return a->exec->scaling ? a->exec->loss_scale : 1.0f; }
static int32_t *skip_flag(const vr_exec_args *a, const cuda_state *s)
{
    return a->exec->scaling && s->clip ? (int32_t *)&s->clip[2] : NULL;
}

/* The kind of an update node for the multi-tensor and compact-state kernels. */
static int mt_kind(vr_op op)
{
    return op == VR_OP_SGD ? VR_CUDA_MT_SGD : op == VR_OP_SGD_MOMENTUM ? VR_CUDA_MT_MOMENTUM
           : op == VR_OP_ADAM ? VR_CUDA_MT_ADAM : VR_CUDA_MT_ADAMW;
}

/* An update node's tensors as a table entry (decay: its weight decay is not 0). *special: the state is
 * bf16 or 8-bit, or a bf16 weight has no master (the compact-state kernels then run it). */
static void state_entry(const vr_exec_args *b, vr_cuda_dtype pdt, vr_cuda_mt_tensor *t, bool *special)
{
    const vr_node *n = b->node;
    vr_dtype sdt = n->out[2] >= 0 ? T_(b, n->out[2])->dtype : VR_F32;
    memset(t, 0, sizeof *t);
    t->param = b->out[0];
    t->master = F(b->out[1]);
    t->grad = b->in[0];
    t->m = n->op != VR_OP_SGD ? F(b->out[2]) : NULL;
    t->v = n->op == VR_OP_ADAM || n->op == VR_OP_ADAMW ? F(b->out[3]) : NULL;
    t->n = numel(b, n->out[0]);
    t->decay = b->weight_decay != 0.0f;
    t->fmt = sdt == VR_U8 ? VR_CUDA_STATE_Q8 : sdt == VR_BF16 ? VR_CUDA_STATE_BF16 : VR_CUDA_STATE_F32;
    t->absmax_m = F(b->out[4]);
    t->absmax_v = F(b->out[5]);
    t->sindex = vr__exec_state_index(b->g, n);
    t->windex = (uint64_t)T_(b, n->out[0])->param_offset;
    t->split = n->out[1] >= 0 && T_(b, n->out[1])->dtype == VR_U16;
    *special = t->fmt != VR_CUDA_STATE_F32 || (!t->master && pdt != VR_CUDA_F32);
}

static vr_status optimizer(const vr_exec_args *a, const cuda_state *s)
{
    const vr_node *n = a->node;
    const vr_optim_hparams *h = a->h;
    if (!h)
        return vr_error(VR_ERR_INVALID, "cuda: optimizer node without hyperparameters");
    vr_cuda_dtype pdt = VR_CUDA_F32, gdt = VR_CUDA_F32;
    vr_status st = dtype_of(a, n->out[0], &pdt);
    if (!st)
        st = dtype_of(a, n->in[0], &gdt);
    if (st)
        return st;
    size_t len = (size_t)numel(a, n->out[0]);
    int step = h->step > 0 ? (int)h->step : 1;
    const float *dev_scale = n->in[1] >= 0 ? s->clip : NULL;
    if (n->in[1] >= 0 && !dev_scale)
        return vr_error(VR_ERR_INVALID, "cuda: clipping needs the step's workspace");
    const vr_cuda_ctx *c = &s->ctx;
    int32_t *skip = skip_flag(a, s);
    if (a->exec->scaling && !skip)
        return vr_error(VR_ERR_INVALID, "cuda: fp16 loss scaling needs the step's workspace");
    vr_cuda_mt_tensor t;
    bool special = false;
    state_entry(a, pdt, &t, &special);
    if (special || t.split) /* the single-tensor kernels below take a full master only */
        return vr_cuda_optim_state(c, mt_kind(n->op), pdt, gdt, &t, h->lr, h->beta1, h->beta2, h->eps, h->momentum,
                                   h->dampening, h->nesterov, a->weight_decay, step, a->grad_scale, dev_scale, skip);
    switch (n->op) {
    case VR_OP_SGD:
        return vr_cuda_sgd(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], len, h->lr, a->weight_decay, a->grad_scale,
                           dev_scale, skip);
    case VR_OP_SGD_MOMENTUM:
        return vr_cuda_sgd_momentum(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], F(a->out[2]), len, h->lr,
                                    h->momentum, h->dampening, a->weight_decay, h->nesterov, step, a->grad_scale,
                                    dev_scale, skip);
    case VR_OP_ADAM:
        return vr_cuda_adam(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], F(a->out[2]), F(a->out[3]), len, h->lr,
                            h->beta1, h->beta2, h->eps, a->weight_decay, step, a->grad_scale, dev_scale, skip);
    default:
        return vr_cuda_adamw(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], F(a->out[2]), F(a->out[3]), len, h->lr,
                             h->beta1, h->beta2, h->eps, a->weight_decay, step, a->grad_scale, dev_scale, skip);
    }
}

static vr_status embedding_bwd(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    const vr_tensor *tok = T_(a, n->in[1]);
    int B = (int)tok->shape[0], T = (int)tok->shape[1], C = lastdim(a, n->in[0]);
    void *dwte = a->out[0], *dwpe = a->out[1];
    int V = dwte ? rows(a, n->out[0]) : 1; /* the kernel wants V >= 1 even without dwte */
    void *scr = dwte ? a->scratch : NULL; /* dwte's sort: the node's planned scratch */
    size_t sb = dwte ? (size_t)a->scratch_bytes : 0;
    vr_status st = VR_OK;
    if (dwte && dwpe && a->acc[0] == a->acc[1]) {
        st = vr_cuda_embedding_bwd(&s->ctx, dt, dwte, dwpe, a->in[0], I32(a->in[1]), B, T, C, V, a->acc[0], scr, sb);
    } else {
        if (dwte)
            st = vr_cuda_embedding_bwd(&s->ctx, dt, dwte, NULL, a->in[0], I32(a->in[1]), B, T, C, V, a->acc[0], scr,
                                       sb);
        if (!st && dwpe)
            st = vr_cuda_embedding_bwd(&s->ctx, dt, NULL, dwpe, a->in[0], I32(a->in[1]), B, T, C, 1, a->acc[1], NULL,
                                       0);
    }
    if (!st && dwpe && !a->acc[1]) { /* rows T..maxT-1: no position in this batch, gradient 0 */
        int maxT = rows(a, n->out[1]);
        if (maxT > T)
            st = vr_cuda_zero(&s->ctx, dt, (char *)dwpe + (size_t)T * C * vr_cuda_dtype_size(dt),
                              (size_t)(maxT - T) * C);
    }
    return st;
}

static vr_status classifier(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    int N = (int)numel(a, n->in[2]), C = lastdim(a, n->in[0]), V = n->vocab, Vw = rows(a, n->in[1]);
    return vr_cuda_classifier(&s->ctx, dt, F(a->out[0]), a->out[1], a->out[2], a->in[0], a->in[1], I32(a->in[2]),
                              N, C, V, Vw, n->loss_scale * loss_scale(a), a->scratch, (size_t)a->scratch_bytes, a->acc[1],
                              a->acc[2]);
}

static vr_status layernorm_bwd(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    int N = rows(a, n->in[0]), C = lastdim(a, n->in[0]);
    void *dw = a->out[1], *db = a->out[2]; /* either may be absent (a frozen weight or bias) */
    bool dparam = dw || db;            /* their partial sums: the node's planned scratch */
    if (n->from_out) /* dout, out, w, b, rstd */
        return vr_cuda_layernorm_bwd_out(&s->ctx, dt, a->out[0], dw, db, NULL, a->in[0], a->in[1], a->in[2], a->in[3],
                                         CF(a->in[4]), N, C, a->acc[0], a->acc[1], 0, dparam ? a->scratch : NULL,
                                         dparam ? (size_t)a->scratch_bytes : 0);
    return vr_cuda_layernorm_bwd(&s->ctx, dt, a->out[0], dw, db, a->in[0], a->in[1], a->in[2], CF(a->in[3]),
                                 CF(a->in[4]), N, C, a->acc[0], a->acc[1], dparam ? a->scratch : NULL,
                                 dparam ? (size_t)a->scratch_bytes : 0);
}

static vr_status rmsnorm_bwd(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    int N = rows(a, n->in[0]), C = lastdim(a, n->in[0]);
    void *dw = a->out[1]; /* its partial sums: the node's planned scratch */
    return (n->from_out ? vr_cuda_rmsnorm_bwd_out : vr_cuda_rmsnorm_bwd)(
        &s->ctx, dt, a->out[0], dw, a->in[0], a->in[1], a->in[2], CF(a->in[3]), N, C, a->acc[0], a->acc[1],
        dw ? a->scratch : NULL, dw ? (size_t)a->scratch_bytes : 0);
}

/* Nodes with (query, kv) heads over a packed qkv (B,T,(NH+2NKV)hd): attention (GPT's NKV = 0 means NH kv
 * heads, qkv (B,T,3C)) and rope. */
static vr_status headed(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    const vr_cuda_ctx *c = &s->ctx;
    int nkv = n->nkv > 0 ? n->nkv : n->nh;
    const vr_tensor *q = T_(a, n->in[n->op == VR_OP_ATTENTION_BWD ? 1 : 0]); /* rope_bwd: dout has qkv's shape */
    int B = (int)q->shape[0], T = (int)q->shape[1], hd = (int)(q->shape[2] / (n->nh + 2 * nkv));
    bool dnn = s->cudnn && s->cudnn[n - a->g->nodes];
    switch (n->op) {
    case VR_OP_ATTENTION:
        if (dnn) /* cuDNN's plan workspace: the ctx's (checked against it in attention_choose) */
            return vr_cuda_attention_cudnn_fwd(c, dt, a->out[0], F(a->out[1]), a->in[0], B, T, n->nh, nkv, hd);
        return vr_cuda_attention_gqa_fwd(c, dt, a->out[0], F(a->out[1]), a->in[0], B, T, n->nh, nkv, hd);
    case VR_OP_ATTENTION_BWD: /* the planned scratch: delta, and in 16 bits every head's fp32 dQ (one fused
                               * launch; given less, the kernel takes the heads in chunks or runs two kernels);
                               * cuDNN: its dQ accumulator and softmax_sum. cuDNN overwrites dqkv: an
                               * accumulating node runs vram's kernel (the same lse) */
        if (dnn && !a->acc[0])
            return vr_cuda_attention_cudnn_bwd(c, dt, a->out[0], a->in[0], a->in[1], a->in[2], CF(a->in[3]), B, T,
                                               n->nh, nkv, hd, a->scratch, (size_t)a->scratch_bytes);
        return vr_cuda_attention_gqa_bwd(c, dt, a->out[0], a->in[0], a->in[1], a->in[2], CF(a->in[3]), B, T, n->nh,
                                         nkv, hd, a->acc[0], a->scratch, (size_t)a->scratch_bytes);
    default: { /* rope, rope_bwd */
        if (hd > VR_CUDA_ROPE_MAX_HD)
            return vr_error(VR_ERR_UNSUPPORTED, "cuda: node %s: head size %d above %d", n->name, hd,
                            VR_CUDA_ROPE_MAX_HD);
        vr_rope_params p = {n->rope.theta, n->rope.scaling, n->rope.factor, n->rope.low_freq, n->rope.high_freq,
                            n->rope.orig_max_t};
        float inv_freq[VR_CUDA_ROPE_MAX_HD / 2];
        vr_rope_inv_freq(inv_freq, hd, &p);
        bool fwd = n->op == VR_OP_ROPE;
        return vr_cuda_rope(c, dt, a->out[0], a->in[0], B, T, n->nh, nkv, hd, inv_freq, fwd ? 1.0f : -1.0f,
                            fwd ? 0 : a->acc[0]);
    }
    }
}

static vr_status sumsq(const vr_exec_args *a, const cuda_state *s)
{
    const vr_node *n = a->node;
    vr_cuda_dtype dt = VR_CUDA_F32;
    vr_status st = dtype_of(a, n->in[0], &dt);
    if (!st)
        st = vr_cuda_sumsq(&s->ctx, dt, F(a->out[0]), a->in[0], (size_t)numel(a, n->in[0]), a->acc[0]);
    if (!st && a->last_sumsq) {
        if (!s->clip)
            return vr_error(VR_ERR_INVALID, "cuda: clipping needs the step's workspace");
        st = vr__exec_comm_normsq(a->exec, F(a->out[0]), s->ctx.stream);
        if (!st)
            st = vr_cuda_clip_scale(&s->ctx, &s->clip[0], &s->clip[1], skip_flag(a, s), CF(a->out[0]), s->max_norm, 1.0f,
                                1.0f / loss_scale(a));
    }
    return st;
}

/* ------------------------------------------------------------------ multi-tensor apply */

static bool is_update(vr_op op)
{
    return op == VR_OP_SGD || op == VR_OP_SGD_MOMENTUM || op == VR_OP_ADAM || op == VR_OP_ADAMW;
}

/* Node by node from now on (something in the graph or the step does not fit a table). */
static void mt_off(const vr_exec_args *a, cuda_state *s)
{
    s->mt = false;
    s->sq.done = s->opt.done = false;
    a->exec->multi_tensor = false;
}

/* Lays out s->build[0..len) and makes the group's device table equal to it. */
static vr_status mt_table(cuda_state *s, mt_group *grp, int len)
{
    int64_t chunks = vr_cuda_mt_layout(s->build, len);
    size_t bytes = (size_t)len * sizeof *s->build;
    if (grp->uploaded && grp->len == len && !memcmp(grp->host, s->build, bytes))
        return VR_OK;
    if (s->capturing) /* a host copy cannot be replayed: fail the capture, node by node */
        return vr_error(VR_ERR_INVALID, "cuda: multi-tensor table changed during a CUDA graph capture");
    grp->uploaded = false;
    vr_status st = vr_cuda_upload(&s->ctx, grp->dev, s->build, bytes);
    if (st)
        return st;
    memcpy(grp->host, s->build, bytes);
    grp->len = len;
    grp->chunks = chunks;
    grp->uploaded = true;
    return VR_OK;
}

/* The first sumsq node: all of them in one pass (and the clip factor). *ran: false when the group
 * does not fit (then node by node). */
static vr_status mt_sumsq(const vr_exec_args *a, cuda_state *s, bool *ran)
{
    vr_exec *e = a->exec;
    const vr_graph *g = a->g;
    *ran = false;
    if (a->acc[0] || !a->out[0] || !s->clip)
        return VR_OK;
    vr_cuda_dtype dt0 = VR_CUDA_F32;
    bool clip = false;
    int len = 0;
    for (int i = s->sq.first; i < g->n_nodes; i++) {
        if (g->nodes[i].op != VR_OP_SUMSQ)
            continue;
        vr_exec_args b;
        vr__exec_node_args(e, i, a->micro, a->h, a->grad_scale, &b);
        vr_cuda_dtype dt = VR_CUDA_F32;
        if (dtype_of(&b, b.node->in[0], &dt) || (len && dt != dt0) || b.out[0] != a->out[0] ||
            (i != s->sq.first && !b.acc[0]) || len >= s->sq.count)
            return VR_OK;
        clip = clip || b.last_sumsq;
        int64_t n = numel(&b, b.node->in[0]);
        if (n == 0)
            continue;
        if (!b.in[0])
            return VR_OK;
        if (!len)
            dt0 = dt;
        memset(&s->build[len], 0, sizeof s->build[len]);
        s->build[len].grad = b.in[0];
        s->build[len].n = n;
        len++;
    }
    vr_status st = mt_table(s, &s->sq, len);
    bool sharded = vr__exec_norm_sharded(e); /* the factor once the ranks' squared norms are summed */
    if (!st)
        st = vr_cuda_mt_sumsq(&s->ctx, dt0, s->sq.dev, len, len ? s->sq.chunks : 0, s->partials, F(a->out[0]),
                              clip && !sharded ? &s->clip[0] : NULL, &s->clip[1], skip_flag(a, s), s->max_norm, 1.0f,
                              1.0f / loss_scale(a));
    if (!st && clip && sharded)
        st = vr__exec_comm_normsq(e, F(a->out[0]), s->ctx.stream);
    if (!st && clip && sharded)
        st = vr_cuda_clip_scale(&s->ctx, &s->clip[0], &s->clip[1], skip_flag(a, s), CF(a->out[0]), s->max_norm, 1.0f,
                                1.0f / loss_scale(a));
    *ran = !st;
    return st;
}

/* The first update node: every parameter in one launch. */
static vr_status mt_update(const vr_exec_args *a, cuda_state *s, bool *ran)
{
    vr_exec *e = a->exec;
    const vr_graph *g = a->g;
    const vr_optim_hparams *h = a->h;
    vr_op op = a->node->op;
    *ran = false;
    if (!h)
        return VR_OK;
    vr_cuda_dtype pdt0 = VR_CUDA_F32, gdt0 = VR_CUDA_F32;
    bool clip = a->node->in[1] >= 0, special = false;
    int len = 0;
    /* the nodes' arguments with a weight decay of 1 say which tensors decay (the table then does not
     * change with the decay's value, which a CUDA graph passes as a launch argument) */
    vr_optim_hparams hd = *h;
    hd.weight_decay = 1.0f;
    for (int i = s->opt.first; i < g->n_nodes; i++) {
        if (!is_update(g->nodes[i].op))
            continue;
        vr_exec_args b;
        vr__exec_node_args(e, i, a->micro, &hd, a->grad_scale, &b);
        const vr_node *n = b.node;
        vr_cuda_dtype pdt = VR_CUDA_F32, gdt = VR_CUDA_F32;
        if (n->op != op || dtype_of(&b, n->out[0], &pdt) || dtype_of(&b, n->in[0], &gdt) ||
            (len && (pdt != pdt0 || gdt != gdt0)) || (n->in[1] >= 0) != clip || len >= s->opt.count)
            return VR_OK;
        if (b.weight_decay != 0.0f && b.weight_decay != 1.0f)
            return VR_OK;
        int64_t cnt = numel(&b, n->out[0]);
        if (cnt == 0)
            continue;
        bool need_m = op != VR_OP_SGD, need_v = op == VR_OP_ADAM || op == VR_OP_ADAMW, sp = false;
        vr_cuda_mt_tensor *t = &s->build[len];
        state_entry(&b, pdt, t, &sp);
        if (!b.out[0] || !b.in[0] || (!b.out[1] && pdt == VR_CUDA_F16) || (t->split && pdt != VR_CUDA_BF16) ||
            (need_m && !b.out[2]) ||
            (need_v && !b.out[3]) || (t->fmt == VR_CUDA_STATE_Q8 && (!t->absmax_m || (need_v && !t->absmax_v))))
            return VR_OK; /* node by node says what is wrong */
        if (!len) {
            pdt0 = pdt;
            gdt0 = gdt;
        }
        special = special || sp;
        len++;
    }
    vr_status st = mt_table(s, &s->opt, len);
    if (st)
        return st;
    if (len) {
        st = (special ? vr_cuda_mt_optim_state : vr_cuda_mt_optim)(
            &s->ctx, mt_kind(op), pdt0, gdt0, s->opt.dev, len, s->opt.chunks, h->lr, h->beta1, h->beta2, h->eps,
            h->momentum, h->dampening, h->nesterov, h->weight_decay, h->step > 0 ? (int)h->step : 1, a->grad_scale,
            clip ? s->clip : NULL, skip_flag(a, s));
    }
    *ran = !st;
    return st;
}

/* A node of a multi-tensor group: the first runs the group (*handled), the others have nothing to
 * queue when it did. */
static vr_status mt_node(const vr_exec_args *a, cuda_state *s, mt_group *grp, bool *handled)
{
    *handled = false;
    if (!s->mt || grp->first < 0)
        return VR_OK;
    int i = (int)(a->node - a->g->nodes);
    if (i != grp->first) {
        *handled = grp->done;
        s->idle = grp->done; /* the first node queued the group's work */
        return VR_OK;
    }
    bool ran = false;
    vr_status st = grp == &s->sq ? mt_sumsq(a, s, &ran) : mt_update(a, s, &ran);
    grp->done = ran;
    if (!ran && !st)
        mt_off(a, s);
    *handled = ran;
    return st;
}

static vr_status run_kernels(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    cuda_state *s = a->state;
    const vr_cuda_ctx *c = &s->ctx;
    vr_cuda_dtype dt = VR_CUDA_F32;
    vr_status st = VR_OK;
    /* the node's main float tensor gives its dtype */
    switch (n->op) {
    case VR_OP_EMBEDDING: st = dtype_of(a, n->out[0], &dt); break;
    case VR_OP_SUMSQ:
    case VR_OP_SGD:
    case VR_OP_SGD_MOMENTUM:
    case VR_OP_ADAM:
    case VR_OP_ADAMW:
    case VR_OP_COPY:
    case VR_OP_ALLREDUCE:
    case VR_OP_REDUCE:
    case VR_OP_BROADCAST:
    case VR_OP_GATHER:
    case VR_OP_RESHAPE: break;
    default: st = dtype_of(a, n->in[0], &dt); break;
    }
    if (!st)
        st = scratch_check(a->g, n, a->scratch ? a->scratch_bytes : 0);
    if (st)
        return st;
    vr_exec_args own;      /* a matmul_bwd whose bias gradient the layernorm_bwd before it wrote: without it */
    a = vr__cuda_fuse_dbias_mm(&s->fuse_dbias, a, &own);
    bool ln_dbias = false; /* a layernorm_bwd writing that bias gradient too */
    if ((st = vr__cuda_fuse_dbias_ln(&s->fuse_dbias, c, a, dt, &ln_dbias)) || ln_dbias)
        return st;
    bool ln_fused = false; /* an add put off into the layernorm after it, or that layernorm running both */
    if ((st = vr__cuda_fuse_ln_node(&s->fuse_ln, c, a, dt, &ln_fused, &s->idle)) || ln_fused)
        return st;
    bool fused = false; /* a node of a Linear + GELU pair queues its part of the one product */
    if ((st = vr__cuda_fuse_run(&s->fuse, a, c, dt, &fused, &s->idle)) || fused)
        return st;
    switch (n->op) {
    case VR_OP_EMBEDDING: {
        const vr_tensor *tok = T_(a, n->in[0]);
        return vr_cuda_embedding_fwd(c, dt, a->out[0], I32(a->in[0]), a->in[1], a->in[2], (int)tok->shape[0],
                                     (int)tok->shape[1], lastdim(a, n->in[1]));
    }
    case VR_OP_EMBEDDING_BWD:
        return embedding_bwd(a, s, dt);
    case VR_OP_LAYERNORM:
        return vr_cuda_layernorm_fwd(c, dt, a->out[0], F(a->out[1]), F(a->out[2]), a->in[0], a->in[1], a->in[2],
                                     rows(a, n->in[0]), lastdim(a, n->in[0]));
    case VR_OP_LAYERNORM_BWD:
        return layernorm_bwd(a, s, dt);
    case VR_OP_MATMUL:
        return vr_cuda_matmul_fwd(c, dt, a->out[0], a->in[0], a->in[1], a->in[2], rows(a, n->in[0]),
                                  lastdim(a, n->in[0]), rows(a, n->in[1]));
    case VR_OP_MATMUL_BWD: { /* dout(N,OC), inp(N,C) (absent when only dinp is wanted), w(OC,C) */
        bool qkvb = false; /* attention's q|k|v projection: its bias gradient from the identities */
        if ((st = vr__cuda_fuse_qkvb_run(&s->fuse_qkvb, c, a, dt, &qkvb)) || qkvb)
            return st;
        int C = lastdim(a, n->in[1] >= 0 ? n->in[1] : n->in[2]);
        return vr_cuda_matmul_bwd(c, dt, a->out[0], a->out[1], a->out[2], a->in[0], a->in[1], a->in[2],
                                  rows(a, n->in[0]), C, lastdim(a, n->in[0]), a->acc[0], a->acc[1]);
    }
    case VR_OP_ATTENTION:
    case VR_OP_ATTENTION_BWD:
    case VR_OP_ROPE:
    case VR_OP_ROPE_BWD:
        return headed(a, s, dt);
    case VR_OP_RMSNORM:
        return vr_cuda_rmsnorm_fwd(c, dt, a->out[0], F(a->out[1]), a->in[0], a->in[1], rows(a, n->in[0]),
                                   lastdim(a, n->in[0]), n->eps);
    case VR_OP_RMSNORM_BWD:
        return rmsnorm_bwd(a, s, dt);
    case VR_OP_SWIGLU:
        return vr_cuda_swiglu_fwd(c, dt, a->out[0], a->in[0], rows(a, n->in[0]), lastdim(a, n->in[0]) / 2);
    case VR_OP_SWIGLU_BWD:
        return vr_cuda_swiglu_bwd(c, dt, a->out[0], a->in[0], a->in[1], rows(a, n->in[0]), lastdim(a, n->in[0]),
                                  a->acc[0]);
    case VR_OP_GELU:
        return vr_cuda_gelu_fwd(c, dt, a->out[0], a->in[0], (size_t)numel(a, n->in[0]));
    case VR_OP_GELU_BWD:
        return vr_cuda_gelu_bwd(c, dt, a->out[0], a->in[1], a->in[0], (size_t)numel(a, n->in[0]), a->acc[0]);
    case VR_OP_RELU:
        return vr_cuda_relu_fwd(c, dt, a->out[0], a->in[0], (size_t)numel(a, n->in[0]));
    case VR_OP_RELU_BWD:
        return vr_cuda_relu_bwd(c, dt, a->out[0], a->in[1], a->in[0], (size_t)numel(a, n->in[0]), a->acc[0]);
    case VR_OP_ADD:
        return vr_cuda_add_fwd(c, dt, a->out[0], a->in[0], a->in[1], (size_t)numel(a, n->in[0]));
    case VR_OP_ACC:
        return vr_cuda_acc(c, dt, a->out[0], a->in[0], (size_t)numel(a, n->in[0]), a->acc[0]);
    case VR_OP_RESHAPE:
        return VR_OK;
    case VR_OP_CLASSIFIER:
        return classifier(a, s, dt);
    case VR_OP_SOFTMAX_XENT:
        return vr_cuda_softmax_xent_fwd(c, dt, F(a->out[0]), a->out[1], a->in[0], I32(a->in[1]), rows(a, n->in[0]),
                                        lastdim(a, n->in[0]));
    case VR_OP_SOFTMAX_XENT_BWD:
        return vr_cuda_softmax_xent_bwd(c, dt, a->out[0], NULL, n->loss_scale * loss_scale(a), a->in[0], I32(a->in[1]),
                                        rows(a, n->in[0]), lastdim(a, n->in[0]), a->acc[0]);
    case VR_OP_SUMSQ: {
        bool handled = false;
        if ((st = mt_node(a, s, &s->sq, &handled)) || handled)
            return st;
        return sumsq(a, s);
    }
    case VR_OP_SGD:
    case VR_OP_SGD_MOMENTUM:
    case VR_OP_ADAM:
    case VR_OP_ADAMW: {
        bool handled = false;
        if ((st = mt_node(a, s, &s->opt, &handled)) || handled)
            return st;
        return optimizer(a, s);
    }
    case VR_OP_COPY: {
        void *begin, *end;
        int i = (int)(n - a->g->nodes);
        return (st = vr__cuda_times_events(&s->times, i, a->micro, &begin, &end))
                   ? st
                   : vr__cuda_copy_run(&s->copies, c, a, vr__cuda_comm_before_copy(&s->comms, a), begin, end);
    }
    case VR_OP_ALLREDUCE:
    case VR_OP_REDUCE:
    case VR_OP_BROADCAST:
    case VR_OP_GATHER: {
        void *begin, *end;
        int i = (int)(n - a->g->nodes);
        return (st = vr__cuda_times_events(&s->times, i, a->micro, &begin, &end))
                   ? st
                   : vr__cuda_comm_run(&s->comms, c, a, begin, end);
    }
    default:
        return vr_error(VR_ERR_UNSUPPORTED, "cuda: no kernel for op %s", vr_op_name(n->op));
    }
}

static vr_status cuda_run_node(const vr_exec_args *a)
{
    cuda_state *s = a->state;
    int i = (int)(a->node - a->g->nodes);
    vr_status st = vr__cuda_prof_before(s->prof, &s->ctx, i);
    if (!st)
        st = vr__cuda_comm_wait(&s->comms, &s->ctx, a);
    if (!st) /* after the waits: the span is the node's own work */
        st = vr__cuda_times_before(&s->times, &s->ctx, i, a->micro);
    s->idle = false;
    if (!st)
        st = run_kernels(a);
    if (!st)
        st = vr__cuda_prof_after(s->prof, &s->ctx, i);
    if (!st)
        st = vr__cuda_times_after(&s->times, &s->ctx, i, a->micro, !s->idle);
    return st;
}

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/* The groups of multi-tensor apply: the sumsq nodes and the update nodes (one op), all in the
 * optimizer phase after every backward node, the updates after the last sumsq. false: the graph does
 * not have that shape (then node by node). */
static bool mt_groups(const vr_exec *e, cuda_state *s)
{
    const vr_graph *g = e->g;
    s->sq.first = s->opt.first = -1;
    vr_op op = VR_OP_ADAMW;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if ((i >= e->opt_start && n->phase != VR_PHASE_OPTIMIZER) || n->host)
            return false;
        if (n->op == VR_OP_SUMSQ) {
            if (i < e->opt_start || s->opt.first >= 0)
                return false;
            if (s->sq.first < 0)
                s->sq.first = i;
            s->sq.count++;
        } else if (is_update(n->op)) {
            if (i < e->opt_start || (s->opt.first >= 0 && n->op != op))
                return false;
            if (s->opt.first < 0)
                s->opt.first = i;
            op = n->op;
            s->opt.count++;
        }
    }
    return s->sq.count + s->opt.count > 0;
}

/* Which attention kernels each attention node runs (vr_step_config.attention), decided before the first
 * step: cuDNN's where asked (cudnn) or allowed (auto), libcudnn loads, its plans for the node's shape build
 * on this device (built now, kept), their workspace fits the step's library workspace (the ctx's: counted
 * by the plan) and the node's planned scratch holds cuDNN's tensors. Under cudnn anything else is an error
 * naming the node; under auto that node runs vram's kernels. e->attention says what was chosen. */
static vr_status attention_choose(vr_exec *e, cuda_state *s)
{
    const vr_graph *g = e->g;
    vr_attention want = g->step.attention;
    int n_dnn = 0, n_ours = 0;
    char why[400] = "";
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->host || (n->op != VR_OP_ATTENTION && n->op != VR_OP_ATTENTION_BWD))
            continue;
        bool bwd = n->op == VR_OP_ATTENTION_BWD;
        const vr_tensor *q = &g->tensors[n->in[bwd ? 1 : 0]];
        int nkv = n->nkv > 0 ? n->nkv : n->nh, W = n->nh + 2 * nkv;
        int B = (int)q->shape[0], T = (int)q->shape[1], hd = q->ndim == 3 && W > 0 ? (int)(q->shape[2] / W) : 0;
        vr_cuda_dtype dt = q->dtype == VR_BF16 ? VR_CUDA_BF16 : q->dtype == VR_F16 ? VR_CUDA_F16 : VR_CUDA_F32;
        char no[400] = "";
        if (want == VR_ATTENTION_VRAM) {
            n_ours++;
            continue;
        }
        size_t fws = 0, bws = 0;
        if (dt == VR_CUDA_F32) {
            snprintf(no, sizeof no, "cuDNN's flash attention takes bf16/fp16, the step is fp32");
        } else if (vr_cuda_attention_cudnn_prepare(&s->ctx, dt, B, T, n->nh, nkv, hd, &fws, &bws)) {
            snprintf(no, sizeof no, "%s", vr_last_error());
        } else if ((fws || bws) && (!s->ws || (fws > bws && fws > s->ws_bytes) ||
                                    (bws > vr_scratch_cudnn_attention_plan_ws(B, T, n->nh, nkv, hd) && bws > s->ws_bytes))) {
            snprintf(no, sizeof no, "its plans ask for %zu (forward) and %zu (backward) bytes of workspace, the "
                     "step's library workspace holds %zu (vr_step_config.workspace_bytes) and the backward's planned "
                     "scratch %llu", fws, bws, s->ws ? s->ws_bytes : (size_t)0,
                     (unsigned long long)vr_scratch_cudnn_attention_plan_ws(B, T, n->nh, nkv, hd));
        } else if (bwd) {
            uint64_t have = n->scratch >= 0 ? vr_tensor_bytes(&g->tensors[n->scratch]) : 0;
            size_t need = vr_cuda_attention_cudnn_scratch_bytes(B, T, n->nh, nkv, hd);
            if (have < need)
                snprintf(no, sizeof no, "its scratch holds %llu bytes, cuDNN's backward needs %zu (a graph "
                         "planned for vram's attention: vr_step_config.attention)", (unsigned long long)have, need);
        }
        if (no[0] && want == VR_ATTENTION_CUDNN)
            return vr_error(VR_ERR_UNSUPPORTED, "cuda: node %s (%s): attention cudnn: %s", n->name,
                            vr_op_name(n->op), no);
        if (no[0]) {
            if (!why[0])
                snprintf(why, sizeof why, "%s", no);
            n_ours++;
            continue;
        }
        s->cudnn[i] = 1;
        n_dnn++;
    }
    int v = vr_cuda_cudnn_version(); /* e.g. 91900: the library loaded, which can differ from the headers' */
    char dnn[32], v3[24];
    snprintf(dnn, sizeof dnn, "cudnn %s", vr_format_version3(v, v3, sizeof v3));
    if (n_dnn && n_ours)
        snprintf(e->attention, sizeof e->attention, "%s and vram (cuDNN not used for some nodes: %s)", dnn, why);
    else if (n_dnn)
        snprintf(e->attention, sizeof e->attention, "%s", dnn);
    else if (n_ours && why[0])
        snprintf(e->attention, sizeof e->attention, "vram (cuDNN not used: %s)", why);
    else if (n_ours)
        snprintf(e->attention, sizeof e->attention, "vram");
    return VR_OK;
}

int vr_exec_cudnn_version(const char **why)
{
    int v = vr_cuda_cudnn_version();
    if (why)
        *why = v ? "" : vr_cuda_cudnn_why();
    return v;
}

static void io_free(io_stage *io)
{
    if (io->buf)
        vr_device_host_free(io->dev, io->buf);
    io->buf = NULL;
    if (io->landed[0])
        vr_cuda_events_destroy(io->landed, 2);
    io->landed[0] = io->landed[1] = NULL;
}

static vr_status io_init(vr_exec *e, io_stage *io)
{
    const vr_graph *g = e->g;
    size_t sz[IO_N] = {sizeof(float) * VR_CUDA_OPT_SCALARS,
                       g->tokens >= 0 ? (size_t)vr_tensor_bytes(&g->tensors[g->tokens]) : 0,
                       g->targets >= 0 ? (size_t)vr_tensor_bytes(&g->tensors[g->targets]) : 0,
                       (size_t)e->rows * sizeof(float), 2 * sizeof(float)};
    for (int k = 0; k < IO_N; k++)
        io->off[k + 1] = io->off[k] + align256(sz[k]);
    io->dev = e->dev;
    vr_status st = vr_cuda_events_create(io->landed, 2);
    if (st) {
        io->landed[0] = io->landed[1] = NULL;
        return st;
    }
    return vr_device_host_alloc(e->dev, 2 * io->off[IO_N], (void **)&io->buf);
}

/* Region k of the pinned staging, for bytes about to be copied up from it (marked so): NULL where it does not
 * hold them. A region is rewritten only once its last copy has run: every pass ends with read_losses, which
 * waits for the stream; else (a step that failed halfway) the stream is waited for here. */
static void *io_up_region(const vr_cuda_ctx *ctx, io_stage *io, int k, size_t bytes, vr_status *st)
{
    if (!io->buf || bytes > io->off[k + 1] - io->off[k])
        return NULL;
    if (io->dirty[io->set][k]) {
        if ((*st = vr_cuda_sync(ctx)))
            return NULL;
        memset(io->dirty, 0, sizeof io->dirty);
    }
    io->dirty[io->set][k] = true;
    return io_region(io, io->set, k);
}

static void cuda_state_free(cuda_state *s)
{
    io_free(&s->io);
    vr__cuda_times_free(&s->times);
    vr__cuda_copies_free(&s->copies);
    vr__cuda_side_free(&s->comms);
    free(s->sq.host);
    free(s->opt.host);
    free(s->build);
    free(s->cudnn);
    vr__cuda_fuse_ln_free(&s->fuse_ln);
    vr__cuda_fuse_dbias_free(&s->fuse_dbias);
    vr__cuda_fuse_qkvb_free(&s->fuse_qkvb);
    vr__cuda_fuse_free(&s->fuse);
    vr__cuda_prof_end(s->prof, NULL);
    free(s);
}

static vr_status cuda_init(vr_exec *e)
{
    /* before anything is queued: every node's planned scratch holds what its kernel needs (a step never
     * fails on it halfway), and the executor's device is the current one (streams, handles) */
    const vr_graph *g = e->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        vr_status st = n->host ? VR_OK
                               : scratch_check(g, n, n->scratch >= 0 ? vr_tensor_bytes(&g->tensors[n->scratch]) : 0);
        if (st)
            return st;
    }
    vr_status ust = vr_device_use(e->dev);
    if (ust)
        return ust;
    cuda_state *s = calloc(1, sizeof *s);
    if (!s)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    bool groups = mt_groups(e, s);
    int w = vr_graph_find(e->g, "workspace");
    if (w >= 0 && e->live[w]) {
        uint64_t bytes = e->plan->tensors[w].bytes;
        if (bytes >= 2 * VR_CLIP_BYTES) {
            s->ws = e->ptr[w];
            s->ws_bytes = (size_t)(bytes - VR_CLIP_BYTES) / 256 * 256;
            s->clip = (float *)((char *)s->ws + s->ws_bytes);
            /* below the clip tail: the partial sums and the two tables (whatever the mode, so that
             * both modes hand the kernels the same workspace) */
            size_t e_sz = sizeof(vr_cuda_mt_tensor), part = align256(VR_CUDA_MT_MAX_PARTIALS * sizeof(float));
            size_t tsq = align256((size_t)s->sq.count * e_sz), top = align256((size_t)s->opt.count * e_sz);
            size_t region = part + tsq + top;
            if (groups && region <= s->ws_bytes / 16) {
                s->ws_bytes -= region;
                char *r = (char *)s->ws + s->ws_bytes;
                s->partials = (float *)r;
                s->sq.dev = (vr_cuda_mt_tensor *)(r + part);
                s->opt.dev = (vr_cuda_mt_tensor *)(r + part + tsq);
                int most = s->sq.count > s->opt.count ? s->sq.count : s->opt.count;
                s->sq.host = calloc((size_t)s->sq.count + 1, e_sz);
                s->opt.host = calloc((size_t)s->opt.count + 1, e_sz);
                s->build = calloc((size_t)most + 1, e_sz);
                if (!s->sq.host || !s->opt.host || !s->build) {
                    cuda_state_free(s);
                    return vr_error(VR_ERR_OOM, "exec: out of host memory");
                }
                s->mt = !e->cfg.per_node_optimizer;
            }
        }
    }
    s->max_norm = e->g->step.grad_clip;
    vr_status st = VR_OK;
    if (e->cfg.cuda_graph && s->clip)
        st = vr_cuda_stream_create(&s->stream);
    if (!st)
        st = vr_cuda_ctx_init(&s->ctx, s->stream, s->ws, s->ws ? s->ws_bytes : 0);
    s->ctx.attention_v1 = (int)(e->cfg.attention_v1 & 3u);
    s->ctx.matmul_tune = e->cfg.matmul_tune;
    if (!st)
        st = io_init(e, &s->io);
    if (!st && !(s->cudnn = calloc((size_t)e->g->n_nodes + 1, 1)))
        st = vr_error(VR_ERR_OOM, "exec: out of host memory");
    if (!st)
        st = attention_choose(e, s);
    if (!st)
        st = vr__cuda_fuse_ln_init(&s->fuse_ln, e);
    if (!st)
        st = vr__cuda_fuse_dbias_init(&s->fuse_dbias, e);
    if (!st)
        st = vr__cuda_fuse_qkvb_init(&s->fuse_qkvb, e);
    if (!st)
        st = vr__cuda_fuse_init(&s->fuse, e);
    if (!st && !e->cfg.cuda_graph)
        st = vr__cuda_prof_new(e->g->n_nodes, e->cfg.profile, &s->prof);
    if (!st)
        st = vr__cuda_copies_init(&s->copies, e);
    if (!st)
        st = vr__cuda_comms_init(&s->comms, e);
    if (!st)
        st = vr__cuda_times_init(&s->times, e, s->copies.side.stream != NULL, &s->comms);
    if (st) {
        vr_cuda_ctx_destroy(&s->ctx);
        vr_cuda_stream_destroy(s->stream);
        cuda_state_free(s);
        return st;
    }
    if (s->stream)
        s->ctx.opt_scalars = s->clip + 4;
    e->be_state = s;
    e->multi_tensor = s->mt;
    e->fused_fwd = s->fuse.fwd;
    e->fused_bwd = s->fuse.bwd;
    e->fused_dbias = s->fuse_dbias.pairs;
    e->fused_qkvb = s->fuse_qkvb.nodes;
    return VR_OK;
}

static bool cuda_graph_ok(vr_exec *e)
{
    const cuda_state *s = e->be_state;
    return s && s->stream && s->ctx.opt_scalars;
}

static vr_status cuda_graph_scalars(vr_exec *e, const vr_optim_hparams *h)
{
    cuda_state *s = e->be_state;
    float local[VR_CUDA_OPT_SCALARS];
    vr_status st = VR_OK;
    float *v = io_up_region(&s->ctx, &s->io, IO_SCALARS, sizeof local, &st);
    if (st)
        return st;
    if (!v)
        v = local;
    vr_cuda_opt_scalars(v, h->lr, h->beta1, h->beta2, h->step > 0 ? (int)h->step : 1);
    return vr_cuda_upload(&s->ctx, s->clip + 4, v, sizeof local);
}

static vr_status cuda_stage_in(vr_exec *e, int slot, void *dst, const void *src, size_t bytes)
{
    cuda_state *s = e->be_state;
    int k = slot ? IO_TARGETS : IO_TOKENS;
    vr_status st = VR_OK;
    void *r = io_up_region(&s->ctx, &s->io, k, bytes, &st);
    if (st)
        return st;
    if (!r)
        return vr_device_memcpy(e->dev, dst, src, bytes, VR_COPY_HOST_TO_DEVICE);
    memcpy(r, src, bytes);
    return vr_cuda_upload(&s->ctx, dst, r, bytes);
}

/* Queues the losses (bytes) and, with clip, the clipping result down into staging set k. */
static vr_status io_down(vr_exec *e, int k, size_t bytes, bool clip)
{
    cuda_state *s = e->be_state;
    io_stage *io = &s->io;
    vr_status st = vr_cuda_download(&s->ctx, io_region(io, k, IO_LOSSES), vr_exec_tensor_ptr(e, e->g->losses), bytes);
    if (!st && clip)
        st = vr_cuda_download(&s->ctx, io_region(io, k, IO_CLIP), s->clip, 2 * sizeof(float));
    return st;
}

static vr_status cuda_read_losses(vr_exec *e, float *dst, size_t bytes, bool last)
{
    cuda_state *s = e->be_state;
    io_stage *io = &s->io;
    io->clip_read = false;
    if (!io_holds_losses(io, bytes))
        return vr_device_memcpy(e->dev, dst, vr_exec_tensor_ptr(e, e->g->losses), bytes, VR_COPY_DEVICE_TO_HOST);
    bool clip = last && s->clip;
    vr_status st = io_down(e, io->set, bytes, clip);
    if (!st)
        st = vr_cuda_sync(&s->ctx);
    if (st)
        return st;
    memset(io->dirty, 0, sizeof io->dirty); /* every copy up has run */
    memcpy(dst, io_region(io, io->set, IO_LOSSES), bytes);
    io->clip_read = clip;
    io->clip_set = io->set;
    return VR_OK;
}

static vr_status cuda_losses_queue(vr_exec *e, size_t bytes, int *set)
{
    cuda_state *s = e->be_state;
    io_stage *io = &s->io;
    if (!io_holds_losses(io, bytes))
        return VR_ERR_UNSUPPORTED;
    int k = io->set;
    vr_status st = io_down(e, k, bytes, s->clip != NULL);
    if (!st)
        st = vr_cuda_event_record(&s->ctx, io->landed[k]);
    if (st)
        return st;
    *set = k;
    io->set = k ^ 1;
    return VR_OK;
}

static vr_status cuda_losses_wait(vr_exec *e, int set, float *dst, size_t bytes)
{
    cuda_state *s = e->be_state;
    io_stage *io = &s->io;
    vr_status st = vr_cuda_event_wait(io->landed[set]);
    if (st)
        return st;
    memset(io->dirty[set], 0, sizeof io->dirty[set]); /* its copies up ran before the step */
    memcpy(dst, io_region(io, set, IO_LOSSES), bytes);
    io->clip_read = s->clip != NULL; /* losses_queue brought it down with the losses */
    io->clip_set = set;
    return VR_OK;
}

static vr_status cuda_capture_begin(vr_exec *e)
{
    cuda_state *s = e->be_state;
    if (s->graph) {
        vr_cuda_sync(&s->ctx);
        vr_cuda_graph_destroy(s->graph);
        s->graph = NULL;
    }
    vr_status st = vr_cuda_capture_begin(&s->ctx);
    s->capturing = !st;
    return st;
}

static vr_status cuda_capture_end(vr_exec *e, bool keep)
{
    cuda_state *s = e->be_state;
    s->capturing = false;
    return vr_cuda_capture_end(&s->ctx, keep, &s->graph);
}

static vr_status cuda_replay(vr_exec *e)
{
    cuda_state *s = e->be_state;
    return vr_cuda_graph_launch(&s->ctx, s->graph);
}

static void cuda_fini(vr_exec *e)
{
    cuda_state *s = e->be_state;
    if (s) {
        (void)vr_device_use(e->dev); /* the streams and handles are that device's */
        vr_cuda_sync(&s->ctx);
        bool profiled = s->prof != NULL;
        vr__cuda_prof_end(s->prof, e->g);
        if (profiled && (s->fuse.fwd || s->fuse.bwd)) /* the table's reader: where the fused products' time is */
            fprintf(stderr, "  (Linear + GELU fused, --fuse off to part them: the gelu nodes hold %d forward products "
                            "and their matmuls ~0, the gelu_bwd nodes %d backward dinp products)\n",
                    s->fuse.fwd, s->fuse.bwd);
        if (profiled && s->fuse_dbias.pairs)
            fprintf(stderr, "  (%d Linear bias gradients in the layernorm_bwd nodes before their matmul_bwd)\n",
                    s->fuse_dbias.pairs);
        s->prof = NULL;
        vr_cuda_graph_destroy(s->graph);
        vr_cuda_ctx_destroy(&s->ctx);
        vr_cuda_stream_destroy(s->stream);
        cuda_state_free(s);
    }
    e->be_state = NULL;
}

static vr_status cuda_clip_result(vr_exec *e, double *norm, double *scale)
{
    cuda_state *s = e->be_state;
    float v[2] = {1.0f, 0.0f};
    if (!s || !s->clip)
        return vr_error(VR_ERR_INVALID, "cuda: clipping needs the step's workspace");
    if (s->io.clip_read) /* read with the losses */
        memcpy(v, io_region(&s->io, s->io.clip_set, IO_CLIP), sizeof v);
    else {
        vr_status st = vr_device_memcpy(e->dev, v, s->clip, sizeof v, VR_COPY_DEVICE_TO_HOST);
        if (st)
            return st;
    }
    s->io.clip_read = false;
    *scale = v[0];
    *norm = v[1];
    return VR_OK;
}

static vr_status cuda_host_wait(vr_exec *e, int copy)
{
    cuda_state *s = e->be_state;
    return vr__cuda_copy_wait(&s->copies, copy);
}

static vr_status cuda_copies_done(vr_exec *e)
{
    cuda_state *s = e->be_state;
    return vr__cuda_copies_done(&s->copies);
}

static bool cuda_device_times(vr_exec *e)
{
    const cuda_state *s = e->be_state;
    return s && s->times.start;
}

static bool cuda_device_span(vr_exec *e, int node, int pass, uint64_t *t0, uint64_t *t1, int *lane)
{
    cuda_state *s = e->be_state;
    return s && vr__cuda_times_span(&s->times, node, pass, t0, t1, lane);
}

const vr_exec_backend *vr__exec_backend_cuda(void)
{
    static const vr_exec_backend cuda = {.name = "cuda",
                                         .run_node = cuda_run_node,
                                         .init = cuda_init,
                                         .fini = cuda_fini,
                                         .clip_result = cuda_clip_result,
                                         .graph_ok = cuda_graph_ok,
                                         .graph_scalars = cuda_graph_scalars,
                                         .capture_begin = cuda_capture_begin,
                                         .capture_end = cuda_capture_end,
                                         .replay = cuda_replay,
                                         .host_wait = cuda_host_wait,
                                         .copies_done = cuda_copies_done,
                                         .device_times = cuda_device_times,
                                         .device_span = cuda_device_span,
                                         .stage_in = cuda_stage_in,
                                         .read_losses = cuda_read_losses,
                                         .losses_queue = cuda_losses_queue,
                                         .losses_wait = cuda_losses_wait};
    return &cuda;
}
