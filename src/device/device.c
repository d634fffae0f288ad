/* Device specs ("cpu:1GiB", "meta", "cuda:1") and dispatch to the backends. */
#define _POSIX_C_SOURCE 200809L
#include "device/device_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/util.h"

void vr__device_init(vr_device *dev, const vr_device_ops *ops, vr_device_kind kind, const char *name)
{
    dev->ops = ops;
    dev->kind = kind;
    dev->index = -1;
    snprintf(dev->name, sizeof dev->name, "%s", name);
    pthread_mutex_init(&dev->lock, NULL);
    memset(&dev->host, 0, sizeof dev->host);
    memset(&dev->calls, 0, sizeof dev->calls);
    dev->host.next_stream = 1;
}

void vr__device_fini(vr_device *dev) { pthread_mutex_destroy(&dev->lock); }

_Noreturn void vr__device_misuse(const vr_device *dev, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "vram: device %s: ", dev->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (programming error; aborting)\n", stderr);
    abort();
}

vr_status vr__device_oom(const vr_device *dev, const char *op, uint64_t bytes, uint64_t used, uint64_t total)
{
    char b[32], u[32], t[32], f[32];
    return vr_error(VR_ERR_OOM, "device %s: out of memory: %s of %s with %s in use of %s (%s free)", dev->name, op,
                    vr_format_size(bytes, b, sizeof b), vr_format_size(used, u, sizeof u),
                    vr_format_size(total, t, sizeof t), vr_format_size(used < total ? total - used : 0, f, sizeof f));
}

vr_status vr__error_prefix(vr_status st, const char *prefix)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", vr_last_error());
    return vr_error(st, "%s: %s", prefix, msg);
}

static const char spec_help[] = "use cpu, cpu:<capacity>, meta, meta:<capacity>, cuda or cuda:<index>";

vr_status vr_device_open(const char *spec, vr_device **out)
{
    *out = NULL;
    if (!spec || !*spec)
        return vr_error(VR_ERR_INVALID, "device: empty spec (%s)", spec_help);
    const char *colon = strchr(spec, ':');
    size_t kind_len = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *arg = colon ? colon + 1 : NULL;
    if (colon && !*arg)
        return vr_error(VR_ERR_INVALID, "device '%s': nothing after ':' (%s)", spec, spec_help);

    char what[128];
    snprintf(what, sizeof what, "device '%s' capacity", spec);
    uint64_t capacity = 0;
    if ((kind_len == 3 && !strncmp(spec, "cpu", 3)) || (kind_len == 4 && !strncmp(spec, "meta", 4))) {
        if (arg) {
            vr_status st = vr_parse_size(arg, what, &capacity);
            if (st != VR_OK)
                return st;
            if (capacity == 0)
                return vr_error(VR_ERR_INVALID, "%s: must be more than 0", what);
        }
        return spec[0] == 'c' ? vr__cpu_open(capacity, out) : vr__meta_open(capacity, out);
    }
    if (kind_len == 4 && !strncmp(spec, "cuda", 4)) {
        long long index = 0;
        if (arg) {
            snprintf(what, sizeof what, "device '%s' index", spec);
            vr_status st = vr_parse_int(arg, what, 0, 1023, &index);
            if (st != VR_OK)
                return st;
        }
        return vr__cuda_open((int)index, spec, out);
    }
    return vr_error(VR_ERR_INVALID, "device '%s': unknown kind (%s)", spec, spec_help);
}

void vr_device_close(vr_device *dev)
{
    if (dev)
        dev->ops->close(dev);
}

vr_device_kind vr_device_kind_of(const vr_device *dev) { return dev->kind; }
const char *vr_device_name(const vr_device *dev) { return dev->name; }
int vr_device_index(const vr_device *dev) { return dev->index; }

vr_status vr_device_mem_info(vr_device *dev, vr_device_mem *out) { return dev->ops->mem_info(dev, out); }
uint64_t vr_device_used_by_us(vr_device *dev) { return dev->ops->used(dev); }

uint64_t vr__device_read_locked(vr_device *dev, const uint64_t *count)
{
    pthread_mutex_lock(&dev->lock);
    uint64_t v = *count;
    pthread_mutex_unlock(&dev->lock);
    return v;
}

vr_status vr_device_malloc(vr_device *dev, size_t bytes, void **ptr)
{
    *ptr = NULL;
    if (bytes == 0)
        return VR_OK;
    if (bytes > SIZE_MAX / 2)
        return vr_error(VR_ERR_OOM, "device %s: out of memory: malloc of %zu bytes is larger than any device", dev->name, bytes);
    vr__count(dev, malloc, 1);
    return dev->ops->malloc(dev, bytes, ptr);
}

