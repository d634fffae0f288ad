/* CUDA plumbing shared by the cuda backend: driver API entry points obtained
 * through the runtime (libcuda is never linked, so vram starts without a
 * driver), error messages, device count, current device. */
#include "device/cuda_impl.h"

#include <pthread.h>
#include <stdio.h>

static vr_cu_api cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static char cu_why[256];
static bool cu_ok;

const char *vr__cuda_err(cudaError_t e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return buf;
}

const char *vr__cu_err(CUresult r, char *buf, size_t cap)
{
    const char *s = NULL;
    if (!cu.GetErrorString || cu.GetErrorString(r, &s) != CUDA_SUCCESS || !s)
        s = "unknown driver error";
    snprintf(buf, cap, "CUresult %d: %s", (int)r, s);
    return buf;
}

static bool entry(const char *name, void **fn, unsigned version)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, version, cudaEnableDefault, &q);
#else
    (void)version;
    cudaError_t e = cudaGetDriverEntryPoint(name, fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
        char b[160];
        if (e != cudaSuccess)
            cudaGetLastError();
        snprintf(cu_why, sizeof cu_why, "cuda: driver entry point %s unavailable (%s)", name,
                 e != cudaSuccess ? vr__cuda_err(e, b, sizeof b) : "symbol not found for CUDA 12.0");
        *fn = NULL;
        return false;
    }
    return true;
}

static void load(void)
{
    int driver = 0;
    cudaError_t e = cudaDriverGetVersion(&driver);
    if (e != cudaSuccess || driver == 0) {
        char b[160];
        snprintf(cu_why, sizeof cu_why, "cuda: no CUDA driver (cudaDriverGetVersion: %s)",
                 e != cudaSuccess ? vr__cuda_err(e, b, sizeof b) : "driver version 0");
        cudaGetLastError();
        return;
    }
    unsigned v = driver < 12000 ? (unsigned)driver : 12000u;
    cu_ok = entry("cuGetErrorString", (void **)&cu.GetErrorString, v)
         && entry("cuDeviceGet", (void **)&cu.DeviceGet, v)
         && entry("cuDeviceGetAttribute", (void **)&cu.DeviceGetAttribute, v)
         && entry("cuDevicePrimaryCtxGetState", (void **)&cu.DevicePrimaryCtxGetState, v)
         && entry("cuMemGetAllocationGranularity", (void **)&cu.MemGetAllocationGranularity, v)
         && entry("cuMemAddressReserve", (void **)&cu.MemAddressReserve, v)
         && entry("cuMemAddressFree", (void **)&cu.MemAddressFree, v)
         && entry("cuMemCreate", (void **)&cu.MemCreate, v)
         && entry("cuMemRelease", (void **)&cu.MemRelease, v)
         && entry("cuMemMap", (void **)&cu.MemMap, v)
         && entry("cuMemUnmap", (void **)&cu.MemUnmap, v)
         && entry("cuMemSetAccess", (void **)&cu.MemSetAccess, v);
}

const vr_cu_api *vr__cu(void)
{
    pthread_once(&cu_once, load);
    if (!cu_ok) {
        vr_error(VR_ERR_DEVICE, "%s", cu_why);
        return NULL;
    }
    return &cu;
}

vr_status vr__cuda_count(int *count)
{
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        char b[200];
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "no CUDA device (cudaGetDeviceCount: %s)", vr__cuda_err(e, b, sizeof b));
    }
    if (n == 0)
        return vr_error(VR_ERR_DEVICE, "no CUDA device (cudaGetDeviceCount found 0)");
    *count = n;
    return VR_OK;
}

/* The device that was current on this thread before vr__cuda_use first made another current (-1: none since
 * vr__cuda_take_switched_from). */
static _Thread_local int switched_from = -1;

int vr__cuda_take_switched_from(void)
{
    int d = switched_from;
    switched_from = -1;
    return d;
}

vr_status vr__cuda_use(int index)
{
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur == index)
        return VR_OK;
    if (e == cudaSuccess && switched_from < 0)
        switched_from = cur;
    e = cudaSetDevice(index);
    if (e != cudaSuccess) {
        char b[200];
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "cuda:%d: cudaSetDevice: %s", index, vr__cuda_err(e, b, sizeof b));
    }
    return VR_OK;
}

CUmemAllocationProp vr__cuda_alloc_prop(int index)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = index;
    return prop;
}

vr_status vr__cuda_enter(vr_device *dev, const vr_cu_api **api)
{
    *api = vr__cu();
    if (!*api)
        return vr__error_prefix(VR_ERR_DEVICE, dev->name);
    return vr__cuda_use(dev->index);
}

CUresult vr__cu_set_rw(const vr_cu_api *api, const cuda_device *c, CUdeviceptr addr, size_t bytes)
{
    return api->MemSetAccess(addr, bytes, c->access, (size_t)c->naccess);
}

void vr__cuda_sync_before_unmap(vr_device *dev)
{
    if (vr__cuda_use(dev->index) != VR_OK)
        fprintf(stderr, "vram: %s\n", vr_last_error());
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        char b[200];
        cudaGetLastError();
        fprintf(stderr, "vram: device %s: cudaDeviceSynchronize before cuMemUnmap: %s\n", dev->name,
                vr__cuda_err(e, b, sizeof b));
    }
}
