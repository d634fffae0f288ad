/* The NCCL engine (CUDA builds): NCCL is loaded at run time with dlopen, so that vram builds and starts
 * where it is not installed; only the entry points used here are declared (no nccl.h), with the types and
 * values of NCCL's public API (nccl.h, 2.10 and later: ncclAvg and ncclBfloat16 need 2.10).
 *
 * The library is looked for as libnccl.so.2, then libnccl.so, then inside Python packages (PyTorch's pip
 * wheels carry their own: .../site-packages/nvidia/nccl/lib/libnccl.so.2).
 *
 * One rank per process, on the CUDA device current when it joins. Collectives are queued on the caller's
 * stream (asynchronous); host values (sum_host, min_host) go through a small device buffer of the
 * communicator on the default stream and block. NVLink multicast (NVLS) is turned off unless the
 * environment says otherwise: NCCL_NVLS_ENABLE=0 before the first communicator.
 *
 * own_bytes is the drop in the device's free memory across joining: cudaMemGetInfo before
 * ncclCommInitRank, and after it plus the allocation of the host-values buffer and one warm-up all-reduce
 * on it (NCCL allocates some buffers lazily, at the first collective). Other processes allocating on the
 * same GPU at that moment would disturb the figure.
 *
 * UNTESTED where vram is developed (no GPU): this file is only compiled there. What needs a GPU machine:
 * loading NCCL, ids, joining, every collective, own_bytes, and freeing (destroy or abort). */
#define _GNU_SOURCE
#include "dist/comm_impl.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

/* ---- the NCCL API (values from nccl.h) ---- */

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[VR_COMM_ID_BYTES]; } ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclSum = 0, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
    ncclUint8 = 1, ncclInt32 = 2, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;

#define MIN_VERSION 21000   /* 2.10.0: ncclAvg, ncclBfloat16 */
#define HOST_CAP 256        /* doubles in the host-values buffer */

static struct {
    void *lib;
    char path[512];
    int version;
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    bool ok;
    char why[768];
} nc;

static pthread_once_t nc_once = PTHREAD_ONCE_INIT;

static void *try_open(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h)
        snprintf(nc.path, sizeof nc.path, "%s", path);
    return h;
}

/* The first match of a glob pattern that loads. */
static void *try_glob(const char *pattern)
{
    glob_t g;
    void *h = NULL;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !h; i++)
            h = try_open(g.gl_pathv[i]);
        globfree(&g);
    }
    return h;
}

static void *open_nccl(void)
{
    void *h = try_open("libnccl.so.2");
    if (!h)
        h = try_open("libnccl.so");
    static const char *const roots[] = {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                                        "/usr/lib/python3*/dist-packages", "/opt/conda/lib/python3*/site-packages"};
    char pattern[1024];
    for (size_t i = 0; !h && i < sizeof roots / sizeof roots[0]; i++) {
        snprintf(pattern, sizeof pattern, "%s/nvidia/nccl/lib/libnccl.so.2", roots[i]);
        h = try_glob(pattern);
    }
    const char *venv = getenv("VIRTUAL_ENV"), *home = getenv("HOME");
    if (!h && venv && *venv) {
        snprintf(pattern, sizeof pattern, "%s/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2", venv);
        h = try_glob(pattern);
    }
    if (!h && home && *home) {
        snprintf(pattern, sizeof pattern, "%s/.local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2", home);
        h = try_glob(pattern);
    }
    return h;
}

static void *sym(const char *name)
{
    void *p = dlsym(nc.lib, name);
    if (!p && !nc.why[0])
        snprintf(nc.why, sizeof nc.why, "dist: %s has no %s", nc.path, name);
    return p;
}

static void load(void)
{
    nc.lib = open_nccl();
    if (!nc.lib) {
        snprintf(nc.why, sizeof nc.why, "dist: cannot load NCCL (libnccl.so.2 not found; install libnccl2 or PyTorch's "
                 "nvidia-nccl wheel)");
        return;
    }
    *(void **)&nc.get_version = sym("ncclGetVersion");
    *(void **)&nc.get_unique_id = sym("ncclGetUniqueId");
    *(void **)&nc.comm_init_rank = sym("ncclCommInitRank");
    *(void **)&nc.comm_destroy = sym("ncclCommDestroy");
    *(void **)&nc.comm_abort = sym("ncclCommAbort");
    *(void **)&nc.all_reduce = sym("ncclAllReduce");
    *(void **)&nc.reduce = sym("ncclReduce");
    *(void **)&nc.broadcast = sym("ncclBroadcast");
    *(void **)&nc.group_start = sym("ncclGroupStart");
    *(void **)&nc.group_end = sym("ncclGroupEnd");
    *(void **)&nc.error_string = sym("ncclGetErrorString");
    *(void **)&nc.async_error = sym("ncclCommGetAsyncError");
    if (nc.why[0])
        return;
    if (nc.get_version(&nc.version) != ncclSuccess || nc.version < MIN_VERSION) {
        snprintf(nc.why, sizeof nc.why, "dist: %s is NCCL version code %d; vram needs 2.10 or later", nc.path,
                 nc.version);
        return;
    }
    nc.ok = true;
}

