/* vram exec — the collectives of a data-parallel step on CUDA (see cuda_comm.h). */
#include "exec/cuda_comm.h"
#include "exec/cuda_dtype.h"

/* A collective over a gradient (in the backward) or a gather: on the communication stream. */
static bool on_comm_stream(const vr_node *n)
{
    return (vr__exec_is_grad_comm(n->op) && n->phase == VR_PHASE_BACKWARD) || n->op == VR_OP_GATHER;
}

vr_status vr__cuda_comms_init(vr_cuda_side *c, const vr_exec *e) { return vr__cuda_side_init(c, e->g, on_comm_stream); }

/* A gather: the parts this rank owns (parameters or pieces), each at its place in the copy that the broadcasts
 * fill (every part's owner sends its own), on the gather's stream. */
static vr_status gather_source(const vr_cuda_ctx *ctx, void *stream, const vr_exec_args *a)
{
    const vr_node *n = a->node;
    const vr_tensor *o = &a->g->tensors[n->out[0]];
    if (n->op != VR_OP_GATHER)
        return VR_OK;
    vr_cuda_dtype dt;
    if (!vr__cuda_dtype(o->dtype, &dt))
        return vr_error(VR_ERR_UNSUPPORTED, "cuda: gather %s: tensor %s has dtype %s, not a float", n->name, o->name,
                        vr_dtype_name(o->dtype));
    vr_cuda_ctx on = *ctx;
    on.stream = stream;
    size_t off = 0;
    vr_status st = VR_OK;
    for (int k = 0; k < VR_NODE_MAX_IN && n->part[k] >= 0 && !st; k++) {
        size_t m = (size_t)vr_tensor_numel(&a->g->tensors[n->part[k]]);
        if (n->in[k] >= 0)
            st = vr_cuda_acc(&on, dt, (char *)a->out[0] + off * vr_cuda_dtype_size(dt), a->in[k], m, 0);
        off += m;
    }
    return st;
}

vr_status vr__cuda_comm_run(vr_cuda_side *c, const vr_cuda_ctx *ctx, const vr_exec_args *a, void *begin, void *end)
{
    int i = (int)(a->node - a->g->nodes);
    vr_status st;
    if (!c->stream || !c->done[i])
        return (st = gather_source(ctx, ctx->stream, a)) ? st : vr__exec_comm_node(a, ctx->stream);
    st = vr_cuda_stream_fork(ctx, c->stream, c->mark, vr__cuda_side_fence(c, a->g, i));
    if (!st && begin)
        st = vr_cuda_stream_record(c->stream, begin);
    if (!st)
        st = gather_source(ctx, c->stream, a);
    if (!st)
        st = vr__exec_comm_node(a, c->stream);
    if (!st && end)
        st = vr_cuda_stream_record(c->stream, end);
    if (!st)
        st = vr_cuda_stream_record(c->stream, c->done[i]);
    if (!st && i == c->last)
        st = vr_cuda_stream_join(ctx, c->done[i]);
    return st;
}

vr_status vr__cuda_comm_wait(const vr_cuda_side *c, const vr_cuda_ctx *ctx, const vr_exec_args *a)
{
    vr_status st = VR_OK;
    for (int k = 0; k < VR_NODE_MAX_IN && c->stream && !st; k++) {
        int t = a->node->in[k];
        int p = t >= 0 ? a->g->tensors[vr_graph_storage(a->g, t)].producer : -1; /* the reads are views of the copy */
        if (p >= 0 && a->g->nodes[p].op == VR_OP_GATHER && c->done[p])
            st = vr_cuda_stream_join(ctx, c->done[p]);
    }
    return st;
}

/* Tensor t's elements in its storage: [*lo, *hi). */
static void storage_range(const vr_graph *g, int t, int64_t *lo, int64_t *hi)
{
    *lo = g->tensors[t].view_of >= 0 ? g->tensors[t].view_offset : 0;
    *hi = *lo + vr_tensor_numel(&g->tensors[t]);
}

void *vr__cuda_comm_before_copy(const vr_cuda_side *c, const vr_exec_args *a)
{
    const vr_graph *g = a->g;
    int src = vr_graph_storage(g, a->node->in[0]);
    int64_t lo, hi, clo, chi;
    storage_range(g, a->node->in[0], &lo, &hi);
    /* the graph places a bucket's copies right after its collective: look back over copies and collectives for
     * the one over this gradient (a bucket holding it, or the piece of a gradient it is) */
    for (int k = (int)(a->node - g->nodes) - 1; c->stream && k >= 0; k--) {
        const vr_node *n = &g->nodes[k];
        if (c->done[k] && vr__exec_is_grad_comm(n->op) && vr_graph_storage(g, n->in[0]) == src &&
            (storage_range(g, n->in[0], &clo, &chi), clo <= lo && hi <= chi))
            return c->done[k];
        if (n->op != VR_OP_COPY && !vr__exec_is_grad_comm(n->op))
            break;
    }
    return NULL;
}
