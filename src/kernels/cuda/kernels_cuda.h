/* vram — CUDA kernels (internal contract between the executor and src/kernels/cuda).
 *
 * The same ops as src/kernels/cpu/kernels_cpu.h, op for op, so that one graph runs on either device;
 * read that header for the maths of each op. What differs here:
 *
 * Context. Every function takes a vr_cuda_ctx, made by the caller with vr_cuda_ctx_init: the stream
 * all work is queued on (kernels and cuBLASLt calls; nothing synchronizes the host), the cuBLASLt
 * handle, and one cuBLASLt workspace of vr_cuda_matmul_workspace_bytes() that the caller allocates
 * (the planner counts it as role `temp`). Functions are asynchronous: they return once the work is
 * queued. Pointers are device pointers unless a comment says "host".
 *
 * Errors. Functions return vr_status: VR_ERR_INVALID for bad arguments (checked before anything is
 * queued), VR_ERR_DEVICE for a failed CUDA or cuBLASLt call or kernel launch, with vr_last_error()
 * naming the op and the CUDA/cuBLAS error. Every launch is checked (cudaGetLastError, cheap); builds
 * with VRAM_CUDA_SYNC_CHECK defined (CMAKE_BUILD_TYPE=Debug defines it: no NDEBUG) also synchronize
 * the stream after each op so that an asynchronous fault is reported by the op that caused it.
 *
 * Precision. Activations, parameters and their gradients are of one storage dtype per call, passed
 * as `dt` (vr_cuda_dtype): fp32, bf16 or fp16. Arithmetic is fp32 throughout (sums, softmax,
 * statistics); tensors that the CPU contract keeps as statistics are always fp32 here too: layernorm
 * mean/rstd, attention lse, per-row losses, optimizer master weights and moments, the global-norm
 * accumulator. Matrix products: fp32 inputs use true fp32 (CUBLAS_COMPUTE_32F) unless ctx->allow_tf32
 * is set; bf16/fp16 inputs use tensor cores with fp32 accumulation.
 *
 * Conventions (as the CPU contract): row-major; backward kernels take acc flags (0 overwrite,
 * 1 accumulate; parameter gradients have acc_dparam); a gradient output passed as NULL is not
 * computed; int32 token/target ids, target -1 = ignore the row. Outputs never alias inputs unless
 * stated. Functions that need scratch beyond the cuBLASLt workspace take it from the caller and
 * expose its size (vr_cuda_*_scratch_bytes, computed by kernels/scratch.h, with which the plan sizes
 * each node's scratch tensor: the executor passes that). Since all work is ordered on one stream,
 * the ctx's cuBLASLt workspace may itself be passed as that scratch when it is large enough and the
 * function makes no matmul call while using it (the functions that allow this say so; tests).
 *
 * Determinism: everything is run-to-run deterministic except vr_cuda_sumsq / vr_cuda_sum with
 * many blocks (fp32 atomics of per-block partial sums; the order of those few additions varies) and
 * dq of the fused attention backward (see vr_cuda_attention_bwd).
 * vr_cuda_mt_sumsq (multi-tensor) is deterministic: fixed per-block partials, summed in order.
 */
#ifndef VRAM_KERNELS_CUDA_H
#define VRAM_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "vram/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- types and context */

/* Storage dtype of a tensor. Values are stable (the executor may store them). */
typedef enum vr_cuda_dtype {
    VR_CUDA_F32 = 0,
    VR_CUDA_BF16 = 1,
    VR_CUDA_F16 = 2,
} vr_cuda_dtype;

/* Bytes per element of dt (4, 2, 2); 0 for an unknown value. */
size_t vr_cuda_dtype_size(vr_cuda_dtype dt);
/* "f32", "bf16", "f16" or "?". */
const char *vr_cuda_dtype_name(vr_cuda_dtype dt);

typedef struct vr_cuda_ctx {
    void *stream;           /* cudaStream_t all work is queued on (NULL = the legacy default stream) */
    void *lt;               /* cublasLtHandle_t, created by vr_cuda_ctx_init */
    void *workspace;        /* cuBLASLt workspace (device), owned by the caller */
    size_t workspace_bytes; /* its size; vr_cuda_matmul_workspace_bytes() recommended */
    int allow_tf32;         /* fp32 matmuls may use TF32 tensor cores (default 0: exact fp32) */
    int device;             /* CUDA device index the ctx was made on */
    int sm_count;           /* multiprocessors of that device */
    const float *opt_scalars; /* device, NULL by default: the optimizers take lr and step from their
                               * arguments. Else they read them here ([0] lr, [1] 1 - beta1^step,
                               * [2] sqrt(1 - beta2^step), [3] 1 on the first step, else 0, [4] the step
                               * (the seed of stochastic rounding); fill with
                               * vr_cuda_opt_scalars + vr_cuda_upload), so that a captured CUDA graph
                               * replays each step with that step's values. Set after ctx_init. */
    int attention_v1;       /* bit 0: the forward, bit 1: the backward use the first tensor-core attention
                             * kernels (v1: the backward as two deterministic kernels without atomics)
                             * instead of v2 (default 0) */
    int matmul_tune;        /* large products: cuBLASLt's fastest candidate, measured at first use, where it
                             * beats its heuristic's first by 8% (matmul.cu lt_measure; default 0) */
} vr_cuda_ctx;

