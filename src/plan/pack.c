/* vram plan — packing the arena's packed region: an offset for every tensor that does not live for the
 * whole step (vr__plan_packed), such that tensors whose lifetimes overlap never share bytes.
 *
 * Two packers; vr__plan_pack picks by the count (vr_plan_config.greedy_max):
 * - Greedy by size (up to VR_PLAN_GREEDY_MAX = 16384 packed tensors): tensors sorted by size (largest first;
 *   ties: earlier first use, then id), each placed at the smallest gap, among the tensors already placed
 *   whose lifetimes overlap its own, that fits it (best fit; the lowest such gap on ties), or on top of
 *   them when none does (TFLite's and ggml-alloc's planners do the same). It sees the whole step, so it
 *   packs tightest (within 1% of the aligned peak on every preset), but each tensor scans the placed
 *   ones: O(n^2). A GPT block has ~33 packed tensors, so models of up to ~500 blocks (every published
 *   one) are packed greedy; 16384 tensors take ~0.2 s.
 * - In time order (above it: thousands of layers): node by node, the tensors first used by the node take
 *   a block (largest first) by best fit among the free blocks, else at the region's end; the tensors
 *   whose bytes are last used by it give their block back, merged with free neighbours. A block allocator
 *   over a line, as a caching allocator works but knowing nothing of the future: O(n log n), and 0-3%
 *   more bytes than greedy on the GPT presets (up to 7.6% on the small MLP: tests/plan/test_arena). */
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"
#include "alloc/tree.h"
#include "plan/plan_internal.h"

typedef struct key {
    uint64_t size;
    int first, id;
} key;

