/* Inside the device layer: the backend interface behind include/vram/device.h.
 *
 * Each backend (cpu.c, meta.c, cuda_*_cuda.c) embeds struct vr_device as the
 * first member of its own struct and fills a vr_device_ops table. device.c
 * parses specs and dispatches; host_streams.c gives cpu and meta their
 * streams and events. */
#ifndef VRAM_DEVICE_IMPL_H
#define VRAM_DEVICE_IMPL_H

#include <pthread.h>

#include "vram/device.h"

typedef struct vr_device_ops {
    void (*close)(vr_device *dev);
    vr_status (*mem_info)(vr_device *dev, vr_device_mem *out);
    uint64_t (*used)(vr_device *dev); /* mem_info's used_by_us alone, without asking the device */
    vr_status (*malloc)(vr_device *dev, size_t bytes, void **ptr);
    void (*free)(vr_device *dev, void *ptr, size_t bytes);

    size_t (*vm_granularity)(vr_device *dev);
    vr_status (*vm_reserve)(vr_device *dev, size_t bytes, void **base);
    vr_status (*vm_map)(vr_device *dev, void *addr, size_t bytes);
    void (*vm_unmap)(vr_device *dev, void *addr, size_t bytes);
    void (*vm_release)(vr_device *dev, void *base, size_t bytes);

    /* Optional (NULL: VR_ERR_UNSUPPORTED); device.c checks alignment first. */
    vr_status (*phys_create)(vr_device *dev, size_t bytes, vr_phys **out);
    vr_status (*phys_map)(vr_device *dev, void *addr, vr_phys *ph, size_t offset, size_t bytes);
    void (*phys_unmap)(vr_device *dev, void *addr, size_t bytes);
    /* Optional: n handles of one granule each mapped side by side from addr (NULL: phys_map each). */
    vr_status (*phys_map_granules)(vr_device *dev, void *addr, vr_phys *const *phs, size_t n, size_t granule);
    /* Optional: the same without waiting for the device (NULL: phys_unmap). */
    void (*phys_unmap_idle)(vr_device *dev, void *addr, size_t bytes);
    void (*phys_release)(vr_device *dev, vr_phys *ph);

    vr_status (*stream_create)(vr_device *dev, vr_stream *out);
    void (*stream_destroy)(vr_device *dev, vr_stream s);
    vr_status (*event_record)(vr_device *dev, vr_stream s, vr_event **out);
    bool (*event_query)(vr_device *dev, vr_event *ev);
    vr_status (*event_sync)(vr_device *dev, vr_event *ev);
    void (*event_destroy)(vr_device *dev, vr_event *ev);
    vr_status (*synchronize)(vr_device *dev);
    /* Optional (NULL: posix_memalign/free): host memory the device copies to and from fast (cuda: pinned). */
    vr_status (*host_alloc)(vr_device *dev, size_t bytes, void **ptr);
    void (*host_free)(vr_device *dev, void *ptr);
    /* Optional (NULL: nothing to do): makes dev the calling thread's current device. */
    vr_status (*use)(vr_device *dev);
} vr_device_ops;

/* Streams and events of the host backends (cpu, meta): host_streams.c. */
typedef struct vr_host_events {
    bool manual;          /* events stay pending until completed by hand */
    uint64_t recorded;    /* events recorded so far (the last one's sequence number) */
    uint64_t completed;   /* every event with seq <= completed is done */
    uint64_t next_stream; /* next stream id to hand out (0 is the default stream) */
    uint64_t live_events; /* recorded and not yet destroyed (leak check at close) */
} vr_host_events;

struct vr_device {
    const vr_device_ops *ops;
    vr_device_kind kind;
    int index;                 /* CUDA ordinal, -1 on cpu/meta */
    char name[192];
    pthread_mutex_t lock;      /* guards the backend's bookkeeping (cpu, meta) */
    vr_host_events host;       /* cpu/meta only */
    vr_device_calls calls;     /* counted with relaxed atomics (vr__count) */
};

/* Adds n to one of dev->calls' counters (any thread). */
#define vr__count(dev, field, n) __atomic_fetch_add(&(dev)->calls.field, (uint64_t)(n), __ATOMIC_RELAXED)
/* Phys mappings side by side are unmapped in runs of at most this many, one driver call per run (the cuda
 * device's cuMemUnmap over the run's range; the meta device counts the same). */
#define VR_UNMAP_RUN 256

/* Sets the common fields (and the lock) of a freshly allocated device. */
void vr__device_init(vr_device *dev, const vr_device_ops *ops, vr_device_kind kind, const char *name);
/* Destroys the lock; the backend frees the device itself. */
void vr__device_fini(vr_device *dev);

/* Reports a misuse that a void function cannot return (freeing what was not
 * handed out, ...) and aborts: a programming error, like a double free. */
_Noreturn void vr__device_misuse(const vr_device *dev, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Returns VR_ERR_OOM with the message every backend uses:
 * "device meta (80.00 GiB): out of memory: malloc of 2.00 GiB with 79.00 GiB
 * in use of 80.00 GiB (1.00 GiB free)". */
vr_status vr__device_oom(const vr_device *dev, const char *op, uint64_t bytes, uint64_t used, uint64_t total);
/* *count read under the device's lock (a backend's byte count, which it updates under the lock): the `used`
 * op of every backend. */
uint64_t vr__device_read_locked(vr_device *dev, const uint64_t *count);

/* Prefixes this thread's last error message with `prefix` ("device 'cuda:1'")
 * and returns st. */
vr_status vr__error_prefix(vr_status st, const char *prefix);

/* Backends' constructors. `capacity` 0 = default (cpu: unlimited, meta: 80 GiB). */
vr_status vr__cpu_open(uint64_t capacity, vr_device **out);
vr_status vr__meta_open(uint64_t capacity, vr_device **out);
vr_status vr__cuda_open(int index, const char *spec, vr_device **out);

/* Host streams/events, used by the ops tables of cpu.c and meta.c. */
vr_status vr__host_stream_create(vr_device *dev, vr_stream *out);
void vr__host_stream_destroy(vr_device *dev, vr_stream s);
vr_status vr__host_event_record(vr_device *dev, vr_stream s, vr_event **out);
bool vr__host_event_query(vr_device *dev, vr_event *ev);
vr_status vr__host_event_sync(vr_device *dev, vr_event *ev);
void vr__host_event_destroy(vr_device *dev, vr_event *ev);
vr_status vr__host_synchronize(vr_device *dev);

#define VR_DEVICE_ALIGN 512u
#define VR_DEVICE_GRANULE ((size_t)2 << 20)  /* vm granularity of cpu and meta */

static inline uint64_t vr__round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

#endif