static vr_status need_nccl(void)
{
    pthread_once(&nc_once, load);
    return nc.ok ? VR_OK : vr_error(VR_ERR_UNSUPPORTED, "%s", nc.why);
}

static vr_status nccl_fail(const char *call, ncclResult_t r)
{
    return vr_error(VR_ERR_DEVICE, "dist: %s failed: %s", call, nc.error_string(r));
}

static vr_status cuda_fail(const char *call, cudaError_t e)
{
    cudaGetLastError();   /* clear it: the error was reported here */
    return vr_error(VR_ERR_DEVICE, "dist: %s failed: %s", call, cudaGetErrorString(e));
}

bool vr_comm_nccl_available(int *version)
{
    bool ok = need_nccl() == VR_OK;   /* when false, vr_last_error() says why */
    if (version)
        *version = ok ? nc.version : 0;
    return ok;
}

vr_status vr_comm_nccl_id(char hex[VR_COMM_ID_HEX])
{
    if (!hex)
        return vr_error(VR_ERR_INVALID, "dist: vr_comm_nccl_id: no output buffer");
    hex[0] = '\0';
    vr_status st = need_nccl();
    if (st != VR_OK)
        return st;
    ncclUniqueId id;
    ncclResult_t r = nc.get_unique_id(&id);
    if (r != ncclSuccess)
        return nccl_fail("ncclGetUniqueId", r);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < VR_COMM_ID_BYTES; i++) {
        unsigned char b = (unsigned char)id.internal[i];
        hex[2 * i] = digits[b >> 4];
        hex[2 * i + 1] = digits[b & 15];
    }
    hex[2 * VR_COMM_ID_BYTES] = '\0';
    return VR_OK;
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static vr_status parse_id(const char *hex, ncclUniqueId *id)
{
    if (!hex || strlen(hex) != 2 * VR_COMM_ID_BYTES)
        return vr_error(VR_ERR_INVALID, "dist: an NCCL id is %d hex digits (got %zu)", 2 * VR_COMM_ID_BYTES,
                        hex ? strlen(hex) : (size_t)0);
    for (int i = 0; i < VR_COMM_ID_BYTES; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return vr_error(VR_ERR_INVALID, "dist: the NCCL id has a non-hex character at %d", hi < 0 ? 2 * i : 2 * i + 1);
        id->internal[i] = (char)(hi << 4 | lo);
    }
    return VR_OK;
}

/* ---- the engine ---- */

typedef struct nccl_comm {
    ncclComm_t comm;
    int device;        /* the CUDA device the rank joined on */
    double *dev_host;  /* HOST_CAP doubles on the device, for sum_host / min_host */
} nccl_comm;

static ncclDataType_t nccl_type(vr_dtype dt)
{
    switch (dt) {
    case VR_F32: return ncclFloat32;
    case VR_BF16: return ncclBfloat16;
    case VR_F16: return ncclFloat16;
    case VR_I32: return ncclInt32;
    case VR_U8: return ncclUint8;
    case VR_U16: return ncclFloat16; /* raw 16 bits, only copied (comm.c reduces f32, bf16, f16 alone) */
    case VR_DTYPE_COUNT: break;
    }
    return ncclUint8;   /* not reached: comm.c checked dt */
}

static vr_status nccl_allreduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, void *stream)
{
    nccl_comm *e = c->impl;
    ncclResult_t r = nc.all_reduce(buf, buf, (size_t)n, nccl_type(dt), op == VR_COMM_AVG ? ncclAvg : ncclSum, e->comm,
                                   (cudaStream_t)stream);
    return r == ncclSuccess ? VR_OK : nccl_fail("ncclAllReduce", r);
}

