/* The MPI engine (built where CMake finds MPI): host buffers, blocking collectives over MPI_COMM_WORLD.
 *
 * MPI is initialised once per process by the first vr_comm_mpi (MPI_THREAD_FUNNELED: only the thread that
 * initialised it calls MPI), its error handler set to return codes instead of aborting, and finalised when
 * the last communicator is freed — unless the program had initialised MPI itself, which then keeps it.
 * MPI cannot be initialised twice in a process: vr_comm_mpi after that final free says so.
 *
 * f32 is reduced in place (MPI_IN_PLACE, MPI_SUM); AVG is the sum divided by the world size, in f32.
 * bf16 and f16 are widened into an f32 scratch of at most CHUNK elements, reduced, and rounded back once
 * (round to nearest even, vr_convert). Counts beyond INT_MAX go in several calls. */
#define _POSIX_C_SOURCE 200809L
#include "dist/comm_impl.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include <mpi.h>

#include "vram/convert.h"

#define CHUNK ((int64_t)1 << 24)   /* elements per call for widened 16-bit buffers (64 MiB of f32) */

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int live;          /* communicators not yet freed */
static bool we_init;      /* MPI_Init_thread was ours, so MPI_Finalize is too */

bool vr_comm_mpi_built(void) { return true; }

static vr_status mpi_fail(const char *call, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len] = '\0';
    return vr_error(VR_ERR_DEVICE, "dist: %s failed: %s", call, len ? msg : "unknown MPI error");
}

/* ---- reductions ---- */

/* buf (f32, n <= INT_MAX) summed in place: over every rank (root < 0) or onto root. */
static vr_status sum_f32(vr_comm *c, float *buf, int n, int root)
{
    int rc;
    if (root < 0)
        rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (c->rank == root)
        rc = MPI_Reduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    else
        rc = MPI_Reduce(buf, NULL, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        return mpi_fail(root < 0 ? "MPI_Allreduce" : "MPI_Reduce", rc);
    return VR_OK;
}

static void divide(float *buf, int64_t n, int size)
{
    float s = (float)size;
    for (int64_t i = 0; i < n; i++)
        buf[i] /= s;
}

/* The reduction behind allreduce (root < 0) and reduce. */
static vr_status reduction(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root)
{
    bool result_here = root < 0 || c->rank == root;
    if (dt == VR_F32) {
        float *f = buf;
        for (int64_t i = 0; i < n; i += INT_MAX) {
            int k = (int)(n - i < INT_MAX ? n - i : INT_MAX);
            vr_status st = sum_f32(c, f + i, k, root);
            if (st != VR_OK)
                return st;
        }
        if (op == VR_COMM_AVG && result_here)
            divide(f, n, c->size);
        return VR_OK;
    }
    /* bf16 / f16: through an f32 scratch, chunk by chunk */
    int64_t cap = n < CHUNK ? n : CHUNK;
    float *w = malloc((size_t)cap * sizeof *w);
    if (!w)
        return vr_error(VR_ERR_OOM, "dist: out of host memory for a %lld-element f32 scratch", (long long)cap);
    vr_status st = VR_OK;
    uint16_t *h = buf;
    for (int64_t i = 0; i < n && st == VR_OK; i += cap) {
        int k = (int)(n - i < cap ? n - i : cap);
        vr_convert(VR_F32, w, dt, h + i, (size_t)k);
        st = sum_f32(c, w, k, root);
        if (st == VR_OK && result_here) {
            if (op == VR_COMM_AVG)
                divide(w, k, c->size);
            vr_convert(dt, h + i, VR_F32, w, (size_t)k);
        }
    }
    free(w);
    return st;
}

static vr_status mpi_allreduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, void *stream)
{
    (void)stream;
    return reduction(c, buf, n, dt, op, -1);
}

static vr_status mpi_reduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root, void *stream)
{
    (void)stream;
    return reduction(c, buf, n, dt, op, root);
}

/* ---- broadcast: bytes, whatever the dtype ---- */

static vr_status mpi_broadcast(vr_comm *c, void *buf, int64_t n, vr_dtype dt, int root, void *stream)
{
    (void)c, (void)stream;
    int64_t bytes = n * (int64_t)vr_dtype_size(dt);
    for (int64_t i = 0; i < bytes; i += INT_MAX) {
        int k = (int)(bytes - i < INT_MAX ? bytes - i : INT_MAX);
        int rc = MPI_Bcast((char *)buf + i, k, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpi_fail("MPI_Bcast", rc);
    }
    return VR_OK;
}

static vr_status mpi_host(vr_comm *c, double *v, int n, bool min)
{
    (void)c;
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, min ? MPI_MIN : MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        return mpi_fail("MPI_Allreduce", rc);
    return VR_OK;
}

static vr_status mpi_host_f32(vr_comm *c, float *v, int64_t n)
{
    (void)c;
    for (int64_t i = 0; i < n; i += 1 << 30) {
        int k = (int)(n - i < (1 << 30) ? n - i : (1 << 30));
        int rc = MPI_Allreduce(MPI_IN_PLACE, v + i, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpi_fail("MPI_Allreduce", rc);
    }
    return VR_OK;
}

/* ---- life ---- */

static void mpi_free(vr_comm *c)
{
    (void)c;
    pthread_mutex_lock(&mpi_lock);
    if (--live == 0 && we_init) {
        int done = 0;
        MPI_Finalized(&done);
        if (!done)
            MPI_Finalize();
    }
    pthread_mutex_unlock(&mpi_lock);
}

static const vr_comm_ops mpi_ops = {
    .allreduce = mpi_allreduce,
    .reduce = mpi_reduce,
    .broadcast = mpi_broadcast,
    .host = mpi_host,
    .host_f32 = mpi_host_f32,
    .free = mpi_free,
};

/* MPI initialised (by us or by the program), with MPI_COMM_WORLD's errors returned. Under mpi_lock. */
static vr_status ensure_init(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return vr_error(VR_ERR_UNSUPPORTED, "dist: MPI was already finalized in this process (it cannot start twice)");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return vr_error(VR_ERR_DEVICE, "dist: MPI_Init_thread failed (code %d)", rc);
        we_init = true;
    }
    int rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS)
        return mpi_fail("MPI_Comm_set_errhandler", rc);
    return VR_OK;
}

vr_status vr_comm_mpi(vr_comm **out)
{
    if (!out)
        return vr_error(VR_ERR_INVALID, "dist: vr_comm_mpi: no output pointer");
    *out = NULL;
    pthread_mutex_lock(&mpi_lock);
    vr_status st = ensure_init();
    vr_comm *c = NULL;
    if (st == VR_OK) {
        c = vr__comm_new(&mpi_ops, VR_COMM_MPI);
        if (!c)
            st = VR_ERR_OOM;
    }
    if (st == VR_OK) {
        int rc = MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_size(MPI_COMM_WORLD, &c->size);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail("MPI_Comm_rank/size", rc);
            free(c);
            c = NULL;
        }
    }
    if (st == VR_OK)
        live++;
    pthread_mutex_unlock(&mpi_lock);
    *out = c;
    return st;
}