/* Recommended cuBLASLt workspace: 32 MiB (as PyTorch on Hopper). */
size_t vr_cuda_matmul_workspace_bytes(void);

/* Fills *ctx for the current device: creates the cuBLASLt handle, records stream (a cudaStream_t,
 * may be NULL) and the caller's workspace (may be NULL with bytes 0: matmuls then use algorithms that
 * need none). */
vr_status vr_cuda_ctx_init(vr_cuda_ctx *ctx, void *stream, void *workspace, size_t workspace_bytes);
/* Destroys the cuBLASLt handle; leaves the stream and workspace to the caller. */
void vr_cuda_ctx_destroy(vr_cuda_ctx *ctx);
/* Waits for all work queued on ctx's stream; VR_ERR_DEVICE if any of it failed. */
vr_status vr_cuda_sync(const vr_cuda_ctx *ctx);

/* ---------------------------------------------------------------- streams and CUDA graphs */

/* A stream of its own (cudaStreamCreate: blocking, so it stays ordered with the legacy default
 * stream that the device layer's copies use). */
vr_status vr_cuda_stream_create(void **stream);
void vr_cuda_stream_destroy(void *stream);
/* dst (device) = src (host), bytes, queued on ctx's stream (src may be reused on return; from pinned
 * memory the host does not wait for the copy, and src must then stay until it has run). */
vr_status vr_cuda_upload(const vr_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
/* dst (pinned host) = src (device), bytes, queued on ctx's stream: read dst after vr_cuda_sync. */
vr_status vr_cuda_download(const vr_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Starts capturing the work queued on ctx's stream (which must not be the legacy stream) into a
 * graph: nothing queued until vr_cuda_capture_end runs. */
vr_status vr_cuda_capture_begin(const vr_cuda_ctx *ctx);
/* Ends the capture; keep != 0 instantiates it into *exec (a cudaGraphExec_t), else discards it
 * (after an error: *exec untouched). */
vr_status vr_cuda_capture_end(const vr_cuda_ctx *ctx, int keep, void **exec);
/* Queues one replay of exec on ctx's stream. */
vr_status vr_cuda_graph_launch(const vr_cuda_ctx *ctx, void *exec);
void vr_cuda_graph_destroy(void *exec);
/* Timing events (profiling): n events into ev[0..n) (cudaEvent_t each); record one on ctx's stream;
 * milliseconds between two recorded events after waiting for the later one; destroy n of them. */
vr_status vr_cuda_events_create(void **ev, int n);
vr_status vr_cuda_event_record(const vr_cuda_ctx *ctx, void *ev);
vr_status vr_cuda_event_ms(void *from, void *to, float *ms);
/* Milliseconds between two events that have both completed (no wait; VR_ERR_DEVICE if one has not). */
vr_status vr_cuda_event_elapsed(void *from, void *to, float *ms);
void vr_cuda_events_destroy(void **ev, int n);
/* Offload copies, on a stream of their own (non-blocking: beside ctx's, the legacy one included).
 * copy_down: ctx's stream first waits for `fence` (an earlier copy's `done`: its source may then be reused
 * after this point; NULL none), marks its position in `mark`; the copy stream waits for the mark, records
 * `begin` (timing, may be NULL), copies device src -> pinned host dst, and records `done`. copy_up: pinned
 * host src -> device dst on the copy stream (src ready now) between `begin` and `end` (both may be NULL).
 * event_wait: the host waits for an event; stream_wait_host: for a stream. */
vr_status vr_cuda_copy_stream_create(void **stream);
vr_status vr_cuda_copy_down(const vr_cuda_ctx *ctx, void *copy_stream, void *mark, void *fence, void *begin, void *done,
                            void *dst, const void *src, size_t bytes);
vr_status vr_cuda_copy_up(void *copy_stream, void *begin, void *end, void *dst, const void *src, size_t bytes);
vr_status vr_cuda_event_wait(void *ev);
vr_status vr_cuda_stream_wait_host(void *stream);
/* Work on a side stream (data parallel's collectives): fork: ctx's stream first waits for `fence` (NULL none),
 * records `mark`, and the side stream waits for it; join: ctx's stream waits for event `ev` (recorded on the
 * side stream with vr_cuda_stream_record). */
vr_status vr_cuda_stream_fork(const vr_cuda_ctx *ctx, void *side, void *mark, void *fence);
vr_status vr_cuda_stream_record(void *side, void *ev);
vr_status vr_cuda_stream_join(const vr_cuda_ctx *ctx, void *ev);
/* The values of vr_cuda_ctx.opt_scalars for a step (host; computed as the optimizers compute them from
 * their arguments, so both paths give the same bits); [4] is the step, the seed of stochastic rounding. */
#define VR_CUDA_OPT_SCALARS 5
void vr_cuda_opt_scalars(float out[VR_CUDA_OPT_SCALARS], float lr, float beta1, float beta2, int step);

/* ---------------------------------------------------------------- memory helpers */

/* x[0..n) = 0 (any dtype; bytes = n * size of dt). */
vr_status vr_cuda_zero(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *x, size_t n);
/* x[0..n) = value (rounded to dt). */
vr_status vr_cuda_fill(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *x, size_t n, float value);
/* dst (dst_dt) = src (src_dt) converted, n elements, round to nearest even (bf16<->fp32 casts,
 * fp32 master -> bf16 params, ...). dst == src allowed only when the dtypes are equal. */
vr_status vr_cuda_convert(const vr_cuda_ctx *ctx, vr_cuda_dtype dst_dt, void *dst,
                          vr_cuda_dtype src_dt, const void *src, size_t n);

/* ---------------------------------------------------------------- elementwise */

/* dst = src (acc = 0) or dst += src (acc = 1); n elements of dt. dst == src allowed when acc = 0. */
vr_status vr_cuda_acc(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dst, const void *src, size_t n,
                      int acc);
/* out = a + b; n elements. out may alias a or b. */
vr_status vr_cuda_add_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *a,
                          const void *b, size_t n);
/* x *= s; n elements. */
vr_status vr_cuda_scale(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *x, size_t n, float s);
/* out = gelu(inp) (tanh approximation); out may alias inp. */
vr_status vr_cuda_gelu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp,
                           size_t n);
