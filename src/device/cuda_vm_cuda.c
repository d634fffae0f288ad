/* Virtual memory of the cuda device (expandable segments), through the
 * driver API entry points of cuda_driver_cuda.c.
 *
 *   reserve  cuMemAddressReserve (aligned to the granularity)
 *   map      per granule: cuMemCreate (pinned device memory) + cuMemMap, then
 *            one cuMemSetAccess (read/write) over the whole range; the handle
 *            is released at once (cuMemRelease), so the physical memory lives
 *            exactly as long as its mapping
 *   unmap    cudaDeviceSynchronize (cuMemUnmap, unlike cudaFree, does not wait
 *            for kernels still using the memory), then cuMemUnmap per granule
 *   release  cuMemAddressFree
 *
 * One physical allocation per granule is what lets any granule-aligned
 * sub-range be unmapped later: cuMemUnmap cannot split a mapping. */
#include "device/cuda_impl.h"

#include <stdio.h>

#include "vram/util.h"

static cuda_device *cud(vr_device *dev) { return (cuda_device *)dev; }

size_t vr__cuda_vm_granularity(vr_device *dev) { return cud(dev)->vm.granule; }

vr_status vr__cuda_vm_reserve(vr_device *dev, size_t bytes, void **base)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu;
    vr_status st = vr__cuda_enter(dev, &cu);
    if (st != VR_OK)
        return st;
    CUdeviceptr p = 0;
    CUresult r = cu->MemAddressReserve(&p, bytes, c->vm.granule, 0, 0);
    if (r != CUDA_SUCCESS) {
        char b[160];
        return vr_error(r == CUDA_ERROR_OUT_OF_MEMORY ? VR_ERR_OOM : VR_ERR_DEVICE,
                        "device %s: cuMemAddressReserve of %zu bytes: %s", dev->name, bytes, vr__cu_err(r, b, sizeof b));
    }
    pthread_mutex_lock(&dev->lock);
    bool ok = vr__vm_add(&c->vm, (uintptr_t)p, bytes);
    pthread_mutex_unlock(&dev->lock);
    if (!ok) {
        cu->MemAddressFree(p, bytes);
        return vr_error(VR_ERR_OOM, "device %s: no host memory to track a reservation", dev->name);
    }
    *base = (void *)(uintptr_t)p;
    return VR_OK;
}

/* Unmaps granules [addr, addr+bytes) one by one; reports failures on stderr. */
static void unmap_granules(vr_device *dev, const vr_cu_api *cu, uintptr_t addr, size_t bytes)
{
    size_t g = cud(dev)->vm.granule;
    for (size_t off = 0; off < bytes; off += g) {
        CUresult r = cu->MemUnmap((CUdeviceptr)(addr + off), g);
        if (r != CUDA_SUCCESS) {
            char b[160];
            fprintf(stderr, "vram: device %s: cuMemUnmap(%#lx, %zu): %s\n", dev->name, (unsigned long)(addr + off), g,
                    vr__cu_err(r, b, sizeof b));
        }
    }
}

/* Maps fresh physical granules at [addr, addr+bytes); on failure unmaps what
 * it mapped and returns the error. */
