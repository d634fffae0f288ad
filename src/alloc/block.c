/* Block bookkeeping shared by every policy: block and segment lifetimes,
 * splitting a found block, merging free neighbours, returning blocks to their
 * pool, releasing whole segments, device calls under the cap, and the
 * statistics each of these moves — updated exactly where PyTorch updates them
 * (alloc_found_block, free_block, alloc_block, release_block). */
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"
#include "alloc/policy.h"
#include "vram/util.h"

/* ---------------------------------------------------------------- stats */

void vra_stat_inc(vr_stat *s, int64_t amount)
{
    s->current += amount;
    if (s->current > s->peak)
        s->peak = s->current;
    s->allocated += amount;
}

void vra_stat_dec(vr_stat *s, int64_t amount)
{
    s->current -= amount;
    s->freed += amount;
}

void vra_pool_inc(vr_stat arr[VR_POOL_COUNT], const vr_pool *p, int64_t amount)
{
    vra_stat_inc(&arr[VR_POOL_ALL], amount);
    vra_stat_inc(&arr[p->stat], amount);
}

void vra_pool_dec(vr_stat arr[VR_POOL_COUNT], const vr_pool *p, int64_t amount)
{
    vra_stat_dec(&arr[VR_POOL_ALL], amount);
    vra_stat_dec(&arr[p->stat], amount);
}

/* ---------------------------------------------------------------- blocks */

vr_block *vra_block_new(vr_alloc *a)
{
    vr_block *b = a->spare;
    if (b)
        a->spare = b->hnext;
    else if (!(b = malloc(sizeof *b)))
        return NULL;
    memset(b, 0, sizeof *b);
    b->mapped = true;
    return b;
}

void vra_block_delete(vr_alloc *a, vr_block *b)
{
    free(b->uses);
    b->uses = NULL;
    b->hnext = a->spare;
    a->spare = b;
}

vr_segment *vra_segment_new(vr_alloc *a, uintptr_t base, size_t size, vr_stream stream,
                            vr_pool *pool, bool expandable, bool mapped)
{
    vr_segment *s = calloc(1, sizeof *s);
    vr_block *b = vra_block_new(a);
    if (!s || !b) {
        free(s);
        if (b)
            vra_block_delete(a, b);
        return NULL;
    }
    s->base = base;
    s->size = size;
    s->mapped = mapped ? size : 0;
    s->stream = stream;
    s->pool = pool;
    s->expandable = expandable;
    s->head = b;
    b->addr = base;
    b->size = size;
    b->stream = stream;
    b->pool = pool;
    b->seg = s;
    b->mapped = mapped;
    s->lnext = a->segs;
    if (a->segs)
        a->segs->lprev = s;
    a->segs = s;
    a->nsegs++;
    return s;
}

void vra_segment_delete(vr_alloc *a, vr_segment *s)
{
    if (s->lprev)
        s->lprev->lnext = s->lnext;
    else
        a->segs = s->lnext;
    if (s->lnext)
        s->lnext->lprev = s->lprev;
    a->nsegs--;
    free(s);
}

vr_pool *vra_pool_for(vr_alloc *a, size_t size)
{
    return size <= VRA_SMALL_SIZE ? &a->small : &a->large;
}

static vra_tree *tree_of(vr_block *b)
{
    return b->mapped ? &b->pool->blocks : &b->pool->unmapped;
}

