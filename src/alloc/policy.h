/* Allocation policies: the pluggable part of the caching allocator.
 *
 * The core (alloc.c) runs the same request path for every policy, the one of
 * PyTorch's DeviceCachingAllocator::malloc:
 *
 *   process completed cross-stream events
 *   size  = round_size(request)
 *   pool  = small (<= 1 MiB) or large
 *   block = find_free(pool, stream, size)                  cached block?
 *        || grow(request)                                  new device memory
 *        || release_some(request) && grow(request)         free a little cache
 *        || (wait for events, release_cached(), retry++) && grow(request)
 *        || out-of-memory error (oom.c)
 *   hand out block, split when should_split(block, size)
 *
 * and frees through vra_free_block (merge neighbours, back into the pool).
 * A policy supplies the decisions below; block bookkeeping, splitting,
 * merging, statistics and history are shared helpers (internal.h), so a new
 * policy is one file plus a line in the table in alloc.c. */
#ifndef VRAM_ALLOC_POLICY_H
#define VRAM_ALLOC_POLICY_H

#include "alloc/internal.h"

struct vr_policy {
    const char *name;
    const char *summary;           /* one line, for help texts */
    bool needs_vm;                 /* requires vr_device_vm_* (not on cpu) */

    /* Optional: set up / tear down a->pstate. fini runs after every cached
     * segment was released; it frees what the policy still holds. */
    vr_status (*init)(vr_alloc *a);
    void (*fini)(vr_alloc *a);

    /* The size a request is rounded to. */
    size_t (*round_size)(const vr_alloc *a, size_t size);

    /* A cached free block of req->pool on req->stream that can serve
     * req->size, removed from its tree; NULL when none fits. */
    vr_block *(*find_free)(vr_alloc *a, vra_request *req);

    /* Gets new device memory and sets req->block to a free block (in no tree)
     * of at least req->size. VR_ERR_OOM when the device or the cap refuses
     * (req->alloc_size then says how much was asked), another status for a
     * device failure. */
    vr_status (*grow)(vr_alloc *a, vra_request *req);

    /* Optional: releases just enough cached memory for req; true if it did. */
    bool (*release_some)(vr_alloc *a, vra_request *req);

    /* Returns all cached memory it can to the device (empty_cache). Events
     * have been waited for already. */
    void (*release_cached)(vr_alloc *a);

    /* Whether handing out `size` bytes of b should split off the rest. */
    bool (*should_split)(const vr_alloc *a, const vr_block *b, size_t size);

    /* Optional: called at the end of vra_free_block, with b merged and in its
     * pool's free tree (a policy caching whole segments notes them here). */
    void (*on_free)(vr_alloc *a, vr_block *b);

    /* Optional, for vr_alloc_check: verifies the policy's own structures and
     * recounts reserved bytes per pool (when reserved is not the sum of the
     * segments' mapped bytes). VR_OK or VR_ERR_INVALID naming the problem. */
    vr_status (*check)(vr_alloc *a, int64_t reserved[VR_POOL_COUNT]);
};

extern const vr_policy vra_policy_pytorch;
extern const vr_policy vra_policy_expandable;
extern const vr_policy vra_policy_stitch;

/* PyTorch's round_size: at least 512 bytes, a multiple of 512. */
size_t vra_round_512(const vr_alloc *a, size_t size);

/* PyTorch's get_free_block oversize rules: may cached block b (>= size)
 * serve a rounded request of `size` under max_split_size? */
bool vra_oversize_ok(const vr_alloc *a, const vr_block *b, size_t size);

#endif
