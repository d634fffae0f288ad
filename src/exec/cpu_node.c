/* vram exec — the CPU backend: one graph node -> one call of src/kernels/cpu.
 *
 * Shapes come from the graph's tensors (N = rows, C = last dimension). Two
 * things the kernels leave to their caller are done here so that no gradient
 * byte is ever left unwritten:
 *   - the embedding backward zero-fills only rows 0..T-1 of dwpe; rows T..maxT-1
 *     are zeroed here when it overwrites;
 *   - the classifier writes only the V real rows of dwte; padded rows V..Vp-1
 *     are zeroed here when it overwrites (their gradient is 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_internal.h"
#include "vram/convert.h"
#include "vram/optim_state.h"
#include "kernels/cpu/kernels_cpu.h"

static const vr_tensor *T_(const vr_exec_args *a, int id) { return &a->g->tensors[id]; }
static int64_t numel(const vr_exec_args *a, int id) { return vr_tensor_numel(T_(a, id)); }
static int lastdim(const vr_exec_args *a, int id) { return (int)T_(a, id)->shape[T_(a, id)->ndim - 1]; }
static int rows(const vr_exec_args *a, int id) { return (int)(numel(a, id) / lastdim(a, id)); }

#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))
#define I32(p) ((const int32_t *)(p))

/* State pointer k (2, 3: the state; 4, 5: its absmax) of update node a, from element `off` of the
 * parameter on (off a multiple of VR_Q8_BLOCK where the state is 8-bit). */
static void *state_at(const vr_exec_args *a, int k, size_t off)
{
    if (!a->out[k])
        return NULL;
    if (k >= 4)
        return F(a->out[k]) + off / VR_Q8_BLOCK;
    return (char *)a->out[k] + off * vr_dtype_size(T_(a, a->node->out[k])->dtype);
}

/* Can this backend run update node a (op, state format, master)? master_ok: the host's offloaded update,
 * which updates the fp32 master (the device runs fp32 params only). */
static vr_status update_check(const vr_exec_args *a, bool master_ok)
{
    const vr_node *n = a->node;
    if (a->out[1] && !master_ok) /* a master copy exists only under mixed precision */
        return vr_error(VR_ERR_UNSUPPORTED, "cpu: mixed-precision master weights are not supported");
    if (!a->h)
        return vr_error(VR_ERR_INVALID, "cpu: optimizer node without hyperparameters");
    vr_dtype sdt = n->out[2] >= 0 ? T_(a, n->out[2])->dtype : VR_F32;
    if (sdt != VR_F32 && n->op != VR_OP_SGD_MOMENTUM && n->op != VR_OP_ADAM && n->op != VR_OP_ADAMW)
        return vr_error(VR_ERR_UNSUPPORTED, "cpu: %s has no optimizer state to store in %s", vr_op_name(n->op),
                        vr_dtype_name(sdt));
    return VR_OK;
}

/* One update of elements [off, off + len) of node a's parameter: p, g point at them (fp32); the state
 * (fp32, bf16 with stochastic rounding from the step and the element's index: vr__exec_state_index,
 * or 8-bit) is taken from the same element on. */
static void update(const vr_exec_args *a, float *p, const float *g, size_t len, size_t off)
{
    const vr_node *n = a->node;
    const vr_optim_hparams *h = a->h;
    int step = h->step > 0 ? (int)h->step : 1;
    vr_dtype sdt = n->out[2] >= 0 ? T_(a, n->out[2])->dtype : VR_F32;
    void *s0 = state_at(a, 2, off), *s1 = state_at(a, 3, off);
    float *a0 = state_at(a, 4, off), *a1 = state_at(a, 5, off);
    uint64_t idx = vr__exec_state_index(a->g, n) + off;
    float wd = a->weight_decay, gs = a->grad_scale;
    int decoupled = n->op == VR_OP_ADAMW;
    switch (n->op) {
    case VR_OP_SGD:
        vr_cpu_sgd(p, g, len, h->lr, wd, gs);
        break;
    case VR_OP_SGD_MOMENTUM:
        if (sdt == VR_U8)
            vr_cpu_sgd_momentum_q8(p, g, s0, a0, len, h->lr, h->momentum, h->dampening, wd, h->nesterov, step, gs);
        else if (sdt == VR_BF16)
            vr_cpu_sgd_momentum_bf16s(p, g, s0, len, h->lr, h->momentum, h->dampening, wd, h->nesterov, step, gs,
                                      (uint64_t)step, idx);
        else
            vr_cpu_sgd_momentum(p, g, s0, len, h->lr, h->momentum, h->dampening, wd, h->nesterov, step, gs);
        break;
    default: /* adam, adamw */
        if (sdt == VR_U8)
            vr_cpu_adam_q8(p, g, s0, s1, a0, a1, len, h->lr, h->beta1, h->beta2, h->eps, wd, step, gs, decoupled);
        else if (sdt == VR_BF16)
            vr_cpu_adam_bf16s(p, g, s0, s1, len, h->lr, h->beta1, h->beta2, h->eps, wd, step, gs, decoupled,
                              (uint64_t)step, idx);
        else if (decoupled)
            vr_cpu_adamw(p, g, s0, s1, len, h->lr, h->beta1, h->beta2, h->eps, wd, step, gs);
        else
            vr_cpu_adam(p, g, s0, s1, len, h->lr, h->beta1, h->beta2, h->eps, wd, step, gs);
        break;
    }
}

