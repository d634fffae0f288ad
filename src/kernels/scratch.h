/* vram kernels — the scratch each kernel takes from its caller, sized in one place.
 *
 * Some kernels need memory beyond their inputs and outputs: a chunk of logits (the fused classifier),
 * per-row statistics and an fp32 dQ accumulator (attention's backward), partial column sums (the weight
 * gradients of LayerNorm and RMSNorm), a radix sort's keys and CUB's temporary storage (the embedding's
 * backward). One function below computes each kernel's need from plain integers (shapes, element sizes),
 * and both sides call it:
 *   - the kernels (src/kernels/cpu, src/kernels/cuda) check the scratch they are given against it
 *     and lay it out with the helpers beside it; their vr_cpu_*_scratch_bytes / vr_cuda_*_scratch_bytes
 *     return it;
 *   - the graph (vr_node_scratch_bytes, src/graph/graph.c) gives each node whose kernel needs scratch a
 *     tensor of that size (role temp), which the plan counts like any other: a step takes no memory the
 *     plan did not see (the step's cuBLASLt workspace is a tensor of its own, vr_step_config.workspace_bytes).
 * Header-only (static inline; C and CUDA C++) so that the graph, which sits below the kernels, computes the
 * sizes without linking them, in builds without CUDA too. Sizes are bytes (uint64_t), shapes int64_t; a
 * dimension <= 0 counts as 0. */
#ifndef VRAM_KERNELS_SCRATCH_H
#define VRAM_KERNELS_SCRATCH_H

#include <stdint.h>

/* Alignment of each region inside one scratch buffer (the buffers themselves come 256-aligned). */
#define VR_SCRATCH_ALIGN 256

static inline uint64_t vr_scratch_align(uint64_t bytes)
{
    return (bytes + VR_SCRATCH_ALIGN - 1) / VR_SCRATCH_ALIGN * VR_SCRATCH_ALIGN;
}

static inline uint64_t vr_scratch_dim(int64_t n) { return n > 0 ? (uint64_t)n : 0; }

/* ---------------------------------------------------------------- fused classifier */

/* CPU (vr_cpu_classifier): chunks of min(N, 128) rows (at least one) of V fp32 logits. */
#define VR_SCRATCH_CPU_CLASSIFIER_ROWS 128

static inline uint64_t vr_scratch_cpu_classifier(int64_t N, int64_t V)
{
    uint64_t rows = N < VR_SCRATCH_CPU_CLASSIFIER_ROWS ? (N > 0 ? (uint64_t)N : 1) : VR_SCRATCH_CPU_CLASSIFIER_ROWS;
    return rows * vr_scratch_dim(V) * 4u;
}

/* CUDA (vr_cuda_classifier): rows of wte's Vw logits padded to a multiple of 64 elements (every row starts
 * 16-byte aligned) in the activations' dtype (esize bytes); planned: min(N, rows) rows where rows > 0 is asked
 * for (vr_step_config.classifier_rows), else min(N, 4096), fewer where those would take more than 512 MiB
 * (1024 rows at least; one row at least). The kernel runs chunks of as many rows as the scratch it is given
 * holds (one at least). Fewer, larger chunks make faster products (the
 * dwte product accumulates once per chunk): GPT-2 124M's three products over B*T = 16384 rows take 5.4 ms
 * in chunks of 1024 rows and 4.6 ms in chunks of 4096 on the H100 (bench/gpu/lt_algos.cu). */
#define VR_SCRATCH_CUDA_CLASSIFIER_ROWS 4096
#define VR_SCRATCH_CUDA_CLASSIFIER_MIN_ROWS 1024
#define VR_SCRATCH_CUDA_CLASSIFIER_CAP ((uint64_t)512 << 20)
#define VR_SCRATCH_CUDA_CLASSIFIER_PAD 64

/* Elements of one padded row of logits. */
static inline uint64_t vr_scratch_cuda_classifier_vp(int64_t Vw)
{
    return (vr_scratch_dim(Vw) + VR_SCRATCH_CUDA_CLASSIFIER_PAD - 1) / VR_SCRATCH_CUDA_CLASSIFIER_PAD *
           VR_SCRATCH_CUDA_CLASSIFIER_PAD;
}

