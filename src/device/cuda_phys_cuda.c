/* Physical memory handles of the cuda device (vr_device_phys_*), through the
 * driver API entry points of cuda_driver_cuda.c.
 *
 *   create   cuMemCreate (pinned device memory); counted in used
 *   map      cuMemMap of [offset, offset+bytes) of the handle at addr, then
 *            cuMemSetAccess (read/write); the mapping's size is remembered
 *            because cuMemUnmap must be given whole mappings. Several handles
 *            side by side (map_granules): a cuMemMap each, one cuMemSetAccess
 *   unmap    cudaDeviceSynchronize (cuMemUnmap does not wait for kernels),
 *            then one cuMemUnmap over the mappings inside the range (one
 *            per mapping where the driver refuses the range)
 *   release  cuMemRelease
 *
 * Misuse (unmapping what is not a mapping) is reported on stderr and ignored. */
#include "device/cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "vram/util.h"

struct vr_phys {
    CUmemGenericAllocationHandle h;
    size_t bytes;
};

static cuda_device *cud(vr_device *dev) { return (cuda_device *)dev; }

vr_status vr__cuda_phys_create(vr_device *dev, size_t bytes, vr_phys **out)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu;
    vr_status st = vr__cuda_enter(dev, &cu);
    if (st != VR_OK)
        return st;
    vr_phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return vr_error(VR_ERR_OOM, "device %s: no host memory for a phys handle", dev->name);
    CUmemAllocationProp prop = vr__cuda_alloc_prop(dev->index);
    CUresult r = cu->MemCreate(&ph->h, bytes, &prop, 0);
    if (r != CUDA_SUCCESS) {
        free(ph);
        char b[160], s[32];
        return vr_error(r == CUDA_ERROR_OUT_OF_MEMORY ? VR_ERR_OOM : VR_ERR_DEVICE, "device %s: %scuMemCreate of %s: %s",
                        dev->name, r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory: " : "",
                        vr_format_size(bytes, s, sizeof s), vr__cu_err(r, b, sizeof b));
    }
    ph->bytes = bytes;
    pthread_mutex_lock(&dev->lock);
    c->used += bytes;
    pthread_mutex_unlock(&dev->lock);
    *out = ph;
    return VR_OK;
}

/* Forgets the mapping at addr (bookkeeping only). */
static void forget(vr_device *dev, uintptr_t addr, size_t bytes)
{
    cuda_device *c = cud(dev);
    uint64_t len;
    pthread_mutex_lock(&dev->lock);
    vr__ptrmap_take(&c->phys_maps, addr, &len);
    vr__vm_set(&c->vm, vr__vm_find(&c->vm, addr, bytes), addr, bytes, false);
    pthread_mutex_unlock(&dev->lock);
}

/* cuMemMap of [offset, offset+bytes) of ph at addr with its bookkeeping; cuMemSetAccess too when access. */
static vr_status map_one(vr_device *dev, const vr_cu_api *cu, void *addr, vr_phys *ph, size_t offset, size_t bytes,
                         bool access)
{
    cuda_device *c = cud(dev);
    if (offset > ph->bytes || bytes > ph->bytes - offset)
        return vr_error(VR_ERR_INVALID, "device %s: phys map of %zu bytes at offset %zu of a %zu-byte handle", dev->name,
                        bytes, offset, ph->bytes);
    vr_vm_range *r = NULL;
    pthread_mutex_lock(&dev->lock);
    vr_status st = vr__vm_check_map(&c->vm, dev->name, "phys map", addr, bytes, &r);
    if (st == VR_OK && !vr__ptrmap_put(&c->phys_maps, (uintptr_t)addr, bytes))
        st = vr_error(VR_ERR_OOM, "device %s: no host memory to track a mapping", dev->name);
    else if (st == VR_OK)
        vr__vm_set(&c->vm, r, (uintptr_t)addr, bytes, true);
    pthread_mutex_unlock(&dev->lock);
    if (st != VR_OK)
        return st;
    char b[160];
    CUresult res = cu->MemMap((CUdeviceptr)(uintptr_t)addr, bytes, 0, ph->h, offset);
    if (res == CUDA_SUCCESS && access) {
        res = vr__cu_set_rw(cu, (const cuda_device *)dev, (CUdeviceptr)(uintptr_t)addr, bytes);
        if (res != CUDA_SUCCESS)
            cu->MemUnmap((CUdeviceptr)(uintptr_t)addr, bytes);
    }
    if (res != CUDA_SUCCESS) {
        forget(dev, (uintptr_t)addr, bytes);
        return vr_error(VR_ERR_DEVICE, "device %s: cuMemMap/cuMemSetAccess of a phys handle: %s", dev->name,
                        vr__cu_err(res, b, sizeof b));
    }
    return VR_OK;
}