static vr_status nccl_reduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root, void *stream)
{
    nccl_comm *e = c->impl;
    ncclResult_t r = nc.reduce(buf, buf, (size_t)n, nccl_type(dt), op == VR_COMM_AVG ? ncclAvg : ncclSum, root,
                               e->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? VR_OK : nccl_fail("ncclReduce", r);
}

static vr_status nccl_broadcast(vr_comm *c, void *buf, int64_t n, vr_dtype dt, int root, void *stream)
{
    nccl_comm *e = c->impl;
    ncclResult_t r = nc.broadcast(buf, buf, (size_t)n, nccl_type(dt), root, e->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? VR_OK : nccl_fail("ncclBroadcast", r);
}

static vr_status nccl_group_begin(vr_comm *c)
{
    (void)c;
    ncclResult_t r = nc.group_start();
    return r == ncclSuccess ? VR_OK : nccl_fail("ncclGroupStart", r);
}

static vr_status nccl_group_end(vr_comm *c)
{
    (void)c;
    ncclResult_t r = nc.group_end();
    return r == ncclSuccess ? VR_OK : nccl_fail("ncclGroupEnd", r);
}

/* HOST_CAP doubles at a time through the device buffer, on the default stream of the comm's device. */
static vr_status host_chunk(nccl_comm *e, double *v, int n, bool min)
{
    cudaError_t ce = cudaMemcpy(e->dev_host, v, (size_t)n * sizeof *v, cudaMemcpyHostToDevice);
    if (ce != cudaSuccess)
        return cuda_fail("cudaMemcpy (host values to the device)", ce);
    ncclResult_t r = nc.all_reduce(e->dev_host, e->dev_host, (size_t)n, ncclFloat64, min ? ncclMin : ncclSum, e->comm,
                                   (cudaStream_t)0);
    if (r != ncclSuccess)
        return nccl_fail("ncclAllReduce (host values)", r);
    ce = cudaStreamSynchronize((cudaStream_t)0);
    if (ce != cudaSuccess)
        return cuda_fail("cudaStreamSynchronize (host values)", ce);
    ncclResult_t async = ncclSuccess;
    r = nc.async_error(e->comm, &async);
    if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
        return nccl_fail("ncclAllReduce (host values, asynchronous)", r != ncclSuccess ? r : async);
    ce = cudaMemcpy(v, e->dev_host, (size_t)n * sizeof *v, cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess)
        return cuda_fail("cudaMemcpy (host values from the device)", ce);
    return VR_OK;
}

/* The host collectives run on the communicator's device: made current (the caller's *prev), then given back. */
static vr_status enter_device(const nccl_comm *e, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess)
        *prev = -1;
    cudaError_t ce = cudaSetDevice(e->device);
    return ce == cudaSuccess ? VR_OK : cuda_fail("cudaSetDevice", ce);
}

static void leave_device(const nccl_comm *e, int prev)
{
    if (prev >= 0 && prev != e->device)
        cudaSetDevice(prev);
}

static vr_status nccl_host(vr_comm *c, double *v, int n, bool min)
{
    nccl_comm *e = c->impl;
    int prev;
    vr_status st = enter_device(e, &prev);
    for (int i = 0; i < n && st == VR_OK; i += HOST_CAP)
        st = host_chunk(e, v + i, n - i < HOST_CAP ? n - i : HOST_CAP, min);
    leave_device(e, prev);
    return st;
}

/* Host floats through a staging buffer of at most 32 MiB, allocated for the call and freed after it (a
 * checkpoint's gather: outside the step, so outside the plan). */
static vr_status nccl_host_f32(vr_comm *c, float *v, int64_t n)
{
    nccl_comm *e = c->impl;
    int prev;
    vr_status st = enter_device(e, &prev);
    if (st)
        return st;
    int64_t cap = n < (8 << 20) ? n : (8 << 20);
    float *d = NULL;
    cudaError_t ce = cudaMalloc((void **)&d, (size_t)cap * sizeof *d);
    if (ce != cudaSuccess)
        st = cuda_fail("cudaMalloc (the staging buffer of a host gather)", ce);
    for (int64_t i = 0; i < n && st == VR_OK; i += cap) {
        size_t k = (size_t)(n - i < cap ? n - i : cap);
        if ((ce = cudaMemcpy(d, v + i, k * sizeof *d, cudaMemcpyHostToDevice)) != cudaSuccess) {
            st = cuda_fail("cudaMemcpy (host floats to the device)", ce);
            break;
        }
        ncclResult_t r = nc.all_reduce(d, d, k, ncclFloat32, ncclSum, e->comm, (cudaStream_t)0);
        if (r != ncclSuccess) {
            st = nccl_fail("ncclAllReduce (host floats)", r);
            break;
        }
        if ((ce = cudaMemcpy(v + i, d, k * sizeof *d, cudaMemcpyDeviceToHost)) != cudaSuccess)
            st = cuda_fail("cudaMemcpy (host floats from the device)", ce);
    }
    cudaFree(d);
    leave_device(e, prev);
    return st;
}

/* Destroys the NCCL communicator, or aborts it when it has failed (a dead peer would make destroy wait). */
static void nccl_free(vr_comm *c)
{
    nccl_comm *e = c->impl;
    if (!e)
        return;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    cudaSetDevice(e->device);
    if (e->comm) {
        ncclResult_t async = ncclSuccess;
        if (nc.async_error(e->comm, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress) ||
            nc.comm_destroy(e->comm) != ncclSuccess)
            nc.comm_abort(e->comm);
    }
    if (e->dev_host)
        cudaFree(e->dev_host);
    cudaGetLastError();
    if (prev >= 0 && prev != e->device)
        cudaSetDevice(prev);
    free(e);
    c->impl = NULL;
}

static const vr_comm_ops nccl_ops = {
    .allreduce = nccl_allreduce,
    .reduce = nccl_reduce,
    .broadcast = nccl_broadcast,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
    .host = nccl_host,
    .host_f32 = nccl_host_f32,
    .free = nccl_free,
};

/* The host-values buffer, and one all-reduce on it so that NCCL's lazily allocated buffers exist. */
static vr_status warm_up(nccl_comm *e)
{
    cudaError_t ce = cudaMalloc((void **)&e->dev_host, HOST_CAP * sizeof(double));
    if (ce != cudaSuccess) {
        e->dev_host = NULL;
        return cuda_fail("cudaMalloc (host-values buffer)", ce);
    }
    ce = cudaMemset(e->dev_host, 0, HOST_CAP * sizeof(double));
    if (ce != cudaSuccess)
        return cuda_fail("cudaMemset", ce);
    ncclResult_t r = nc.all_reduce(e->dev_host, e->dev_host, 1, ncclFloat32, ncclSum, e->comm, (cudaStream_t)0);
    if (r != ncclSuccess)
        return nccl_fail("ncclAllReduce (warm-up)", r);
    ce = cudaStreamSynchronize((cudaStream_t)0);
    if (ce != cudaSuccess)
        return cuda_fail("cudaStreamSynchronize (warm-up)", ce);
    return VR_OK;
}

vr_status vr_comm_nccl(const char *id_hex, int rank, int world, vr_comm **out)
{
    if (!out)
        return vr_error(VR_ERR_INVALID, "dist: vr_comm_nccl: no output pointer");
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return vr_error(VR_ERR_INVALID, "dist: NCCL rank %d is not in a world of %d", rank, world);
    ncclUniqueId id;
    vr_status st = parse_id(id_hex, &id);
    if (st == VR_OK)
        st = need_nccl();
    if (st != VR_OK)
        return st;
    if (!getenv("NCCL_NVLS_ENABLE"))
        setenv("NCCL_NVLS_ENABLE", "0", 0);   /* NVLink multicast stays off unless asked for */

    vr_comm *c = vr__comm_new(&nccl_ops, VR_COMM_NCCL);
    nccl_comm *e = calloc(1, sizeof *e);
    if (!c || !e) {
        free(c);
        free(e);
        return vr_error(VR_ERR_OOM, "dist: out of host memory for a communicator");
    }
    c->impl = e;
    c->rank = rank;
    c->size = world;
    size_t free0 = 0, free1 = 0, total = 0;
    cudaError_t ce = cudaGetDevice(&e->device);
    if (ce == cudaSuccess)
        ce = cudaMemGetInfo(&free0, &total);   /* creates the context first, if it was not there */
    if (ce != cudaSuccess) {
        st = cuda_fail("cudaGetDevice/cudaMemGetInfo", ce);
        goto fail;
    }
    ncclResult_t r = nc.comm_init_rank(&e->comm, world, id, rank);
    if (r != ncclSuccess) {
        e->comm = NULL;
        st = nccl_fail("ncclCommInitRank", r);
        goto fail;
    }
    st = warm_up(e);
    if (st != VR_OK)
        goto fail;
    ce = cudaMemGetInfo(&free1, &total);
    if (ce != cudaSuccess) {
        st = cuda_fail("cudaMemGetInfo", ce);
        goto fail;
    }
    c->own_bytes = free0 > free1 ? (uint64_t)(free0 - free1) : 0;
    *out = c;
    return VR_OK;
fail:
    vr_comm_free(c);
    return st;
}