size_t vra_try_merge(vr_alloc *a, vr_block *dst, vr_block *src)
{
    if (!vra_block_available(src) || dst->mapped != src->mapped)
        return 0;
    vra_tree_remove(tree_of(src), src);
    if (dst->prev == src) { /* [src dst] */
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
        else
            dst->seg->head = dst;
    } else { /* [dst src] */
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    size_t subsumed = src->size;
    dst->size += subsumed;
    vra_block_delete(a, src);
    return subsumed;
}

vr_block *vra_alloc_found(vr_alloc *a, const vra_request *req, vr_block *b, bool split)
{
    vr_pool *pool = b->pool;
    bool already_split = vra_block_is_split(b);
    bool counts_split = !b->seg->expandable; /* PyTorch leaves expandable segments out */

    if (split) {
        vr_block *rest = b;
        b = vra_block_new(a);
        if (!b) { /* no memory for bookkeeping: hand out the whole block */
            b = rest;
            split = false;
            goto unsplit;
        }
        b->addr = rest->addr;
        b->size = req->size;
        b->stream = req->stream;
        b->pool = pool;
        b->seg = rest->seg;
        b->mapped = true;
        b->prev = rest->prev;
        if (b->prev)
            b->prev->next = b;
        else
            b->seg->head = b;
        b->next = rest;
        rest->prev = b;
        rest->addr += req->size;
        rest->size -= req->size;
        vra_tree_insert(&pool->blocks, rest);
        if (counts_split) {
            if (already_split) {
                vra_pool_dec(a->stats.inactive_split_bytes, pool, (int64_t)b->size);
            } else {
                vra_pool_inc(a->stats.inactive_split_bytes, pool, (int64_t)rest->size);
                vra_pool_inc(a->stats.inactive_split, pool, 1);
            }
        }
    } else {
unsplit:
        if (already_split && counts_split) {
            vra_pool_dec(a->stats.inactive_split_bytes, pool, (int64_t)b->size);
            vra_pool_dec(a->stats.inactive_split, pool, 1);
        }
    }

    b->allocated = true;
    b->requested = req->orig;
    b->stream = req->stream;
    vra_pool_inc(a->stats.allocation, pool, 1);
    vra_pool_inc(a->stats.allocated_bytes, pool, (int64_t)b->size);
    vra_pool_inc(a->stats.active, pool, 1);
    vra_pool_inc(a->stats.active_bytes, pool, (int64_t)b->size);
    vra_pool_inc(a->stats.requested_bytes, pool, (int64_t)b->requested);
    if (b->size >= a->max_split)
        vra_stat_inc(&a->stats.oversize_allocations, 1);
    vra_record(a, VRA_ALLOC, b->addr, b->requested, b->stream);
    return b;
}

void vra_free_block(vr_alloc *a, vr_block *b)
{
    vr_pool *pool = b->pool;
    vra_record(a, VRA_FREE_COMPLETED, b->addr, b->requested, b->stream);
    size_t orig_size = b->size, requested = b->requested;
    int64_t d_count = 0, d_bytes = 0;
    vr_block *cand[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        size_t sub = vra_try_merge(a, b, cand[i]);
        if (sub > 0) {
            d_count -= 1;
            d_bytes -= (int64_t)sub;
        }
    }
    b->requested = 0;
    if (!pool->untreed)
        vra_tree_insert(&pool->blocks, b);
    if (vra_block_is_split(b)) {
        d_count += 1;
        d_bytes += (int64_t)b->size;
    }
    if (!b->seg->expandable) {
        if (d_count > 0)
            vra_pool_inc(a->stats.inactive_split, pool, d_count);
        else if (d_count < 0)
            vra_pool_dec(a->stats.inactive_split, pool, -d_count);
        if (d_bytes > 0)
            vra_pool_inc(a->stats.inactive_split_bytes, pool, d_bytes);
        else if (d_bytes < 0)
            vra_pool_dec(a->stats.inactive_split_bytes, pool, -d_bytes);
    }
    vra_pool_dec(a->stats.active, pool, 1);
    vra_pool_dec(a->stats.active_bytes, pool, (int64_t)orig_size);
    vra_pool_dec(a->stats.requested_bytes, pool, (int64_t)requested);
    if (a->policy->on_free)
        a->policy->on_free(a, b);
}

void vra_release_segment(vr_alloc *a, vr_block *b)
{
    vr_segment *s = b->seg;
    vr_pool *pool = b->pool;
    a->stats.num_device_free++;
    if (!pool->untreed)
        vra_tree_remove(&pool->blocks, b);
    vr_device_free(a->dev, (void *)s->base, s->size);
    a->reserved -= s->size;
    vra_pool_dec(a->stats.segment, pool, 1);
    vra_pool_dec(a->stats.reserved_bytes, pool, (int64_t)s->size);
    if (s->size >= a->max_split)
        vra_stat_dec(&a->stats.oversize_segments, 1);
    vra_record(a, VRA_SEGMENT_FREE, s->base, s->size, s->stream);
    vra_block_delete(a, b);
    vra_segment_delete(a, s);
}

/* ---------------------------------------------------------------- device */

static bool over_cap(vr_alloc *a, size_t bytes)
{
    return a->limit != UINT64_MAX && (a->reserved + bytes > a->limit || a->reserved + bytes < a->reserved);
}

vr_status vra_device_malloc(vr_alloc *a, size_t bytes, void **ptr)
{
    if (over_cap(a, bytes))
        return VR_ERR_OOM;
    return vr_device_malloc(a->dev, bytes, ptr);
}

vr_status vra_device_map(vr_alloc *a, uintptr_t addr, size_t bytes)
{
    if (over_cap(a, bytes))
        return VR_ERR_OOM;
    return vr_device_vm_map(a->dev, (void *)addr, bytes);
}

/* ---------------------------------------------------------------- events */

void vra_process_events(vr_alloc *a)
{
    size_t keep = 0;
    for (size_t i = 0; i < a->npending; i++) {
        vra_pending p = a->pending[i];
        if (!vr_event_query(a->dev, p.ev)) {
            a->pending[keep++] = p;
            continue;
        }
        vr_event_destroy(a->dev, p.ev);
        if (--p.block->event_count == 0)
            vra_free_block(a, p.block);
    }
    a->npending = keep;
}

void vra_sync_and_free_events(vr_alloc *a)
{
    a->stats.num_sync_all_streams++;
    for (size_t i = 0; i < a->npending; i++) {
        vra_pending p = a->pending[i];
        if (vr_event_sync(a->dev, p.ev) != VR_OK)
            vr_device_synchronize(a->dev);
        if (--p.block->event_count == 0)
            vra_free_block(a, p.block);
    }
    a->npending = 0;
}

uint64_t vra_clock(vr_alloc *a)
{
    return a->cfg.clock_ns ? a->cfg.clock_ns(a->cfg.clock_ctx) : vr_now_ns();
}
