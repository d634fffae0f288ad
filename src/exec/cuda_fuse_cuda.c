/* vram exec — CUDA: Linear + GELU pairs as one cuBLASLt product (cuda_fuse.h says which, and why the
 * work moves to the pair's second node).
 *
 * The GELU of both paths is the tanh approximation: vram's kernels (vr_cuda_gelu_fwd/bwd) and
 * cuBLASLt's GELU epilogues (as llm.c and PyTorch's addmm + gelu(approximate="tanh") use them). The
 * DGELU epilogue's aux matrix is the GELU's input as stored, which the forward wrote (a plain product
 * with bias or the GELU_AUX epilogue alike). */
#include <stdlib.h>

#include "exec/cuda_dtype.h"
#include "exec/cuda_fuse.h"

/* A node's part in a pair. */
enum {
    PART_NONE,
    PART_FWD_MATMUL, /* queues nothing */
    PART_FWD_GELU,   /* matmul + gelu (GELU_AUX epilogue) */
    PART_BWD_MATMUL, /* dw, db only */
    PART_BWD_GELU,   /* dinp product with the DGELU epilogue */
    PART_BWD_SPLIT,  /* the same pair where cuBLASLt had no algorithm: dinp product, then gelu_bwd */
};

static int storage(const vr_exec *e, int t) { return vr_graph_storage(e->g, t); }
static int base(const vr_exec *e, int t) { return e->plan->tensors[storage(e, t)].base; }

bool vr__cuda_node_refers(const vr_exec *e, const vr_node *n, int s)
{
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        if (n->in[k] >= 0 && storage(e, n->in[k]) == s)
            return true;
    for (int k = 0; k < VR_NODE_MAX_OUT; k++)
        if (n->out[k] >= 0 && storage(e, n->out[k]) == s)
            return true;
    return n->scratch >= 0 && storage(e, n->scratch) == s;
}

bool vr__cuda_arena_disjoint(const vr_exec *e, int a, int b)
{
    const vr_plan_tensor *x = &e->plan->tensors[base(e, a)], *y = &e->plan->tensors[base(e, b)];
    return e->cfg.memory == VR_MEMORY_PLANNED && !x->host && !y->host &&
           (x->offset + x->size <= y->offset || y->offset + y->size <= x->offset);
}

/* Tensor t (-1: none), read by node i, still holds its value when node i + 1 runs, whose output is out:
 * it is persistent, an output of the step, or read by a node after i in every pass (last[]: the last
 * node before the optimizer that refers to each storage tensor); or, in planned memory, it died at
 * node i but its bytes are apart from out's, the only tensor bound (and poisoned) before node i + 1. */
static bool kept(const vr_exec *e, const int *last, int t, int i, int out)
{
    if (t < 0)
        return true;
    int s = storage(e, t);
    return e->plan->tensors[s].persistent || e->g->tensors[s].output || last[s] > i ||
           vr__cuda_arena_disjoint(e, t, out);
}

/* Every tensor in ids[0..n) (-1: none) has the dtype of ids[0], a float one, on the device. */
static bool one_float_dtype(const vr_exec *e, const int *ids, int n)
{
    vr_cuda_dtype dt;
    if (!vr__cuda_dtype(e->g->tensors[ids[0]].dtype, &dt))
        return false;
    for (int k = 0; k < n; k++)
        if (ids[k] >= 0 && (e->g->tensors[ids[k]].dtype != e->g->tensors[ids[0]].dtype ||
                            e->plan->tensors[storage(e, ids[k])].host))
            return false;
    return true;
}

/* out (the second node's output) is on none of reads[0..n)'s bytes. */
static bool apart(const vr_exec *e, int out, const int *reads, int n)
{
    for (int k = 0; k < n; k++)
        if (reads[k] >= 0 && base(e, reads[k]) == base(e, out))
            return false;
    return true;
}

static bool plain(const vr_node *n) { return !n->host && n->acc[0] == VR_ACC_OVERWRITE && n->scratch < 0; }

