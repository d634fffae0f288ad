/* vram — the caching allocator.
 *
 * Sits on one vr_device and hands out blocks from cached segments, the way
 * PyTorch's CUDA caching allocator does (policy "pytorch", stated in full at
 * the top of src/alloc/pytorch.c), or with other policies behind the same
 * interface ("expandable": one growing virtual range per stream and pool, see
 * src/alloc/expandable.c; "stitch": physical granules stitched into a fresh
 * virtual range per block, with no rounding to granules, on devices with
 * physical memory handles, see src/alloc/stitch.c). Statistics are kept exactly as PyTorch users know
 * them (memory_allocated, memory_reserved, ...), per pool.
 *
 * Words: a *segment* is memory obtained from the device (vr_device_malloc, or
 * a mapped range of an expandable segment); a *block* is a piece of a segment,
 * either handed out (allocated), waiting for events of other streams before it
 * can be reused (active, pending free), or cached (inactive). *Reserved* bytes
 * are all segment bytes; *allocated* bytes are the rounded sizes of the blocks
 * handed out; *requested* bytes are the sizes the callers asked for.
 *
 * Thread-safe: one lock per allocator. */
#ifndef VRAM_ALLOC_H
#define VRAM_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vram/device.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_alloc vr_alloc;

typedef struct vr_alloc_config {
    const char *policy;        /* "pytorch" (default when NULL), "expandable", ... */
    uint64_t max_split_size;   /* blocks of this size or more are never split (0 = unlimited) */
    uint64_t max_non_split_rounding; /* an unsplittable cached block serves a request only if
                                      * it is less than this much larger (0 = 20 MiB, PyTorch's) */
    double memory_fraction;    /* cap reserved at this fraction of device total (0 = none) */
    uint64_t capacity;         /* cap reserved at this many bytes (0 = none); with a fraction
                                * too, the smaller cap holds */
    size_t history;            /* events kept in the history ring (0 = history off) */
    unsigned stitch_lend_pct;  /* policy stitch: a large request of a size with no mapping of its own may be
                                * lent an idle or cached mapping up to this percent larger (0 = never, the
                                * default; src/alloc/stitch.c) */
    uint64_t stitch_granule;   /* policy stitch: bytes of each physical allocation it makes and maps (rounded up to
                                * a multiple of the device's granularity, at most 512 of it; 0: the granularity,
                                * 2 MiB on current GPUs). The
                                * driver's cuMemSetAccess and cuMemUnmap cost ~20-30 us per physical allocation
                                * in the range (bench/alloc/vmm_cost.c), so larger granules make new mappings
                                * cheaper, and stitching coarser */
    /* Time source for history timestamps, in ns (NULL = vr_now_ns). A replay
     * passes a logical clock so that its traces are readable. */
    uint64_t (*clock_ns)(void *ctx);
    void *clock_ctx;
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
    vr_stat segment[VR_POOL_COUNT];              /* number of device segments (expandable:
                                                  * virtual ranges) */
    vr_stat active[VR_POOL_COUNT];               /* live blocks + blocks awaiting events */
    vr_stat inactive_split[VR_POOL_COUNT];       /* free blocks that are part of split segments */
    vr_stat allocated_bytes[VR_POOL_COUNT];      /* "memory_allocated": rounded sizes handed out */
    vr_stat reserved_bytes[VR_POOL_COUNT];       /* "memory_reserved": bytes held from the device */
    vr_stat active_bytes[VR_POOL_COUNT];
    vr_stat inactive_split_bytes[VR_POOL_COUNT];
    vr_stat requested_bytes[VR_POOL_COUNT];      /* sizes as the caller asked */
    vr_stat oversize_allocations;                /* live blocks of max_split_size or more */
    vr_stat oversize_segments;                   /* segments of max_split_size or more */
    int64_t num_alloc_retries;   /* device allocation failed, cache freed, retried */
    int64_t num_ooms;            /* out-of-memory errors returned to the caller */
    int64_t num_device_alloc;    /* segments (or mappings) obtained from the device */
    int64_t num_device_free;     /* segments (or mappings) returned to the device */
    int64_t num_sync_all_streams;
    uint64_t max_split_size;     /* the setting (UINT64_MAX when unlimited) */
} vr_alloc_stats;

/* Creates an allocator on `dev` (config may be NULL for defaults). An unknown
 * policy, or "expandable" on a device without virtual memory, is VR_ERR_INVALID
 * / VR_ERR_UNSUPPORTED with a message listing what is available. */
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

/* Returns every cached segment with no live block to the device (expandable:
 * unmaps every free granule). Waits for pending cross-stream frees first. */
void vr_alloc_empty_cache(vr_alloc *a);

/* Copies the statistics / resets peaks to current values / resets the
 * allocated and freed totals and the counters. */
void vr_alloc_get_stats(vr_alloc *a, vr_alloc_stats *out);
void vr_alloc_reset_peak(vr_alloc *a);
void vr_alloc_reset_accumulated(vr_alloc *a);

/* Caps reserved memory at fraction × device total (0 removes the fraction cap). */
vr_status vr_alloc_set_memory_fraction(vr_alloc *a, double fraction);

/* The cap on reserved bytes now in force (UINT64_MAX when none). */
uint64_t vr_alloc_limit(vr_alloc *a);

/* Size in bytes of the largest cached free block (0 when none). */
uint64_t vr_alloc_largest_free_block(vr_alloc *a);

/* The rounded size of the live block at ptr, or 0 when ptr is not one. */
size_t vr_alloc_block_size(vr_alloc *a, const void *ptr);

/* The bytes a request of `size` is rounded to (512-byte blocks under "pytorch"). */
size_t vr_alloc_round_size(const vr_alloc *a, size_t size);

/* The policy's name and the device it sits on. */
const char *vr_alloc_policy(const vr_alloc *a);
vr_device *vr_alloc_device(const vr_alloc *a);

/* The policies this build offers, as "pytorch, expandable, ...". */
const char *vr_alloc_policy_names(void);

/* Checks every internal invariant (blocks tile their segments without overlap,
 * free lists match block states, statistics match a recount, reserved within
 * the cap). VR_OK, or VR_ERR_INVALID naming the first violation. For tests. */
vr_status vr_alloc_check(vr_alloc *a);

/* A text table like torch.cuda.memory_summary(); caller frees. */
char *vr_alloc_summary(vr_alloc *a);

/* Starts (entries > 0) or stops (0, clearing it) the history ring. */
void vr_alloc_record_history(vr_alloc *a, size_t entries);

/* Writes the JSON snapshot (segments with their blocks, plus the history
 * trace; PyTorch's field names) / a Chrome/Perfetto trace with allocated and
 * reserved counter tracks. Written to a temporary file and renamed. */
vr_status vr_alloc_write_snapshot(vr_alloc *a, const char *path);
vr_status vr_alloc_write_chrome_trace(vr_alloc *a, const char *path);

/* The snapshot as a JSON string (caller frees). */
char *vr_alloc_snapshot_json(vr_alloc *a);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
