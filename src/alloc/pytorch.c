/* Policy "pytorch": the rules of PyTorch's CUDA caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp, default settings), so that a model's
 * memory_reserved under vram is what it would be under PyTorch.
 *
 * - Every request is rounded up to a multiple of 512 bytes (at least 512).
 *   (PyTorch's optional roundup_power2_divisions is not offered.)
 * - Blocks are associated with the stream they were allocated on. A freed
 *   block is reused only by requests on the same stream. A block used on other
 *   streams (vr_alloc_record_stream) goes back to the cache only after events
 *   recorded on those streams at free time have completed.
 * - Requests of 1 MiB or less are served from the small pool, whose segments
 *   are 2 MiB. Larger requests come from the large pool: requests under
 *   10 MiB get a 20 MiB segment, larger ones a segment of the request rounded
 *   up to 2 MiB.
 * - Best fit: the smallest cached block of the pool on the request's stream
 *   that is at least as large as the request (ties broken by lower address);
 *   the free blocks of a pool live in a tree ordered by (stream, size, addr).
 * - A block larger than the request is split, and the remainder stays cached,
 *   when the remainder is at least 512 bytes (small pool) or more than 1 MiB
 *   (large pool). Otherwise the request gets the whole block (allocated bytes
 *   count the block's full size).
 * - When a block is freed it is merged with free neighbours of its segment
 *   (coalescing), so a segment whose blocks are all free is one block again.
 * - max_split_size (unlimited by default): blocks of this size or more are
 *   never split. A request below max_split_size never takes a cached block of
 *   max_split_size or more; a request of max_split_size or more takes a cached
 *   block only if that block is less than max_non_split_rounding (20 MiB)
 *   larger than the request.
 * - When no cached block fits, a new segment is taken from the device. If the
 *   device (or the cap: capacity / memory fraction, checked before asking the
 *   device, like PyTorch's set_per_process_memory_fraction) refuses:
 *     1. with max_split_size set, free just enough cached unsplit oversize
 *        blocks (the smallest single one that suffices, else the largest ones
 *        downwards) and try again;
 *     2. wait for all pending cross-stream events, return every cached
 *        segment that has no live block (empty_cache), count an alloc retry,
 *        and try once more;
 *     3. report out of memory (num_ooms) with a message that says what was
 *        asked, the device's capacity and free bytes, what the allocator holds
 *        and what to try.
 * - Garbage collection of cached blocks (garbage_collection_threshold) is off
 *   by default in PyTorch and not offered here.
 * - empty_cache returns every cached segment with no live block.
 *
 * Statistics follow PyTorch's DeviceStats exactly; see block.c for where each
 * moves. */
#include <stdlib.h>

#include "alloc/policy.h"

size_t vra_round_512(const vr_alloc *a, size_t size)
{
    (void)a;
    if (size < VRA_MIN_BLOCK)
        return VRA_MIN_BLOCK;
    return VRA_MIN_BLOCK * ((size + VRA_MIN_BLOCK - 1) / VRA_MIN_BLOCK);
}

/* PyTorch's get_allocation_size: bytes of a new segment for a rounded request. */
static size_t allocation_size(size_t size)
{
    if (size <= VRA_SMALL_SIZE)
        return VRA_SMALL_BUF;
    if (size < VRA_MIN_LARGE)
        return VRA_LARGE_BUF;
    return VRA_ROUND_LARGE * ((size + VRA_ROUND_LARGE - 1) / VRA_ROUND_LARGE);
}

bool vra_oversize_ok(const vr_alloc *a, const vr_block *b, size_t size)
{
    if (size < a->max_split && b->size >= a->max_split)
        return false; /* do not return an oversized block for a smaller request */
    if (size >= a->max_split && b->size >= size + a->max_non_split_rounding)
        return false; /* oversized blocks only for requests close to their size */
    return true;
}

static vr_block *find_free(vr_alloc *a, vra_request *req)
{
    vr_block key = {.stream = req->stream, .size = req->size, .addr = 0};
    vra_tree *t = &req->pool->blocks;
    vr_block *b = vra_tree_lower_bound(t, &key);
    if (!b || b->stream != req->stream || !vra_oversize_ok(a, b, req->size))
        return NULL;
    vra_tree_remove(t, b);
    return b;
}

