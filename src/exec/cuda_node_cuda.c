/* vram exec — the CUDA backend: one graph node -> one call of src/kernels/cuda.
 *
 * Per executor a vr_cuda_ctx (the legacy default stream, so that the device
 * layer's copies and memsets order with the kernels; the cuBLASLt handle) whose
 * cuBLASLt workspace is the graph's "workspace" tensor, which the plan counts
 * as temp: nothing is allocated outside the plan. The same tensor serves the
 * backward kernels that take scratch (attention's delta, LayerNorm's partial
 * sums, the embedding's sort): all work is ordered on one stream and none of
 * them makes a matmul call while it uses it. Its last 256 bytes hold the two
 * fp32 scalars of device-side clipping (factor, norm): the last sumsq node
 * turns the squared norm into the factor (vr_cuda_clip_scale) and every
 * optimizer node reads it there, so a step never waits on the host for it.
 *
 * Dtypes come from the graph: activations, params and grads of the node's
 * dtype (fp32 or bf16), statistics fp32, and under mixed precision the
 * optimizer updates the fp32 master and rounds it into the params.
 *
 * As on the CPU, the embedding backward zeroes rows T..maxT-1 of dwpe and the
 * classifier rows V..Vp-1 of dwte when they overwrite. */
#include <stdlib.h>
#include <string.h>

#include "exec/exec_internal.h"
#include "kernels/cuda/kernels_cuda.h"

#define VR_CLIP_BYTES 256 /* tail of the workspace: clip factor, norm (fp32) */

typedef struct cuda_state {
    vr_cuda_ctx ctx;
    void *ws;          /* the whole workspace tensor (NULL: none) */
    size_t ws_bytes;   /* usable by kernels (less the clip tail) */
    float *clip;       /* [0] factor, [1] norm, [4..7] the step's optimizer scalars (graph mode);
                        * NULL without a workspace */
    float max_norm;
    void *stream;      /* graph mode: a stream of its own (ctx.stream), else NULL (legacy stream) */
    void *graph;       /* graph mode: the captured step (cudaGraphExec_t), NULL until captured */
} cuda_state;

static const vr_tensor *T_(const vr_exec_args *a, int id) { return &a->g->tensors[id]; }
static int64_t numel(const vr_exec_args *a, int id) { return vr_tensor_numel(T_(a, id)); }
static int lastdim(const vr_exec_args *a, int id) { return (int)T_(a, id)->shape[T_(a, id)->ndim - 1]; }
static int rows(const vr_exec_args *a, int id) { return (int)(numel(a, id) / lastdim(a, id)); }

static vr_status dtype_of(const vr_exec_args *a, int id, vr_cuda_dtype *out)
{
    switch (T_(a, id)->dtype) {
    case VR_F32: *out = VR_CUDA_F32; return VR_OK;
    case VR_BF16: *out = VR_CUDA_BF16; return VR_OK;
    case VR_F16: *out = VR_CUDA_F16; return VR_OK;
    default: break;
    }
    return vr_error(VR_ERR_UNSUPPORTED, "cuda: tensor %s has dtype %s, not a float", T_(a, id)->name,
                    vr_dtype_name(T_(a, id)->dtype));
}

#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))
#define I32(p) ((const int32_t *)(p))

/* The workspace as scratch of `need` bytes for op. */
static vr_status ws_scratch(const cuda_state *s, size_t need, const char *op, void **out)
{
    if (need && (!s->ws || s->ws_bytes < need))
        return vr_error(VR_ERR_INVALID, "cuda: %s needs %zu bytes of scratch, the step's workspace holds %zu (build "
                        "the graph with a larger workspace_bytes)", op, need, s->ws ? s->ws_bytes : (size_t)0);
    *out = s->ws;
    return VR_OK;
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
    switch (n->op) {
    case VR_OP_SGD:
        return vr_cuda_sgd(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], len, h->lr, a->weight_decay, a->grad_scale,
                           dev_scale, NULL);
    case VR_OP_SGD_MOMENTUM:
        return vr_cuda_sgd_momentum(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], F(a->out[2]), len, h->lr,
                                    h->momentum, h->dampening, a->weight_decay, h->nesterov, step, a->grad_scale,
                                    dev_scale, NULL);
    case VR_OP_ADAM:
        return vr_cuda_adam(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], F(a->out[2]), F(a->out[3]), len, h->lr,
                            h->beta1, h->beta2, h->eps, a->weight_decay, step, a->grad_scale, dev_scale, NULL);
    default:
        return vr_cuda_adamw(c, pdt, a->out[0], F(a->out[1]), gdt, a->in[0], F(a->out[2]), F(a->out[3]), len, h->lr,
                             h->beta1, h->beta2, h->eps, a->weight_decay, step, a->grad_scale, dev_scale, NULL);
    }
}

