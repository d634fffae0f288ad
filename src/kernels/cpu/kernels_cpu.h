/* vram — CPU kernels (internal contract between the executor and src/kernels/cpu).
 *
 * Plain functions over fp32 arrays in row-major order, llm.c style: each
 * forward beside its backward, shapes in the comments, e.g. out is (B,T,C).
 * Threaded with OpenMP; matrix products through OpenBLAS (cblas_sgemm, called
 * only outside OpenMP regions). No function allocates memory: the few that
 * need a workspace take it from the caller and say how large it must be
 * (the planner counts it as role `temp`).
 *
 * Conventions
 * - Sizes are int (B, T, C, NH, V, N = rows, OC = output channels) or size_t
 *   for flat element counts n; all index arithmetic is done in size_t.
 * - Backward kernels take an `acc` flag per output group: acc = 0 overwrites
 *   the output, acc = 1 adds into it (so autodiff needs no zero-fill and no
 *   extra add nodes). Parameter-gradient outputs have their own flag
 *   (acc_dparam). A gradient output passed as NULL is not computed.
 * - Outputs never alias inputs unless a function says it may.
 * - int32 token / target ids; a target of -1 means "ignore this row".
 *
 * Threads: OpenMP (OMP_NUM_THREADS) for the kernels' own loops, OpenBLAS's pthreads
 * (OPENBLAS_NUM_THREADS) inside sgemm, used in turn. Both pools spin after their work by default,
 * so where their calls alternate they fight for the cores: on 16 cores the classifier (128-row
 * chunks) took 2.0 s by default and 1.4 s with OPENBLAS_THREAD_TIMEOUT=4 GOMP_SPINCOUNT=10000
 * (or OMP_WAIT_POLICY=passive). Both libraries read these when they load, so a process that runs
 * these kernels should have them in its environment from the start (bench/kcpu/RESULTS.md).
 */
#ifndef VRAM_KERNELS_CPU_H
#define VRAM_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- elementwise */

/* dst = src (acc = 0) or dst += src (acc = 1); n floats. dst == src allowed when acc = 0. */
void vr_cpu_acc(float *dst, const float *src, size_t n, int acc);

/* out = a + b; n floats (residual connection). out may alias a or b.
 * Backward: da = dout, db = dout, i.e. vr_cpu_acc(da, dout, n, acc) twice. */
void vr_cpu_add_fwd(float *out, const float *a, const float *b, size_t n);

/* x *= s; n floats. */
void vr_cpu_scale(float *x, size_t n, float s);

/* out = gelu(inp), tanh approximation as in GPT-2:
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); n floats. out may alias inp. */
void vr_cpu_gelu_fwd(float *out, const float *inp, size_t n);
/* dinp (=|+=) dout * gelu'(inp); n floats. Needs the forward's input. */
void vr_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n, int acc);

/* out = max(inp, 0); n floats. out may alias inp. */
void vr_cpu_relu_fwd(float *out, const float *inp, size_t n);
/* dinp (=|+=) dout * (x > 0), where x is the forward's input or output (same sign test). */
void vr_cpu_relu_bwd(float *dinp, const float *x, const float *dout, size_t n, int acc);

/* ---------------------------------------------------------------- reductions */

/* Sum of x[i]^2 over n floats, accumulated in double (global L2 norm for clipping). */
double vr_cpu_sumsq(const float *x, size_t n);

/* Calls fn(ctx, off, len) for the chunks [off, off + len) of `chunk` elements covering [0, n), spread over
 * the threads (a kernel called inside with fewer than VR_CPU_PAR_MIN elements stays on its thread). */
void vr_cpu_chunks(size_t n, size_t chunk, void (*fn)(void *ctx, size_t off, size_t len), void *ctx);

/* Sum of x[i] over n floats, accumulated in double. */
double vr_cpu_sum(const float *x, size_t n);

/* out[0] = mean of inp (n floats), computed in double. */
void vr_cpu_mean_fwd(float *out, const float *inp, size_t n);
/* dinp (=|+=) dout[0] / n for every element. */
void vr_cpu_mean_bwd(float *dinp, const float *dout, size_t n, int acc);

/* ---------------------------------------------------------------- embedding */

