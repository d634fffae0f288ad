/* vram exec — the bias gradient of attention's q|k|v projection from the attention's identities (CUDA only).
 *
 * GPT's attention reads q, k and v from one Linear (qkv = x W^T + b, 3C columns) and its output y goes through
 * another (attproj: dy = dout Wp, whose bias gradient dbp is the column sums of dout). In the backward, with
 * P = softmax(S) a row at a time and dS = P (dP - rowsum(P dP)):
 *   - each row of dS sums to 0, so the key columns of dqkv sum to 0: a key bias moves every score of a query
 *     by the same amount, which softmax ignores;
 *   - each row of P sums to 1, so the value columns of dqkv sum to those of dy, which are dbp Wp.
 * Only the query columns need their column sums: the matmul_bwd of qkv reads a third of dqkv for its bias
 * (vr_cuda_qkv_bias_bwd; GPT-2 medium, 8192 x 3072 bf16: 48 MB a layer down to 16 MB).
 *
 * A node: matmul_bwd j wanting a bias gradient, whose dout is the dqkv that attention_bwd node a writes, alone
 * (one head of keys and values per head of queries; no rotary between, which would turn the keys' sum), whose
 * dy is the dinp of matmul_bwd node p, alone, with a bias gradient dbp and a weight Wp (C x C) of the
 * parameters; one float dtype; no node between p and j refers to dbp nor between a and j to dqkv, and dbp lives
 * past j. With micro-batches dbp holds the sum of every micro-batch so far, so v's third is written, not added
 * (the same flag as p's bias; where they differ the node runs as before). It reads only tensors that are bound
 * (dbp, Wp) and writes only node j's own output: planned and dynamic memory and poisoning alike; one rank,
 * fusion on (vr_exec_config.unfused). The key bias's gradient is 0 exactly, and the value bias's rounds
 * differently from the column sums (fp32 either way). */
#include <stdlib.h>

#include "exec/cuda_dtype.h"
#include "exec/cuda_fuse.h"
#include "exec/cuda_fuse_qkvb.h"

static const vr_tensor *T_(const vr_graph *g, int id) { return &g->tensors[id]; }
static int64_t lastdim(const vr_graph *g, int id) { return T_(g, id)->shape[T_(g, id)->ndim - 1]; }

/* The node before `before` that writes tensor t as its first output, -1. */
static int writer(const vr_graph *g, int t, int before)
{
    for (int i = before - 1; i >= 0; i--)
        if (g->nodes[i].out[0] == t)
            return i;
    return -1;
}

/* No node strictly between i and j refers to tensor t's storage. */
static bool untouched(const vr_exec *e, int t, int i, int j)
{
    int s = vr_graph_storage(e->g, t);
    for (int k = i + 1; k < j; k++)
        if (vr__cuda_node_refers(e, &e->g->nodes[k], s))
            return false;
    return true;
}