static vr_status optimizer(const vr_exec_args *a)
{
    vr_status st = update_check(a, false);
    if (!st)
        update(a, F(a->out[0]), CF(a->in[0]), (size_t)numel(a, a->node->out[0]), 0);
    return st;
}

/* ------------------------------------------------------------------ the host's offloaded nodes */

/* Elements per chunk of the host update: a multiple of VR_Q8_BLOCK, below VR_CPU_PAR_MIN so that the
 * kernels called per chunk stay on the calling thread (the chunks are the parallel loop). */
#define HOST_CHUNK ((size_t)16384)

typedef struct host_job {
    const vr_exec_args *a;
    vr_dtype dt;     /* the params' dtype (of the gradient's host copy) */
    char *io;        /* the gradient's host copy, then the new weights */
    float *master;
    double *partial; /* sumsq: one sum per chunk (added in order: the same sum whatever the threads) */
} host_job;

static void update_chunk(void *ctx, size_t off, size_t len)
{
    host_job *j = ctx;
    size_t es = vr_dtype_size(j->dt);
    float g[HOST_CHUNK];
    vr_convert(VR_F32, g, j->dt, j->io + off * es, len);
    update(j->a, j->master + off, g, len, off);
    vr_convert(j->dt, j->io + off * es, VR_F32, j->master + off, len);
}

/* Update node over host tensors: in[0] = out[0] the gradient's host copy (params' dtype), out[1] the fp32
 * master. Per chunk: the gradient widened to fp32, the master and state updated, the new weights written
 * over the gradient in the params' dtype (what the copy up sends). */
static vr_status host_update(const vr_exec_args *a)
{
    vr_status st = update_check(a, true);
    if (st)
        return st;
    const vr_node *n = a->node;
    if (!a->out[1] || a->in[0] != a->out[0])
        return vr_error(VR_ERR_INVALID, "host: %s is not an offloaded update (master, gradient = weights)", n->name);
    host_job j = {.a = a, .dt = T_(a, n->in[0])->dtype, .io = a->out[0], .master = F(a->out[1])};
    vr_cpu_chunks((size_t)numel(a, n->out[0]), HOST_CHUNK, update_chunk, &j);
    return VR_OK;
}

static void sumsq_chunk(void *ctx, size_t off, size_t len)
{
    host_job *j = ctx;
    float f[HOST_CHUNK];
    vr_convert(VR_F32, f, j->dt, j->io + off * vr_dtype_size(j->dt), len);
    j->partial[off / HOST_CHUNK] = vr_cpu_sumsq(f, len);
}

/* Sum of squares of a host gradient in the params' dtype (fp32: vr_cpu_sumsq's, as the device's node). */
static vr_status host_sumsq(const void *x, vr_dtype dt, size_t n, double *out)
{
    if (dt == VR_F32) {
        *out = vr_cpu_sumsq(x, n);
        return VR_OK;
    }
    size_t nc = (n + HOST_CHUNK - 1) / HOST_CHUNK;
    host_job j = {.dt = dt, .io = (char *)x, .partial = malloc(sizeof(double) * (nc + 1))};
    if (!j.partial)
        return vr_error(VR_ERR_OOM, "host: out of host memory");
    vr_cpu_chunks(n, HOST_CHUNK, sumsq_chunk, &j);
    double s = 0;
    for (size_t c = 0; c < nc; c++)
        s += j.partial[c];
    free(j.partial);
    *out = s;
    return VR_OK;
}