/* out(B,T,C) = wte[tok[b,t]] + wpe[t]. tok is (B,T) int32 in [0,V); wte is (V,C); wpe is (maxT,C), T <= maxT,
 * or NULL: no position table. */
void vr_cpu_embedding_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                          int B, int T, int C);
/* dwte(V,C) scatter-add of dout rows by token, dwpe(maxT,C) rows 0..T-1 = sum over b of dout.
 * Either may be NULL (frozen). acc = 0 zero-fills all V rows of dwte (and rows 0..T-1 of dwpe) first. */
void vr_cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                          int B, int T, int C, int V, int acc);

/* ---------------------------------------------------------------- matmul (Linear) */

/* out(N,OC) = inp(N,C) w(OC,C)^T + bias(OC); bias may be NULL. PyTorch nn.Linear layout. */
void vr_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC);
/* dinp(N,C) = dout(N,OC) w(OC,C); dw(OC,C) = dout^T inp; dbias(OC) = column sums of dout.
 * Any of dinp, dw, dbias may be NULL. acc_dinp for dinp, acc_dparam for dw and dbias. */
void vr_cpu_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int N, int C, int OC,
                       int acc_dinp, int acc_dparam);

/* ---------------------------------------------------------------- layernorm */

/* out(N,C) = (inp - mean) * rstd * w(C) + b(C); saves mean(N) and rstd(N) for backward. eps = 1e-5
 * (biased variance, as torch.nn.LayerNorm). */
void vr_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
/* dinp(N,C), dw(C), db(C) from dout(N,C), the forward's inp, w, mean, rstd. Any of dinp, dw, db may
 * be NULL. acc_dinp for dinp, acc_dparam for dw and db. */
void vr_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C,
                          int acc_dinp, int acc_dparam);
/* The same from the forward's output (kernels/norm_math.h: xhat = (out - b) / w), without its input or mean;
 * b NULL: no bias. */
void vr_cpu_layernorm_bwd_out(float *dinp, float *dw, float *db, const float *dout, const float *out,
                              const float *w, const float *b, const float *rstd, int N, int C, int acc_dinp,
                              int acc_dparam);

/* ---------------------------------------------------------------- attention */

/* Causal multi-head self-attention, flash-style.
 * qkv is (B,T,3C): q at channels [0,C), k at [C,2C), v at [2C,3C); head h uses channels
 * [h*hs, (h+1)*hs) of each, hs = C/NH (C % NH == 0). Scale 1/sqrt(hs).
 * out(B,T,C) (head h at channels h*hs); lse(B,NH,T) = per query row log-sum-exp of the scaled
 * scores, the only thing besides out kept for backward. No (T,T) matrix is ever stored: tiles of
 * 32 queries x 64 keys with an online softmax, on each thread's stack (~50 KiB forward, ~150 KiB
 * backward, for head sizes up to 128; larger heads go row by row). Parallel over B*NH*query tiles. */
void vr_cpu_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
/* dqkv(B,T,3C) (=|+=) gradient w.r.t. qkv, recomputing scores from q, k and lse;
 * delta_i = sum_d dout_i * out_i. Needs the forward's qkv, out and lse. Parallel over B*NH. */
void vr_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int NH, int acc);
/* Grouped-query attention (GQA), the general form of the two above (which are NKV = NH, hs = C/NH,
 * bit for bit): qkv is (B,T,(NH+2*NKV)*hs), q heads then NKV k heads then NKV v heads, hs channels each
 * (hs need not be C/NH); query head h reads kv head h / (NH/NKV) in place (no K/V copies); NKV
 * divides NH. out is (B,T,NH*hs), lse (B,NH,T). */
void vr_cpu_attention_gqa_fwd(float *out, float *lse, const float *qkv, int B, int T, int NH,
                              int NKV, int hs);
/* dqkv(B,T,(NH+2*NKV)*hs) (=|+=); the dK, dV of a shared kv head sum over its query heads. Parallel
 * over B*NKV. */
void vr_cpu_attention_gqa_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int NH, int NKV, int hs, int acc);
/* Workspace bytes the two attention kernels need from the caller: 0 (only the fixed stack tiles). */
size_t vr_cpu_attention_scratch_bytes(int B, int T, int C, int NH);

/* ---------------------------------------------------------------- Llama family: rmsnorm, rope, swiglu */