/* The matmul_bwd node p whose bias gradient and weight give node j's q|k|v bias gradient, -1. */
static int proj_of(const vr_exec *e, int j)
{
    const vr_graph *g = e->g;
    const vr_node *m = &g->nodes[j];
    if (m->op != VR_OP_MATMUL_BWD || m->host || m->out[2] < 0 || m->in[2] < 0)
        return -1;
    int dq = m->in[0], a = writer(g, dq, j);
    if (a < 0)
        return -1;
    const vr_node *at = &g->nodes[a];
    if (at->op != VR_OP_ATTENTION_BWD || at->host || at->phase != m->phase || at->nh <= 0 ||
        (at->nkv > 0 && at->nkv != at->nh) || at->acc[0] != VR_ACC_OVERWRITE) /* dqkv: the attention's alone */
        return -1;
    int dy = at->in[0], p = writer(g, dy, a);
    if (p < 0)
        return -1;
    const vr_node *pm = &g->nodes[p];
    int C = (int)lastdim(g, dy), dbp = pm->out[2], wp = pm->in[2];
    if (pm->op != VR_OP_MATMUL_BWD || pm->host || pm->phase != m->phase || dbp < 0 || wp < 0 ||
        pm->acc[0] != VR_ACC_OVERWRITE || !untouched(e, dy, p, a) || /* dy: dout Wp alone */
        lastdim(g, dq) != 3 * (int64_t)C || vr_tensor_numel(T_(g, dbp)) != C ||
        vr_tensor_numel(T_(g, wp)) != (int64_t)C * C || lastdim(g, wp) != C ||
        vr_tensor_numel(T_(g, m->out[2])) != 3 * (int64_t)C)
        return -1;
    int ids[4] = {dq, m->out[2], dbp, wp};
    vr_cuda_dtype dt;
    if (!vr__cuda_dtype(T_(g, dq)->dtype, &dt))
        return -1;
    for (int k = 0; k < 4; k++)
        if (T_(g, ids[k])->dtype != T_(g, dq)->dtype || e->plan->tensors[vr_graph_storage(g, ids[k])].host)
            return -1;
    const vr_plan_tensor *pw = &e->plan->tensors[vr_graph_storage(g, wp)];
    const vr_plan_tensor *pb = &e->plan->tensors[vr_graph_storage(g, dbp)];
    if (!pw->persistent || T_(g, vr_graph_storage(g, wp))->role != VR_ROLE_PARAM || (!pb->persistent && pb->last <= j))
        return -1;
    /* the weights change only in the optimizer; dbp and dqkv as p and a left them */
    if (!untouched(e, dbp, p, j) || !untouched(e, dq, a, j))
        return -1;
    return p;
}

vr_status vr__cuda_fuse_qkvb_init(vr_cuda_fuse_qkvb *f, const vr_exec *e)
{
    const vr_graph *g = e->g;
    f->proj = NULL;
    f->nodes = 0;
    if (e->cfg.unfused)
        return VR_OK;
    for (int i = 0; i < g->n_nodes; i++)
        if (vr__exec_is_comm(g->nodes[i].op)) /* ranks: a gradient may be reduced between p and j */
            return VR_OK;
    if (!(f->proj = malloc(sizeof(int) * (size_t)g->n_nodes)))
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    for (int j = 0; j < g->n_nodes; j++) {
        f->proj[j] = j < e->opt_start ? proj_of(e, j) : -1;
        f->nodes += f->proj[j] >= 0;
    }
    if (!f->nodes)
        vr__cuda_fuse_qkvb_free(f);
    return VR_OK;
}

void vr__cuda_fuse_qkvb_free(vr_cuda_fuse_qkvb *f)
{
    free(f->proj);
    f->proj = NULL;
    f->nodes = 0;
}

vr_status vr__cuda_fuse_qkvb_run(vr_cuda_fuse_qkvb *f, const vr_cuda_ctx *c, const vr_exec_args *a,
                                 vr_cuda_dtype dt, bool *handled)
{
    *handled = false;
    int j = (int)(a->node - a->g->nodes);
    if (!f->proj || f->proj[j] < 0 || !a->out[2])
        return VR_OK;
    vr_exec_args pa; /* the projection's node: its bias gradient, weight and accumulate flag */
    vr__exec_node_args(a->exec, f->proj[j], a->micro, NULL, 1.0f, &pa);
    if (pa.acc[2] != a->acc[2])
        return VR_OK;
    const vr_graph *g = a->g;
    const vr_node *n = a->node;
    int OC = (int)lastdim(g, n->in[0]), C = (int)lastdim(g, n->in[1] >= 0 ? n->in[1] : n->in[2]);
    int N = (int)(vr_tensor_numel(T_(g, n->in[0])) / OC);
    *handled = true;
    vr_status st = vr_cuda_matmul_bwd(c, dt, a->out[0], a->out[1], NULL, a->in[0], a->in[1], a->in[2], N, C, OC,
                                      a->acc[0], a->acc[1]);
    return st ? st : vr_cuda_qkv_bias_bwd(c, dt, a->out[2], a->in[0], pa.out[2], pa.in[2], N, OC / 3, a->acc[2]);
}