/* dinp (=|+=) dout * gelu'(inp). dinp may alias dout (acc = 0 or 1). */
vr_status vr_cuda_gelu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, const void *inp,
                           const void *dout, size_t n, int acc);
/* out = max(inp, 0); out may alias inp. */
vr_status vr_cuda_relu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp,
                           size_t n);
/* dinp (=|+=) dout * (x > 0), x the forward's input or output. dinp may alias dout. */
vr_status vr_cuda_relu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, const void *x,
                           const void *dout, size_t n, int acc);

/* ---------------------------------------------------------------- reductions */

/* out[0] (fp32, device) (=|+=) sum of x[i]^2 over n elements of dt. With acc = 1 over many tensors it
 * builds the global L2 norm^2 for clipping with no host round trip. Multi-block: fp32 atomics. */
vr_status vr_cuda_sumsq(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *out, const void *x, size_t n,
                        int acc);
/* out[0] (fp32, device) (=|+=) sum of x[i]. */
vr_status vr_cuda_sum(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *out, const void *x, size_t n,
                      int acc);
/* out[0] (dt) = mean of inp (n elements of dt). One block, deterministic. */
vr_status vr_cuda_mean_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp,
                           size_t n);
/* dinp (=|+=) dout[0] / n for every element. */
vr_status vr_cuda_mean_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, const void *dout,
                           size_t n, int acc);

/* Gradient clipping on the device, from the squared norm of gradients that carry a loss scale:
 * norm = sqrt(sumsq[0]) * unscale (unscale = 1 / loss scale; 1 without one), scale[0] = extra *
 * unscale * min(1, max_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_ after
 * GradScaler.unscale_); max_norm <= 0 means no clipping. Also writes norm[0] when norm is not NULL,
 * and skip[0] (int32) = 1 when the norm is inf or NaN (an fp16 overflow: the optimizers given skip
 * as dev_skip then leave everything as is), else 0, when skip is not NULL. scale/norm/sumsq are fp32
 * device scalars; pass scale to the optimizers as dev_grad_scale. */
vr_status vr_cuda_clip_scale(const vr_cuda_ctx *ctx, float *scale, float *norm, int32_t *skip, const float *sumsq,
                             float max_norm, float extra, float unscale);

/* ---------------------------------------------------------------- fp16 dynamic loss scaling */

/* found[0] (int32, device) = 1 if any of n elements of x is inf or NaN; else found[0] is left as is
 * (so one flag collects over many tensors: zero it first with vr_cuda_zero(.., VR_CUDA_F32, ..)). */
vr_status vr_cuda_check_finite(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int32_t *found,
                               const void *x, size_t n);
/* torch.cuda.amp.GradScaler's update, on the device: if found[0], scale *= backoff and tracker = 0;
 * else tracker += 1 and, when it reaches interval, scale *= growth and tracker = 0.
 * scale (fp32), tracker and found (int32) are device scalars. */
vr_status vr_cuda_loss_scale_update(const vr_cuda_ctx *ctx, float *scale, int32_t *tracker,
                                    const int32_t *found, float growth, float backoff, int interval);
/* inv[0] = extra / scale[0]: the gradient unscale factor to pass as dev_grad_scale. */
vr_status vr_cuda_reciprocal(const vr_cuda_ctx *ctx, float *inv, const float *scale, float extra);

/* ---------------------------------------------------------------- embedding */

/* out(B,T,C) = wte[tok[b,t]] + wpe[t]; tok (B,T) int32 in [0,V), wte (V,C), wpe (maxT,C) or NULL (no
 * position table: Llama), dt. */
vr_status vr_cuda_embedding_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out,
                                const int32_t *tok, const void *wte, const void *wpe, int B, int T,
                                int C);
