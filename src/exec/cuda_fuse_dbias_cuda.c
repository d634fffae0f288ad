/* vram exec — a Linear's bias gradient computed by the layernorm backward before it (CUDA only).
 *
 * GPT-2's residual stream: x' = x + proj(y) is normalized by the next layernorm, so in the backward that
 * layernorm's dinp (added into the stream's gradient) is what proj's matmul_bwd reads as dout, and proj's
 * bias gradient is its column sums (attproj's after ln2.bwd, fcproj's after the next ln1.bwd or lnf.bwd).
 * The layernorm's one-pass kernel has each value of dinp in registers as it writes it: it adds them per
 * column beside its dw | db sums (vr_cuda_layernorm_bwd_sum), and the matmul_bwd runs without its bias
 * column-sum kernel (a read of dout: 8.6 us on GPT-2 medium's 8192 x 1024, for 5.3 us more in the layernorm's;
 * 10.5 against 3.2 on 124M's 16384 x 768).
 *
 * A pair: layernorm_bwd node i with dinp, scratch and dw or db; node j, the next that refers to dinp's bytes,
 * a matmul_bwd reading that dinp as dout (the same tensor) and wanting a bias gradient of its dtype, whose
 * planned bytes are apart from node i's outputs and scratch and from everything the nodes between refer to
 * (recompute's, e.g. the GELU re-run before fcproj.bwd): it is bound only at node j, and before that its bytes
 * may be those of a tensor that dies on the way; node i's inputs may be there, the kernel writes the sum
 * after reading them. The bias gradient is written at node i, with node j's accumulate flag (micro-batches).
 * Planned memory, no poison, fusion on (the other fusions' switch, vr_exec_config.unfused). Where the kernel
 * does not take the shape, node i runs alone and node j computes its bias as before, from then on. The sums
 * run in another order than the column-sum kernel's (fp32 either way), so the gradient can differ in its
 * last bit.
 */
#include <stdlib.h>

#include "exec/cuda_dtype.h"
#include "exec/cuda_fuse.h"
#include "exec/cuda_fuse_dbias.h"

/* Every tensor node n refers to (its inputs too when ins) is on bytes apart from tensor t's. */
static bool apart(const vr_exec *e, const vr_node *n, int t, bool ins)
{
    for (int k = 0; ins && k < VR_NODE_MAX_IN; k++)
        if (n->in[k] >= 0 && !vr__cuda_arena_disjoint(e, n->in[k], t))
            return false;
    for (int k = 0; k < VR_NODE_MAX_OUT; k++)
        if (n->out[k] >= 0 && !vr__cuda_arena_disjoint(e, n->out[k], t))
            return false;
    return n->scratch < 0 || vr__cuda_arena_disjoint(e, n->scratch, t);
}

/* The matmul_bwd node whose bias gradient layernorm_bwd node i can write, -1. */
static int partner(const vr_exec *e, int i)
{
    const vr_graph *g = e->g;
    const vr_node *n = &g->nodes[i];
    if (n->op != VR_OP_LAYERNORM_BWD || n->host || n->out[0] < 0 || n->scratch < 0 || (n->out[1] < 0 && n->out[2] < 0))
        return -1;
    int dinp = n->out[0], j = i + 1;
    while (j < e->opt_start && !vr__cuda_node_refers(e, &g->nodes[j], vr_graph_storage(g, dinp)))
        j++;
    if (j == e->opt_start)
        return -1;
    const vr_node *m = &g->nodes[j];
    int db = m->out[2];
    if (m->op != VR_OP_MATMUL_BWD || m->host || m->in[0] != dinp || db < 0 || m->phase != n->phase ||
        g->tensors[db].dtype != g->tensors[dinp].dtype)
        return -1;
    /* db is bound at node j: until then its planned bytes may be those of a tensor that dies between, one that
     * node i or a node before j refers to. Node i's inputs may be there (vr_cuda_layernorm_bwd_sum writes dsum
     * after it has read them), not its outputs or scratch, nor anything a node between refers to. */
    if (!apart(e, n, db, false))
        return -1;
    for (int k = i + 1; k < j; k++)
        if (!apart(e, &g->nodes[k], db, true))
            return -1;
    return j;
}

