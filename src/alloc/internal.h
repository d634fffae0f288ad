/* The allocator's shared bookkeeping: blocks, segments, pools, the allocator
 * itself, and the helpers every policy builds on (split, merge, free, stats,
 * device calls under the cap, history). Policies (src/alloc/policy.h) decide
 * *which* block serves a request and *how* memory is obtained and returned;
 * everything here is policy-neutral so that new policies reuse it.
 *
 * Nothing here locks: the public entry points in alloc.c hold a->lock while
 * they call into policies and helpers. Internal names are prefixed vra_. */
#ifndef VRAM_ALLOC_INTERNAL_H
#define VRAM_ALLOC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vram/alloc.h"
#include "alloc/tree.h"

#define VRA_MIN_BLOCK   ((size_t)512)              /* every size is rounded to this */
#define VRA_SMALL_SIZE  ((size_t)1 << 20)          /* largest request of the small pool */
#define VRA_SMALL_BUF   ((size_t)2 << 20)          /* small pool segment */
#define VRA_LARGE_BUF   ((size_t)20 << 20)         /* segment for 1-10 MiB requests */
#define VRA_MIN_LARGE   ((size_t)10 << 20)         /* from here: request rounded to 2 MiB */
#define VRA_ROUND_LARGE ((size_t)2 << 20)

typedef struct vr_block vr_block;
typedef struct vr_segment vr_segment;
typedef struct vr_pool vr_pool;
typedef struct vr_policy vr_policy;

/* A piece of a segment. Lives in exactly one place: the allocated map
 * (allocated), its pool's free tree (free and mapped, no pending events), its
 * pool's unmapped tree (an unmapped range of an expandable segment), or
 * nowhere (freed by the caller but waiting for events of other streams). */
struct vr_block {
    uintptr_t addr;
    size_t size;
    size_t requested;        /* size the caller asked for (live blocks) */
    vr_stream stream;        /* allocation stream */
    vr_pool *pool;
    vr_segment *seg;
    vr_block *prev, *next;   /* address neighbours inside the segment */
    vr_block *left, *right;  /* tree links */
    vr_block *hnext;         /* allocated-map chain */
    int height;              /* AVL height */
    int event_count;         /* outstanding events before reuse */
    bool allocated;
    bool mapped;             /* backed by memory (always, outside expandable segments) */
    uint32_t nuses, capuses; /* streams the block was used on (record_stream) */
    vr_stream *uses;
};

/* Memory obtained from the device: one vr_device_malloc, or one reserved
 * virtual range of an expandable segment with granules mapped into it. */
struct vr_segment {
    uintptr_t base;
    size_t size;             /* bytes of the allocation / of the virtual range */
    size_t mapped;           /* bytes backed by memory (== size unless expandable) */
    vr_stream stream;
    vr_pool *pool;
    bool expandable;
    vr_block *head;          /* lowest-address block */
    void *pdata;             /* the policy's own data about the segment (or NULL) */
    vr_segment *lprev, *lnext; /* list of all segments */
};

struct vr_pool {
    bool is_small;
    int stat;                /* VR_POOL_SMALL or VR_POOL_LARGE */
    vra_tree blocks;         /* free mapped blocks by (stream, size, addr) */
    vra_tree unmapped;       /* unmapped ranges by (stream, addr) */
    bool untreed;            /* its free blocks are not in `blocks`: the policy finds them its own way
                              * (stitch's large pool: by mapping, stitch_cand.c) */
};

/* One allocation request as it moves through a policy. */
typedef struct vra_request {
    size_t orig;             /* as asked */
    size_t size;             /* rounded */
    vr_stream stream;
    vr_pool *pool;
    size_t alloc_size;       /* what the policy last tried to get from the device */
    vr_block *block;         /* the block found or made */
} vra_request;

typedef struct vra_pending {
    vr_event *ev;
    vr_block *block;
} vra_pending;

enum vra_action {
    VRA_ALLOC, VRA_FREE_REQUESTED, VRA_FREE_COMPLETED, VRA_SEGMENT_ALLOC, VRA_SEGMENT_FREE,
    VRA_SEGMENT_MAP, VRA_SEGMENT_UNMAP, VRA_OOM, VRA_ACTION_COUNT
};

typedef struct vra_event {
    uint8_t action;
    uint64_t addr, size;     /* OOM: addr holds the device's free bytes */
    vr_stream stream;
    uint64_t time_ns;
    int64_t allocated, reserved; /* totals after the event */
} vra_event;

typedef struct vra_history {
    vra_event *ring;
    size_t cap, next, count;
    uint64_t t0;
} vra_history;

