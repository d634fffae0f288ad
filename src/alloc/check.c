/* vr_alloc_check: every invariant of the allocator's bookkeeping, recounted
 * from scratch. Tests call it after each operation.
 *
 *  - segments are disjoint; each one's blocks tile it exactly, in address
 *    order, with consistent prev/next links, segment, pool and stream;
 *  - each block is where its state says (allocated: the live map; free and
 *    mapped: its pool's free tree; unmapped: its pool's unmapped tree;
 *    waiting for events: nowhere), and the trees are valid AVL trees holding
 *    nothing else;
 *  - no two neighbouring free blocks of the same mapped state are unmerged;
 *  - every current statistic equals its recount (per pool, and all = small +
 *    large), peaks are at least the current values, allocated <= active <=
 *    reserved <= cap, and reserved <= what the device says we use;
 *  - a policy with its own check verifies its structures and recounts
 *    reserved bytes itself (policy "stitch": physical bytes held). */
#include <stdlib.h>

#include "alloc/internal.h"
#include "alloc/policy.h"

typedef struct recount {
    int64_t allocation[VR_POOL_COUNT], allocated_bytes[VR_POOL_COUNT], active[VR_POOL_COUNT];
    int64_t active_bytes[VR_POOL_COUNT], requested_bytes[VR_POOL_COUNT], segment[VR_POOL_COUNT];
    int64_t reserved_bytes[VR_POOL_COUNT], inactive_split[VR_POOL_COUNT], inactive_split_bytes[VR_POOL_COUNT];
    size_t free_blocks, unmapped_blocks, live_blocks;
} recount;

static void add(int64_t arr[VR_POOL_COUNT], const vr_pool *p, int64_t v)
{
    arr[VR_POOL_ALL] += v;
    arr[p->stat] += v;
}

static bool in_tree(const vra_tree *t, const vr_block *b) { return vra_tree_lower_bound(t, b) == b; }

static vr_status check_segment(vr_alloc *a, const vr_segment *s, recount *rc)
{
    if (!s->head || s->head->prev || s->head->addr != s->base)
        return vr_error(VR_ERR_INVALID, "check: segment %#lx does not start with its head block", (unsigned long)s->base);
    size_t total = 0, mapped = 0;
    const vr_block *prev = NULL;
    for (const vr_block *b = s->head; b; prev = b, b = b->next) {
        if (b->prev != prev || b->seg != s || b->pool != s->pool || b->stream != s->stream || !b->size)
            return vr_error(VR_ERR_INVALID, "check: block %#lx has broken links/segment/pool/stream", (unsigned long)b->addr);
        if (b->addr != s->base + total)
            return vr_error(VR_ERR_INVALID, "check: block %#lx leaves a gap or overlaps in segment %#lx",
                            (unsigned long)b->addr, (unsigned long)s->base);
        total += b->size;
        if (b->mapped)
            mapped += b->size;
        else if (!s->expandable || b->allocated || b->event_count || b->nuses)
            return vr_error(VR_ERR_INVALID, "check: block %#lx is unmapped but in use or outside an expandable segment",
                            (unsigned long)b->addr);
        if (vra_block_available(b) && vra_block_available(b->next) && b->mapped == b->next->mapped)
            return vr_error(VR_ERR_INVALID, "check: free neighbours %#lx and %#lx were not coalesced",
                            (unsigned long)b->addr, (unsigned long)b->next->addr);
        if (b->allocated) {
            rc->live_blocks++;
            add(rc->allocation, s->pool, 1);
            add(rc->allocated_bytes, s->pool, (int64_t)b->size);
            if (vra_map_find(a, b->addr) != b)
                return vr_error(VR_ERR_INVALID, "check: live block %#lx is missing from the live map", (unsigned long)b->addr);
        }
        if (b->allocated || b->event_count || b->nuses) {
            add(rc->active, s->pool, 1);
            add(rc->active_bytes, s->pool, (int64_t)b->size);
            add(rc->requested_bytes, s->pool, (int64_t)b->requested);
            if (b->requested > b->size)
                return vr_error(VR_ERR_INVALID, "check: block %#lx requested more than its size", (unsigned long)b->addr);
        } else if (b->mapped) {
            rc->free_blocks += !s->pool->untreed;
            if (!s->pool->untreed && !in_tree(&s->pool->blocks, b))
                return vr_error(VR_ERR_INVALID, "check: free block %#lx is not in its pool", (unsigned long)b->addr);
            if (!s->expandable && vra_block_is_split(b)) {
                add(rc->inactive_split, s->pool, 1);
                add(rc->inactive_split_bytes, s->pool, (int64_t)b->size);
            }
        } else {
            rc->unmapped_blocks++;
            if (!in_tree(&s->pool->unmapped, b))
                return vr_error(VR_ERR_INVALID, "check: unmapped block %#lx is not in its pool", (unsigned long)b->addr);
        }
    }
    if (total != s->size || mapped != s->mapped)
        return vr_error(VR_ERR_INVALID, "check: segment %#lx: blocks cover %zu bytes (%zu mapped), segment says %zu (%zu)",
                        (unsigned long)s->base, total, mapped, s->size, s->mapped);
    add(rc->segment, s->pool, 1);
    add(rc->reserved_bytes, s->pool, (int64_t)s->mapped);
    return VR_OK;
}

