/* vram — the caching allocator.
 *
 * Sits on one vr_device and hands out blocks from cached segments, the way
 * PyTorch's CUDA caching allocator does (policy "pytorch", stated in full at
 * the top of src/alloc/pytorch.c), or with other policies behind the same
 * interface ("expandable", ...). Statistics are kept exactly as PyTorch users
 * know them (memory_allocated, memory_reserved, ...), per pool.
 *
 * Thread-safe: one lock per allocator. */
#ifndef VRAM_ALLOC_H
#define VRAM_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vram/device.h"
#include "vram/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_alloc vr_alloc;

typedef struct vr_alloc_config {
    const char *policy;        /* "pytorch" (default when NULL), "expandable", ... */
    uint64_t max_split_size;   /* blocks larger than this are never split (0 = unlimited) */
    double memory_fraction;    /* cap reserved at this fraction of device total (0 = none) */
    uint64_t capacity;         /* cap reserved at this many bytes (0 = none) */
    size_t history;            /* events kept in the history ring (0 = history off) */
} vr_alloc_config;

/* One statistic, as in PyTorch's Stat. */
typedef struct vr_stat {
    int64_t current;
    int64_t peak;
    int64_t allocated;   /* total ever added */
    int64_t freed;       /* total ever removed */
} vr_stat;

enum { VR_POOL_ALL = 0, VR_POOL_SMALL = 1, VR_POOL_LARGE = 2, VR_POOL_COUNT = 3 };

/* Statistics, as in PyTorch's DeviceStats; arrays are indexed by VR_POOL_*. */
typedef struct vr_alloc_stats {
    vr_stat allocation[VR_POOL_COUNT];           /* number of live blocks handed out */
    vr_stat segment[VR_POOL_COUNT];              /* number of device segments */
    vr_stat active[VR_POOL_COUNT];               /* live blocks + blocks awaiting events */
    vr_stat inactive_split[VR_POOL_COUNT];       /* free blocks that are part of split segments */
    vr_stat allocated_bytes[VR_POOL_COUNT];      /* "memory_allocated": rounded sizes handed out */
    vr_stat reserved_bytes[VR_POOL_COUNT];       /* "memory_reserved": bytes held from the device */
    vr_stat active_bytes[VR_POOL_COUNT];
    vr_stat inactive_split_bytes[VR_POOL_COUNT];
    vr_stat requested_bytes[VR_POOL_COUNT];      /* sizes as the caller asked */
    int64_t num_alloc_retries;   /* device allocation failed, cache freed, retried */
    int64_t num_ooms;            /* out-of-memory errors returned to the caller */
    int64_t num_device_alloc;    /* segments (or mappings) obtained from the device */
    int64_t num_device_free;     /* segments (or mappings) returned to the device */
    int64_t num_sync_all_streams;
    uint64_t max_split_size;
} vr_alloc_stats;

/* Creates an allocator on `dev` (config may be NULL for defaults). */
vr_status vr_alloc_create(vr_device *dev, const vr_alloc_config *config, vr_alloc **out);

/* Frees every cached segment and the allocator; live blocks are leaked to the device. */
void vr_alloc_destroy(vr_alloc *a);

/* Allocates `size` bytes for use on `stream`. On failure returns VR_ERR_OOM and
 * vr_last_error() holds the full out-of-memory explanation. size 0 gives NULL. */
vr_status vr_alloc_malloc(vr_alloc *a, size_t size, vr_stream stream, void **ptr);

/* Returns a block to the cache (NULL is ignored; an unknown pointer is an error). */
vr_status vr_alloc_free(vr_alloc *a, void *ptr);

/* Marks a block as used on another stream: on free it is reused only after
 * events recorded on those streams have completed. */
vr_status vr_alloc_record_stream(vr_alloc *a, void *ptr, vr_stream stream);

/* Returns every cached segment with no live block to the device. */
void vr_alloc_empty_cache(vr_alloc *a);

/* Copies the statistics / resets peaks to current values. */
void vr_alloc_get_stats(vr_alloc *a, vr_alloc_stats *out);
void vr_alloc_reset_peak(vr_alloc *a);

/* The bytes a request of `size` is rounded to (512-byte blocks under "pytorch"). */
size_t vr_alloc_round_size(const vr_alloc *a, size_t size);

/* The policy's name and the device it sits on. */
const char *vr_alloc_policy(const vr_alloc *a);
vr_device *vr_alloc_device(const vr_alloc *a);

/* A text table like torch.cuda.memory_summary(); caller frees. */
char *vr_alloc_summary(vr_alloc *a);

/* Writes the JSON snapshot (segments with their blocks, plus the history
 * trace; PyTorch's field names) / a Chrome/Perfetto trace with a memory
 * counter track. Written to a temporary file and renamed. */
vr_status vr_alloc_write_snapshot(vr_alloc *a, const char *path);
vr_status vr_alloc_write_chrome_trace(vr_alloc *a, const char *path);

#ifdef __cplusplus
}
#endif
#endif
