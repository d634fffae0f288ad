/* The meta device: address space only.
 *
 * Addresses come from a bump pointer in a fake range starting at 2^56, which
 * is not a canonical x86-64/arm64 user address, so dereferencing one faults at
 * once. An address is never handed out twice (the range is 2^63 - 2^56 bytes,
 * enough for ~10^14 segments of 20 MiB). Live allocations sit in a hash map,
 * reservations in a sorted array (vmspace.c), so every operation is O(1) or
 * O(log n) and never touches memory. malloc'd bytes (rounded up to 512) and
 * vm-mapped bytes and phys handles count against the capacity (default
 * 80 GiB; host_book.c keeps the books); phys mappings sit in a hash map so that unmap finds their handle. */
#include "device/device_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "device/host_book.h"
#include "vram/util.h"

#define META_BASE ((uintptr_t)1 << 56)
#define META_END ((uintptr_t)1 << 63)

typedef struct meta_device {
    vr_device base;
    vr_host_book book;    /* capacity never 0 */
    uintptr_t next;       /* bump pointer */
    vr_ptrmap phys_maps;  /* address of a phys mapping -> its bytes */
    size_t nphys;         /* phys handles not yet released */
} meta_device;

/* A physical memory handle of meta: its size and how many bytes of it are mapped. */
struct vr_phys {
    size_t bytes;
    uint64_t mapped;
};

static meta_device *meta(vr_device *dev) { return (meta_device *)dev; }

/* Takes `bytes` of fresh address space aligned to `align`; 0 when exhausted. */
static uintptr_t bump(meta_device *m, uint64_t bytes, uint64_t align)
{
    uintptr_t at = (uintptr_t)vr__round_up(m->next, align);
    if (at >= META_END || bytes > META_END - at)
        return 0;
    m->next = at + bytes;
    return at;
}

static uint64_t meta_used(vr_device *dev) { return vr__device_read_locked(dev, &meta(dev)->book.used); }

static vr_status meta_mem_info(vr_device *dev, vr_device_mem *out)
{
    const vr_host_book *b = &meta(dev)->book;
    pthread_mutex_lock(&dev->lock);
    out->total = b->capacity;
    out->used_by_us = b->used;
    out->free = b->capacity - b->used;
    pthread_mutex_unlock(&dev->lock);
    return VR_OK;
}

static vr_status meta_malloc(vr_device *dev, size_t bytes, void **ptr)
{
    meta_device *m = meta(dev);
    uint64_t size = vr__round_up(bytes, VR_DEVICE_ALIGN);
    vr_status st = VR_OK;
    pthread_mutex_lock(&dev->lock);
    if (size > m->book.capacity - m->book.used) {
        st = vr__device_oom(dev, "malloc", bytes, m->book.used, m->book.capacity); /* names the bytes asked for */
    } else {
        uintptr_t at = bump(m, size, VR_DEVICE_ALIGN);
        if (!at)
            st = vr_error(VR_ERR_OOM, "device %s: fake address space exhausted", dev->name);
        else if (!vr__ptrmap_put(&m->book.live, at, size))
            st = vr_error(VR_ERR_OOM, "device %s: no host memory to track an allocation", dev->name);
        else {
            m->book.used += size;
            *ptr = (void *)at;
        }
    }
    pthread_mutex_unlock(&dev->lock);
    return st;
}

static void meta_free(vr_device *dev, void *ptr, size_t bytes)
{
    pthread_mutex_lock(&dev->lock);
    vr__book_untrack(dev, &meta(dev)->book, ptr, bytes);
    pthread_mutex_unlock(&dev->lock);
}

static vr_status meta_vm_reserve(vr_device *dev, size_t bytes, void **base)
{
    meta_device *m = meta(dev);
    vr_status st = VR_OK;
    pthread_mutex_lock(&dev->lock);
    uintptr_t at = bump(m, bytes, VR_DEVICE_GRANULE);
    if (!at)
        st = vr_error(VR_ERR_OOM, "device %s: fake address space exhausted", dev->name);
    else if (!vr__vm_add(&m->book.vm, at, bytes))
        st = vr_error(VR_ERR_OOM, "device %s: no host memory to track a reservation", dev->name);
    else
        *base = (void *)at;
    pthread_mutex_unlock(&dev->lock);
    return st;
}

