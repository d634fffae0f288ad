/* The cuda device: cudaMalloc/cudaFree segments, cudaMemGetInfo, streams and
 * events (virtual memory is in cuda_vm_cuda.c).
 *
 * Every call's return code is checked; a failed cudaMalloc is cleared from
 * the runtime's last error (cudaGetLastError) so that it does not surface
 * later as a kernel's error. Streams are non-blocking cudaStream_t handles
 * cast to vr_stream; events are cudaEvent_t handles (timing disabled) cast to
 * vr_event *, reused from a small pool because creating one is not free. */
#include "device/cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/util.h"

#define EVENT_POOL_MAX 1024

static cuda_device *cud(vr_device *dev) { return (cuda_device *)dev; }

/* Formats e, clears it from the runtime and returns VR_ERR_DEVICE. */
static vr_status fail(vr_device *dev, const char *what, cudaError_t e)
{
    char b[200];
    cudaGetLastError();
    return vr_error(VR_ERR_DEVICE, "device %s: %s: %s", dev->name, what, vr__cuda_err(e, b, sizeof b));
}

/* For void functions: reports e on stderr (there is no caller to tell). */
static void complain(vr_device *dev, const char *what, cudaError_t e)
{
    char b[200];
    cudaGetLastError();
    fprintf(stderr, "vram: device %s: %s: %s\n", dev->name, what, vr__cuda_err(e, b, sizeof b));
}

static uint64_t cuda_used(vr_device *dev) { return vr__device_read_locked(dev, &cud(dev)->used); }

static vr_status cuda_mem_info(vr_device *dev, vr_device_mem *out)
{
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return fail(dev, "cudaMemGetInfo", e);
    out->total = total_b;
    out->free = free_b;
    pthread_mutex_lock(&dev->lock);
    out->used_by_us = cud(dev)->used;
    pthread_mutex_unlock(&dev->lock);
    return VR_OK;
}

static vr_status cuda_malloc(vr_device *dev, size_t bytes, void **ptr)
{
    cuda_device *c = cud(dev);
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
            cudaGetLastError();
        pthread_mutex_lock(&dev->lock);
        uint64_t ours = c->used;
        pthread_mutex_unlock(&dev->lock);
        char b[32], f[32], t[32], o[32];
        return vr_error(VR_ERR_OOM,
                        "device %s: out of memory: cudaMalloc of %s failed with %s free of %s on the GPU "
                        "(%s of it held through this device)",
                        dev->name, vr_format_size(bytes, b, sizeof b), vr_format_size(free_b, f, sizeof f),
                        vr_format_size(total_b, t, sizeof t), vr_format_size(ours, o, sizeof o));
    }
    if (e != cudaSuccess)
        return fail(dev, "cudaMalloc", e);
    uint64_t size = vr__round_up(bytes, VR_DEVICE_ALIGN);
    pthread_mutex_lock(&dev->lock);
    bool ok = vr__ptrmap_put(&c->live, (uintptr_t)p, size);
    if (ok)
        c->used += size;
    pthread_mutex_unlock(&dev->lock);
    if (!ok) {
        if ((e = cudaFree(p)) != cudaSuccess)
            complain(dev, "cudaFree", e);
        return vr_error(VR_ERR_OOM, "device %s: no host memory to track an allocation", dev->name);
    }
    *ptr = p;
    return VR_OK;
}

static void cuda_free(vr_device *dev, void *ptr, size_t bytes)
{
    cuda_device *c = cud(dev);
    uint64_t size = 0;
    pthread_mutex_lock(&dev->lock);
    bool known = vr__ptrmap_take(&c->live, (uintptr_t)ptr, &size);
    if (known)
        c->used -= size;
    pthread_mutex_unlock(&dev->lock);
    if (!known) {
        fprintf(stderr, "vram: device %s: free(%p, %zu): not a live allocation; ignored\n", dev->name, ptr, bytes);
        return;
    }
    if (size != vr__round_up(bytes, VR_DEVICE_ALIGN))
        fprintf(stderr, "vram: device %s: free(%p, %zu): it was allocated with %llu bytes\n", dev->name, ptr, bytes,
                (unsigned long long)size);
    if (vr__cuda_use(dev->index) != VR_OK)
        fprintf(stderr, "vram: %s\n", vr_last_error());
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess)
        complain(dev, "cudaFree", e);
}

static vr_status cuda_stream_create(vr_device *dev, vr_stream *out)
{
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return fail(dev, "cudaStreamCreateWithFlags", e);
    *out = (vr_stream)s;
    return VR_OK;
}

static void cuda_stream_destroy(vr_device *dev, vr_stream s)
{
    cudaError_t e = cudaStreamDestroy((cudaStream_t)s);
    if (e != cudaSuccess)
        complain(dev, "cudaStreamDestroy", e);
}

static vr_status cuda_event_record(vr_device *dev, vr_stream s, vr_event **out)
{
    cuda_device *c = cud(dev);
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    cudaEvent_t ev = NULL;
    pthread_mutex_lock(&dev->lock);
    if (c->npool)
        ev = c->pool[--c->npool];
    pthread_mutex_unlock(&dev->lock);
    cudaError_t e;
    if (!ev && (e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
        return fail(dev, "cudaEventCreateWithFlags", e);
    if ((e = cudaEventRecord(ev, (cudaStream_t)s)) != cudaSuccess) {
        st = fail(dev, "cudaEventRecord", e);
        if ((e = cudaEventDestroy(ev)) != cudaSuccess)
            complain(dev, "cudaEventDestroy", e);
        return st;
    }
    *out = (vr_event *)ev;
    return VR_OK;
}

static bool cuda_event_query(vr_device *dev, vr_event *ev)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaSuccess)
        return true;
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
    }
    complain(dev, "cudaEventQuery", e);
    return true;  /* an event that can never complete must not hold memory forever */
}