vr_status vr__cuda_phys_map(vr_device *dev, void *addr, vr_phys *ph, size_t offset, size_t bytes)
{
    const vr_cu_api *cu = vr__cu();
    if (!cu)
        return vr__error_prefix(VR_ERR_DEVICE, dev->name);
    return map_one(dev, cu, addr, ph, offset, bytes, true);
}

vr_status vr__cuda_phys_map_granules(vr_device *dev, void *addr, vr_phys *const *phs, size_t n, size_t granule)
{
    const vr_cu_api *cu = vr__cu();
    if (!cu)
        return vr__error_prefix(VR_ERR_DEVICE, dev->name);
    size_t i = 0;
    vr_status st = VR_OK;
    for (; i < n && st == VR_OK; i++)
        st = map_one(dev, cu, (char *)addr + i * granule, phs[i], 0, granule, false);
    if (st == VR_OK) {
        CUresult res = vr__cu_set_rw(cu, (const cuda_device *)dev, (CUdeviceptr)(uintptr_t)addr, n * granule);
        if (res != CUDA_SUCCESS) {
            char b[160];
            st = vr_error(VR_ERR_DEVICE, "device %s: cuMemSetAccess of %zu mapped granules: %s", dev->name, n,
                          vr__cu_err(res, b, sizeof b));
        }
    } else {
        i--; /* the failed one undid itself */
    }
    if (st != VR_OK)
        while (i-- > 0) {
            cu->MemUnmap((CUdeviceptr)(uintptr_t)((char *)addr + i * granule), granule);
            forget(dev, (uintptr_t)addr + i * granule, granule);
        }
    return st;
}

/* Unmaps every phys mapping in [addr, addr+bytes); waits for the device first unless idle. Mappings side by side
 * go to the driver in runs of up to VR_UNMAP_RUN, one cuMemUnmap over each run's range (stitch unmaps runs of
 * granules: one call, not one per granule); where the driver refuses a range, one call per mapping of it. */
static void phys_unmap(vr_device *dev, void *addr, size_t bytes, bool idle)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu = vr__cu();
    if (!cu)
        return;
    if (!idle)
        vr__cuda_sync_before_unmap(dev);
    char b[200];
    uintptr_t at = (uintptr_t)addr, end = at + bytes;
    bool ok = true;
    while (at < end && ok) {
        uint64_t lens[VR_UNMAP_RUN];
        uintptr_t p = at;
        int n = 0;
        while (n < VR_UNMAP_RUN && p < end) { /* the run: mappings tiling [at, p) */
            uint64_t len = 0;
            pthread_mutex_lock(&dev->lock);
            ok = vr__ptrmap_take(&c->phys_maps, p, &len) && len <= end - p;
            if (ok)
                vr__vm_set(&c->vm, vr__vm_find(&c->vm, p, len), p, len, false);
            pthread_mutex_unlock(&dev->lock);
            if (!ok) {
                fprintf(stderr, "vram: device %s: phys unmap(%p, %zu): %#lx is not a phys mapping inside it; ignored\n",
                        dev->name, addr, bytes, (unsigned long)p);
                break;
            }
            lens[n++] = len;
            p += len;
        }
        if (n == 0)
            break;
        vr__count(dev, unmap, 1);
        if (n > 1 && cu->MemUnmap((CUdeviceptr)at, p - at) == CUDA_SUCCESS) {
            at = p;
            continue;
        }
        for (int i = 0; i < n; i++) { /* one mapping, or the driver refused the range */
            if (n > 1)
                vr__count(dev, unmap, 1);
            CUresult r = cu->MemUnmap((CUdeviceptr)at, lens[i]);
            if (r != CUDA_SUCCESS)
                fprintf(stderr, "vram: device %s: cuMemUnmap(%#lx, %llu): %s\n", dev->name, (unsigned long)at,
                        (unsigned long long)lens[i], vr__cu_err(r, b, sizeof b));
            at += lens[i];
        }
    }
}

void vr__cuda_phys_unmap(vr_device *dev, void *addr, size_t bytes) { phys_unmap(dev, addr, bytes, false); }

void vr__cuda_phys_unmap_idle(vr_device *dev, void *addr, size_t bytes) { phys_unmap(dev, addr, bytes, true); }

void vr__cuda_phys_release(vr_device *dev, vr_phys *ph)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu = vr__cu();
    if (cu) {
        CUresult r = cu->MemRelease(ph->h);
        if (r != CUDA_SUCCESS) {
            char b[160];
            fprintf(stderr, "vram: device %s: cuMemRelease: %s\n", dev->name, vr__cu_err(r, b, sizeof b));
        }
    }
    pthread_mutex_lock(&dev->lock);
    c->used -= ph->bytes;
    pthread_mutex_unlock(&dev->lock);
    free(ph);
}