/* dwte(V,C): rows of dout added by token; dwpe(maxT,C) rows 0..T-1 = sum over b of dout. Either may
 * be NULL. acc = 0 zero-fills all V rows of dwte (rows 0..T-1 of dwpe) first. Deterministic: the
 * rows of each token are sorted (stable radix sort) and summed in fp32 in a fixed order, a frequent
 * token's rows spread over a block (C <= 12288). dwte needs
 * scratch of vr_cuda_embedding_bwd_scratch_bytes(B,T,V) (the ctx workspace may serve). */
vr_status vr_cuda_embedding_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dwte, void *dwpe,
                                const void *dout, const int32_t *tok, int B, int T, int C, int V,
                                int acc, void *scratch, size_t scratch_bytes);
size_t vr_cuda_embedding_bwd_scratch_bytes(int B, int T, int V);

/* ---------------------------------------------------------------- matmul (Linear), cuBLASLt */

/* out(N,OC) = inp(N,C) w(OC,C)^T + bias(OC); bias may be NULL (bias epilogue). */
vr_status vr_cuda_matmul_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp,
                             const void *w, const void *bias, int N, int C, int OC);
/* Fused Linear + GELU: pre(N,OC) = inp w^T + bias (saved for backward), out(N,OC) = gelu(pre)
 * (cuBLASLt GELU_AUX_BIAS epilogue; falls back to a separate GELU kernel where cuBLASLt offers no
 * algorithm). out must not alias pre. Same result as matmul_fwd then gelu_fwd, to rounding. */
vr_status vr_cuda_matmul_gelu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, void *pre,
                                  const void *inp, const void *w, const void *bias, int N, int C,
                                  int OC);
/* dinp(N,C) = dout w; dw(OC,C) = dout^T inp; dbias(OC) = column sums of dout (fp32 sums). Any of
 * dinp, dw, dbias may be NULL. acc_dinp for dinp, acc_dparam for dw and dbias. dbias comes from a
 * column-sum kernel (cuBLASLt's BGRADB epilogue made the dw product slower than the sums cost). */
vr_status vr_cuda_matmul_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                             void *dbias, const void *dout, const void *inp, const void *w, int N,
                             int C, int OC, int acc_dinp, int acc_dparam);
/* The bias gradient of attention's fused q|k|v projection (dqkv(N,3C): q, k, v of C columns each, one head
 * of keys and values per head of queries, no rotary) from the attention's identities, where dbp(C) and
 * wp(C,C) are the bias gradient and the weight of the Linear that reads the attention's output y(N,C):
 *   q: the column sums of dqkv's first C columns (=|+= with acc);
 *   k: 0 (a row of softmax's gradient sums to 0: a key bias shifts every score of a query alike);
 *   v: dbp wp (a row of softmax sums to 1: the v columns of dqkv sum to those of dy = dout wp, whose
 *      column sums are dbp wp); written, not added: dbp holds the sum of every micro-batch so far.
 * One pass over a third of dqkv instead of all of it. */
vr_status vr_cuda_qkv_bias_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dbias, const void *dqkv,
                               const void *dbp, const void *wp, int N, int C, int acc);

/* The dinp product of a Linear whose input was gelu(pre), fused with the GELU backward (cuBLASLt's
 * DGELU epilogue): dpre(N,C) = (dout(N,OC) w(OC,C)) * gelu'(pre(N,C)), overwritten. dpre must not
 * alias pre. VR_ERR_UNSUPPORTED (no error set) where cuBLASLt has no algorithm for it or C is not a
 * multiple of 8: then matmul_bwd's dinp and gelu_bwd give the same result, to rounding. */
vr_status vr_cuda_matmul_dgelu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dpre, const void *dout,
                                   const void *w, const void *pre, int N, int C, int OC);

/* General product for the executor: D(m,n) (=|+=) alpha op(A) op(B), row-major, with leading
 * dimensions lda/ldb/ldd (elements); transa/transb 0 or 1 (op = transpose); all of dt. */
vr_status vr_cuda_gemm(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *D, const void *A,
                       const void *Bm, int m, int n, int k, int lda, int ldb, int ldd, int transa,
                       int transb, float alpha, int acc);

/* ---------------------------------------------------------------- layernorm */

/* out(N,C) = (inp - mean) rstd w + b; mean(N), rstd(N) fp32 saved for backward; eps 1e-5. */
vr_status vr_cuda_layernorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *mean,
                                float *rstd, const void *inp, const void *w, const void *b, int N,
                                int C);
/* dinp(N,C), dw(C), db(C) as the CPU op (any of them may be NULL: a frozen weight or bias).
 * dw/db need scratch of vr_cuda_layernorm_bwd_scratch_bytes(N,C) (fp32 partial sums over row
 * blocks, summed in a fixed order: deterministic; the ctx workspace may serve). */
vr_status vr_cuda_layernorm_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw,
                                void *db, const void *dout, const void *inp, const void *w,
                                const float *mean, const float *rstd, int N, int C, int acc_dinp,
                                int acc_dparam, void *scratch, size_t scratch_bytes);