static int by_size(const void *a, const void *b)
{
    const key *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int by_first_then_size(const void *a, const void *b)
{
    const key *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The packed tensors as keys, sorted by cmp; *n set. NULL when out of memory. */
static key *keys(const vr_plan *p, int (*cmp)(const void *, const void *), int *n)
{
    key *k = malloc(sizeof(key) * ((size_t)p->n_tensors + 1));
    *n = 0;
    if (!k)
        return NULL;
    for (int t = 0; t < p->n_tensors; t++)
        if (vr__plan_packed(p, t))
            k[(*n)++] = (key){p->tensors[t].size, p->tensors[t].first, t};
    qsort(k, (size_t)*n, sizeof(key), cmp);
    return k;
}

/* ---------------------------------------------------------------- greedy by size */

typedef struct span {
    uint64_t off, end;
    int first, last; /* lifetime (first use, last use of its bytes) */
} span;

static vr_status pack_greedy(vr_plan *p, const int *ulast, uint64_t *top)
{
    int n = 0, np = 0;
    key *order = keys(p, by_size, &n);
    /* the placed tensors, sorted by offset: the gap search is one pass with no sort per tensor (ties in
     * offset do not change the result: a gap opens only where a span starts past every earlier end) */
    span *placed = malloc(sizeof(span) * ((size_t)n + 1));
    if (!order || !placed) {
        free(order);
        free(placed);
        return vr_error(VR_ERR_OOM, "plan: out of host memory");
    }
    *top = 0;
    for (int i = 0; i < n; i++) {
        vr_plan_tensor *pt = &p->tensors[order[i].id];
        int f = pt->first, l = ulast[order[i].id];
        uint64_t cursor = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
        for (int j = 0; j < np; j++) {
            if (f > placed[j].last || placed[j].first > l)
                continue;
            if (placed[j].off > cursor) {
                uint64_t gap = placed[j].off - cursor;
                if (gap >= pt->size && gap < best_gap) {
                    best_gap = gap;
                    best = cursor;
                }
            }
            if (placed[j].end > cursor)
                cursor = placed[j].end;
        }
        pt->offset = best != UINT64_MAX ? best : cursor;
        if (pt->offset + pt->size > *top)
            *top = pt->offset + pt->size;
        int lo = 0, hi = np; /* insert after the placed spans at offsets <= this one */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (placed[mid].off <= pt->offset)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, (size_t)(np - lo) * sizeof *placed);
        placed[lo] = (span){pt->offset, pt->offset + pt->size, f, l};
        np++;
    }
    free(order);
    free(placed);
    return VR_OK;
}

/* ---------------------------------------------------------------- in time order */

/* The region as a line of blocks in address order (prev/next), each used or free; the free ones also in
 * an AVL tree by (size, offset) (the allocator's, src/alloc/tree.h), so best fit is one lower-bound
 * search. `tail` is the last block: the region ends at its end. */
typedef struct line {
    vr_block *blocks, *tail;
    int used;
    vra_tree free;
} line;

static vr_block *new_block(line *L, uint64_t off, uint64_t size)
{
    vr_block *b = &L->blocks[L->used++];
    memset(b, 0, sizeof *b);
    b->addr = off;
    b->size = size;
    return b;
}

/* Best fit among the free blocks (the lowest offset on ties), else at the region's end (taking the free
 * block that ends it, if any); the rest of a larger block is split off, free. */
static vr_block *take(line *L, uint64_t size)
{
    vr_block key = {.size = size};
    vr_block *b = vra_tree_lower_bound(&L->free, &key);
    if (b) {
        vra_tree_remove(&L->free, b);
        if (b->size > size) {
            vr_block *rest = new_block(L, b->addr + size, b->size - size);
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            else
                L->tail = rest;
            b->next = rest;
            b->size = size;
            vra_tree_insert(&L->free, rest);
        }
    } else if (L->tail && !L->tail->allocated) {
        b = L->tail;
        vra_tree_remove(&L->free, b);
        b->size = size;
    } else {
        b = new_block(L, L->tail ? L->tail->addr + L->tail->size : 0, size);
        b->prev = L->tail;
        if (L->tail)
            L->tail->next = b;
        L->tail = b;
    }
    b->allocated = true;
    return b;
}

/* Unlinks b's successor (free, out of the tree), merging its bytes into b. */
static void absorb_next(line *L, vr_block *b)
{
    vr_block *n = b->next;
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    else
        L->tail = b;
}

static void give(line *L, vr_block *b)
{
    b->allocated = false;
    if (b->next && !b->next->allocated) {
        vra_tree_remove(&L->free, b->next);
        absorb_next(L, b);
    }
    if (b->prev && !b->prev->allocated) {
        b = b->prev;
        vra_tree_remove(&L->free, b);
        absorb_next(L, b);
    }
    vra_tree_insert(&L->free, b);
}

static vr_status pack_in_time(vr_plan *p, const int *ulast, uint64_t *top)
{
    int N = p->n_nodes, n = 0;
    key *order = keys(p, by_first_then_size, &n);
    vr__plan_buckets last = {0};
    line L = {.blocks = malloc(sizeof(vr_block) * (2 * (size_t)n + 2))};
    vr_block **at = malloc(sizeof(vr_block *) * ((size_t)p->n_tensors + 1));
    vr_status st = VR_OK;
    if (!order || !L.blocks || !at || !vr__plan_bucket(p, ulast, true, &last)) {
        st = vr_error(VR_ERR_OOM, "plan: out of host memory");
        goto out;
    }
    vra_tree_init(&L.free, VRA_BY_SIZE);
    for (int i = 0, j = 0; i < N; i++) {
        for (; j < n && order[j].first == i; j++) {
            at[order[j].id] = take(&L, order[j].size);
            p->tensors[order[j].id].offset = at[order[j].id]->addr;
        }
        for (int k = last.start[i]; k < last.start[i + 1]; k++)
            give(&L, at[last.ids[k]]);
    }
    *top = 0;
    for (int j = 0; j < n; j++) {
        const vr_plan_tensor *pt = &p->tensors[order[j].id];
        if (pt->offset + pt->size > *top)
            *top = pt->offset + pt->size;
    }
out:
    free(order);
    free(L.blocks);
    free(at);
    free(last.start);
    free(last.ids);
    return st;
}

vr_status vr__plan_pack(vr_plan *p, uint64_t *top)
{
    int n = 0;
    for (int t = 0; t < p->n_tensors; t++)
        n += vr__plan_packed(p, t);
    int *ulast = vr__plan_unit_last(p);
    if (!ulast)
        return vr_error(VR_ERR_OOM, "plan: out of host memory");
    int max = p->config.greedy_max ? p->config.greedy_max : VR_PLAN_GREEDY_MAX;
    vr_status st = n <= max ? pack_greedy(p, ulast, top) : pack_in_time(p, ulast, top);
    free(ulast);
    return st;
}
