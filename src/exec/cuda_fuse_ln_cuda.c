/* vram exec — a residual add fused into the layer normalization that follows it (CUDA only).
 *
 * GPT-2 writes residual = x + y and normalizes it in the very next node (ln2 after the attention's
 * residual, the next block's ln1 or lnf after the MLP's), and Llama likewise with RMSNorm. The add node
 * then queues nothing and the normalization node runs vr_cuda_add_layernorm_fwd (vr_cuda_add_rmsnorm_fwd):
 * one read of x and y instead of a write and a read of the residual in between, the same bytes in every
 * output. The executor's books still run node by node: the add's inputs are let go after the add, but in
 * planned memory nothing writes the arena between the two nodes (binding the normalization's outputs
 * writes nothing without poison), so they still hold their values when it runs. Where its planned outputs
 * overlap the add's inputs (the arena reuses their bytes), the one-pass kernel would race, so that node
 * runs the add and then the normalization, as unfused. Dynamic memory and poison keep every node's own
 * kernels. Under a CUDA graph capture the node loop is the same; a replay runs what was captured. */
#include <stdlib.h>

#include "exec/cuda_dtype.h"
#include "exec/cuda_fuse_ln.h"

static bool same_elems(const vr_graph *g, int x, int y)
{
    return x >= 0 && y >= 0 && g->tensors[x].dtype == g->tensors[y].dtype &&
           vr_tensor_numel(&g->tensors[x]) == vr_tensor_numel(&g->tensors[y]);
}

static bool is_pair(const vr_graph *g, int i)
{
    const vr_node *n = &g->nodes[i], *m = &g->nodes[i + 1];
    bool rms = m->op == VR_OP_RMSNORM; /* out, rstd; else layernorm's out, mean, rstd */
    if (n->op != VR_OP_ADD || (m->op != VR_OP_LAYERNORM && !rms) || n->host || m->host || n->phase != m->phase)
        return false;
    if (n->phase != VR_PHASE_FORWARD && n->phase != VR_PHASE_RECOMPUTE)
        return false;
    if (m->in[0] != n->out[0] || m->out[0] < 0 || m->out[1] < 0 || (!rms && m->out[2] < 0))
        return false;
    vr_cuda_dtype dt;
    return same_elems(g, n->in[0], n->out[0]) && same_elems(g, n->in[1], n->out[0]) &&
           vr__cuda_dtype(g->tensors[n->out[0]].dtype, &dt);
}

vr_status vr__cuda_fuse_ln_init(vr_cuda_fuse_ln *f, const vr_exec *e)
{
    const vr_graph *g = e->g;
    f->pair = NULL;
    f->pending = -1;
    if (e->cfg.unfused || e->cfg.memory != VR_MEMORY_PLANNED || e->cfg.poison || g->n_nodes < 2)
        return VR_OK;
    int found = 0;
    for (int i = 0; i + 1 < g->n_nodes; i++)
        found += is_pair(g, i);
    if (!found)
        return VR_OK;
    if (!(f->pair = calloc((size_t)g->n_nodes, 1)))
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    for (int i = 0; i + 1 < g->n_nodes; i++)
        f->pair[i] = is_pair(g, i);
    return VR_OK;
}

void vr__cuda_fuse_ln_free(vr_cuda_fuse_ln *f)
{
    free(f->pair);
    f->pair = NULL;
    f->pending = -1;
}

/* [p, p + n) and [q, q + m) share a byte */
static bool overlap(const void *p, size_t n, const void *q, size_t m)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a < b + m && b < a + n;
}

/* The one-pass kernel is safe: the layernorm's outputs touch none of the add's operands, and the sum
 * is each input exactly or apart from it (a warp reads its row before it writes it). */
static bool one_pass_ok(const vr_cuda_fuse_ln *f, const vr_exec_args *a, size_t es, size_t rows)
{
    size_t nb = (size_t)f->n * es;
    const void *opnd[3] = {f->a, f->b, f->sum};
    for (int k = 0; k < 3; k++)
        if (overlap(a->out[0], nb, opnd[k], nb) || overlap(a->out[1], rows * 4, opnd[k], nb) ||
            (a->out[2] && overlap(a->out[2], rows * 4, opnd[k], nb)))
            return false;
    for (int k = 0; k < 2; k++)
        if (opnd[k] != f->sum && overlap(opnd[k], nb, f->sum, nb))
            return false;
    return true;
}

vr_status vr__cuda_fuse_ln_node(vr_cuda_fuse_ln *f, const vr_cuda_ctx *c, const vr_exec_args *a,
                                vr_cuda_dtype dt, bool *handled, bool *idle)
{
    *handled = false;
    if (!f->pair)
        return VR_OK;
    const vr_graph *g = a->g;
    const vr_node *n = a->node;
    int i = (int)(n - g->nodes);
    if (n->op == VR_OP_ADD) {
        f->pending = -1;
        if (!f->pair[i] || a->acc[0])
            return VR_OK;
        f->pending = i + 1;
        f->a = a->in[0];
        f->b = a->in[1];
        f->sum = a->out[0];
        f->n = vr_tensor_numel(&g->tensors[n->out[0]]);
        *handled = *idle = true;
        return VR_OK;
    }
    if ((n->op != VR_OP_LAYERNORM && n->op != VR_OP_RMSNORM) || f->pending != i)
        return VR_OK;
    f->pending = -1;
    *handled = true;
    const vr_tensor *x = &g->tensors[n->in[0]];
    int C = (int)x->shape[x->ndim - 1], N = (int)(f->n / C);
    bool rms = n->op == VR_OP_RMSNORM;
    if (a->in[0] == f->sum && one_pass_ok(f, a, vr_cuda_dtype_size(dt), (size_t)N))
        return rms ? vr_cuda_add_rmsnorm_fwd(c, dt, f->sum, a->out[0], (float *)a->out[1], f->a, f->b, a->in[1], N,
                                             C, n->eps)
                   : vr_cuda_add_layernorm_fwd(c, dt, f->sum, a->out[0], (float *)a->out[1], (float *)a->out[2],
                                               f->a, f->b, a->in[1], a->in[2], N, C);
    vr_status st = vr_cuda_add_fwd(c, dt, f->sum, f->a, f->b, (size_t)f->n);
    if (st)
        return st;
    return rms ? vr_cuda_rmsnorm_fwd(c, dt, a->out[0], (float *)a->out[1], a->in[0], a->in[1], N, C, n->eps)
               : vr_cuda_layernorm_fwd(c, dt, a->out[0], (float *)a->out[1], (float *)a->out[2], a->in[0], a->in[1],
                                       a->in[2], N, C);
}