static vr_status map_granules(vr_device *dev, const vr_cu_api *cu, uintptr_t addr, size_t bytes)
{
    size_t g = cud(dev)->vm.granule;
    CUmemAllocationProp prop = vr__cuda_alloc_prop(dev->index);
    char b[160], s[32];
    for (size_t off = 0; off < bytes; off += g) {
        CUmemGenericAllocationHandle h;
        CUresult r = cu->MemCreate(&h, g, &prop, 0);
        if (r != CUDA_SUCCESS) {
            size_t free_b = 0, total_b = 0;  /* read before giving back what this call mapped */
            if (r == CUDA_ERROR_OUT_OF_MEMORY && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
                cudaGetLastError();
            unmap_granules(dev, cu, addr, off);
            if (r == CUDA_ERROR_OUT_OF_MEMORY) {
                char m[32];
                return vr_error(VR_ERR_OOM,
                                "device %s: out of memory: vm map of %s: cuMemCreate failed after %s of it, "
                                "with %s free on the GPU",
                                dev->name, vr_format_size(bytes, b, sizeof b), vr_format_size(off, m, sizeof m),
                                vr_format_size(free_b, s, sizeof s));
            }
            return vr_error(VR_ERR_DEVICE, "device %s: cuMemCreate: %s", dev->name, vr__cu_err(r, b, sizeof b));
        }
        r = cu->MemMap((CUdeviceptr)(addr + off), g, 0, h, 0);
        CUresult rr = cu->MemRelease(h);  /* the mapping keeps the memory alive */
        if (r != CUDA_SUCCESS || rr != CUDA_SUCCESS) {
            if (r == CUDA_SUCCESS)
                off += g;  /* mapped, but the handle leaked: undo the mapping too */
            unmap_granules(dev, cu, addr, off);
            return vr_error(VR_ERR_DEVICE, "device %s: %s: %s", dev->name, r != CUDA_SUCCESS ? "cuMemMap" : "cuMemRelease",
                            vr__cu_err(r != CUDA_SUCCESS ? r : rr, b, sizeof b));
        }
    }
    CUresult r = vr__cu_set_rw(cu, (const cuda_device *)dev, (CUdeviceptr)addr, bytes);
    if (r != CUDA_SUCCESS) {
        unmap_granules(dev, cu, addr, bytes);
        return vr_error(VR_ERR_DEVICE, "device %s: cuMemSetAccess: %s", dev->name, vr__cu_err(r, b, sizeof b));
    }
    return VR_OK;
}

vr_status vr__cuda_vm_map(vr_device *dev, void *addr, size_t bytes)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu;
    vr_status st = vr__cuda_enter(dev, &cu);
    if (st != VR_OK)
        return st;
    vr_vm_range *r = NULL;
    pthread_mutex_lock(&dev->lock);
    st = vr__vm_check_map(&c->vm, dev->name, "vm map", addr, bytes, &r);
    if (st == VR_OK)  /* claim the granules first so that no other thread maps them meanwhile */
        vr__vm_set(&c->vm, r, (uintptr_t)addr, bytes, true);
    pthread_mutex_unlock(&dev->lock);
    if (st != VR_OK)
        return st;
    st = map_granules(dev, cu, (uintptr_t)addr, bytes);
    pthread_mutex_lock(&dev->lock);
    r = vr__vm_find(&c->vm, (uintptr_t)addr, bytes);
    if (st != VR_OK)
        vr__vm_set(&c->vm, r, (uintptr_t)addr, bytes, false);
    else
        c->used += bytes;
    pthread_mutex_unlock(&dev->lock);
    return st;
}

void vr__cuda_vm_unmap(vr_device *dev, void *addr, size_t bytes)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu = vr__cu();
    size_t g = c->vm.granule;
    pthread_mutex_lock(&dev->lock);
    vr_vm_range *r = cu && g ? vr__vm_find(&c->vm, (uintptr_t)addr, bytes) : NULL;
    bool ok = r && (uintptr_t)addr % g == 0 && bytes % g == 0 && vr__vm_all(&c->vm, r, (uintptr_t)addr, bytes, true);
    pthread_mutex_unlock(&dev->lock);
    if (!ok) {
        fprintf(stderr, "vram: device %s: vm unmap(%p, %zu): not a mapped, granule-aligned range; ignored\n", dev->name,
                addr, bytes);
        return;
    }
    vr__cuda_sync_before_unmap(dev);
    unmap_granules(dev, cu, (uintptr_t)addr, bytes);
    pthread_mutex_lock(&dev->lock);
    r = vr__vm_find(&c->vm, (uintptr_t)addr, bytes);
    vr__vm_set(&c->vm, r, (uintptr_t)addr, bytes, false);
    c->used -= bytes;
    pthread_mutex_unlock(&dev->lock);
}

void vr__cuda_vm_release(vr_device *dev, void *base, size_t bytes)
{
    cuda_device *c = cud(dev);
    const vr_cu_api *cu = vr__cu();
    pthread_mutex_lock(&dev->lock);
    vr_vm_range *r = cu ? vr__vm_find(&c->vm, (uintptr_t)base, bytes) : NULL;
    bool ok = r && r->base == (uintptr_t)base && r->bytes == bytes && r->mapped == 0;
    if (ok)
        vr__vm_remove(&c->vm, r);
    pthread_mutex_unlock(&dev->lock);
    if (!ok) {
        fprintf(stderr, "vram: device %s: vm release(%p, %zu): not an unmapped reservation; ignored\n", dev->name, base,
                bytes);
        return;
    }
    CUresult res = cu->MemAddressFree((CUdeviceptr)(uintptr_t)base, bytes);
    if (res != CUDA_SUCCESS) {
        char b[160];
        fprintf(stderr, "vram: device %s: cuMemAddressFree: %s\n", dev->name, vr__cu_err(res, b, sizeof b));
    }
}