size_t vr_cuda_layernorm_bwd_scratch_bytes(int N, int C);
/* The same, and dsum(C) (=|+= by acc_dsum) = the column sums of dinp as written: the bias gradient of the
 * Linear whose output's gradient dinp is (a residual stream), in the same pass. VR_ERR_UNSUPPORTED (no error
 * set, nothing queued) where that pass does not apply: dinp or both dw and db NULL, a row too wide or not
 * 16-byte aligned for the bandwidth kernel, or a GPU without the shared memory its sums take (192 KiB at 1024
 * 16-bit columns); dsum NULL: vr_cuda_layernorm_bwd. Same scratch. dsum may be on
 * the bytes of dout, inp, w, mean or rstd (it is written by a second kernel, after they are read), not on
 * dinp's, dw's, db's or the scratch's. */
vr_status vr_cuda_layernorm_bwd_sum(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw, void *db,
                                    void *dsum, const void *dout, const void *inp, const void *w, const float *mean,
                                    const float *rstd, int N, int C, int acc_dinp, int acc_dparam, int acc_dsum,
                                    void *scratch, size_t scratch_bytes);
/* vr_cuda_layernorm_bwd_sum from the forward's output out instead of its input (vr_step_config.norm_from_out):
 * x-hat = (out - b) / w (kernels/norm_math.h; b NULL: no bias), no mean; w is read for dw | db too. */
vr_status vr_cuda_layernorm_bwd_out(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw, void *db,
                                    void *dsum, const void *dout, const void *out, const void *w, const void *b,
                                    const float *rstd, int N, int C, int acc_dinp, int acc_dparam, int acc_dsum,
                                    void *scratch, size_t scratch_bytes);
/* res(N,C) = a + b (rounded to the dtype, as vr_cuda_add_fwd) and out, mean, rstd = layernorm(res) as
 * vr_cuda_layernorm_fwd, in one pass where the rows allow: the same bytes as the two calls. res may be
 * a or b; out, mean and rstd overlap none of res, a, b. */
vr_status vr_cuda_add_layernorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *res, void *out,
                                    float *mean, float *rstd, const void *a, const void *b,
                                    const void *w, const void *bias, int N, int C);
/* Benchmarks only: on (1) runs the generic layernorm kernels where the bandwidth ones would (the
 * speed before them); process-wide, not thread-safe. */
void vr__cuda_layernorm_generic(int on);

/* ---------------------------------------------------------------- attention */

/* Causal multi-head self-attention, flash-style (online softmax; no (T,T) matrix in memory).
 * qkv (B,T,3C) as the CPU op; out(B,T,C) in dt; lse(B,NH,T) fp32. bf16/fp16 with head size 64 run on
 * tensor cores (mma.sync m16n8k16, fp32 accumulators, 64x64 tiles); other cases (fp32, head sizes up
 * to 128) on a scalar fp32 kernel. */
vr_status vr_cuda_attention_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                const void *qkv, int B, int T, int C, int NH);
/* dqkv(B,T,3C) (=|+=) gradient w.r.t. qkv from dout(B,T,C), the forward's qkv, out and lse.
 * Needs scratch of vr_cuda_attention_scratch_bytes (delta = rowsum(dout*out), (B,NH,T) fp32; the ctx
 * workspace may serve). Given more scratch (a training step plans
 * vr_cuda_attention_scratch_fused_bytes), bf16/fp16 with head size 64 runs one fused FA2-order
 * kernel per key block, adding dq with fp32 atomics: dk/dv are run-to-run deterministic, dq is
 * not. With the minimum scratch, or VRAM_ATTN_V1=1|bwd, two kernels with no atomics (dk/dv per
 * key block, dq per query block): fully deterministic. */
vr_status vr_cuda_attention_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv,
                                const void *dout, const void *qkv, const void *out,
                                const float *lse, int B, int T, int C, int NH, int acc,
                                void *scratch, size_t scratch_bytes);
size_t vr_cuda_attention_scratch_bytes(int B, int T, int C, int NH);
/* Grouped-query attention, the general form of the two above (which are NKV = NH, hs = C/NH): qkv
 * (B,T,(NH+2NKV)hs) as the CPU op (q heads, then k heads, then v heads); query head h reads kv head
 * h / (NH/NKV); out (B,T,NH hs). dK and dV sum the query heads of their group in registers (no K/V
 * copies, no atomics on them). Scratch as above with C = NH hs. */
vr_status vr_cuda_attention_gqa_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                    const void *qkv, int B, int T, int NH, int NKV, int hs);
vr_status vr_cuda_attention_gqa_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv, const void *dout,
                                    const void *qkv, const void *out, const float *lse, int B, int T, int NH,
                                    int NKV, int hs, int acc, void *scratch, size_t scratch_bytes);
/* Scratch for the fused backward over all heads in one launch: delta (256-aligned) + the fp32 dQ of
 * every head (B*NH*T*64*4 bytes; GPT-2 124M B=16: 51 MB); head sizes other than 64: the minimum. */
size_t vr_cuda_attention_scratch_fused_bytes(int B, int T, int C, int NH);