/* Nodes i (matmul) and i + 1 (gelu) fuse? */
static bool pair_fwd(const vr_exec *e, const int *last, int i)
{
    const vr_graph *g = e->g;
    const vr_node *m = &g->nodes[i], *u = &g->nodes[i + 1];
    if (m->op != VR_OP_MATMUL || u->op != VR_OP_GELU || !plain(m) || !plain(u) || m->out[0] < 0 ||
        u->out[0] < 0 || u->in[0] != m->out[0] || m->in[0] < 0 || m->in[1] < 0)
        return false;
    int inp = m->in[0], w = m->in[1], bias = m->in[2], pre = m->out[0], post = u->out[0];
    int ids[5] = {pre, post, inp, w, bias};
    int OC = (int)vr_tensor_numel(&g->tensors[w]) / (int)g->tensors[w].shape[g->tensors[w].ndim - 1];
    return OC % 8 == 0 && one_float_dtype(e, ids, 5) && apart(e, post, ids + 2, 3) && base(e, post) != base(e, pre) &&
           kept(e, last, inp, i, post) && kept(e, last, w, i, post) && kept(e, last, bias, i, post);
}

/* Nodes i (matmul_bwd) and i + 1 (gelu_bwd) fuse? */
static bool pair_bwd(const vr_exec *e, const int *last, int i)
{
    const vr_graph *g = e->g;
    const vr_node *m = &g->nodes[i], *u = &g->nodes[i + 1];
    if (m->op != VR_OP_MATMUL_BWD || u->op != VR_OP_GELU_BWD || m->host || m->acc[0] != VR_ACC_OVERWRITE ||
        !plain(u) || m->out[0] < 0 || u->out[0] < 0 || u->in[0] != m->out[0] || u->in[1] < 0 || m->in[0] < 0 ||
        m->in[2] < 0)
        return false;
    int dout = m->in[0], w = m->in[2], dpost = m->out[0], pre = u->in[1], dpre = u->out[0];
    int ids[5] = {dpre, dpost, dout, w, pre}, reads[3] = {dout, w, pre};
    int C = (int)g->tensors[w].shape[g->tensors[w].ndim - 1];
    int sp = storage(e, dpost);
    if (C % 8 || !one_float_dtype(e, ids, 5) || !apart(e, dpre, reads, 3) || !kept(e, last, dout, i, dpre) ||
        !kept(e, last, w, i, dpre) || e->plan->tensors[sp].persistent || g->tensors[sp].output)
        return false;
    for (int j = 0; j < g->n_nodes; j++) /* d_post: no other reader or writer */
        if (j != i && j != i + 1 && vr__cuda_node_refers(e, &g->nodes[j], sp))
            return false;
    return true;
}

vr_status vr__cuda_fuse_init(vr_cuda_fuse *f, const vr_exec *e)
{
    const vr_graph *g = e->g;
    f->fwd = f->bwd = 0;
    f->part = NULL;
    if (e->cfg.unfused)
        return VR_OK;
    int *last = malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
    f->part = calloc((size_t)g->n_nodes + 1, 1);
    if (!last || !f->part) {
        free(last);
        vr__cuda_fuse_free(f);
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    }
    for (int t = 0; t < g->n_tensors; t++)
        last[t] = -1;
    for (int j = 0; j < e->opt_start; j++) {
        const vr_node *n = &g->nodes[j];
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (n->in[k] >= 0)
                last[storage(e, n->in[k])] = j;
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (n->out[k] >= 0)
                last[storage(e, n->out[k])] = j;
        if (n->scratch >= 0)
            last[storage(e, n->scratch)] = j;
    }
    for (int i = 0; i + 1 < e->opt_start; i++) {
        if (f->part[i])
            continue;
        if (pair_fwd(e, last, i)) {
            f->part[i] = PART_FWD_MATMUL;
            f->part[i + 1] = PART_FWD_GELU;
            f->fwd++;
        } else if (pair_bwd(e, last, i)) {
            f->part[i] = PART_BWD_MATMUL;
            f->part[i + 1] = PART_BWD_GELU;
            f->bwd++;
        }
    }
    free(last);
    return VR_OK;
}

void vr__cuda_fuse_free(vr_cuda_fuse *f)
{
    free(f->part);
    f->part = NULL;
}

void *vr__cuda_arena_ptr(const vr_exec *e, int t)
{
    const vr_tensor *x = &e->g->tensors[t];
    const vr_plan_tensor *b = &e->plan->tensors[base(e, t)];
    if (e->cfg.memory != VR_MEMORY_PLANNED || b->host || !e->arena)
        return NULL;
    return (char *)e->arena + (b->offset - e->arena_lo) +
           (x->view_of >= 0 ? (uint64_t)x->view_offset * vr_dtype_size(x->dtype) : 0);
}

static const vr_tensor *T_(const vr_exec_args *a, int id) { return &a->g->tensors[id]; }
static int lastdim(const vr_exec_args *a, int id) { return (int)T_(a, id)->shape[T_(a, id)->ndim - 1]; }
static int rows(const vr_exec_args *a, int id) { return (int)(vr_tensor_numel(T_(a, id)) / lastdim(a, id)); }