static int cmp_base(const void *x, const void *y)
{
    const vr_segment *a = *(const vr_segment *const *)x, *b = *(const vr_segment *const *)y;
    return a->base < b->base ? -1 : a->base > b->base;
}

static vr_status compare(const char *name, const vr_stat st[VR_POOL_COUNT], const int64_t rc[VR_POOL_COUNT])
{
    static const char *pools[] = {"all", "small", "large"};
    for (int p = 0; p < VR_POOL_COUNT; p++) {
        if (st[p].current != rc[p])
            return vr_error(VR_ERR_INVALID, "check: %s (%s pool) is %lld, recount says %lld", name, pools[p],
                            (long long)st[p].current, (long long)rc[p]);
        if (st[p].peak < st[p].current || st[p].current < 0)
            return vr_error(VR_ERR_INVALID, "check: %s (%s pool) peak %lld below current %lld", name, pools[p],
                            (long long)st[p].peak, (long long)st[p].current);
    }
    if (st[VR_POOL_ALL].current != st[VR_POOL_SMALL].current + st[VR_POOL_LARGE].current)
        return vr_error(VR_ERR_INVALID, "check: %s: all != small + large", name);
    return VR_OK;
}

vr_status vr_alloc_check(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    recount rc = {0};
    vr_status st = VR_OK;
    const vr_segment **list = a->nsegs ? malloc(a->nsegs * sizeof *list) : NULL;
    size_t n = 0;
    for (const vr_segment *s = a->segs; s && st == VR_OK; s = s->lnext) {
        if (list)
            list[n++] = s;
        st = check_segment(a, s, &rc);
    }
    if (st == VR_OK && list) {
        qsort(list, n, sizeof *list, cmp_base);
        for (size_t i = 1; i < n && st == VR_OK; i++)
            if (list[i - 1]->base + list[i - 1]->size > list[i]->base)
                st = vr_error(VR_ERR_INVALID, "check: segments %#lx and %#lx overlap", (unsigned long)list[i - 1]->base,
                              (unsigned long)list[i]->base);
    }
    free(list);
    const vra_tree *trees[4] = {&a->small.blocks, &a->large.blocks, &a->small.unmapped, &a->large.unmapped};
    for (int i = 0; i < 4 && st == VR_OK; i++)
        if (vra_tree_verify(trees[i]) < 0)
            st = vr_error(VR_ERR_INVALID, "check: a block tree is not a valid ordered AVL tree");
    if (st == VR_OK && (a->small.blocks.count + a->large.blocks.count != rc.free_blocks ||
                        a->small.unmapped.count + a->large.unmapped.count != rc.unmapped_blocks))
        st = vr_error(VR_ERR_INVALID, "check: trees hold %zu free / %zu unmapped blocks, segments %zu / %zu",
                      a->small.blocks.count + a->large.blocks.count, a->small.unmapped.count + a->large.unmapped.count,
                      rc.free_blocks, rc.unmapped_blocks);
    if (st == VR_OK && a->map_count != rc.live_blocks)
        st = vr_error(VR_ERR_INVALID, "check: live map holds %zu blocks, segments %zu", a->map_count, rc.live_blocks);
    if (st == VR_OK && a->policy->check) {
        int64_t res[VR_POOL_COUNT] = {0};
        st = a->policy->check(a, res);
        for (int p = 0; p < VR_POOL_COUNT; p++)
            rc.reserved_bytes[p] = res[p];
    }
    const vr_alloc_stats *s = &a->stats;
    if (st == VR_OK) st = compare("allocation", s->allocation, rc.allocation);
    if (st == VR_OK) st = compare("allocated_bytes", s->allocated_bytes, rc.allocated_bytes);
    if (st == VR_OK) st = compare("active", s->active, rc.active);
    if (st == VR_OK) st = compare("active_bytes", s->active_bytes, rc.active_bytes);
    if (st == VR_OK) st = compare("requested_bytes", s->requested_bytes, rc.requested_bytes);
    if (st == VR_OK) st = compare("segment", s->segment, rc.segment);
    if (st == VR_OK) st = compare("reserved_bytes", s->reserved_bytes, rc.reserved_bytes);
    if (st == VR_OK) st = compare("inactive_split", s->inactive_split, rc.inactive_split);
    if (st == VR_OK) st = compare("inactive_split_bytes", s->inactive_split_bytes, rc.inactive_split_bytes);
    int64_t res = s->reserved_bytes[VR_POOL_ALL].current;
    if (st == VR_OK && (uint64_t)res != a->reserved)
        st = vr_error(VR_ERR_INVALID, "check: reserved total %llu != statistic %lld", (unsigned long long)a->reserved,
                      (long long)res);
    if (st == VR_OK && !(s->allocated_bytes[VR_POOL_ALL].current <= s->active_bytes[VR_POOL_ALL].current &&
                         s->active_bytes[VR_POOL_ALL].current <= res && (uint64_t)res <= a->limit))
        st = vr_error(VR_ERR_INVALID, "check: not allocated <= active <= reserved <= cap");
    if (st == VR_OK) {
        vr_device_mem mem;
        if (vr_device_mem_info(a->dev, &mem) == VR_OK && (uint64_t)res > mem.used_by_us)
            st = vr_error(VR_ERR_INVALID, "check: reserved %lld exceeds the device's used bytes %llu", (long long)res,
                          (unsigned long long)mem.used_by_us);
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}