static inline uint64_t vr_scratch_cuda_classifier(int64_t N, int64_t Vw, int64_t esize, int64_t rows_asked)
{
    uint64_t row = vr_scratch_cuda_classifier_vp(Vw) * vr_scratch_dim(esize);
    uint64_t most = row ? VR_SCRATCH_CUDA_CLASSIFIER_CAP / row : VR_SCRATCH_CUDA_CLASSIFIER_ROWS;
    if (most > VR_SCRATCH_CUDA_CLASSIFIER_ROWS) most = VR_SCRATCH_CUDA_CLASSIFIER_ROWS;
    if (most < VR_SCRATCH_CUDA_CLASSIFIER_MIN_ROWS) most = VR_SCRATCH_CUDA_CLASSIFIER_MIN_ROWS;
    if (rows_asked > 0) most = (uint64_t)rows_asked;
    uint64_t rows = N < (int64_t)most ? (N > 0 ? (uint64_t)N : 1) : most;
    return rows * row;
}

/* ---------------------------------------------------------------- attention backward (CUDA) */

/* The head size of the tensor-core kernels (bf16/fp16): the fused backward runs for it only. */
#define VR_SCRATCH_CUDA_ATTENTION_TC_HS 64

/* The minimum (vr_cuda_attention_scratch_bytes): delta = rowsum(dout * out), (B,NH,T) fp32. With it the
 * backward runs two kernels without atomics (and the fp32 / other head sizes' scalar kernels need no more). */
static inline uint64_t vr_scratch_cuda_attention_delta(int64_t B, int64_t T, int64_t NH)
{
    return vr_scratch_dim(B) * vr_scratch_dim(NH) * vr_scratch_dim(T) * 4u;
}

/* The fp32 dQ accumulator of one query head of the fused backward: T rows of 64. */
static inline uint64_t vr_scratch_cuda_attention_dq_head(int64_t T)
{
    return vr_scratch_dim(T) * VR_SCRATCH_CUDA_ATTENTION_TC_HS * 4u;
}

/* The fused backward over all heads in one launch (vr_cuda_attention_scratch_fused_bytes): delta
 * (256-aligned), then every query head's fp32 dQ; head sizes other than 64: the minimum. The kernel takes
 * the heads in chunks that fit when given less (down to one (b, kv head) pair's query heads). */
static inline uint64_t vr_scratch_cuda_attention_fused(int64_t B, int64_t T, int64_t NH, int64_t hs)
{
    uint64_t delta = vr_scratch_cuda_attention_delta(B, T, NH);
    if (!delta || hs != VR_SCRATCH_CUDA_ATTENTION_TC_HS)
        return delta;
    return vr_scratch_align(delta) + vr_scratch_dim(B) * vr_scratch_dim(NH) * vr_scratch_cuda_attention_dq_head(T);
}

/* What a training step plans for the node: the fused scratch where the tensor cores run (activations of
 * esize 2, head size 64), else the minimum (fp32: the scalar kernels). */
static inline uint64_t vr_scratch_cuda_attention_bwd(int64_t B, int64_t T, int64_t NH, int64_t hs, int64_t esize)
{
    return esize == 4 ? vr_scratch_cuda_attention_delta(B, T, NH) : vr_scratch_cuda_attention_fused(B, T, NH, hs);
}

/* ---------------------------------------------------------------- attention through cuDNN (CUDA) */

/* cuDNN's fused flash attention (src/kernels/cuda/attention_cudnn_cuda.c) runs for 16-bit activations and
 * head sizes that are a multiple of 8 up to 128. Its backward takes two fp32 tensors that its operation
 * graph names and that live outside cuDNN (as cudnn-frontend's sdpa_backward keeps them in its part of the
 * workspace): the dQ accumulator (B,NH,T,hs) at offset 0, then softmax_sum = rowsum(dO * O) (B,NH,T) at the
 * 256-aligned offset after it. Those are the node's scratch, sized here exactly. What the execution plan
 * itself asks for beyond them (CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, known once a plan is built on a
 * GPU) comes out of the step's library workspace (the cuBLASLt one, vr_step_config.workspace_bytes, 32 MiB),
 * as the forward's does: the executor builds both plans before the first step and refuses (or, with
 * attention auto, leaves cuDNN for vram's kernels) a plan that asks for more than that workspace holds. */