static vr_status embedding_bwd(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    const vr_tensor *tok = T_(a, n->in[1]);
    int B = (int)tok->shape[0], T = (int)tok->shape[1], C = lastdim(a, n->in[0]);
    void *dwte = a->out[0], *dwpe = a->out[1];
    int V = dwte ? rows(a, n->out[0]) : 1; /* the kernel wants V >= 1 even without dwte */
    void *scr = NULL;
    size_t need = dwte ? vr_cuda_embedding_bwd_scratch_bytes(B, T, V) : 0;
    vr_status st = ws_scratch(s, need, "embedding_bwd", &scr);
    if (st)
        return st;
    size_t sb = dwte ? s->ws_bytes : 0;
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
    int N = (int)numel(a, n->in[2]), C = lastdim(a, n->in[0]), V = n->vocab;
    vr_status st = vr_cuda_classifier(&s->ctx, dt, F(a->out[0]), a->out[1], a->out[2], a->in[0], a->in[1],
                                      I32(a->in[2]), N, C, V, n->loss_scale, a->scratch, (size_t)a->scratch_bytes,
                                      a->acc[1], a->acc[2]);
    if (!st && a->out[2] && !a->acc[2]) { /* padded vocabulary rows: never read, gradient 0 */
        int Vp = rows(a, n->out[2]);
        if (Vp > V)
            st = vr_cuda_zero(&s->ctx, dt, (char *)a->out[2] + (size_t)V * C * vr_cuda_dtype_size(dt),
                              (size_t)(Vp - V) * C);
    }
    return st;
}

static vr_status layernorm_bwd(const vr_exec_args *a, const cuda_state *s, vr_cuda_dtype dt)
{
    const vr_node *n = a->node;
    int N = rows(a, n->in[0]), C = lastdim(a, n->in[0]);
    void *dw = a->out[1], *db = a->out[2];
    if (!dw != !db) { /* one of w, b frozen: the node's scratch takes the gradient nobody keeps */
        if (!a->scratch)
            return vr_error(VR_ERR_INVALID, "cuda: layernorm_bwd with one parameter gradient and no scratch");
        if (!dw)
            dw = a->scratch;
        else
            db = a->scratch;
    }
    void *scr = NULL;
    vr_status st = ws_scratch(s, dw ? vr_cuda_layernorm_bwd_scratch_bytes(N, C) : 0, "layernorm_bwd", &scr);
    if (st)
        return st;
    return vr_cuda_layernorm_bwd(&s->ctx, dt, a->out[0], dw, db, a->in[0], a->in[1], a->in[2], CF(a->in[3]),
                                 CF(a->in[4]), N, C, a->acc[0], a->acc[1], scr, dw ? s->ws_bytes : 0);
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
        st = vr_cuda_clip_scale(&s->ctx, &s->clip[0], &s->clip[1], CF(a->out[0]), s->max_norm, 1.0f);
    }
    return st;
}

