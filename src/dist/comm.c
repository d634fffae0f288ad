/* The communicator's public calls: argument checks, then the engine's function. Also the `self` engine
 * (a world of one rank, where every collective leaves the buffer as it is) and the launcher test.
 *
 * Checked here for every engine: the communicator is given, n >= 0, buf is given when n > 0, root is a
 * rank, the dtype is a vram dtype (reductions: f32, bf16 or f16 only), the op is SUM or AVG. A collective
 * over 0 elements returns at once on every engine (every rank passes the same n). */
#define _POSIX_C_SOURCE 200809L
#include "dist/comm_impl.h"

#include <stdlib.h>

vr_comm *vr__comm_new(const vr_comm_ops *ops, vr_comm_engine engine)
{
    vr_comm *c = calloc(1, sizeof *c);
    if (!c) {
        vr_error(VR_ERR_OOM, "dist: out of host memory for a communicator");
        return NULL;
    }
    c->ops = ops;
    c->engine = engine;
    c->size = 1;
    return c;
}

/* ---- argument checks ---- */

static vr_status check_common(const vr_comm *c, const char *what, const void *buf, int64_t n)
{
    if (!c)
        return vr_error(VR_ERR_INVALID, "dist: %s: no communicator", what);
    if (n < 0)
        return vr_error(VR_ERR_INVALID, "dist: %s: negative element count %lld", what, (long long)n);
    if (n > 0 && !buf)
        return vr_error(VR_ERR_INVALID, "dist: %s: NULL buffer for %lld elements", what, (long long)n);
    return VR_OK;
}

static vr_status check_reduction(const vr_comm *c, const char *what, const void *buf, int64_t n, vr_dtype dt,
                                 vr_comm_op op)
{
    vr_status st = check_common(c, what, buf, n);
    if (st != VR_OK)
        return st;
    if (dt != VR_F32 && dt != VR_BF16 && dt != VR_F16)
        return vr_error(VR_ERR_INVALID, "dist: %s: dtype %d cannot be reduced (f32, bf16 or f16 only)", what,
                        (int)dt);
    if (op != VR_COMM_SUM && op != VR_COMM_AVG)
        return vr_error(VR_ERR_INVALID, "dist: %s: unknown op %d (sum or avg)", what, (int)op);
    return VR_OK;
}

static vr_status check_root(const vr_comm *c, const char *what, int root)
{
    if (root < 0 || root >= c->size)
        return vr_error(VR_ERR_INVALID, "dist: %s: root %d is not a rank (world of %d)", what, root, c->size);
    return VR_OK;
}

/* ---- public calls ---- */

vr_status vr_comm_allreduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, void *stream)
{
    vr_status st = check_reduction(c, "allreduce", buf, n, dt, op);
    if (st != VR_OK || n == 0)
        return st;
    return c->ops->allreduce(c, buf, n, dt, op, stream);
}

vr_status vr_comm_reduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root, void *stream)
{
    vr_status st = check_reduction(c, "reduce", buf, n, dt, op);
    if (st == VR_OK)
        st = check_root(c, "reduce", root);
    if (st != VR_OK || n == 0)
        return st;
    return c->ops->reduce(c, buf, n, dt, op, root, stream);
}

vr_status vr_comm_broadcast(vr_comm *c, void *buf, int64_t n, vr_dtype dt, int root, void *stream)
{
    vr_status st = check_common(c, "broadcast", buf, n);
    if (st != VR_OK)
        return st;
    if ((int)dt < 0 || dt >= VR_DTYPE_COUNT)
        return vr_error(VR_ERR_INVALID, "dist: broadcast: unknown dtype %d", (int)dt);
    st = check_root(c, "broadcast", root);
    if (st != VR_OK || n == 0)
        return st;
    return c->ops->broadcast(c, buf, n, dt, root, stream);
}

vr_status vr_comm_group_begin(vr_comm *c)
{
    if (!c)
        return vr_error(VR_ERR_INVALID, "dist: group_begin: no communicator");
    return c->ops->group_begin ? c->ops->group_begin(c) : VR_OK;
}

vr_status vr_comm_group_end(vr_comm *c)
{
    if (!c)
        return vr_error(VR_ERR_INVALID, "dist: group_end: no communicator");
    return c->ops->group_end ? c->ops->group_end(c) : VR_OK;
}

static vr_status host(vr_comm *c, double *v, int n, bool min)
{
    const char *what = min ? "min_host" : "sum_host";
    vr_status st = check_common(c, what, v, n);
    if (st != VR_OK || n == 0)
        return st;
    return c->ops->host(c, v, n, min);
}

vr_status vr_comm_sum_host(vr_comm *c, double *v, int n) { return host(c, v, n, false); }
vr_status vr_comm_min_host(vr_comm *c, double *v, int n) { return host(c, v, n, true); }

vr_status vr_comm_sum_host_f32(vr_comm *c, float *v, int64_t n)
{
    vr_status st = check_common(c, "sum_host_f32", v, n);
    if (st != VR_OK || n == 0 || !c->ops->host_f32)
        return st;
    return c->ops->host_f32(c, v, n);
}

int vr_comm_rank(const vr_comm *c) { return c ? c->rank : 0; }
int vr_comm_size(const vr_comm *c) { return c ? c->size : 1; }
vr_comm_engine vr_comm_engine_of(const vr_comm *c) { return c ? c->engine : VR_COMM_SELF; }
uint64_t vr_comm_own_bytes(const vr_comm *c) { return c ? c->own_bytes : 0; }

const char *vr_comm_engine_name(const vr_comm *c)
{
    switch (vr_comm_engine_of(c)) {
    case VR_COMM_SELF: return "self";
    case VR_COMM_MPI: return "mpi";
    case VR_COMM_NCCL: return "nccl";
    }
    return "unknown";
}

void vr_comm_free(vr_comm *c)
{
    if (!c)
        return;
    if (c->ops->free)
        c->ops->free(c);
    free(c);
}

/* Set by mpirun/orterun (OpenMPI), by MPICH's and Slurm's PMI, and by PMIx launchers (srun --mpi=pmix). */
bool vr_comm_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int vr_comm_mpi_launched_size(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    long n = v ? strtol(v, NULL, 10) : 0;
    return n > 0 && n <= VR_MAX_RANKS ? (int)n : 0;
}

/* ---- the self engine: one rank, so the sum, the mean and the root's buffer are this buffer ---- */

static vr_status self_allreduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, void *stream)
{
    (void)c, (void)buf, (void)n, (void)dt, (void)op, (void)stream;
    return VR_OK;
}

static vr_status self_reduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root, void *stream)
{
    (void)c, (void)buf, (void)n, (void)dt, (void)op, (void)root, (void)stream;
    return VR_OK;
}

static vr_status self_broadcast(vr_comm *c, void *buf, int64_t n, vr_dtype dt, int root, void *stream)
{
    (void)c, (void)buf, (void)n, (void)dt, (void)root, (void)stream;
    return VR_OK;
}

static vr_status self_host(vr_comm *c, double *v, int n, bool min)
{
    (void)c, (void)v, (void)n, (void)min;
    return VR_OK;
}

static const vr_comm_ops self_ops = {
    .allreduce = self_allreduce,
    .reduce = self_reduce,
    .broadcast = self_broadcast,
    .host = self_host,
};

vr_status vr_comm_self(vr_comm **out)
{
    if (!out)
        return vr_error(VR_ERR_INVALID, "dist: vr_comm_self: no output pointer");
    *out = vr__comm_new(&self_ops, VR_COMM_SELF);
    return *out ? VR_OK : VR_ERR_OOM;
}