#define VR_SCRATCH_CUDNN_HS_MAX 128

static inline int vr_scratch_cudnn_attention_ok(int64_t hs, int64_t esize)
{
    return esize == 2 && hs > 0 && hs % 8 == 0 && hs <= VR_SCRATCH_CUDNN_HS_MAX;
}

/* The dQ accumulator's bytes (the offset of softmax_sum is their 256-aligned size). */
static inline uint64_t vr_scratch_cudnn_attention_dq(int64_t B, int64_t T, int64_t NH, int64_t hs)
{
    return vr_scratch_dim(B) * vr_scratch_dim(NH) * vr_scratch_dim(T) * vr_scratch_dim(hs) * 4u;
}

/* Grouped-query attention (NKV < NH): cuDNN's backward plan asks for a workspace of dK and dV spread over every
 * query head, B*NH*T*hs 4-byte elements between them, plus 256 bytes (measured on an H100 with cuDNN 9.19:
 * 409,856 B at B=2 T=200 NH=4 NKV=1 hs=64; 67,109,120 B at B=4 T=2048 NH=32 NKV=8 hs=64), more than the step's
 * library workspace at long sequences. It is planned here, after softmax_sum (the executor checks the built
 * plan's figure against it before the first step); with NKV == NH the plan asks for 256 bytes, which the
 * library workspace gives. */
static inline uint64_t vr_scratch_cudnn_attention_plan_ws(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs)
{
    return NKV > 0 && NKV < NH ? vr_scratch_dim(B) * vr_scratch_dim(NH) * vr_scratch_dim(T) * vr_scratch_dim(hs) * 4u + 256u
                               : 0;
}

/* The offset of the plan's workspace in the scratch (the end of softmax_sum, 256-aligned). */
static inline uint64_t vr_scratch_cudnn_attention_ws_offset(int64_t B, int64_t T, int64_t NH, int64_t hs)
{
    return vr_scratch_align(vr_scratch_cudnn_attention_dq(B, T, NH, hs)) +
           vr_scratch_align(vr_scratch_dim(B) * vr_scratch_dim(NH) * vr_scratch_dim(T) * 4u);
}

static inline uint64_t vr_scratch_cudnn_attention_bwd(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs)
{
    uint64_t dq = vr_scratch_cudnn_attention_dq(B, T, NH, hs), ws = vr_scratch_cudnn_attention_plan_ws(B, T, NH, NKV, hs);
    if (!dq)
        return 0;
    uint64_t sum = vr_scratch_dim(B) * vr_scratch_dim(NH) * vr_scratch_dim(T) * 4u;
    return ws ? vr_scratch_cudnn_attention_ws_offset(B, T, NH, hs) + ws : vr_scratch_align(dq) + sum;
}

/* Which attention kernels a CUDA step may run (vr_step_config.attention, include/vram/graph.h, same values):
 * 0 auto (cuDNN where it loads and takes the shape, else vram's), 1 vram's own, 2 cuDNN. */
#define VR_SCRATCH_ATTN_AUTO 0
#define VR_SCRATCH_ATTN_VRAM 1
#define VR_SCRATCH_ATTN_CUDNN 2

/* What a training step plans for attention_bwd's node on CUDA: vram's (vr_scratch_cuda_attention_bwd) with
 * attention vram or where cuDNN cannot run the shape; cuDNN's with attention cudnn; the larger of the two
 * with auto, since the choice is made on the GPU (whether libcudnn loads) and the plan is the same on
 * every device it is made on. */
