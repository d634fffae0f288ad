/* Policy "expandable": PyTorch's expandable segments
 * (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), on devices with virtual
 * memory (meta, cuda).
 *
 * - Rounding, the small/large pool split (1 MiB), per-stream reuse, deferred
 *   frees and the out-of-memory steps are those of policy "pytorch".
 * - Instead of one device allocation per segment, each (stream, pool) gets one
 *   virtual address range large enough for the whole device (capacity + 1/8),
 *   with nothing behind it at first. Memory is mapped into it in granules of
 *   the device's granularity (2 MiB on current GPUs) as requests need it, so
 *   the range grows at its end and new blocks tile against old ones instead
 *   of leaving slivers at the ends of many separate segments.
 * - To grow, the lowest address of the range where a free (mapped) block plus
 *   the unmapped space after it can hold the request is chosen; only the
 *   missing granules are mapped (num_device_alloc counts mappings).
 * - Best fit inside the range, as in "pytorch", except that a free block
 *   followed by unmapped space counts as large as it could grow, so that the
 *   growing end is used last.
 * - Any free block is split when at least 512 bytes remain (a range has no
 *   segment edges to respect); inactive_split statistics leave expandable
 *   memory out, as PyTorch does.
 * - empty_cache (and the out-of-memory retry) unmaps every granule that lies
 *   entirely inside a free block; a range with nothing mapped is released.
 * - reserved_bytes counts mapped bytes; the segment statistic counts ranges.
 *
 * Known limit: holes inside a range stay usable only by requests that fit
 * them, so fragmentation remains (1.01-1.18 reserved/allocated on real
 * training traces). Smarter policies sit beside this one. */
#include <stdlib.h>

#include "alloc/policy.h"

typedef struct exp_state {
    size_t granule;
    size_t va_size; /* bytes of address space per range */
} exp_state;

static size_t granule_of(const vr_alloc *a) { return ((const exp_state *)a->pstate)->granule; }

static vr_status init(vr_alloc *a)
{
    exp_state *s = calloc(1, sizeof *s);
    if (!s)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory");
    s->granule = vr_device_vm_granularity(a->dev);
    uint64_t total = a->device_total + a->device_total / 8;
    if (a->limit != UINT64_MAX && a->limit > a->device_total)
        total = a->limit + a->limit / 8;
    s->va_size = (size_t)((total + s->granule - 1) / s->granule * s->granule);
    if (s->va_size == 0)
        s->va_size = s->granule;
    a->pstate = s;
    return VR_OK;
}

static void fini(vr_alloc *a)
{
    free(a->pstate);
    a->pstate = NULL;
}