static void cuda_event_destroy(vr_device *dev, vr_event *ev)
{
    cuda_device *c = cud(dev);
    pthread_mutex_lock(&dev->lock);
    if (c->npool == c->cappool && c->cappool < EVENT_POOL_MAX) {
        size_t ncap = c->cappool ? c->cappool * 2 : 64;
        cudaEvent_t *p = realloc(c->pool, ncap * sizeof *p);
        if (p) {
            c->pool = p;
            c->cappool = ncap;
        }
    }
    bool pooled = c->npool < c->cappool;
    if (pooled)
        c->pool[c->npool++] = (cudaEvent_t)ev;
    pthread_mutex_unlock(&dev->lock);
    cudaError_t e;
    if (!pooled && (e = cudaEventDestroy((cudaEvent_t)ev)) != cudaSuccess)
        complain(dev, "cudaEventDestroy", e);
}

static vr_status cuda_event_sync(vr_device *dev, vr_event *ev)
{
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev);
    vr_status st = e == cudaSuccess ? VR_OK : fail(dev, "cudaEventSynchronize", e);
    cuda_event_destroy(dev, ev);
    return st;
}

static vr_status cuda_use(vr_device *dev) { return vr__cuda_use(dev->index); }

static vr_status cuda_synchronize(vr_device *dev)
{
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? VR_OK : fail(dev, "cudaDeviceSynchronize", e);
}

static void cuda_close(vr_device *dev)
{
    cuda_device *c = cud(dev);
    if (c->live.count || c->vm.n)
        fprintf(stderr, "vram: device %s closed with %zu allocations and %zu reservations still live\n", dev->name,
                c->live.count, c->vm.n);
    for (size_t i = 0; i < c->npool; i++) {
        cudaError_t e = cudaEventDestroy(c->pool[i]);
        if (e != cudaSuccess)
            complain(dev, "cudaEventDestroy", e);
    }
    free(c->pool);
    vr__ptrmap_free(&c->live);
    vr__ptrmap_free(&c->phys_maps);
    vr__vm_free(&c->vm);
    vr__device_fini(dev);
    free(c);
}

/* Pinned host memory: copies from and to it run asynchronously at the link's full speed. */
static vr_status cuda_host_alloc(vr_device *dev, size_t bytes, void **ptr)
{
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    if (cudaHostAlloc(ptr, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        *ptr = NULL;
    }
    return VR_OK;
}

static void cuda_host_free(vr_device *dev, void *ptr)
{
    (void)dev;
    cudaFreeHost(ptr);
}

static const vr_device_ops cuda_ops = {
    .close = cuda_close,
    .mem_info = cuda_mem_info,
    .used = cuda_used,
    .malloc = cuda_malloc,
    .free = cuda_free,
    .vm_granularity = vr__cuda_vm_granularity,
    .vm_reserve = vr__cuda_vm_reserve,
    .vm_map = vr__cuda_vm_map,
    .vm_unmap = vr__cuda_vm_unmap,
    .vm_release = vr__cuda_vm_release,
    .phys_create = vr__cuda_phys_create,
    .phys_map = vr__cuda_phys_map,
    .phys_unmap = vr__cuda_phys_unmap,
    .phys_unmap_idle = vr__cuda_phys_unmap_idle,
    .phys_map_granules = vr__cuda_phys_map_granules,
    .phys_release = vr__cuda_phys_release,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_destroy = cuda_event_destroy,
    .synchronize = cuda_synchronize,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .use = cuda_use,
};

/* Read/write access for device, added to the list every mapping of c gets. */
static void add_access(cuda_device *c, int device)
{
    if (c->naccess == VR_CUDA_MAX_PEERS)
        return;
    CUmemAccessDesc *a = &c->access[c->naccess++];
    memset(a, 0, sizeof *a);
    a->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a->location.id = device;
    a->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* The access every mapping of device `index` gets: read/write for it and for each device that can reach
 * its memory peer to peer (cudaDeviceCanAccessPeer). */
static void grant_access(cuda_device *c, int index)
{
    int count = 0, can = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        count = 0, cudaGetLastError();
    c->naccess = 0;
    add_access(c, index);
    for (int d = 0; d < count; d++) {
        if (d != index && cudaDeviceCanAccessPeer(&can, d, index) == cudaSuccess && can)
            add_access(c, d);
        cudaGetLastError();
    }
}

vr_status vr__cuda_open(int index, const char *spec, vr_device **out)
{
    *out = NULL;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "device '%.40s'", spec);
    vr_status st = vr__cuda_create_context(index);
    if (st != VR_OK)
        return vr__error_prefix(st, prefix);
    vr_cuda_info info;
    st = vr_cuda_device_info(index, &info);
    if (st != VR_OK)
        return vr__error_prefix(st, prefix);
    cuda_device *c = calloc(1, sizeof *c);
    if (!c)
        return vr_error(VR_ERR_OOM, "device '%s': no host memory", spec);
    char name[sizeof c->base.name];
    snprintf(name, sizeof name, "cuda:%d (%.150s)", index, info.name);
    vr__device_init(&c->base, &cuda_ops, VR_DEVICE_CUDA, name);
    c->base.index = index;
    c->vm.granule = info.vm_supported ? info.vm_granularity : 0;
    grant_access(c, index);
    *out = &c->base;
    return VR_OK;
}