static inline uint64_t vr_scratch_cuda_attention_bwd_for(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                                         int64_t esize, int attention)
{
    uint64_t ours = vr_scratch_cuda_attention_bwd(B, T, NH, hs, esize);
    if (attention == VR_SCRATCH_ATTN_VRAM || !vr_scratch_cudnn_attention_ok(hs, esize))
        return ours;
    uint64_t theirs = vr_scratch_cudnn_attention_bwd(B, T, NH, NKV, hs);
    if (attention == VR_SCRATCH_ATTN_CUDNN)
        return theirs;
    return ours > theirs ? ours : theirs;
}

/* ---------------------------------------------------------------- LayerNorm / RMSNorm backward (CUDA) */

/* dw (and db) are summed in two steps: blocks over (columns) x (a slice of rows) write fp32 partial sums,
 * then one thread per column adds the slices in order. */

/* Slices of `rows` rows over N rows, 1 to `max` of them. */
static inline int vr_scratch_slices(int64_t N, int64_t rows, int max)
{
    int64_t s = (N + rows - 1) / rows;
    return s < 1 ? 1 : s > max ? max : (int)s;
}

/* LayerNorm (vr_cuda_layernorm_bwd): the one-pass kernel's blocks each write a slice's partial sums (as many
 * blocks as the multiprocessors hold at once, at most one per 16 rows and 256 in all: GPT-2 medium's 8,192 rows
 * on an H100, 256 blocks of 8 warps), the generic kernels a slice per multiprocessor; the scratch holds up to 256
 * slices x (dw | db) x C fp32, slice s's dw at s*2C, its db at s*2C + C, then for vr_cuda_layernorm_bwd_sum (the
 * next Linear's bias gradient, which the executor may fuse in) slices x C more: slice s's column sums of dinp at
 * slices*2C + s*C, slices being this maximum. */
#define VR_SCRATCH_LN_ROWS_PER_SLICE 16
#define VR_SCRATCH_LN_MAX_SLICES 256

static inline int vr_scratch_ln_slices(int64_t N)
{
    return vr_scratch_slices(N, VR_SCRATCH_LN_ROWS_PER_SLICE, VR_SCRATCH_LN_MAX_SLICES);
}

static inline uint64_t vr_scratch_cuda_layernorm_bwd(int64_t N, int64_t C)
{
    return (uint64_t)vr_scratch_ln_slices(N) * 3u * vr_scratch_dim(C) * 4u;
}

/* RMSNorm (vr_cuda_rmsnorm_bwd): LayerNorm's slices, each C fp32 (dw's partial sums; no bias). */
static inline uint64_t vr_scratch_cuda_rmsnorm_bwd(int64_t N, int64_t C)
{
    return (uint64_t)vr_scratch_ln_slices(N) * vr_scratch_dim(C) * 4u;
}

/* ---------------------------------------------------------------- embedding backward (CUDA) */

/* dwte sorts the R = B*T rows by token: keys and values double-buffered (four int32 arrays of R, each
 * 256-aligned: vr_scratch_cuda_embedding_seg apart), then CUB's temporary storage for
 * cub::DeviceRadixSort::SortPairs. CUB's own figure needs a GPU to ask (its tuning depends on the
 * architecture), so the plan reserves a bound over it: 1 MiB + 8 bytes per row (CUB's onesweep sort asks for
 * its histograms, a few KiB, and 1 KiB of look-back state per tile of thousands of rows). The kernel checks
 * CUB's real figure against what is left. dwpe needs none. */
static inline uint64_t vr_scratch_cuda_embedding_seg(int64_t R) { return vr_scratch_align(vr_scratch_dim(R) * 4u); }

static inline uint64_t vr_scratch_cuda_embedding_sort_temp(int64_t R)
{
    return ((uint64_t)1 << 20) + vr_scratch_dim(R) * 8u;
}

static inline uint64_t vr_scratch_cuda_embedding_bwd(int64_t B, int64_t T)
{
    int64_t R = B > 0 && T > 0 ? B * T : 0;
    if (!R)
        return 0;
    return 4u * vr_scratch_cuda_embedding_seg(R) + vr_scratch_align(vr_scratch_cuda_embedding_sort_temp(R));
}

#endif