struct vr_alloc {
    pthread_mutex_t lock;
    vr_device *dev;
    const vr_policy *policy;
    void *pstate;                   /* the policy's own state */
    vr_alloc_config cfg;
    uint64_t max_split;             /* UINT64_MAX when unlimited */
    uint64_t max_non_split_rounding;
    uint64_t device_total;
    uint64_t limit;                 /* cap on reserved bytes (UINT64_MAX none) */
    vr_pool small, large;
    vr_alloc_stats stats;
    uint64_t reserved;              /* == stats.reserved_bytes[ALL].current */
    vr_block **map;                 /* allocated blocks by address */
    size_t map_cap, map_count;
    vr_segment *segs;               /* all segments */
    size_t nsegs;
    vra_pending *pending;           /* events before cross-stream reuse */
    size_t npending, cappending;
    vr_block *spare;                /* recycled block structs */
    vra_history hist;
};

/* --- stats (PyTorch's increase_stat / decrease_stat on ALL and one pool) --- */
void vra_stat_inc(vr_stat *s, int64_t amount);
void vra_stat_dec(vr_stat *s, int64_t amount);
void vra_pool_inc(vr_stat arr[VR_POOL_COUNT], const vr_pool *p, int64_t amount);
void vra_pool_dec(vr_stat arr[VR_POOL_COUNT], const vr_pool *p, int64_t amount);

/* --- blocks and segments --- */
vr_block *vra_block_new(vr_alloc *a);
void vra_block_delete(vr_alloc *a, vr_block *b);
static inline bool vra_block_is_split(const vr_block *b) { return b->prev || b->next; }
/* Free, mapped or not, with nothing pending: may be merged or reused. */
static inline bool vra_block_available(const vr_block *b)
{
    return b && !b->allocated && b->event_count == 0 && b->nuses == 0;
}
/* Creates a segment [base, base+size) with one block covering it (mapped as
 * given; not in any tree) and links it into a->segs. */
vr_segment *vra_segment_new(vr_alloc *a, uintptr_t base, size_t size, vr_stream stream,
                            vr_pool *pool, bool expandable, bool mapped);
void vra_segment_delete(vr_alloc *a, vr_segment *s);

/* The pool a rounded size belongs to (small: <= 1 MiB). */
vr_pool *vra_pool_for(vr_alloc *a, size_t size);

/* Merges src (a neighbour of dst) into dst when src is available and has the
 * same mapped state; src leaves its tree and is deleted. dst must not be in a
 * tree. Returns the bytes subsumed (0 when not merged). */
size_t vra_try_merge(vr_alloc *a, vr_block *dst, vr_block *src);

/* Hands out block b for req: splits off the remainder when split is set,
 * marks it allocated, updates statistics and records the event. Returns the
 * block handed out (b itself or its front part). */
vr_block *vra_alloc_found(vr_alloc *a, const vra_request *req, vr_block *b, bool split);

/* Returns a block with no pending uses to its pool: merges free neighbours,
 * inserts it into the free tree, updates statistics (PyTorch's free_block). */
void vra_free_block(vr_alloc *a, vr_block *b);

/* Returns the device allocation of a non-expandable segment whose only block
 * is b (free, in its pool's tree) to the device (PyTorch's release_block). */
void vra_release_segment(vr_alloc *a, vr_block *b);

/* --- device calls under the cap: VR_ERR_OOM when the cap or the device says no --- */
vr_status vra_device_malloc(vr_alloc *a, size_t bytes, void **ptr);
vr_status vra_device_map(vr_alloc *a, uintptr_t addr, size_t bytes);

/* --- cross-stream events --- */
void vra_process_events(vr_alloc *a);
void vra_sync_and_free_events(vr_alloc *a);

/* --- history (history.c) --- */
void vra_history_init(vra_history *h, size_t cap);
void vra_history_free(vra_history *h);
void vra_record(vr_alloc *a, int action, uint64_t addr, uint64_t size, vr_stream stream);
const char *vra_action_name(int action);

/* --- out-of-memory message (oom.c): stores it as the last error --- */
vr_status vra_oom_error(vr_alloc *a, const vra_request *req);
uint64_t vra_largest_free(vr_alloc *a);

/* --- misc --- */
/* The live block at addr, or NULL. */
vr_block *vra_map_find(vr_alloc *a, uintptr_t addr);
uint64_t vra_clock(vr_alloc *a);
/* Writes text to path through a temporary file and rename. */
vr_status vra_write_atomic(const char *path, const char *text, const char *what);

#endif