vr_status vr__exec_host_node(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    switch (n->op) {
    case VR_OP_SUMSQ: {
        double s = 0;
        vr_status st = host_sumsq(a->in[0], T_(a, n->in[0])->dtype, (size_t)numel(a, n->in[0]), &s);
        if (st)
            return st;
        float *out = F(a->out[0]);
        out[0] = a->acc[0] ? (float)((double)out[0] + s) : (float)s;
        return VR_OK;
    }
    case VR_OP_SGD:
    case VR_OP_SGD_MOMENTUM:
    case VR_OP_ADAM:
    case VR_OP_ADAMW:
        return host_update(a);
    default:
        return vr_error(VR_ERR_UNSUPPORTED, "host: no host kernel for op %s", vr_op_name(n->op));
    }
}

static void embedding_bwd(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    const vr_tensor *tok = T_(a, n->in[1]);
    int B = (int)tok->shape[0], T = (int)tok->shape[1], C = lastdim(a, n->in[0]);
    float *dwte = F(a->out[0]), *dwpe = F(a->out[1]);
    int V = dwte ? rows(a, n->out[0]) : 0;
    if (dwte && dwpe && a->acc[0] == a->acc[1]) {
        vr_cpu_embedding_bwd(dwte, dwpe, CF(a->in[0]), I32(a->in[1]), B, T, C, V, a->acc[0]);
    } else {
        if (dwte)
            vr_cpu_embedding_bwd(dwte, NULL, CF(a->in[0]), I32(a->in[1]), B, T, C, V, a->acc[0]);
        if (dwpe)
            vr_cpu_embedding_bwd(NULL, dwpe, CF(a->in[0]), I32(a->in[1]), B, T, C, V, a->acc[1]);
    }
    if (dwpe && !a->acc[1]) { /* rows T..maxT-1 have no position in this batch: gradient 0 */
        int maxT = rows(a, n->out[1]);
        if (maxT > T)
            memset(dwpe + (size_t)T * C, 0, (size_t)(maxT - T) * C * sizeof(float));
    }
}

static void classifier(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    int N = (int)numel(a, n->in[2]), C = lastdim(a, n->in[0]), V = n->vocab;
    vr_cpu_classifier(F(a->out[0]), F(a->out[1]), F(a->out[2]), CF(a->in[0]), CF(a->in[1]), I32(a->in[2]), N, C, V,
                      n->loss_scale, F(a->scratch), (size_t)a->scratch_bytes, a->acc[1], a->acc[2]);
    if (a->out[2] && !a->acc[2]) { /* padded vocabulary rows: never read, gradient 0 */
        int Vp = rows(a, n->out[2]);
        if (Vp > V)
            memset(F(a->out[2]) + (size_t)V * C, 0, (size_t)(Vp - V) * C * sizeof(float));
    }
}

/* Nodes with (query, kv) heads: grouped-query attention and rope over a (B,T,(NH+2*NKV)*hd) qkv. */
static vr_status headed(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    int qslot = n->op == VR_OP_ATTENTION_BWD ? 1 : 0; /* rope_bwd: dout has qkv's shape */
    const vr_tensor *q = T_(a, n->in[qslot]);
    int B = (int)q->shape[0], T = (int)q->shape[1], hd = (int)(q->shape[2] / (n->nh + 2 * n->nkv));
    vr_rope_params p = {n->rope.theta, n->rope.scaling, n->rope.factor, n->rope.low_freq, n->rope.high_freq,
                        n->rope.orig_max_t};
    switch (n->op) {
    case VR_OP_ATTENTION:
        vr_cpu_attention_gqa_fwd(F(a->out[0]), F(a->out[1]), CF(a->in[0]), B, T, n->nh, n->nkv, hd);
        break;
    case VR_OP_ATTENTION_BWD:
        vr_cpu_attention_gqa_bwd(F(a->out[0]), CF(a->in[0]), CF(a->in[1]), CF(a->in[2]), CF(a->in[3]), B, T, n->nh,
                                 n->nkv, hd, a->acc[0]);
        break;
    case VR_OP_ROPE:
        vr_cpu_rope_fwd(F(a->out[0]), CF(a->in[0]), B, T, n->nh, n->nkv, hd, &p);
        break;
    default: /* VR_OP_ROPE_BWD */
        vr_cpu_rope_bwd(F(a->out[0]), CF(a->in[0]), B, T, n->nh, n->nkv, hd, &p, a->acc[0]);
        break;
    }
    return VR_OK;
}

