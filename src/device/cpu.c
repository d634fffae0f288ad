/* The cpu device: host memory, optionally capped.
 *
 * malloc: posix_memalign with 512-byte alignment. Virtual memory is real:
 * reserve = mmap(PROT_NONE, MAP_NORESERVE) aligned to 2 MiB, map = mprotect
 * read/write, unmap = madvise(MADV_DONTNEED) + mprotect(PROT_NONE) (the pages
 * go back to the kernel), release = munmap. Allocations and reservations are
 * tracked (ptrmap.c, vmspace.c) to check frees and count bytes against the
 * capacity (host_book.c); without a cap the capacity is the host's RAM. */
#define _GNU_SOURCE
#include "device/device_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "device/host_book.h"
#include "vram/util.h"

typedef struct cpu_device {
    vr_device base;
    vr_host_book book;    /* capacity 0 = no cap */
} cpu_device;

static cpu_device *cpu(vr_device *dev) { return (cpu_device *)dev; }

/* Host RAM: MemTotal and MemAvailable from /proc/meminfo, else sysinfo(2). */
static void host_memory(uint64_t *total, uint64_t *available)
{
    *total = *available = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
                *total = (uint64_t)kib * 1024;
            else if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
                *available = (uint64_t)kib * 1024;
        }
        fclose(f);
    }
    if (*total && *available)
        return;
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        *total = (uint64_t)si.totalram * si.mem_unit;
        *available = (uint64_t)(si.freeram + si.bufferram) * si.mem_unit;
    }
}

static uint64_t cpu_used(vr_device *dev) { return vr__device_read_locked(dev, &cpu(dev)->book.used); }

static vr_status cpu_mem_info(vr_device *dev, vr_device_mem *out)
{
    cpu_device *c = cpu(dev);
    uint64_t total, avail;
    host_memory(&total, &avail);
    pthread_mutex_lock(&dev->lock);
    const vr_host_book *b = &c->book;
    out->used_by_us = b->used;
    if (b->capacity) {
        out->total = b->capacity;
        out->free = b->capacity - b->used < avail ? b->capacity - b->used : avail;
    } else {
        out->total = total;
        out->free = avail;
    }
    pthread_mutex_unlock(&dev->lock);
    return VR_OK;
}

static vr_status cpu_malloc(vr_device *dev, size_t bytes, void **ptr)
{
    cpu_device *c = cpu(dev);
    uint64_t size = vr__round_up(bytes, VR_DEVICE_ALIGN);
    void *p = NULL;
    pthread_mutex_lock(&dev->lock);
    vr_status st = vr__book_charge(dev, &c->book, "malloc", size);
    pthread_mutex_unlock(&dev->lock);
    if (st != VR_OK)
        return st;
    if (posix_memalign(&p, VR_DEVICE_ALIGN, (size_t)size) != 0) {
        char b[32];
        st = vr_error(VR_ERR_OOM, "device %s: out of memory: the host could not provide %s", dev->name,
                      vr_format_size(bytes, b, sizeof b));
    }
    pthread_mutex_lock(&dev->lock);
    if (st == VR_OK && !vr__ptrmap_put(&c->book.live, (uintptr_t)p, size)) {
        free(p);
        st = vr_error(VR_ERR_OOM, "device %s: no host memory to track an allocation", dev->name);
    }
    if (st != VR_OK)
        c->book.used -= size;
    pthread_mutex_unlock(&dev->lock);
    if (st == VR_OK)
        *ptr = p;
    return st;
}

static void cpu_free(vr_device *dev, void *ptr, size_t bytes)
{
    pthread_mutex_lock(&dev->lock);
    vr__book_untrack(dev, &cpu(dev)->book, ptr, bytes);
    pthread_mutex_unlock(&dev->lock);
    free(ptr);
}