/* out(N,C) = inp * rstd * w(C) with rstd(N) = 1 / sqrt(mean_c(inp^2) + eps) (HF LlamaRMSNorm); saves
 * rstd for backward. out may alias inp. */
void vr_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps);
/* dinp(N,C) (=|+=), dw(C) (=|+=) from dout(N,C), the forward's inp, w and rstd. Either output may be NULL. */
void vr_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        const float *rstd, int N, int C, int acc_dinp, int acc_dparam);
/* The same from the forward's output (kernels/norm_math.h: xhat = out / w), without its input. */
void vr_cpu_rmsnorm_bwd_out(float *dinp, float *dw, const float *dout, const float *out, const float *w,
                            const float *rstd, int N, int C, int acc_dinp, int acc_dparam);

/* Rotary position parameters: theta and the optional Llama 3 frequency scaling (scaling = 1). */
typedef struct {
    double theta;      /* rope_theta, e.g. 500000 */
    int scaling;       /* 0: none, 1: llama3 */
    double factor;     /* llama3: factor (e.g. 32) */
    double low_freq;   /* llama3: low_freq_factor (e.g. 1) */
    double high_freq;  /* llama3: high_freq_factor (e.g. 4) */
    double orig_max_t; /* llama3: original_max_position_embeddings (e.g. 8192) */
} vr_rope_params;

/* The hd/2 inverse frequencies of a head of hd (even) channels: 1 / theta^(2i/hd), then HF's Llama 3
 * scaling when p->scaling == 1. The one definition shared by every rope kernel (CPU and CUDA). */
void vr_rope_inv_freq(float *inv_freq, int hd, const vr_rope_params *p);

/* Rotary embedding of the q and k heads of a packed qkv(B,T,(NH+2*NKV)*hd) (q heads, then k heads,
 * then v heads, hd channels each) at positions t = 0..T-1, rotate-half convention (HF Llama):
 * for i < hd/2, a = t * inv_freq[i]: y[i] = x[i] cos a - x[i+hd/2] sin a, y[i+hd/2] = x[i+hd/2] cos a
 * + x[i] sin a. v heads are copied. out may alias inp. hd even, hd <= VR_ROPE_MAX_HD. */
#define VR_ROPE_MAX_HD 1024
void vr_cpu_rope_fwd(float *out, const float *inp, int B, int T, int NH, int NKV, int hd,
                     const vr_rope_params *p);
/* dinp (=|+=) rotation of dout by -angle on the q and k heads, dout itself on the v heads.
 * dinp may alias dout when acc = 0. */
void vr_cpu_rope_bwd(float *dinp, const float *dout, int B, int T, int NH, int NKV, int hd,
                     const vr_rope_params *p, int acc);

/* out(N,HI) = silu(gate) * up where inp(N,2HI) = [gate | up] per row, silu(g) = g / (1 + e^-g).
 * HI is the intermediate size (not I: complex.h's macro). */
void vr_cpu_swiglu_fwd(float *out, const float *inp, int N, int HI);
/* dinp(N,2HI) (=|+=) [dout * up * silu'(gate) | dout * silu(gate)] from dout(N,HI) and the
 * forward's inp. */
void vr_cpu_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int HI, int acc);

/* ---------------------------------------------------------------- fused classifier */

/* Tied-head classifier + softmax cross-entropy, forward and backward in one op.
 * For rows in chunks of R = min(N, scratch_bytes / (V*4)) rows:
 *   logits(R,V) = x(R,C) wte(V,C)^T;  p = softmax(logits);  losses[i] = -log p[i, targets[i]];
 *   if dx or dwte: dlogits = (p - onehot(targets)) * dloss_scale, then at once
 *     dx(R,C) (=|+=) dlogits wte   and   dwte(V,C) (=|+=) dlogits^T x.
 * So the full (N,V) logits never exist. targets[i] == -1: losses[i] = 0 and row i gets no gradient
 * (dx row set to 0 when acc_dx = 0). dloss_scale is dL/dlosses[i] (e.g. 1/(B*T) for a mean).
 * scratch must hold at least V floats (one row); more rows per chunk means fewer, larger sgemms. */
