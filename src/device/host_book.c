/* The bookkeeping shared by the host backends (cpu.c, meta.c): host_book.h. */
#include "device/host_book.h"

#include <string.h>

void vr__book_init(vr_host_book *b, uint64_t capacity)
{
    memset(b, 0, sizeof *b);
    b->capacity = capacity;
    b->vm.granule = VR_DEVICE_GRANULE;
}

void vr__book_free(vr_host_book *b)
{
    vr__ptrmap_free(&b->live);
    vr__vm_free(&b->vm);
}

vr_status vr__book_charge(vr_device *dev, vr_host_book *b, const char *op, uint64_t bytes)
{
    if (b->capacity && bytes > b->capacity - b->used)
        return vr__device_oom(dev, op, bytes, b->used, b->capacity);
    b->used += bytes;
    return VR_OK;
}

void vr__book_untrack(vr_device *dev, vr_host_book *b, void *ptr, size_t bytes)
{
    uint64_t size;
    if (!vr__ptrmap_take(&b->live, (uintptr_t)ptr, &size))
        vr__device_misuse(dev, "free(%p, %zu): not a live allocation", ptr, bytes);
    if (size != vr__round_up(bytes, VR_DEVICE_ALIGN))
        vr__device_misuse(dev, "free(%p, %zu): it was allocated with %llu bytes (rounded to 512)", ptr, bytes,
                          (unsigned long long)size);
    b->used -= size;
}

void vr__book_unmap(vr_device *dev, vr_host_book *b, void *addr, size_t bytes)
{
    vr_vm_range *r = vr__vm_find(&b->vm, (uintptr_t)addr, bytes);
    if (!r || (uintptr_t)addr % VR_DEVICE_GRANULE || bytes % VR_DEVICE_GRANULE ||
        !vr__vm_all(&b->vm, r, (uintptr_t)addr, bytes, true))
        vr__device_misuse(dev, "vm unmap(%p, %zu): not a mapped, granule-aligned range", addr, bytes);
    vr__vm_set(&b->vm, r, (uintptr_t)addr, bytes, false);
    b->used -= bytes;
}

void vr__book_release(vr_device *dev, vr_host_book *b, void *base, size_t bytes)
{
    vr_vm_range *r = vr__vm_find(&b->vm, (uintptr_t)base, bytes);
    if (!r || r->base != (uintptr_t)base || r->bytes != bytes)
        vr__device_misuse(dev, "vm release(%p, %zu): not a reservation", base, bytes);
    if (r->mapped)
        vr__device_misuse(dev, "vm release(%p, %zu): %zu granules are still mapped", base, bytes, r->mapped);
    vr__vm_remove(&b->vm, r);
}

size_t vr__host_vm_granularity(vr_device *dev)
{
    (void)dev;
    return VR_DEVICE_GRANULE;
}