static vr_status cuda_run_node(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    const cuda_state *s = a->state;
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
    case VR_OP_RESHAPE: break;
    default: st = dtype_of(a, n->in[0], &dt); break;
    }
    if (st)
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
        int C = lastdim(a, n->in[1] >= 0 ? n->in[1] : n->in[2]);
        return vr_cuda_matmul_bwd(c, dt, a->out[0], a->out[1], a->out[2], a->in[0], a->in[1], a->in[2],
                                  rows(a, n->in[0]), C, lastdim(a, n->in[0]), a->acc[0], a->acc[1]);
    }
    case VR_OP_ATTENTION: {
        const vr_tensor *q = T_(a, n->in[0]);
        return vr_cuda_attention_fwd(c, dt, a->out[0], F(a->out[1]), a->in[0], (int)q->shape[0], (int)q->shape[1],
                                     (int)(q->shape[2] / 3), n->nh);
    }
    case VR_OP_ATTENTION_BWD: {
        const vr_tensor *q = T_(a, n->in[1]);
        int B = (int)q->shape[0], T = (int)q->shape[1], C = (int)(q->shape[2] / 3);
        void *scr = NULL;
        if ((st = ws_scratch(s, vr_cuda_attention_scratch_bytes(B, T, C, n->nh), "attention_bwd", &scr)))
            return st;
        return vr_cuda_attention_bwd(c, dt, a->out[0], a->in[0], a->in[1], a->in[2], CF(a->in[3]), B, T, C, n->nh,
                                     a->acc[0], scr, s->ws_bytes);
    }
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
        return vr_cuda_softmax_xent_bwd(c, dt, a->out[0], NULL, n->loss_scale, a->in[0], I32(a->in[1]),
                                        rows(a, n->in[0]), lastdim(a, n->in[0]), a->acc[0]);
    case VR_OP_SUMSQ:
        return sumsq(a, s);
    case VR_OP_SGD:
    case VR_OP_SGD_MOMENTUM:
    case VR_OP_ADAM:
    case VR_OP_ADAMW:
        return optimizer(a, s);
    default:
        return vr_error(VR_ERR_UNSUPPORTED, "cuda: no kernel for op %s", vr_op_name(n->op));
    }
}

static vr_status cuda_init(vr_exec *e)
{
    cuda_state *s = calloc(1, sizeof *s);
    if (!s)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    int w = vr_graph_find(e->g, "workspace");
    if (w >= 0 && e->live[w]) {
        uint64_t bytes = e->plan->tensors[w].bytes;
        if (bytes >= 2 * VR_CLIP_BYTES) {
            s->ws = e->ptr[w];
            s->ws_bytes = (size_t)(bytes - VR_CLIP_BYTES) / 256 * 256;
            s->clip = (float *)((char *)s->ws + s->ws_bytes);
        }
    }
    s->max_norm = e->g->step.grad_clip;
    vr_status st = VR_OK;
    if (e->cfg.cuda_graph && s->clip)
        st = vr_cuda_stream_create(&s->stream);
    if (!st)
        st = vr_cuda_ctx_init(&s->ctx, s->stream, s->ws, s->ws ? s->ws_bytes : 0);
    if (st) {
        vr_cuda_stream_destroy(s->stream);
        free(s);
        return st;
    }
    if (s->stream)
        s->ctx.opt_scalars = s->clip + 4;
    e->be_state = s;
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
    float v[4];
    vr_cuda_opt_scalars(v, h->lr, h->beta1, h->beta2, h->step > 0 ? (int)h->step : 1);
    return vr_cuda_upload(&s->ctx, s->clip + 4, v, sizeof v);
}

static vr_status cuda_capture_begin(vr_exec *e)
{
    cuda_state *s = e->be_state;
    if (s->graph) {
        vr_cuda_sync(&s->ctx);
        vr_cuda_graph_destroy(s->graph);
        s->graph = NULL;
    }
    return vr_cuda_capture_begin(&s->ctx);
}

static vr_status cuda_capture_end(vr_exec *e, bool keep)
{
    cuda_state *s = e->be_state;
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
        vr_cuda_sync(&s->ctx);
        vr_cuda_graph_destroy(s->graph);
        vr_cuda_ctx_destroy(&s->ctx);
        vr_cuda_stream_destroy(s->stream);
        free(s);
    }
    e->be_state = NULL;
}

static vr_status cuda_clip_result(vr_exec *e, double *norm, double *scale)
{
    cuda_state *s = e->be_state;
    float v[2] = {1.0f, 0.0f};
    if (!s || !s->clip)
        return vr_error(VR_ERR_INVALID, "cuda: clipping needs the step's workspace");
    vr_status st = vr_device_memcpy(e->dev, v, s->clip, sizeof v, VR_COPY_DEVICE_TO_HOST);
    if (st)
        return st;
    *scale = v[0];
    *norm = v[1];
    return VR_OK;
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
                                         .cheap_mem_info = false};
    return &cuda;
}
