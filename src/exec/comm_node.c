/* vram exec — the collectives of a data-parallel step (VR_OP_ALLREDUCE, VR_OP_REDUCE, VR_OP_BROADCAST,
 * VR_OP_GATHER).
 *
 * A node's buffer is its in[0], changed in place through the executor's communicator (vr_exec_config.comm):
 * gradients are averaged over the ranks (all-reduce to every rank, or reduce to the parameter's owner),
 * weights are broadcast from their owner. A gather (ZeRO-3) broadcasts into its output, which the backend has
 * first filled with the parts (parameters or pieces: node.part) this rank owns, each part from its owner. On the CPU the call blocks (MPI); on CUDA it is queued on the
 * stream the backend gives (NCCL). Under ZeRO 2 and 3 each rank's sumsq nodes cover its own gradients only, and
 * the squared norm is summed over the ranks before the clipping factor (vr__exec_comm_normsq; offloaded, ZeRO >= 1:
 * each rank's norm of the gradients it copied down, on the host: vr__exec_comm_normsq_host). */
#include "exec/exec_internal.h"

vr_status vr__exec_comm_check(const vr_exec *e)
{
    const vr_graph *g = e->g;
    if (g->step.world < 1)
        return VR_OK;
    if (!e->cfg.comm)
        return vr_error(VR_ERR_INVALID, "exec: a data-parallel step (%d ranks) needs a communicator", g->step.world);
    if (vr_comm_size(e->cfg.comm) != g->step.world || vr_comm_rank(e->cfg.comm) != g->step.rank)
        return vr_error(VR_ERR_INVALID, "exec: the step is rank %d of %d, the communicator rank %d of %d",
                        g->step.rank, g->step.world, vr_comm_rank(e->cfg.comm), vr_comm_size(e->cfg.comm));
    return VR_OK;
}

bool vr__exec_is_comm(vr_op op)
{
    return op == VR_OP_ALLREDUCE || op == VR_OP_REDUCE || op == VR_OP_BROADCAST || op == VR_OP_GATHER;
}

bool vr__exec_is_grad_comm(vr_op op) { return op == VR_OP_ALLREDUCE || op == VR_OP_REDUCE; }

/* A gather's broadcasts into its copy (which the backend has filled with this rank's parts, at their offsets): one
 * per run of consecutive parts of one owner, from that owner; several are launched as one (an NCCL group). */
static vr_status gather(const vr_exec_args *a, void *stream)
{
    const vr_node *n = a->node;
    const vr_graph *g = a->g;
    vr_comm *c = a->exec->cfg.comm;
    vr_dtype dt = g->tensors[n->out[0]].dtype;
    size_t es = vr_dtype_size(dt);
    int runs = 0;
    for (int k = 0; k < VR_NODE_MAX_IN && n->part[k] >= 0; k++)
        runs += k == 0 || g->tensors[n->part[k]].owner != g->tensors[n->part[k - 1]].owner;
    vr_status st = runs > 1 ? vr_comm_group_begin(c) : VR_OK;
    if (st)
        return st;
    int64_t off = 0;
    for (int k = 0, j; k < VR_NODE_MAX_IN && n->part[k] >= 0 && !st; k = j) {
        int root = g->tensors[n->part[k]].owner;
        int64_t m = 0;
        for (j = k; j < VR_NODE_MAX_IN && n->part[j] >= 0 && g->tensors[n->part[j]].owner == root; j++)
            m += vr_tensor_numel(&g->tensors[n->part[j]]);
        st = vr_comm_broadcast(c, (char *)a->out[0] + (size_t)off * es, m, dt, root > 0 ? root : 0, stream);
        off += m;
    }
    vr_status st2 = runs > 1 ? vr_comm_group_end(c) : VR_OK;
    return st ? st : st2;
}

vr_status vr__exec_comm_node(const vr_exec_args *a, void *stream)
{
    const vr_node *n = a->node;
    const vr_tensor *t = &a->g->tensors[n->op == VR_OP_GATHER ? n->out[0] : n->in[0]];
    vr_comm *c = a->exec->cfg.comm;
    int64_t numel = vr_tensor_numel(t);
    switch (n->op) {
    case VR_OP_ALLREDUCE: return vr_comm_allreduce(c, a->in[0], numel, t->dtype, VR_COMM_AVG, stream);
    case VR_OP_REDUCE: return vr_comm_reduce(c, a->in[0], numel, t->dtype, VR_COMM_AVG, n->root, stream);
    case VR_OP_BROADCAST: return vr_comm_broadcast(c, a->in[0], numel, t->dtype, n->root, stream);
    case VR_OP_GATHER: return gather(a, stream); /* each part's owner: copied in */
    default: return vr_error(VR_ERR_INVALID, "exec: node %s is not a collective", n->name);
    }
}

bool vr__exec_norm_sharded(const vr_exec *e)
{
    const vr_step_config *s = &e->g->step; /* offloaded: each rank copies down (and sums) its own gradients */
    return s->world >= 1 && (s->zero >= 2 || (s->zero >= 1 && s->offload == VR_OFFLOAD_OPTIM));
}

vr_status vr__exec_comm_normsq(vr_exec *e, float *normsq, void *stream)
{
    return vr__exec_norm_sharded(e) ? vr_comm_allreduce(e->cfg.comm, normsq, 1, VR_F32, VR_COMM_SUM, stream) : VR_OK;
}

vr_status vr__exec_comm_normsq_host(vr_exec *e, float *normsq)
{
    if (!vr__exec_norm_sharded(e))
        return VR_OK;
    double v = *normsq;
    vr_status st = vr_comm_sum_host(e->cfg.comm, &v, 1);
    *normsq = (float)v;
    return st;
}