static vr_status grow(vr_alloc *a, vra_request *req)
{
    size_t bytes = allocation_size(req->size);
    req->alloc_size = bytes;
    void *ptr = NULL;
    vr_status st = vra_device_malloc(a, bytes, &ptr);
    if (st != VR_OK)
        return st;
    vr_segment *s = vra_segment_new(a, (uintptr_t)ptr, bytes, req->stream, req->pool, false, true);
    if (!s) {
        vr_device_free(a->dev, ptr, bytes);
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    }
    a->reserved += bytes;
    vra_pool_inc(a->stats.segment, req->pool, 1);
    vra_pool_inc(a->stats.reserved_bytes, req->pool, (int64_t)bytes);
    if (bytes >= a->max_split)
        vra_stat_inc(&a->stats.oversize_segments, 1);
    a->stats.num_device_alloc++;
    vra_record(a, VRA_SEGMENT_ALLOC, s->base, bytes, req->stream);
    req->block = s->head;
    return VR_OK;
}

static bool whole_segment(const vr_block *b) { return !vra_block_is_split(b) && !b->seg->expandable; }

/* PyTorch's release_available_cached_blocks: with max_split_size set, free the
 * smallest cached block of at least max(size, max_split_size) on the stream,
 * or else the largest oversize blocks downwards until enough is freed. Only
 * whole (unsplit) segments can be returned to the device. */
static bool release_some(vr_alloc *a, vra_request *req)
{
    if (a->max_split == UINT64_MAX)
        return false;
    vra_tree *t = &req->pool->blocks;
    size_t want = req->size < a->max_split ? a->max_split : req->size;
    vr_block key = {.stream = req->stream, .size = want, .addr = 0};
    vr_block *b = vra_tree_lower_bound(t, &key);
    while (b && b->stream == req->stream && !whole_segment(b))
        b = vra_tree_next(t, b);
    if (b && b->stream == req->stream) {
        vra_release_segment(a, b);
        return true;
    }
    vr_block *it = vra_tree_prev(t, &key);
    size_t released = 0;
    while (released < want && it && it->size >= a->max_split && it->stream == req->stream) {
        vr_block *cur = it;
        it = vra_tree_prev(t, cur);
        if (whole_segment(cur)) {
            released += cur->size;
            vra_release_segment(a, cur);
        }
    }
    return released >= want;
}

static void collect_whole(vr_block *b, void *ctx)
{
    vr_block ***out = ctx;
    if (whole_segment(b))
        *(*out)++ = b;
}

/* PyTorch's release_cached_blocks: return every unsplit cached segment. */
static void release_cached(vr_alloc *a)
{
    vr_pool *pools[2] = {&a->large, &a->small};
    for (int i = 0; i < 2; i++) {
        vra_tree *t = &pools[i]->blocks;
        if (!t->count)
            continue;
        vr_block **list = malloc(t->count * sizeof *list), **end = list;
        if (!list) { /* no memory for the list: release one at a time */
            vr_block *b = vra_tree_first(t);
            while (b) {
                vr_block *n = vra_tree_next(t, b);
                if (whole_segment(b))
                    vra_release_segment(a, b);
                b = n;
            }
            continue;
        }
        vra_tree_walk(t, collect_whole, &end);
        for (vr_block **p = list; p < end; p++)
            vra_release_segment(a, *p);
        free(list);
    }
}

static bool should_split(const vr_alloc *a, const vr_block *b, size_t size)
{
    size_t remaining = b->size - size;
    if (b->pool->is_small)
        return remaining >= VRA_MIN_BLOCK;
    return size < a->max_split && remaining > VRA_SMALL_SIZE;
}

const vr_policy vra_policy_pytorch = {
    .name = "pytorch",
    .summary = "PyTorch's CUDA caching allocator: 2 MiB small / 20 MiB large segments, best fit, split, coalesce",
    .needs_vm = false,
    .round_size = vra_round_512,
    .find_free = find_free,
    .grow = grow,
    .release_some = release_some,
    .release_cached = release_cached,
    .should_split = should_split,
};