void vr_cpu_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, float dloss_scale,
                       float *scratch, size_t scratch_bytes, int acc_dx, int acc_dwte);
/* Recommended workspace for vr_cpu_classifier: min(N, 128) rows of V floats (25.7 MB for GPT-2's
 * V = 50257). Larger chunks run faster (512 rows: ~25% less time on 16 cores), smaller ones down to
 * one row still work: the planner picks. */
size_t vr_cpu_classifier_scratch_bytes(int N, int V);

/* ---------------------------------------------------------------- softmax cross-entropy (small V) */

/* probs(N,V) = softmax(logits(N,V)) per row; losses(N) = -log probs[i, targets[i]] (0 where target -1). */
void vr_cpu_softmax_xent_fwd(float *losses, float *probs, const float *logits,
                             const int32_t *targets, int N, int V);
/* dlogits(N,V) (=|+=) (probs - onehot) * g_i with g_i = dloss_scale * (dlosses ? dlosses[i] : 1);
 * rows with target -1 get 0. */
void vr_cpu_softmax_xent_bwd(float *dlogits, const float *dlosses, float dloss_scale,
                             const float *probs, const int32_t *targets, int N, int V, int acc);

/* ---------------------------------------------------------------- optimizers (torch.optim semantics) */
/* All over flat buffers of n floats, fused into one threaded pass. The gradient used is
 * g = grad * grad_scale (fold clipping and 1/accumulation into the update). step is 1-based. */

/* SGD: g += wd * p; p -= lr * g. */
void vr_cpu_sgd(float *param, const float *grad, size_t n, float lr, float weight_decay,
                float grad_scale);
/* SGD with momentum (torch.optim.SGD): g += wd * p; buf = g at step 1, else
 * buf = momentum * buf + (1 - dampening) * g; g = nesterov ? g + momentum * buf : buf; p -= lr * g. */
void vr_cpu_sgd_momentum(float *param, const float *grad, float *mom, size_t n, float lr,
                         float momentum, float dampening, float weight_decay, int nesterov,
                         int step, float grad_scale);
/* Adam (torch.optim.Adam, L2 decay): g += wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
void vr_cpu_adam(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale);
/* AdamW (torch.optim.AdamW, decoupled decay): p *= 1 - lr * wd; then Adam's update without L2. */
void vr_cpu_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale);

/* ---------------------------------------------------------------- compact optimizer state (optim_state.c) */

/* The 256 sorted values of the dynamic quantization map (bitsandbytes' create_dynamic_map with 7
 * exponent bits): signed for Adam's m and momentum, unsigned for Adam's v. */
void vr_qmap_dynamic(int is_signed, float out[256]);
/* The same maps, computed once per process (the kernels' copy). */
const float *vr_qmap(int is_signed);

/* Adam (decoupled = 0) / AdamW (1) as vr_cpu_adam(w) with 8-bit block-wise state: m, v are u8 codes (n),
 * absmax_m, absmax_v one float per block of VR_Q8_BLOCK (vram/optim_state.h). An element whose scaled
 * gradient is inf/NaN keeps its state and parameter. Zeroed codes and absmax are a zero state. */
void vr_cpu_adam_q8(float *param, const float *grad, uint8_t *m, uint8_t *v, float *absmax_m, float *absmax_v,
                    size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                    float grad_scale, int decoupled);
/* The same with bf16 m, v (bits), stochastically rounded with the random bits of (seed, index0 + i). */
void vr_cpu_adam_bf16s(float *param, const float *grad, uint16_t *m, uint16_t *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int step, float grad_scale, int decoupled,
                       uint64_t seed, uint64_t index0);
/* vr_cpu_sgd_momentum with 8-bit block-wise momentum (signed map) / bf16 momentum. */
void vr_cpu_sgd_momentum_q8(float *param, const float *grad, uint8_t *mom, float *absmax, size_t n, float lr,
                            float momentum, float dampening, float weight_decay, int nesterov, int step,
                            float grad_scale);
void vr_cpu_sgd_momentum_bf16s(float *param, const float *grad, uint16_t *mom, size_t n, float lr, float momentum,
                               float dampening, float weight_decay, int nesterov, int step, float grad_scale,
                               uint64_t seed, uint64_t index0);

#ifdef __cplusplus
}
#endif
#endif
