/* What a GPU is and what its CUDA context costs: vr_cuda_device_count,
 * vr_cuda_device_info, vr_cuda_context_cost.
 *
 * The context cost is measured when this process first creates the primary
 * context of a device: NVML's figure just before (nothing of ours is on the
 * device yet) and just after cudaSetDevice + cudaFree(0). The process's own
 * NVML figure is preferred; where NVML does not list our pid (another pid
 * namespace, as in many containers) the device-wide used memory is compared
 * instead, which other processes starting at the same moment would disturb.
 * A context vram creates gets a per-thread stack of VR_CUDA_STACK_BYTES first. */
#define _GNU_SOURCE
#include "device/cuda_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device/nvml.h"

#define MAX_DEVICES 64

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool created;          /* we made sure the primary context exists */
    vr_status cost_status; /* VR_OK when cost is known */
    uint64_t cost;
    size_t stack;          /* the stack a thread got (VR_CUDA_STACK_BYTES), 0: not ours to set */
    char why[256];         /* why the cost is unknown */
} ctx[MAX_DEVICES];

vr_status vr_cuda_device_count(int *count) { return vr__cuda_count(count); }

int vr_cuda_runtime_version(void)
{
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
        cudaGetLastError();
        v = 0;
    }
    return v;
}

static vr_status check_index(int index)
{
    int n;
    vr_status st = vr__cuda_count(&n);
    if (st != VR_OK)
        return st;
    if (index < 0 || index >= n || index >= MAX_DEVICES)
        return vr_error(VR_ERR_INVALID, "CUDA device index %d out of range (%d CUDA device%s here)", index, n,
                        n == 1 ? "" : "s");
    return VR_OK;
}

/* NVML handle of a CUDA ordinal, matched by PCI bus id (NVML's order and
 * CUDA_VISIBLE_DEVICES can differ from CUDA's). */
static vr_status nvml_of(int index, void **handle, char *bus, size_t cap)
{
    cudaError_t e = cudaDeviceGetPCIBusId(bus, (int)cap, index);
    if (e != cudaSuccess) {
        char b[160];
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "cuda:%d: cudaDeviceGetPCIBusId: %s", index, vr__cuda_err(e, b, sizeof b));
    }
    return vr__nvml_device(bus, handle);
}

/* Device-wide and own used bytes from NVML; own = -1 when not listed. */
static vr_status nvml_used(void *h, uint64_t *device, int64_t *own)
{
    vr_nvml_mem m;
    vr_status st = vr__nvml_memory(h, &m);
    if (st != VR_OK)
        return st;
    *device = m.used;
    if (vr__nvml_process_used(h, (unsigned)getpid(), own) != VR_OK)
        *own = -1;
    return VR_OK;
}

/* Call with ctx_lock held. */
static vr_status create_measured(int index)
{
    char bus[32], b[200];
    void *h = NULL;
    uint64_t dev_before = 0, dev_after = 0;
    int64_t own_before = -1, own_after = -1;
    bool have_nvml = nvml_of(index, &h, bus, sizeof bus) == VR_OK && nvml_used(h, &dev_before, &own_before) == VR_OK;
    if (!have_nvml)
        snprintf(ctx[index].why, sizeof ctx[index].why, "cuda:%d: context cost unknown (%s)", index, vr_last_error());

    const vr_cu_api *cu = vr__cu();
    if (!cu)
        return VR_ERR_DEVICE;
    CUdevice cudev;
    unsigned flags = 0;
    int active = 0;
    CUresult r = cu->DeviceGet(&cudev, index);
    if (r == CUDA_SUCCESS)
        r = cu->DevicePrimaryCtxGetState(cudev, &flags, &active);
    if (r != CUDA_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "cuda:%d: cuDevicePrimaryCtxGetState: %s", index, vr__cu_err(r, b, sizeof b));
    if (active && have_nvml) {
        have_nvml = false;
        snprintf(ctx[index].why, sizeof ctx[index].why,
                 "cuda:%d: context cost unknown (the context existed before vram could measure it)", index);
    }

    vr_status st = vr__cuda_use(index);
    if (st != VR_OK)
        return st;
    cudaError_t e = cudaFree(0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "cuda:%d: creating the context (cudaFree(0)): %s", index, vr__cuda_err(e, b, sizeof b));
    }
    ctx[index].created = true;
    /* Our context: its threads' stack trimmed before it is measured, so the cost is what this process holds. */
    if (!active) {
        e = cudaDeviceSetLimit(cudaLimitStackSize, VR_CUDA_STACK_BYTES);
        if (e == cudaSuccess)
            ctx[index].stack = VR_CUDA_STACK_BYTES;
        else
            cudaGetLastError();
    }
    if (have_nvml && nvml_used(h, &dev_after, &own_after) == VR_OK) {
        int64_t own0 = own_before > 0 ? own_before : 0;
        if (own_after >= 0)
            ctx[index].cost = own_after > own0 ? (uint64_t)(own_after - own0) : 0;
        else
            ctx[index].cost = dev_after > dev_before ? dev_after - dev_before : 0;
        ctx[index].cost_status = VR_OK;
    }
    return VR_OK;
}