void vr_device_free(vr_device *dev, void *ptr, size_t bytes)
{
    if (ptr) {
        vr__count(dev, free, 1);
        dev->ops->free(dev, ptr, bytes);
    }
}

vr_status vr_device_host_alloc(vr_device *dev, size_t bytes, void **ptr)
{
    *ptr = NULL;
    if (bytes == 0)
        return VR_OK;
    vr_status st = VR_OK;
    if (dev->ops->host_alloc)
        st = dev->ops->host_alloc(dev, bytes, ptr);
    else if (bytes > SIZE_MAX / 2 || posix_memalign(ptr, 512, bytes))
        *ptr = NULL;
    if (!st && !*ptr) {
        char b[32];
        st = vr_error(VR_ERR_OOM, "device %s: out of host memory: %s of host memory could not be allocated",
                      dev->name, vr_format_size(bytes, b, sizeof b));
    }
    return st;
}

void vr_device_host_free(vr_device *dev, void *ptr)
{
    if (!ptr)
        return;
    if (dev->ops->host_free)
        dev->ops->host_free(dev, ptr);
    else
        free(ptr);
}

uint64_t vr_host_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

size_t vr_device_vm_granularity(vr_device *dev) { return dev->ops->vm_granularity(dev); }

vr_status vr_device_vm_reserve(vr_device *dev, size_t bytes, void **base)
{
    *base = NULL;
    size_t g = dev->ops->vm_granularity(dev);
    if (g == 0)
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: no virtual memory management", dev->name);
    if (bytes == 0 || bytes % g || bytes > SIZE_MAX / 2)
        return vr_error(VR_ERR_INVALID, "device %s: vm reserve of %zu bytes is not a positive multiple of the granularity (%zu)",
                        dev->name, bytes, g);
    vr__count(dev, vm_reserve, 1);
    return dev->ops->vm_reserve(dev, bytes, base);
}

vr_status vr_device_vm_map(vr_device *dev, void *addr, size_t bytes)
{
    size_t g = dev->ops->vm_granularity(dev);
    if (g == 0)
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: no virtual memory management", dev->name);
    if (bytes == 0 || bytes % g || (uintptr_t)addr % g)
        return vr_error(VR_ERR_INVALID, "device %s: vm map of [%p, +%zu) is not granule-aligned (%zu)",
                        dev->name, addr, bytes, g);
    vr__count(dev, map, bytes / g);
    vr__count(dev, phys_create, bytes / g);
    vr__count(dev, phys_release, bytes / g);
    vr__count(dev, set_access, 1);
    return dev->ops->vm_map(dev, addr, bytes);
}

void vr_device_vm_unmap(vr_device *dev, void *addr, size_t bytes)
{
    if (bytes) {
        size_t g = dev->ops->vm_granularity(dev);
        vr__count(dev, unmap, g ? bytes / g : 1);
        vr__count(dev, device_sync, 1);
        dev->ops->vm_unmap(dev, addr, bytes);
    }
}

void vr_device_vm_release(vr_device *dev, void *base, size_t bytes)
{
    if (base) {
        vr__count(dev, vm_release, 1);
        dev->ops->vm_release(dev, base, bytes);
    }
}

vr_status vr_device_phys_create(vr_device *dev, size_t bytes, vr_phys **out)
{
    *out = NULL;
    size_t g = dev->ops->vm_granularity(dev);
    if (g == 0 || !dev->ops->phys_create)
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: no physical memory handles", dev->name);
    if (bytes == 0 || bytes % g || bytes > SIZE_MAX / 2)
        return vr_error(VR_ERR_INVALID, "device %s: phys create of %zu bytes is not a positive multiple of the granularity (%zu)",
                        dev->name, bytes, g);
    vr__count(dev, phys_create, 1);
    return dev->ops->phys_create(dev, bytes, out);
}

vr_status vr_device_phys_map(vr_device *dev, void *addr, vr_phys *ph, size_t offset, size_t bytes)
{
    size_t g = dev->ops->vm_granularity(dev);
    if (g == 0 || !dev->ops->phys_map)
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: no physical memory handles", dev->name);
    if (!ph || bytes == 0 || bytes % g || offset % g || (uintptr_t)addr % g)
        return vr_error(VR_ERR_INVALID, "device %s: phys map of [%p, +%zu) at offset %zu is not granule-aligned (%zu)",
                        dev->name, addr, bytes, offset, g);
    vr__count(dev, map, 1);
    vr__count(dev, set_access, 1);
    return dev->ops->phys_map(dev, addr, ph, offset, bytes);
}