static vr_status cpu_vm_reserve(vr_device *dev, size_t bytes, void **base)
{
    cpu_device *c = cpu(dev);
    size_t g = VR_DEVICE_GRANULE;
    if (bytes > SIZE_MAX - g)
        return vr_error(VR_ERR_INVALID, "device %s: vm reserve of %zu bytes is too large", dev->name, bytes);
    /* Over-reserve by one granule, then trim both ends to a 2 MiB-aligned range. */
    char *raw = mmap(NULL, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return vr_error(VR_ERR_OOM, "device %s: vm reserve of %zu bytes: mmap: %s", dev->name, bytes, strerror(errno));
    char *at = (char *)vr__round_up((uintptr_t)raw, g);
    if (at > raw)
        munmap(raw, (size_t)(at - raw));
    if (raw + bytes + g > at + bytes)
        munmap(at + bytes, (size_t)(raw + bytes + g - (at + bytes)));
    pthread_mutex_lock(&dev->lock);
    bool ok = vr__vm_add(&c->book.vm, (uintptr_t)at, bytes);
    pthread_mutex_unlock(&dev->lock);
    if (!ok) {
        munmap(at, bytes);
        return vr_error(VR_ERR_OOM, "device %s: no host memory to track a reservation", dev->name);
    }
    *base = at;
    return VR_OK;
}

static vr_status cpu_vm_map(vr_device *dev, void *addr, size_t bytes)
{
    vr_host_book *b = &cpu(dev)->book;
    vr_vm_range *r = NULL;
    pthread_mutex_lock(&dev->lock);
    vr_status st = vr__vm_check_map(&b->vm, dev->name, "vm map", addr, bytes, &r);
    if (st == VR_OK)
        st = vr__book_charge(dev, b, "vm map", bytes);
    if (st == VR_OK && mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) {
        st = vr_error(VR_ERR_OOM, "device %s: vm map of %zu bytes: mprotect: %s", dev->name, bytes, strerror(errno));
        b->used -= bytes;
    }
    if (st == VR_OK)
        vr__vm_set(&b->vm, r, (uintptr_t)addr, bytes, true);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

static void cpu_vm_unmap(vr_device *dev, void *addr, size_t bytes)
{
    pthread_mutex_lock(&dev->lock);
    vr__book_unmap(dev, &cpu(dev)->book, addr, bytes); /* checks the range before the pages are touched */
    if (madvise(addr, bytes, MADV_DONTNEED) != 0 || mprotect(addr, bytes, PROT_NONE) != 0)
        vr__device_misuse(dev, "vm unmap(%p, %zu): %s", addr, bytes, strerror(errno));
    pthread_mutex_unlock(&dev->lock);
}

static void cpu_vm_release(vr_device *dev, void *base, size_t bytes)
{
    pthread_mutex_lock(&dev->lock);
    vr__book_release(dev, &cpu(dev)->book, base, bytes);
    pthread_mutex_unlock(&dev->lock);
    munmap(base, bytes);
}

static void cpu_close(vr_device *dev)
{
    cpu_device *c = cpu(dev);
    if (c->book.live.count || c->book.vm.n)
        fprintf(stderr, "vram: device %s closed with %zu allocations and %zu reservations still live\n", dev->name,
                c->book.live.count, c->book.vm.n);
    vr__book_free(&c->book);
    vr__device_fini(dev);
    free(c);
}

static const vr_device_ops cpu_ops = {
    .close = cpu_close,
    .mem_info = cpu_mem_info,
    .used = cpu_used,
    .malloc = cpu_malloc,
    .free = cpu_free,
    .vm_granularity = vr__host_vm_granularity,
    .vm_reserve = cpu_vm_reserve,
    .vm_map = cpu_vm_map,
    .vm_unmap = cpu_vm_unmap,
    .vm_release = cpu_vm_release,
    .stream_create = vr__host_stream_create,
    .stream_destroy = vr__host_stream_destroy,
    .event_record = vr__host_event_record,
    .event_query = vr__host_event_query,
    .event_sync = vr__host_event_sync,
    .event_destroy = vr__host_event_destroy,
    .synchronize = vr__host_synchronize,
};

vr_status vr__cpu_open(uint64_t capacity, vr_device **out)
{
    cpu_device *c = calloc(1, sizeof *c);
    if (!c)
        return vr_error(VR_ERR_OOM, "device cpu: no host memory");
    vr__book_init(&c->book, capacity);
    char name[64] = "cpu", cap[32];
    if (capacity)
        snprintf(name, sizeof name, "cpu (%s)", vr_format_size(capacity, cap, sizeof cap));
    vr__device_init(&c->base, &cpu_ops, VR_DEVICE_CPU, name);
    *out = &c->base;
    return VR_OK;
}