/* The size b could reach by mapping the unmapped range after it. */
static size_t expandable_size(const vr_block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

static vr_block *find_free(vr_alloc *a, vra_request *req)
{
    vr_block key = {.stream = req->stream, .size = req->size, .addr = 0};
    vra_tree *t = &req->pool->blocks;
    vr_block *b = vra_tree_lower_bound(t, &key);
    if (!b || b->stream != req->stream)
        return NULL;
    for (vr_block *n = vra_tree_next(t, b); n && n->stream == req->stream && expandable_size(n) < expandable_size(b);
         n = vra_tree_next(t, n))
        b = n;
    if (!vra_oversize_ok(a, b, req->size))
        return NULL;
    vra_tree_remove(t, b);
    return b;
}

/* Links nb into b's segment just before / after b. */
static void splice_before(vr_block *b, vr_block *nb)
{
    nb->seg = b->seg;
    nb->pool = b->pool;
    nb->stream = b->stream;
    nb->prev = b->prev;
    nb->next = b;
    if (b->prev)
        b->prev->next = nb;
    else
        b->seg->head = nb;
    b->prev = nb;
}

static void splice_after(vr_block *b, vr_block *nb)
{
    nb->seg = b->seg;
    nb->pool = b->pool;
    nb->stream = b->stream;
    nb->next = b->next;
    nb->prev = b;
    if (b->next)
        b->next->prev = nb;
    b->next = nb;
}

static bool has_space(const vr_block *b, size_t size)
{
    size_t bytes = 0;
    while (bytes < size && vra_block_available(b)) {
        bytes += b->size;
        b = b->next;
    }
    return bytes >= size;
}

/* PyTorch's find_expandable_block: the lowest-address place on the stream
 * where free and unmapped space together hold size, or a new range. */
static vr_status find_expandable(vr_alloc *a, vra_request *req, vr_block **out)
{
    exp_state *es = a->pstate;
    vra_tree *un = &req->pool->unmapped;
    vr_block key = {.stream = req->stream, .addr = 0};
    for (vr_block *c = vra_tree_lower_bound(un, &key); c && c->stream == req->stream; c = vra_tree_next(un, c)) {
        vr_block *cand = vra_block_available(c->prev) ? c->prev : c;
        if (has_space(cand, req->size)) {
            *out = cand;
            return VR_OK;
        }
    }
    if (req->size > es->va_size)
        return VR_ERR_OOM;
    void *base = NULL;
    vr_status st = vr_device_vm_reserve(a->dev, es->va_size, &base);
    if (st != VR_OK)
        return st;
    vr_segment *s = vra_segment_new(a, (uintptr_t)base, es->va_size, req->stream, req->pool, true, false);
    if (!s) {
        vr_device_vm_release(a->dev, base, es->va_size);
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    }
    vra_pool_inc(a->stats.segment, req->pool, 1);
    vra_tree_insert(un, s->head);
    *out = s->head;
    return VR_OK;
}

/* Maps the granules covering the first `size` bytes of unmapped block b and
 * merges them with free neighbours; b ends up in the free tree. */
static vr_status map_block(vr_alloc *a, vr_block *b, size_t size)
{
    size_t g = granule_of(a);
    size_t bytes = (size + g - 1) / g * g;
    if (bytes > b->size)
        bytes = b->size;
    vr_status st = vra_device_map(a, b->addr, bytes);
    if (st != VR_OK)
        return st;
    vr_pool *pool = b->pool;
    vra_tree_remove(&pool->unmapped, b);
    b->mapped = true;
    if (bytes < b->size) {
        vr_block *rest = vra_block_new(a);
        if (!rest) {
            vr_device_vm_unmap(a->dev, (void *)b->addr, bytes);
            b->mapped = false;
            vra_tree_insert(&pool->unmapped, b);
            return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
        }
        rest->addr = b->addr + bytes;
        rest->size = b->size - bytes;
        rest->mapped = false;
        splice_after(b, rest);
        vra_tree_insert(&pool->unmapped, rest);
        b->size = bytes;
    }
    uintptr_t at = b->addr;
    vra_try_merge(a, b, b->prev);
    vra_try_merge(a, b, b->next);
    vra_tree_insert(&pool->blocks, b);
    a->reserved += bytes;
    b->seg->mapped += bytes;
    vra_pool_inc(a->stats.reserved_bytes, pool, (int64_t)bytes);
    a->stats.num_device_alloc++;
    vra_record(a, VRA_SEGMENT_MAP, at, bytes, b->stream);
    return VR_OK;
}

static vr_status grow(vr_alloc *a, vra_request *req)
{
    size_t g = granule_of(a);
    req->alloc_size = (req->size + g - 1) / g * g;
    vr_block *c = NULL;
    vr_status st = find_expandable(a, req, &c);
    if (st != VR_OK)
        return st;
    if (!c->mapped && (st = map_block(a, c, req->size < c->size ? req->size : c->size)) != VR_OK)
        return st;
    while (c->size < req->size) {
        vr_block *n = c->next; /* unmapped: free blocks are always merged */
        size_t remaining = req->size - c->size;
        if ((st = map_block(a, n, remaining < n->size ? remaining : n->size)) != VR_OK)
            return st;
        c = n; /* n absorbed c */
    }
    vra_tree_remove(&req->pool->blocks, c);
    req->block = c;
    return VR_OK;
}

/* Unmaps the granules lying entirely inside free block b (PyTorch's unmap_block). */
static void unmap_block(vr_alloc *a, vr_block *b)
{
    size_t g = granule_of(a);
    vr_segment *s = b->seg;
    uintptr_t begin = s->base + (b->addr - s->base + g - 1) / g * g;
    uintptr_t end = s->base + (b->addr + b->size - s->base) / g * g;
    if (begin >= end)
        return;
    vr_block *before = begin > b->addr ? vra_block_new(a) : NULL;
    vr_block *after = b->addr + b->size > end ? vra_block_new(a) : NULL;
    if ((begin > b->addr && !before) || (b->addr + b->size > end && !after)) {
        if (before) vra_block_delete(a, before);
        if (after) vra_block_delete(a, after);
        return; /* no memory for bookkeeping: keep it mapped */
    }
    vr_pool *pool = b->pool;
    vra_tree_remove(&pool->blocks, b);
    if (before) {
        before->addr = b->addr;
        before->size = begin - b->addr;
        splice_before(b, before);
        vra_tree_insert(&pool->blocks, before);
    }
    if (after) {
        after->addr = end;
        after->size = b->addr + b->size - end;
        splice_after(b, after);
        vra_tree_insert(&pool->blocks, after);
    }
    b->addr = begin;
    b->size = end - begin;
    b->mapped = false;
    vr_device_vm_unmap(a->dev, (void *)begin, end - begin);
    vra_try_merge(a, b, b->prev);
    vra_try_merge(a, b, b->next);
    vra_tree_insert(&pool->unmapped, b);
    a->reserved -= end - begin;
    s->mapped -= end - begin;
    vra_pool_dec(a->stats.reserved_bytes, pool, (int64_t)(end - begin));
    a->stats.num_device_free++;
    vra_record(a, VRA_SEGMENT_UNMAP, begin, end - begin, b->stream);
}

static void release_range(vr_alloc *a, vr_block *b)
{
    vr_segment *s = b->seg;
    vra_tree_remove(&b->pool->unmapped, b);
    vr_device_vm_release(a->dev, (void *)s->base, s->size);
    vra_pool_dec(a->stats.segment, b->pool, 1);
    vra_block_delete(a, b);
    vra_segment_delete(a, s);
}

static void collect(vr_block *b, void *ctx)
{
    vr_block ***out = ctx;
    *(*out)++ = b;
}

static void release_cached(vr_alloc *a)
{
    vr_pool *pools[2] = {&a->large, &a->small};
    for (int i = 0; i < 2; i++) {
        vra_tree *t = &pools[i]->blocks;
        size_t n = t->count;
        vr_block **list = n ? malloc(n * sizeof *list) : NULL, **end = list;
        if (list) {
            vra_tree_walk(t, collect, &end);
            for (vr_block **p = list; p < end; p++)
                unmap_block(a, *p);
            free(list);
        }
        /* Ranges left with one unmapped block are empty: release them. */
        vra_tree *un = &pools[i]->unmapped;
        for (vr_block *b = vra_tree_first(un), *nx; b; b = nx) {
            nx = vra_tree_next(un, b);
            if (!b->prev && !b->next)
                release_range(a, b);
        }
    }
}

static bool should_split(const vr_alloc *a, const vr_block *b, size_t size)
{
    (void)a;
    return b->size - size >= VRA_MIN_BLOCK;
}

const vr_policy vra_policy_expandable = {
    .name = "expandable",
    .summary = "PyTorch's expandable segments: one growing mapped range per stream and pool",
    .needs_vm = true,
    .init = init,
    .fini = fini,
    .round_size = vra_round_512,
    .find_free = find_free,
    .grow = grow,
    .release_some = NULL,
    .release_cached = release_cached,
    .should_split = should_split,
};