vr_status vr__cuda_create_context(int index)
{
    vr_status st = check_index(index);
    if (st != VR_OK)
        return st;
    pthread_mutex_lock(&ctx_lock);
    if (!ctx[index].created) {
        ctx[index].cost_status = VR_ERR_UNSUPPORTED;
        st = create_measured(index);
    }
    pthread_mutex_unlock(&ctx_lock);
    if (st == VR_OK)
        st = vr__cuda_use(index);  /* the context is current on this thread too */
    return st;
}

vr_status vr_cuda_context_cost(int index, uint64_t *bytes)
{
    *bytes = 0;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        cudaGetLastError();
    vr_status st = vr__cuda_create_context(index);
    if (st != VR_OK)
        return st;
    if (prev >= 0 && prev != index && prev < MAX_DEVICES) {
        pthread_mutex_lock(&ctx_lock);
        bool prev_created = ctx[prev].created;
        pthread_mutex_unlock(&ctx_lock);
        if (prev_created)  /* switch back only where that creates no context */
            vr__cuda_use(prev);
    }
    pthread_mutex_lock(&ctx_lock);
    st = ctx[index].cost_status;
    *bytes = ctx[index].cost;
    if (st != VR_OK)
        vr_error(st, "%s", ctx[index].why);
    pthread_mutex_unlock(&ctx_lock);
    return st;
}

static int attr(int index, enum cudaDeviceAttr a)
{
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, index) != cudaSuccess) {
        cudaGetLastError();
        v = 0;
    }
    return v;
}

vr_status vr_cuda_device_info(int index, vr_cuda_info *out)
{
    memset(out, 0, sizeof *out);
    out->index = index;
    out->used_by_process = -1;
    vr_status st = check_index(index);
    if (st != VR_OK)
        return st;
    char b[200];
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "cuda:%d: cudaGetDeviceProperties: %s", index, vr__cuda_err(e, b, sizeof b));
    }
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->total = prop.totalGlobalMem;
    out->cc_major = attr(index, cudaDevAttrComputeCapabilityMajor);
    out->cc_minor = attr(index, cudaDevAttrComputeCapabilityMinor);
    out->sm_count = attr(index, cudaDevAttrMultiProcessorCount);
    if (cudaDriverGetVersion(&out->driver_cuda_version) != cudaSuccess)
        cudaGetLastError();
    if (cudaRuntimeGetVersion(&out->runtime_version) != cudaSuccess)
        cudaGetLastError();

    const vr_cu_api *cu = vr__cu();
    if (cu) {
        CUdevice cudev;
        int vmm = 0;
        if (cu->DeviceGet(&cudev, index) == CUDA_SUCCESS &&
            cu->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cudev) == CUDA_SUCCESS)
            out->vm_supported = vmm != 0;
        CUmemAllocationProp ap = vr__cuda_alloc_prop(index);
        size_t g = 0;
        if (out->vm_supported &&
            cu->MemGetAllocationGranularity(&g, &ap, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS)
            out->vm_granularity = g;
    }

    void *h;
    vr_nvml_mem m;
    if (nvml_of(index, &h, out->pci_bus_id, sizeof out->pci_bus_id) == VR_OK && vr__nvml_memory(h, &m) == VR_OK) {
        out->have_nvml = true;
        out->free = m.free;
        out->used = m.used;
        out->reserved = m.reserved;
        if (vr__nvml_process_used(h, (unsigned)getpid(), &out->used_by_process) != VR_OK)
            out->used_by_process = -1;
        if (vr__nvml_driver_version(out->driver_version, sizeof out->driver_version) != VR_OK)
            out->driver_version[0] = '\0';
        return VR_OK;
    }
    /* Without NVML: cudaMemGetInfo, which needs (and so creates) the context. */
    size_t free_b = 0, total_b = 0;
    st = vr__cuda_create_context(index);
    if (st != VR_OK)
        return st;
    e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "cuda:%d: cudaMemGetInfo: %s", index, vr__cuda_err(e, b, sizeof b));
    }
    out->free = free_b;
    out->used = total_b - free_b;
    return VR_OK;
}

uint64_t vr_cuda_stack_growth(int index, size_t *stack)
{
    *stack = 0;
    if (index < 0 || index >= MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&ctx_lock);
    size_t set = ctx[index].stack;
    pthread_mutex_unlock(&ctx_lock);
    if (!set)
        return 0;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    size_t now = 0;
    if ((prev == index || cudaSetDevice(index) == cudaSuccess) &&
        cudaDeviceGetLimit(&now, cudaLimitStackSize) == cudaSuccess)
        *stack = now;
    cudaGetLastError();
    if (prev != index)
        cudaSetDevice(prev);
    /* the driver reserves the stack of every thread the GPU holds, rounded down to its 2 MiB pages (measured on the
     * H100 at 0 to 1024 bytes a thread; tests/device/test_cuda.c checks it against cudaMemGetInfo) */
    uint64_t threads = (uint64_t)attr(index, cudaDevAttrMaxThreadsPerMultiProcessor) *
                       (uint64_t)attr(index, cudaDevAttrMultiProcessorCount);
    uint64_t page = (uint64_t)2 << 20;
    uint64_t had = set * threads / page * page, has = now * threads / page * page;
    return has > had ? has - had : 0;
}
