/* Inside the device layer, CUDA builds only: the cuda device, the driver API
 * entry points (taken through the runtime, never by linking libcuda, so that
 * vram starts on machines without a driver) and CUDA error messages. */
#ifndef VRAM_DEVICE_CUDA_IMPL_H
#define VRAM_DEVICE_CUDA_IMPL_H

#include <cuda.h>              /* driver API types only */
#include <cuda_runtime_api.h>

#include "device/device_impl.h"
#include "device/ptrmap.h"
#include "device/vmspace.h"

/* Driver API entry points, ABI as of CUDA 12.0 (cudaGetDriverEntryPointByVersion). */
typedef struct vr_cu_api {
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} vr_cu_api;

/* The entry points, looked up once; NULL with a message when unavailable. */
const vr_cu_api *vr__cu(void);

/* "cudaErrorMemoryAllocation: out of memory" for runtime errors. */
const char *vr__cuda_err(cudaError_t e, char *buf, size_t cap);
/* The same for driver API results. */
const char *vr__cu_err(CUresult r, char *buf, size_t cap);

/* Number of devices, or an error naming cudaGetDeviceCount's answer. */
vr_status vr__cuda_count(int *count);

/* Makes device `index` current on this thread (cudaSetDevice when it is not). */
vr_status vr__cuda_use(int index);
/* The device that was current on this thread before vr__cuda_use first switched away from it since the last
 * call, or -1 when it has not (libvram_torch gives PyTorch its current device back without asking for it). */
int vr__cuda_take_switched_from(void);

/* Creates the primary context of device `index` (cudaSetDevice + cudaFree(0)),
 * measuring its cost with NVML the first time (see vr_cuda_context_cost). */
vr_status vr__cuda_create_context(int index);

/* Allocation properties of pinned memory on device `index`. */
CUmemAllocationProp vr__cuda_alloc_prop(int index);

/* How the phys and vm ops start: the driver entry points in *cu, then device
 * dev made current (an error naming the device when there are none). */
vr_status vr__cuda_enter(vr_device *dev, const vr_cu_api **cu);

/* cuMemSetAccess: read/write over [addr, addr+bytes) for the device and for every device that can
 * access its memory peer to peer (as cudaMalloc'd memory is, once a program enables peer access: PyTorch
 * copies between GPUs with kernels that read the other GPU's memory). */
struct cuda_device;
CUresult vr__cu_set_rw(const vr_cu_api *cu, const struct cuda_device *c, CUdeviceptr addr, size_t bytes);

/* Before cuMemUnmap (which, unlike cudaFree, does not wait for kernels still
 * using the memory): makes dev current and synchronizes it; failures are
 * reported on stderr. */
void vr__cuda_sync_before_unmap(vr_device *dev);

#define VR_CUDA_MAX_PEERS 64    /* devices granted access to a mapping: the device and its peers */

typedef struct cuda_device {
    vr_device base;
    uint64_t used;            /* malloc'd (rounded to 512) + mapped bytes; under base.lock */
    vr_ptrmap live;           /* cudaMalloc'd address -> rounded size */
    vr_vmspace vm;            /* reservations; vm.granule = 0 without VMM support */
    vr_ptrmap phys_maps;      /* phys mapping address -> bytes (cuda_phys_cuda.c) */
    cudaEvent_t *pool;        /* idle events for reuse */
    size_t npool, cappool;
    CUmemAccessDesc access[VR_CUDA_MAX_PEERS]; /* read/write for the device, then its peers */
    int naccess;
} cuda_device;

/* Virtual memory ops of the cuda device (cuda_vm_cuda.c). */
size_t vr__cuda_vm_granularity(vr_device *dev);
/* Physical memory handles (cuda_phys_cuda.c). */
vr_status vr__cuda_phys_create(vr_device *dev, size_t bytes, vr_phys **out);
vr_status vr__cuda_phys_map(vr_device *dev, void *addr, vr_phys *ph, size_t offset, size_t bytes);
void vr__cuda_phys_unmap(vr_device *dev, void *addr, size_t bytes);
void vr__cuda_phys_unmap_idle(vr_device *dev, void *addr, size_t bytes);
vr_status vr__cuda_phys_map_granules(vr_device *dev, void *addr, vr_phys *const *phs, size_t n, size_t granule);
void vr__cuda_phys_release(vr_device *dev, vr_phys *ph);
vr_status vr__cuda_vm_reserve(vr_device *dev, size_t bytes, void **base);
vr_status vr__cuda_vm_map(vr_device *dev, void *addr, size_t bytes);
void vr__cuda_vm_unmap(vr_device *dev, void *addr, size_t bytes);
void vr__cuda_vm_release(vr_device *dev, void *base, size_t bytes);

#endif