static vr_status cpu_run_node(const vr_exec_args *a)
{
    const vr_node *n = a->node;
    switch (n->op) {
    case VR_OP_EMBEDDING: {
        const vr_tensor *tok = T_(a, n->in[0]);
        vr_cpu_embedding_fwd(F(a->out[0]), I32(a->in[0]), CF(a->in[1]), CF(a->in[2]), (int)tok->shape[0],
                             (int)tok->shape[1], lastdim(a, n->in[1]));
        return VR_OK;
    }
    case VR_OP_EMBEDDING_BWD:
        embedding_bwd(a);
        return VR_OK;
    case VR_OP_LAYERNORM:
        vr_cpu_layernorm_fwd(F(a->out[0]), F(a->out[1]), F(a->out[2]), CF(a->in[0]), CF(a->in[1]), CF(a->in[2]),
                             rows(a, n->in[0]), lastdim(a, n->in[0]));
        return VR_OK;
    case VR_OP_LAYERNORM_BWD:
        if (n->from_out) { /* dout, out, w, b, rstd */
            vr_cpu_layernorm_bwd_out(F(a->out[0]), F(a->out[1]), F(a->out[2]), CF(a->in[0]), CF(a->in[1]),
                                     CF(a->in[2]), CF(a->in[3]), CF(a->in[4]), rows(a, n->in[0]),
                                     lastdim(a, n->in[0]), a->acc[0], a->acc[1]);
            return VR_OK;
        }
        vr_cpu_layernorm_bwd(F(a->out[0]), F(a->out[1]), F(a->out[2]), CF(a->in[0]), CF(a->in[1]), CF(a->in[2]),
                             CF(a->in[3]), CF(a->in[4]), rows(a, n->in[0]), lastdim(a, n->in[0]), a->acc[0],
                             a->acc[1]);
        return VR_OK;
    case VR_OP_MATMUL:
        vr_cpu_matmul_fwd(F(a->out[0]), CF(a->in[0]), CF(a->in[1]), CF(a->in[2]), rows(a, n->in[0]),
                          lastdim(a, n->in[0]), rows(a, n->in[1]));
        return VR_OK;
    case VR_OP_MATMUL_BWD: { /* dout(N,OC), inp(N,C) (absent when only dinp is wanted), w(OC,C) */
        int C = lastdim(a, n->in[1] >= 0 ? n->in[1] : n->in[2]);
        vr_cpu_matmul_bwd(F(a->out[0]), F(a->out[1]), F(a->out[2]), CF(a->in[0]), CF(a->in[1]), CF(a->in[2]),
                          rows(a, n->in[0]), C, lastdim(a, n->in[0]), a->acc[0], a->acc[1]);
        return VR_OK;
    }
    case VR_OP_ATTENTION:
    case VR_OP_ATTENTION_BWD:
    case VR_OP_ROPE:
    case VR_OP_ROPE_BWD:
        if (n->nkv > 0)
            return headed(a);
        break;
    default:
        break;
    }
    switch (n->op) {
    case VR_OP_ATTENTION: {
        const vr_tensor *q = T_(a, n->in[0]);
        vr_cpu_attention_fwd(F(a->out[0]), F(a->out[1]), CF(a->in[0]), (int)q->shape[0], (int)q->shape[1],
                             (int)(q->shape[2] / 3), n->nh);
        return VR_OK;
    }
    case VR_OP_ATTENTION_BWD: {
        const vr_tensor *q = T_(a, n->in[1]);
        vr_cpu_attention_bwd(F(a->out[0]), CF(a->in[0]), CF(a->in[1]), CF(a->in[2]), CF(a->in[3]), (int)q->shape[0],
                             (int)q->shape[1], (int)(q->shape[2] / 3), n->nh, a->acc[0]);
        return VR_OK;
    }
    case VR_OP_RMSNORM:
        vr_cpu_rmsnorm_fwd(F(a->out[0]), F(a->out[1]), CF(a->in[0]), CF(a->in[1]), rows(a, n->in[0]),
                           lastdim(a, n->in[0]), n->eps);
        return VR_OK;
    case VR_OP_RMSNORM_BWD:
        (n->from_out ? vr_cpu_rmsnorm_bwd_out : vr_cpu_rmsnorm_bwd)(F(a->out[0]), F(a->out[1]), CF(a->in[0]),
                                                                 CF(a->in[1]), CF(a->in[2]), CF(a->in[3]),
                                                                 rows(a, n->in[0]), lastdim(a, n->in[0]), a->acc[0],
                                                                 a->acc[1]);
        return VR_OK;
    case VR_OP_SWIGLU:
        vr_cpu_swiglu_fwd(F(a->out[0]), CF(a->in[0]), rows(a, n->in[0]), lastdim(a, n->in[0]) / 2);
        return VR_OK;
    case VR_OP_SWIGLU_BWD:
        vr_cpu_swiglu_bwd(F(a->out[0]), CF(a->in[0]), CF(a->in[1]), rows(a, n->in[0]), lastdim(a, n->in[0]),
                          a->acc[0]);
        return VR_OK;
    case VR_OP_GELU:
        vr_cpu_gelu_fwd(F(a->out[0]), CF(a->in[0]), (size_t)numel(a, n->in[0]));
        return VR_OK;
    case VR_OP_GELU_BWD:
        vr_cpu_gelu_bwd(F(a->out[0]), CF(a->in[1]), CF(a->in[0]), (size_t)numel(a, n->in[0]), a->acc[0]);
        return VR_OK;
    case VR_OP_RELU:
        vr_cpu_relu_fwd(F(a->out[0]), CF(a->in[0]), (size_t)numel(a, n->in[0]));
        return VR_OK;
    case VR_OP_RELU_BWD:
        vr_cpu_relu_bwd(F(a->out[0]), CF(a->in[1]), CF(a->in[0]), (size_t)numel(a, n->in[0]), a->acc[0]);
        return VR_OK;
    case VR_OP_ADD:
        vr_cpu_add_fwd(F(a->out[0]), CF(a->in[0]), CF(a->in[1]), (size_t)numel(a, n->in[0]));
        return VR_OK;
    case VR_OP_ACC:
        vr_cpu_acc(F(a->out[0]), CF(a->in[0]), (size_t)numel(a, n->in[0]), a->acc[0]);
        return VR_OK;
    case VR_OP_RESHAPE:
        return VR_OK;
    case VR_OP_CLASSIFIER:
        classifier(a);
        return VR_OK;
    case VR_OP_SOFTMAX_XENT:
        vr_cpu_softmax_xent_fwd(F(a->out[0]), F(a->out[1]), CF(a->in[0]), I32(a->in[1]), rows(a, n->in[0]),
                                lastdim(a, n->in[0]));
        return VR_OK;
    case VR_OP_SOFTMAX_XENT_BWD:
        vr_cpu_softmax_xent_bwd(F(a->out[0]), NULL, n->loss_scale, CF(a->in[0]), I32(a->in[1]), rows(a, n->in[0]),
                                lastdim(a, n->in[0]), a->acc[0]);
        return VR_OK;
    case VR_OP_SUMSQ: /* the host's node: the device is the host here */
        return vr__exec_host_node(a);
    case VR_OP_SGD:
    case VR_OP_SGD_MOMENTUM:
    case VR_OP_ADAM:
    case VR_OP_ADAMW:
        return optimizer(a);
    case VR_OP_COPY: /* offload: device and host are the same memory here */
        memcpy(a->out[0], a->in[0], (size_t)vr_tensor_bytes(T_(a, n->out[0])));
        return VR_OK;
    case VR_OP_GATHER: { /* ZeRO-3: the parts this rank owns, each at its place in the copy every rank receives */
        size_t off = 0;
        for (int k = 0; k < VR_NODE_MAX_IN && n->part[k] >= 0; k++) {
            size_t bytes = (size_t)vr_tensor_bytes(T_(a, n->part[k]));
            if (n->in[k] >= 0)
                memcpy((char *)a->out[0] + off, a->in[k], bytes);
            off += bytes;
        }
        return vr__exec_comm_node(a, NULL);
    }
    case VR_OP_ALLREDUCE:
    case VR_OP_REDUCE:
    case VR_OP_BROADCAST:
        return vr__exec_comm_node(a, NULL);
    default:
        return vr_error(VR_ERR_UNSUPPORTED, "cpu: no kernel for op %s", vr_op_name(n->op));
    }
}

const vr_exec_backend *vr__exec_backend_cpu(void)
{
    static const vr_exec_backend cpu = {.name = "cpu", .run_node = cpu_run_node};
    return &cpu;
}