/* The gelu node: pre = inp w^T + bias and post = gelu(pre), in one product where cuBLASLt has one
 * (vr_cuda_matmul_gelu_fwd falls back to the two kernels itself). m: the matmul node's arguments. */
static vr_status fwd_gelu(const vr_exec_args *a, const vr_exec_args *m, const vr_cuda_ctx *c, vr_cuda_dtype dt)
{
    const vr_node *n = m->node;
    int N = rows(m, n->in[0]), C = lastdim(m, n->in[0]), OC = rows(m, n->in[1]);
    void *pre = m->out[0], *post = a->out[0];
    if (post != pre)
        return vr_cuda_matmul_gelu_fwd(c, dt, post, pre, m->in[0], m->in[1], m->in[2], N, C, OC);
    vr_status st = vr_cuda_matmul_fwd(c, dt, pre, m->in[0], m->in[1], m->in[2], N, C, OC);
    return st ? st : vr_cuda_gelu_fwd(c, dt, post, pre, (size_t)N * OC);
}

/* The gelu_bwd node: d_pre = (dout w) * gelu'(pre); where cuBLASLt has no DGELU algorithm, d_post =
 * dout w and then the GELU backward (and this pair so from now on). m: the matmul_bwd node's arguments. */
static vr_status bwd_gelu(vr_cuda_fuse *f, int i, const vr_exec_args *a, const vr_exec_args *m,
                          const vr_cuda_ctx *c, vr_cuda_dtype dt)
{
    const vr_node *n = m->node;
    int N = rows(m, n->in[0]), OC = lastdim(m, n->in[0]), C = lastdim(m, n->in[2]);
    void *dpost = m->out[0], *dpre = a->out[0];
    const void *dout = m->in[0], *w = m->in[2], *pre = a->in[1];
    if (f->part[i] == PART_BWD_GELU && dpre != pre) {
        vr_status st = vr_cuda_matmul_dgelu_bwd(c, dt, dpre, dout, w, pre, N, C, OC);
        if (st != VR_ERR_UNSUPPORTED)
            return st;
        f->part[i] = PART_BWD_SPLIT;
        f->bwd--;
        a->exec->fused_bwd = f->bwd;
    }
    vr_status st = vr_cuda_matmul_bwd(c, dt, dpost, NULL, NULL, dout, NULL, w, N, C, OC, 0, 0);
    return st ? st : vr_cuda_gelu_bwd(c, dt, dpre, pre, dpost, (size_t)N * C, 0);
}

vr_status vr__cuda_fuse_run(vr_cuda_fuse *f, const vr_exec_args *a, const vr_cuda_ctx *c, vr_cuda_dtype dt,
                            bool *handled, bool *idle)
{
    int i = (int)(a->node - a->g->nodes);
    int part = f->part ? f->part[i] : PART_NONE;
    *handled = part != PART_NONE;
    *idle = false;
    const vr_node *n = a->node;
    switch (part) {
    case PART_FWD_MATMUL: /* the gelu node runs it */
        *idle = true;
        return VR_OK;
    case PART_BWD_MATMUL: { /* dout(N,OC), inp(N,C), w(OC,C): dw and db; the gelu_bwd node runs dinp */
        int C = lastdim(a, n->in[1] >= 0 ? n->in[1] : n->in[2]);
        *idle = !a->out[1] && !a->out[2];
        if (*idle)
            return VR_OK;
        return vr_cuda_matmul_bwd(c, dt, NULL, a->out[1], a->out[2], a->in[0], a->in[1], a->in[2], rows(a, n->in[0]),
                                  C, lastdim(a, n->in[0]), 0, a->acc[1]);
    }
    case PART_FWD_GELU:
    case PART_BWD_GELU:
    case PART_BWD_SPLIT: {
        vr_exec_args m; /* the pair's first node, its tensors at their addresses now (a dead input: planned) */
        vr__exec_node_args(a->exec, i - 1, a->micro, NULL, 1.0f, &m);
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (m.node->in[k] >= 0 && !m.in[k])
                m.in[k] = vr__cuda_arena_ptr(a->exec, m.node->in[k]); /* kept() found its bytes intact */
        if (part == PART_FWD_GELU)
            return fwd_gelu(a, &m, c, dt);
        return bwd_gelu(f, i, a, &m, c, dt);
    }
    default:
        return VR_OK;
    }
}