vr_status vr_device_phys_map_granules(vr_device *dev, void *addr, vr_phys *const *phs, size_t n, size_t each)
{
    size_t g = dev->ops->vm_granularity(dev);
    if (g == 0 || !dev->ops->phys_map)
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: no physical memory handles", dev->name);
    if ((uintptr_t)addr % g || each == 0 || each % g)
        return vr_error(VR_ERR_INVALID, "device %s: phys map of %zu-byte handles at %p is not granule-aligned (%zu)",
                        dev->name, each, addr, g);
    vr__count(dev, map, n);
    vr__count(dev, set_access, 1);
    if (dev->ops->phys_map_granules)
        return dev->ops->phys_map_granules(dev, addr, phs, n, each);
    for (size_t i = 0; i < n; i++) {
        vr_status st = dev->ops->phys_map(dev, (char *)addr + i * each, phs[i], 0, each);
        if (st != VR_OK) {
            if (i)
                vr_device_phys_unmap(dev, addr, i * each);
            return st;
        }
    }
    return VR_OK;
}

void vr_device_phys_unmap(vr_device *dev, void *addr, size_t bytes)
{
    if (bytes && dev->ops->phys_unmap) {
        vr__count(dev, device_sync, 1);
        dev->ops->phys_unmap(dev, addr, bytes); /* counts its cuMemUnmap calls */
    }
}

void vr_device_phys_unmap_idle(vr_device *dev, void *addr, size_t bytes)
{
    if (!bytes)
        return;
    if (dev->ops->phys_unmap_idle)
        dev->ops->phys_unmap_idle(dev, addr, bytes);
    else if (dev->ops->phys_unmap)
        dev->ops->phys_unmap(dev, addr, bytes);
}

void vr_device_phys_release(vr_device *dev, vr_phys *ph)
{
    if (ph && dev->ops->phys_release) {
        vr__count(dev, phys_release, 1);
        dev->ops->phys_release(dev, ph);
    }
}

vr_status vr_stream_create(vr_device *dev, vr_stream *out) { return dev->ops->stream_create(dev, out); }

void vr_stream_destroy(vr_device *dev, vr_stream s)
{
    if (s)
        dev->ops->stream_destroy(dev, s);
}

vr_status vr_event_record(vr_device *dev, vr_stream s, vr_event **out)
{
    *out = NULL;
    vr__count(dev, event_record, 1);
    return dev->ops->event_record(dev, s, out);
}

bool vr_event_query(vr_device *dev, vr_event *ev)
{
    vr__count(dev, event_query, 1);
    return dev->ops->event_query(dev, ev);
}

vr_status vr_event_sync(vr_device *dev, vr_event *ev)
{
    vr__count(dev, event_sync, 1);
    return dev->ops->event_sync(dev, ev);
}

void vr_device_get_calls(vr_device *dev, vr_device_calls *out)
{
    vr_device_calls c;
    const uint64_t *src = (const uint64_t *)&dev->calls;
    uint64_t *dst = (uint64_t *)&c;
    for (size_t i = 0; i < sizeof c / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    *out = c;
}

uint64_t vr_device_calls_vm_total(const vr_device_calls *c)
{
    return c->vm_reserve + c->vm_release + c->phys_create + c->phys_release + c->map + c->unmap + c->set_access +
           c->device_sync + c->malloc + c->free;
}

void vr_event_destroy(vr_device *dev, vr_event *ev)
{
    if (ev)
        dev->ops->event_destroy(dev, ev);
}

vr_status vr_device_synchronize(vr_device *dev) { return dev->ops->synchronize(dev); }

vr_status vr_device_use(vr_device *dev) { return dev->ops->use ? dev->ops->use(dev) : VR_OK; }

void vr_device_set_manual_events(vr_device *dev, bool manual)
{
    if (dev->kind == VR_DEVICE_CUDA)
        return;
    pthread_mutex_lock(&dev->lock);
    dev->host.manual = manual;
    if (!manual)
        dev->host.completed = dev->host.recorded;
    pthread_mutex_unlock(&dev->lock);
}

void vr_device_complete_events(vr_device *dev)
{
    if (dev->kind == VR_DEVICE_CUDA)
        return;
    pthread_mutex_lock(&dev->lock);
    dev->host.completed = dev->host.recorded;
    pthread_mutex_unlock(&dev->lock);
}