/* ---------------------------------------------------------------- attention through cuDNN */
/* cuDNN's fused flash attention (attention_cudnn_cuda.c): the same causal attention as the gqa functions
 * above, for bf16/fp16 and head sizes that are a multiple of 8 up to 128, with the same layout and the same
 * saved lse (cuDNN's softmax "Stats": the natural log-sum-exp of the scaled scores, (B,NH,T) fp32), so
 * either path's forward feeds either path's backward. libcudnn.so.9 is loaded at run time (dlopen); where
 * it does not load, or takes no engine for the shape, these return VR_ERR_UNSUPPORTED saying why.
 * One forward and one backward execution plan per (device, dtype, B, T, NH, NKV, hs), built on first use
 * (heuristics mode A, the first config that finalizes) and kept for the process.
 * prepare: builds both plans on the ctx's device now (a GPU call: the executor makes it before the first
 * step) and returns the workspace each plan asks for beyond its tensors; fwd/bwd take that workspace from
 * ctx->workspace (VR_ERR_INVALID when it holds less), which they use without a matmul call in between.
 * bwd overwrites dqkv (no acc) and needs scratch of vr_cuda_attention_cudnn_scratch_bytes (the fp32 dQ
 * accumulator and rowsum(dout * out), kernels/scratch.h). Not deterministic in dQ (cuDNN's atomics). */
vr_status vr_cuda_attention_cudnn_prepare(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int B, int T, int NH, int NKV,
                                          int hs, size_t *fwd_ws, size_t *bwd_ws);
vr_status vr_cuda_attention_cudnn_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                      const void *qkv, int B, int T, int NH, int NKV, int hs);
vr_status vr_cuda_attention_cudnn_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv, const void *dout,
                                      const void *qkv, const void *out, const float *lse, int B, int T, int NH,
                                      int NKV, int hs, void *scratch, size_t scratch_bytes);
size_t vr_cuda_attention_cudnn_scratch_bytes(int B, int T, int NH, int NKV, int hs);
/* cudnnGetVersion() of the loaded library (e.g. 91900), 0 when none loads; then why says why. */
int vr_cuda_cudnn_version(void);
const char *vr_cuda_cudnn_why(void);
/* Frees every cached plan and the handles (tests; the plans are otherwise kept until the process ends). */
void vr_cuda_attention_cudnn_release(void);
/* Tests and benchmarks only: plans made from now on take the engine config after the first i that finalize, in
 * the heuristics' order (0: the first, as always). Release the plans before. */
void vr__cudnn_attention_pick(int i);

/* ---------------------------------------------------------------- Llama family (llama.cu) */

/* RMSNorm: out(N,C) = inp * rstd * w, rstd(N) fp32 = 1/sqrt(mean(inp^2) + eps); fp32 maths. */
vr_status vr_cuda_rmsnorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *rstd, const void *inp,
                              const void *w, int N, int C, float eps);
/* res(N,C) = a + b (rounded to the dtype, as vr_cuda_add_fwd) and out, rstd = rmsnorm(res) as vr_cuda_rmsnorm_fwd,
 * in one pass where the rows allow (a row in a warp's registers): the same bytes as the two calls. res may be a
 * or b; out and rstd overlap none of res, a, b. */
vr_status vr_cuda_add_rmsnorm_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *res, void *out, float *rstd,
                                  const void *a, const void *b, const void *w, int N, int C, float eps);
/* dinp (=|+= per acc_dinp) and dw (=|+= per acc_dw; either may be NULL) from dout, the forward's inp, w
 * and rstd. dw is summed in fp32 over row chunks in scratch (vr_cuda_rmsnorm_bwd_scratch_bytes), then
 * over the chunks in a fixed order: deterministic. */
vr_status vr_cuda_rmsnorm_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw, const void *dout,
                              const void *inp, const void *w, const float *rstd, int N, int C, int acc_dinp,
                              int acc_dw, void *scratch, size_t scratch_bytes);
/* The same from the forward's output out instead of its input (x-hat = out / w, kernels/norm_math.h). */
vr_status vr_cuda_rmsnorm_bwd_out(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, void *dw, const void *dout,
                                  const void *out, const void *w, const float *rstd, int N, int C, int acc_dinp,
                                  int acc_dw, void *scratch, size_t scratch_bytes);
size_t vr_cuda_rmsnorm_bwd_scratch_bytes(int N, int C);

/* Rotary positions (HF rotate-half) over a packed qkv (B,T,(NH+2NKV)hd): the NH q and NKV k heads of
 * position t rotated by t * inv_freq[i] (inv_freq: hd/2 values from vr_rope_inv_freq, theta and Llama 3
 * scaling), the v heads copied. sign +1: forward; -1: backward (out = dinp, in = dout). acc adds into
 * out. out may be inp. */
#define VR_CUDA_ROPE_MAX_HD 256
vr_status vr_cuda_rope(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp, int B, int T, int NH,
                       int NKV, int hd, const float *inv_freq, float sign, int acc);

/* SwiGLU: out(N,HI) = silu(gate) * up of inp(N,2HI) = [gate | up]; backward: dinp(N,2HI) (=|+=). */
vr_status vr_cuda_swiglu_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, const void *inp, int N, int HI);
vr_status vr_cuda_swiglu_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, const void *dout,
                             const void *inp, int N, int HI, int acc);