vr_status vr__cuda_fuse_dbias_init(vr_cuda_fuse_dbias *f, const vr_exec *e)
{
    const vr_graph *g = e->g;
    f->to = NULL;
    f->done = NULL;
    f->pairs = 0;
    if (e->cfg.unfused || e->cfg.memory != VR_MEMORY_PLANNED || e->cfg.poison || g->n_nodes < 2)
        return VR_OK;
    f->to = malloc(sizeof(int) * (size_t)g->n_nodes);
    f->done = calloc((size_t)g->n_nodes, 1);
    if (!f->to || !f->done) {
        vr__cuda_fuse_dbias_free(f);
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        f->to[i] = i + 1 < e->opt_start ? partner(e, i) : -1;
        f->pairs += f->to[i] >= 0;
    }
    if (!f->pairs) /* nothing to do at any node */
        vr__cuda_fuse_dbias_free(f);
    return VR_OK;
}

void vr__cuda_fuse_dbias_free(vr_cuda_fuse_dbias *f)
{
    free(f->to);
    free(f->done);
    f->to = NULL;
    f->done = NULL;
    f->pairs = 0;
}

static const vr_tensor *T_(const vr_exec_args *a, int id) { return &a->g->tensors[id]; }
static int lastdim(const vr_exec_args *a, int id) { return (int)T_(a, id)->shape[T_(a, id)->ndim - 1]; }

vr_status vr__cuda_fuse_dbias_ln(vr_cuda_fuse_dbias *f, const vr_cuda_ctx *c, const vr_exec_args *a,
                                 vr_cuda_dtype dt, bool *handled)
{
    *handled = false;
    int i = (int)(a->node - a->g->nodes);
    if (!f->to || f->to[i] < 0)
        return VR_OK;
    int j = f->to[i];
    vr_exec_args m; /* the matmul_bwd node's arguments: its bias gradient's accumulate flag */
    vr__exec_node_args(a->exec, j, a->micro, NULL, 1.0f, &m);
    void *db = vr__cuda_arena_ptr(a->exec, m.node->out[2]); /* not bound yet: partner() found its bytes free */
    const vr_node *n = a->node;
    int C = lastdim(a, n->in[0]), N = (int)(vr_tensor_numel(T_(a, n->in[0])) / C);
    vr_status st = n->from_out /* dout, out, w, b, rstd */
                       ? vr_cuda_layernorm_bwd_out(c, dt, a->out[0], a->out[1], a->out[2], db, a->in[0], a->in[1],
                                                   a->in[2], a->in[3], (const float *)a->in[4], N, C, a->acc[0],
                                                   a->acc[1], m.acc[2], a->scratch, (size_t)a->scratch_bytes)
                       : vr_cuda_layernorm_bwd_sum(c, dt, a->out[0], a->out[1], a->out[2], db, a->in[0], a->in[1],
                                                   a->in[2], (const float *)a->in[3], (const float *)a->in[4], N, C,
                                                   a->acc[0], a->acc[1], m.acc[2], a->scratch,
                                                   (size_t)a->scratch_bytes);
    if (st == VR_ERR_UNSUPPORTED) { /* not this shape: the pair runs apart from now on */
        f->to[i] = -1;
        a->exec->fused_dbias = --f->pairs;
        return VR_OK;
    }
    *handled = true;
    f->done[j] = !st;
    return st;
}

const vr_exec_args *vr__cuda_fuse_dbias_mm(vr_cuda_fuse_dbias *f, const vr_exec_args *a, vr_exec_args *own)
{
    int j = (int)(a->node - a->g->nodes);
    if (!f->done || !f->done[j])
        return a;
    f->done[j] = 0;
    *own = *a;
    own->out[2] = NULL;
    return own;
}