static vr_status meta_vm_map(vr_device *dev, void *addr, size_t bytes)
{
    vr_host_book *b = &meta(dev)->book;
    vr_vm_range *r = NULL;
    pthread_mutex_lock(&dev->lock);
    vr_status st = vr__vm_check_map(&b->vm, dev->name, "vm map", addr, bytes, &r);
    if (st == VR_OK)
        st = vr__book_charge(dev, b, "vm map", bytes);
    if (st == VR_OK)
        vr__vm_set(&b->vm, r, (uintptr_t)addr, bytes, true);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

static void meta_vm_unmap(vr_device *dev, void *addr, size_t bytes)
{
    pthread_mutex_lock(&dev->lock);
    vr__book_unmap(dev, &meta(dev)->book, addr, bytes);
    pthread_mutex_unlock(&dev->lock);
}

static void meta_vm_release(vr_device *dev, void *base, size_t bytes)
{
    pthread_mutex_lock(&dev->lock);
    vr__book_release(dev, &meta(dev)->book, base, bytes);
    pthread_mutex_unlock(&dev->lock);
}

static vr_status meta_phys_create(vr_device *dev, size_t bytes, vr_phys **out)
{
    meta_device *m = meta(dev);
    vr_phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return vr_error(VR_ERR_OOM, "device %s: no host memory for a phys handle", dev->name);
    pthread_mutex_lock(&dev->lock);
    vr_status st = vr__book_charge(dev, &m->book, "phys create", bytes);
    if (st == VR_OK) {
        m->nphys++;
        ph->bytes = bytes;
    }
    pthread_mutex_unlock(&dev->lock);
    if (st != VR_OK)
        free(ph);
    else
        *out = ph;
    return st;
}

static vr_status meta_phys_map(vr_device *dev, void *addr, vr_phys *ph, size_t offset, size_t bytes)
{
    meta_device *m = meta(dev);
    vr_status st = VR_OK;
    vr_vm_range *r = NULL;
    pthread_mutex_lock(&dev->lock);
    if (offset > ph->bytes || bytes > ph->bytes - offset)
        st = vr_error(VR_ERR_INVALID, "device %s: phys map of %zu bytes at offset %zu of a %zu-byte handle", dev->name,
                      bytes, offset, ph->bytes);
    else
        st = vr__vm_check_map(&m->book.vm, dev->name, "phys map", addr, bytes, &r);
    if (st == VR_OK && (!vr__ptrmap_put(&m->phys_maps, (uintptr_t)addr, (uint64_t)bytes) ||
                        !vr__ptrmap_put(&m->phys_maps, (uintptr_t)addr + 1, (uint64_t)(uintptr_t)ph))) {
        uint64_t dummy;
        vr__ptrmap_take(&m->phys_maps, (uintptr_t)addr, &dummy);
        st = vr_error(VR_ERR_OOM, "device %s: no host memory to track a mapping", dev->name);
    } else if (st == VR_OK) {
        vr__vm_set(&m->book.vm, r, (uintptr_t)addr, bytes, true);
        ph->mapped += bytes;
    }
    pthread_mutex_unlock(&dev->lock);
    return st;
}

/* A mapping is two entries of phys_maps: addr -> bytes, and addr + 1 (free,
 * since addresses are granule-aligned) -> its handle. */
static void meta_phys_unmap(vr_device *dev, void *addr, size_t bytes)
{
    meta_device *m = meta(dev);
    pthread_mutex_lock(&dev->lock);
    uintptr_t at = (uintptr_t)addr, end = at + bytes;
    for (int n = 0; at < end; n++) {
        uint64_t len = 0, ph = 0;
        if (!vr__ptrmap_take(&m->phys_maps, at, &len) || !vr__ptrmap_take(&m->phys_maps, at + 1, &ph) ||
            (len) > end - at)
            vr__device_misuse(dev, "phys unmap(%p, %zu): %#lx is not the start of a phys mapping inside it", addr, bytes,
                              (unsigned long)at);
        vr_vm_range *r = vr__vm_find(&m->book.vm, at, len);
        vr__vm_set(&m->book.vm, r, at, len, false);
        ((vr_phys *)(uintptr_t)ph)->mapped -= len;
        if (n % VR_UNMAP_RUN == 0) /* one driver call per run of mappings, as the cuda device makes */
            vr__count(dev, unmap, 1);
        at += len;
    }
    pthread_mutex_unlock(&dev->lock);
}

static void meta_phys_release(vr_device *dev, vr_phys *ph)
{
    meta_device *m = meta(dev);
    pthread_mutex_lock(&dev->lock);
    if (ph->mapped)
        vr__device_misuse(dev, "phys release: %llu bytes of the handle are still mapped", (unsigned long long)ph->mapped);
    m->book.used -= ph->bytes;
    m->nphys--;
    pthread_mutex_unlock(&dev->lock);
    free(ph);
}

static void meta_close(vr_device *dev)
{
    meta_device *m = meta(dev);
    if (m->book.live.count || m->book.vm.n || m->nphys)
        fprintf(stderr, "vram: device %s closed with %zu allocations, %zu reservations and %zu phys handles still live\n",
                dev->name, m->book.live.count, m->book.vm.n, m->nphys);
    vr__book_free(&m->book);
    vr__ptrmap_free(&m->phys_maps);
    vr__device_fini(dev);
    free(m);
}

static const vr_device_ops meta_ops = {
    .close = meta_close,
    .mem_info = meta_mem_info,
    .used = meta_used,
    .malloc = meta_malloc,
    .free = meta_free,
    .vm_granularity = vr__host_vm_granularity,
    .vm_reserve = meta_vm_reserve,
    .vm_map = meta_vm_map,
    .vm_unmap = meta_vm_unmap,
    .vm_release = meta_vm_release,
    .phys_create = meta_phys_create,
    .phys_map = meta_phys_map,
    .phys_unmap = meta_phys_unmap,
    .phys_release = meta_phys_release,
    .stream_create = vr__host_stream_create,
    .stream_destroy = vr__host_stream_destroy,
    .event_record = vr__host_event_record,
    .event_query = vr__host_event_query,
    .event_sync = vr__host_event_sync,
    .event_destroy = vr__host_event_destroy,
    .synchronize = vr__host_synchronize,
};

vr_status vr__meta_open(uint64_t capacity, vr_device **out)
{
    meta_device *m = calloc(1, sizeof *m);
    if (!m)
        return vr_error(VR_ERR_OOM, "device meta: no host memory");
    vr__book_init(&m->book, capacity ? capacity : VR_META_DEFAULT_CAPACITY);
    m->next = META_BASE;
    char name[64], cap[32];
    snprintf(name, sizeof name, "meta (%s)", vr_format_size(m->book.capacity, cap, sizeof cap));
    vr__device_init(&m->base, &meta_ops, VR_DEVICE_META, name);
    *out = &m->base;
    return VR_OK;
}