/* ---------------------------------------------------------------- fused classifier */

/* Tied-head classifier + softmax cross-entropy, forward and backward in one op (CPU contract).
 * wte has Vw >= V rows (rows V..Vw-1: vocabulary padding, as llm.c's 50304 for 50257): the products
 * run over all Vw (one fast cuBLASLt product where an odd V is slow), the softmax over the V real
 * ones; the padded rows' dwte is 0 and they never change a loss or dx.
 * Rows in chunks of R = vr_cuda_classifier_chunk_rows(scratch_bytes, Vw, dt): logits(R,Vw) =
 * x wte^T by cuBLASLt into scratch (dt, rows padded to a multiple of 64 elements), one kernel
 * computes softmax, the fp32 loss per row and (training) dlogits = (p - onehot) dloss_scale in place,
 * then dx (=|+=) dlogits wte and dwte (=|+=) dlogits^T x by cuBLASLt. losses(N) fp32; x, wte, dx,
 * dwte of dt; targets int32 (-1: loss 0, no gradient, dx row 0 when acc_dx = 0). dx and dwte may be
 * NULL (evaluation). The scratch must hold at least one row. */
vr_status vr_cuda_classifier(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *losses, void *dx,
                             void *dwte, const void *x, const void *wte, const int32_t *targets,
                             int N, int C, int V, int Vw, float dloss_scale, void *scratch,
                             size_t scratch_bytes, int acc_dx, int acc_dwte);
/* Recommended scratch: min(N, 1024) rows of Vw padded to 64 (GPT-2, dt bf16: 103 MB at 1024 rows). */
size_t vr_cuda_classifier_scratch_bytes(int N, int Vw, vr_cuda_dtype dt);
/* Rows per chunk that scratch_bytes holds for wte of Vw rows (0 if not even one). */
int vr_cuda_classifier_chunk_rows(size_t scratch_bytes, int Vw, vr_cuda_dtype dt);

/* ---------------------------------------------------------------- softmax cross-entropy (small V) */

/* probs(N,V) (dt) = softmax(logits(N,V)); losses(N) fp32 (0 where target -1). */
vr_status vr_cuda_softmax_xent_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, float *losses,
                                   void *probs, const void *logits, const int32_t *targets, int N,
                                   int V);
/* dlogits(N,V) (=|+=) (probs - onehot) g_i, g_i = dloss_scale * (dlosses ? dlosses[i] : 1) (dlosses
 * fp32); rows with target -1 get 0. */
vr_status vr_cuda_softmax_xent_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dlogits,
                                   const float *dlosses, float dloss_scale, const void *probs,
                                   const int32_t *targets, int N, int V, int acc);

/* ---------------------------------------------------------------- optimizers (torch.optim semantics) */
/* One fused pass over a flat buffer of n parameters. param is of dt (pdt); when master (fp32) is not
 * NULL the update is computed on master and param receives its rounding (mixed precision), else
 * param must be fp32 and is updated in place. grad is of gdt. m, v, mom are fp32. The gradient used is
 * g = grad * grad_scale * (dev_grad_scale ? dev_grad_scale[0] : 1): fold clipping, 1/accumulation and
 * loss-scale unscaling into the update. When dev_skip is not NULL and dev_skip[0] != 0 (fp16
 * overflow found by vr_cuda_check_finite) nothing is updated. step is 1-based; bias corrections are
 * computed on the host in double. Formulas: see kernels_cpu.h. */
vr_status vr_cuda_sgd(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                      vr_cuda_dtype gdt, const void *grad, size_t n, float lr, float weight_decay,
                      float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip);
vr_status vr_cuda_sgd_momentum(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param,
                               float *master, vr_cuda_dtype gdt, const void *grad, float *mom,
                               size_t n, float lr, float momentum, float dampening,
                               float weight_decay, int nesterov, int step, float grad_scale,
                               const float *dev_grad_scale, const int32_t *dev_skip);
vr_status vr_cuda_adam(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                       vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, int step,
                       float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip);
vr_status vr_cuda_adamw(const vr_cuda_ctx *ctx, vr_cuda_dtype pdt, void *param, float *master,
                        vr_cuda_dtype gdt, const void *grad, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int step,
                        float grad_scale, const float *dev_grad_scale, const int32_t *dev_skip);


/* ---------------------------------------------------------------- multi-tensor apply */
/* The clipping norm and the optimizer update over many tensors in one launch each, from a device
 * table of vr_cuda_mt_tensor (built on the host, uploaded by the caller to memory it owns, e.g. the
 * step's workspace). Each tensor is cut into chunks of VR_CUDA_MT_CHUNK elements; chunk0 is the
 * index of its first chunk (vr_cuda_mt_layout fills it), so one block finds its tensor by a binary
 * search. Per element the update is the same code as vr_cuda_sgd/.../vr_cuda_adamw (bit-identical
 * results given the same gradient multiplier); a tensor's weight decay is the call's weight_decay
 * when its decay flag is set, else 0. */
#define VR_CUDA_MT_CHUNK 4096
/* Blocks (partial sums) vr_cuda_mt_sumsq uses at most: the partials buffer holds this many floats. */
#define VR_CUDA_MT_MAX_PARTIALS 2048

typedef struct vr_cuda_mt_tensor {
    void *param;       /* pdt: updated (rounded from master when there is one) */
    float *master;     /* fp32 master, NULL: param is fp32 and updated in place, or (bf16 param, the
                        * compact-state kernels only) rounded stochastically */
    const void *grad;  /* gdt (sumsq: the tensor whose squares are summed, of dt) */
    float *m, *v;      /* optimizer state (momentum | Adam m, v); NULL where the optimizer has none; of the
                        * format below (f32; bf16 bits; u8 codes) */
    int64_t n;         /* elements (> 0) */
    int64_t chunk0;    /* first chunk of this tensor (vr_cuda_mt_layout) */
    int32_t decay;     /* 1: weight decay applies to this tensor */
    int32_t fmt;       /* VR_CUDA_STATE_*: the state's format (the compact-state kernels) */
    int32_t split;     /* 1: master holds the 16 low bits of a split master (uint16; param bf16 is the high half:
                        * kernels/optim_math.h), not fp32; the multi-tensor and compact-state kernels only */
    float *absmax_m, *absmax_v; /* VR_CUDA_STATE_Q8: one f32 per block of VR_Q8_BLOCK */
    uint64_t sindex;   /* the index of m[0] in the stream of random bits of rounding (the executor's choice) */
    uint64_t windex;   /* the element index of param[0] in the parameter buffer (same) */
} vr_cuda_mt_tensor;

/* Optimizer-state formats of the compact-state kernels (vram/optim_state.h, kernels/optim_math.h). */
enum { VR_CUDA_STATE_F32 = 0, VR_CUDA_STATE_BF16 = 1, VR_CUDA_STATE_Q8 = 2 };

/* Host: fills chunk0 of t[0..n) (every t[i].n > 0) and returns the total number of chunks. */
int64_t vr_cuda_mt_layout(vr_cuda_mt_tensor *t, int n);

/* normsq[0] (fp32, device) = sum over the table's tensors (grad, n; dt) of x^2, deterministic: a fixed
 * grid writes one partial sum per block into partials (VR_CUDA_MT_MAX_PARTIALS floats, device), one
 * more block adds them in a fixed order. When scale is not NULL it also does vr_cuda_clip_scale
 * (scale, norm, skip, max_norm, extra, unscale) on the result. Two launches. */
vr_status vr_cuda_mt_sumsq(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, const vr_cuda_mt_tensor *tab, int n_tensors,
                           int64_t n_chunks, float *partials, float *normsq, float *scale, float *norm,
                           int32_t *skip, float max_norm, float extra, float unscale);

/* The optimizer update over the table's tensors (param, master, grad, m, v, n, decay) in one launch:
 * kind 0 sgd, 1 sgd with momentum, 2 adam, 3 adamw; other arguments as the single-tensor functions
 * above (ctx->opt_scalars honoured the same way). */
enum { VR_CUDA_MT_SGD = 0, VR_CUDA_MT_MOMENTUM = 1, VR_CUDA_MT_ADAM = 2, VR_CUDA_MT_ADAMW = 3 };
vr_status vr_cuda_mt_optim(const vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                           const vr_cuda_mt_tensor *tab, int n_tensors, int64_t n_chunks, float lr, float beta1,
                           float beta2, float eps, float momentum, float dampening, int nesterov,
                           float weight_decay, int step, float grad_scale, const float *dev_grad_scale,
                           const int32_t *dev_skip);

/* ---------------------------------------------------------------- compact optimizer state */
/* The update of vr_cuda_mt_optim (kind, scalars, device scale and skip as there) for tables whose entries
 * may hold bf16 or 8-bit block-wise state (fmt) and bf16 params without a master (stochastic rounding):
 * the arithmetic of the fp32 kernels per element; 8-bit: dequantize in registers, update, the block's new
 * absmax, requantize to the nearest entry of the dynamic map (vr_qmap_dynamic); an element whose scaled
 * gradient is inf/NaN keeps its state and parameter. The random bits of rounding come from (step,
 * sindex/windex + i). One launch, chunks as vr_cuda_mt_layout. */
vr_status vr_cuda_mt_optim_state(const vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                                 const vr_cuda_mt_tensor *tab, int n_tensors, int64_t n_chunks, float lr, float beta1,
                                 float beta2, float eps, float momentum, float dampening, int nesterov,
                                 float weight_decay, int step, float grad_scale, const float *dev_grad_scale,
                                 const int32_t *dev_skip);
/* The same for one tensor t (host memory; t->n elements, its decay flag honoured): no table upload. */
vr_status vr_cuda_optim_state(const vr_cuda_ctx *ctx, int kind, vr_cuda_dtype pdt, vr_cuda_dtype gdt,
                              const vr_cuda_mt_tensor *t, float lr, float beta1, float beta2, float eps, float momentum,
                              float dampening, int nesterov, float weight_decay, int step, float grad_scale,
                              const float *dev_grad_scale, const int32_t *dev_skip);

#ifdef __cplusplus
}
#endif
#endif
