/* Policy "stitch": physical granules stitched into fresh virtual ranges
 * (after GMLake, ASPLOS 2024), on devices with physical memory handles
 * (vr_device_phys_*: meta, cuda).
 *
 * Reserved bytes are the physical granules held (2 MiB on current GPUs), each
 * a vr_phys of its own. A granule can be mapped at several virtual addresses
 * at once, so the bytes of one granule may belong to several blocks, each
 * using a different interval of it ("spans", in 512-byte units).
 *
 * - Rounding (512 bytes), the small/large pool split (1 MiB) and per-stream
 *   reuse are those of policy "pytorch".
 * - Small pool: a segment is one granule mapped at its own 2 MiB range, split
 *   and coalesced best-fit as in "pytorch".
 * - Large pool: every block is a segment of its own, exactly the rounded
 *   request, at a fresh virtual range of n granules: an optional *head* piece
 *   (the free end [G-h, G) of a granule whose start is used by others), full
 *   granules, and an optional *tail* piece (the free start [0, e) of a
 *   granule). So a granule holds the tail of one block and the head of
 *   another, and no request is rounded up to a granule: a request of u bytes
 *   uses the largest free granule end as its head, then u - h rounds into
 *   full granules plus a tail placed best-fit in the smallest free granule
 *   start that holds it (else a fresh granule, whose rest becomes a head for
 *   the next request). A request under a granule first goes best-fit into
 *   one free granule end (right after what is used there) or start.
 * - Freed blocks keep their mapping (cached): a later request of exactly the
 *   same size and stream takes it back with no device call, which is what
 *   makes the steady state of training cheap. Large cached blocks are never
 *   split or handed to other sizes.
 * - Fresh granules come from the granules nobody uses; when those run out,
 *   cached blocks (and fully free small segments) are evicted, least recently
 *   freed first: their spans are given back at once, and their virtual range
 *   becomes *stale*: still mapped, with an event recorded on its stream. A
 *   stale range is unmapped (without waiting for the device) once its event has
 *   completed, looked at on every grow; work queued on that stream before the
 *   eviction may still touch it until then. Its pages may be mapped again at
 *   once for a request on the same stream (stream order keeps the two uses
 *   apart); before pages go to another stream, the stale ranges of other
 *   streams are waited for. So an eviction costs no device-wide wait (it used
 *   to: one per unmap, which stalled the GPU's queue). Only when nothing is
 *   cached is new physical memory created. Hence reserved grows only when the
 *   live blocks plus unusable gaps fill every granule held.
 * - A new block's granules are mapped by one device call (cuda: a cuMemMap
 *   per granule, CUDA maps only whole physical allocations, and one
 *   cuMemSetAccess for the range).
 * - Unavoidable overhead: gaps inside granules between pieces (a gap touching
 *   a granule's end or start is reused as head or tail; one in the middle
 *   waits for a neighbour's free), fragmentation of the small pool's
 *   granules, and granules held for pieces of blocks that are still live.
 * - empty_cache (and the out-of-memory retry) evicts every cached block and
 *   releases every granule with nothing in it.
 * - Statistics: reserved_bytes counts granules held, per the pool that last
 *   took them; segment counts virtual ranges (small segments and large
 *   blocks); num_device_alloc / num_device_free count granule mappings /
 *   unmappings. max_split_size does not apply (large blocks never split). */
#include <stdlib.h>
#include <string.h>

#include "alloc/policy.h"

typedef struct sgran sgran;

/* An evicted segment's virtual range, still mapped until its stream has passed the eviction. */
typedef struct stale {
    uintptr_t va;
    size_t n;                     /* granules */
    vr_stream stream;
    vr_event *ev;                 /* recorded on stream at eviction */
    struct stale *next;
} stale;

typedef struct span {
    uint32_t lo, hi;              /* used units [lo, hi) of a granule */
} span;

typedef struct glink {
    sgran *prev, *next;
    int bucket;                   /* -1: in no list */
} glink;

enum { HEADS = 0, TAILS = 1, FREE = 2 };

struct sgran {
    vr_phys *ph;
    int pool;                     /* VR_POOL_SMALL / LARGE: where its reserved bytes count */
    span *used;                   /* sorted by lo, disjoint */
    uint32_t nused, capused;
    glink link[3];                /* HEADS (by free end), TAILS (by free start), FREE */
    size_t idx;                   /* in st->all */
};

typedef struct piece {
    sgran *g;
    uint32_t lo, hi;
} piece;

/* A virtual range with its pieces (the pdata of every segment of this policy). */
typedef struct sext {
    uintptr_t va;
    size_t n;                     /* granules mapped at va, va + G, ... */
    vr_segment *seg;
    bool cached;                  /* in the LRU list: free and evictable */
    struct sext *lprev, *lnext;
    piece p[];
} sext;

typedef struct bset {
    sgran **first;                /* one list per bucket */
    uint64_t *bits;               /* non-empty buckets */
} bset;

typedef struct st_state {
    size_t G;                     /* granule bytes */
    uint32_t nb;                  /* units per granule */
    sgran **all;
    size_t nall, capall;
    bset set[2];                  /* HEADS, TAILS */
    sgran *freelist;
    size_t nfree;
    sext *oldest, *newest;        /* LRU of cached segments */
    stale *stale_first, *stale_last; /* evicted ranges not unmapped yet, oldest first */
    size_t nstale;
} st_state;

/* A placement: single piece (k == 0, no tail) or head + k full + tail. */
typedef struct plan {
    sgran *head;
    uint32_t hlo, hhi;            /* head piece (or the single piece) */
    size_t k;                     /* full fresh granules */
    sgran *tail;                  /* NULL: e units at the start of a fresh granule */
    uint32_t e;
    size_t nfresh;
} plan;

#define UNIT VRA_MIN_BLOCK

static st_state *S(const vr_alloc *a) { return a->pstate; }

/* ---------------------------------------------------------------- granule lists */

static uint32_t free_start(const st_state *s, const sgran *g) { return g->nused ? g->used[0].lo : s->nb; }
static uint32_t free_end(const st_state *s, const sgran *g) { return g->nused ? s->nb - g->used[g->nused - 1].hi : s->nb; }

static void unlink_from(st_state *s, sgran *g, int which)
{
    glink *l = &g->link[which];
    if (l->bucket < 0)
        return;
    sgran **first = which == FREE ? &s->freelist : &s->set[which].first[l->bucket];
    if (l->prev)
        l->prev->link[which].next = l->next;
    else
        *first = l->next;
    if (l->next)
        l->next->link[which].prev = l->prev;
    if (which == FREE)
        s->nfree--;
    else if (!*first)
        s->set[which].bits[l->bucket / 64] &= ~((uint64_t)1 << (l->bucket % 64));
    l->prev = l->next = NULL;
    l->bucket = -1;
}

static void link_into(st_state *s, sgran *g, int which, uint32_t bucket)
{
    sgran **first = which == FREE ? &s->freelist : &s->set[which].first[bucket];
    glink *l = &g->link[which];
    l->bucket = (int)bucket;
    l->prev = NULL;
    l->next = *first;
    if (*first)
        (*first)->link[which].prev = g;
    *first = g;
    if (which == FREE)
        s->nfree++;
    else
        s->set[which].bits[bucket / 64] |= (uint64_t)1 << (bucket % 64);
}

/* Puts g in the lists its spans call for: empty -> FREE; else a free end ->
 * HEADS, a free start -> TAILS (both when only its middle is used). */
static void reclass(st_state *s, sgran *g)
{
    for (int w = 0; w < 3; w++)
        unlink_from(s, g, w);
    if (!g->nused) {
        link_into(s, g, FREE, 0);
        return;
    }
    uint32_t fe = free_end(s, g), fs = free_start(s, g);
    if (fe)
        link_into(s, g, HEADS, fe);
    if (fs)
        link_into(s, g, TAILS, fs);
}

/* The granule of the smallest non-empty bucket >= k, or NULL. */
static sgran *find_ge(const st_state *s, int which, uint32_t k)
{
    const bset *b = &s->set[which];
    uint32_t words = (s->nb + 64) / 64;
    for (uint32_t w = k / 64; w < words; w++) {
        uint64_t m = b->bits[w] & (w == k / 64 ? ~(uint64_t)0 << (k % 64) : ~(uint64_t)0);
        if (m)
            return b->first[w * 64 + (uint32_t)__builtin_ctzll(m)];
    }
    return NULL;
}

/* The granule of the largest non-empty bucket below k, or NULL. */
static sgran *find_lt(const st_state *s, int which, uint32_t k)
{
    const bset *b = &s->set[which];
    for (int64_t w = (int64_t)(k / 64); w >= 0; w--) {
        uint64_t m = b->bits[w];
        if ((uint32_t)w == k / 64)
            m &= k % 64 ? ((uint64_t)1 << (k % 64)) - 1 : 0;
        if (m)
            return b->first[(uint32_t)w * 64 + 63 - (uint32_t)__builtin_clzll(m)];
    }
    return NULL;
}

/* Makes room for two more spans in g (a block may use a granule twice: as
 * its tail and as its head). */
static bool span_reserve(sgran *g)
{
    if (g->nused + 2 > g->capused) {
        uint32_t ncap = g->capused ? g->capused * 2 : 4;
        span *nu = realloc(g->used, ncap * sizeof *nu);
        if (!nu)
            return false;
        g->used = nu;
        g->capused = ncap;
    }
    return true;
}

/* Adds [lo, hi) to g's spans (room made by span_reserve). */
static void span_add(sgran *g, uint32_t lo, uint32_t hi)
{
    uint32_t i = g->nused;
    while (i > 0 && g->used[i - 1].lo > lo)
        i--;
    memmove(&g->used[i + 1], &g->used[i], (g->nused - i) * sizeof *g->used);
    g->used[i] = (span){lo, hi};
    g->nused++;
}

static void span_del(sgran *g, uint32_t lo)
{
    uint32_t i = 0;
    while (i < g->nused && g->used[i].lo != lo)
        i++;
    if (i == g->nused)
        return;
    memmove(&g->used[i], &g->used[i + 1], (g->nused - i - 1) * sizeof *g->used);
    g->nused--;
}

/* ---------------------------------------------------------------- granules held */

static void move_reserved(vr_alloc *a, sgran *g, int pool)
{
    if (g->pool == pool)
        return;
    vra_stat_dec(&a->stats.reserved_bytes[g->pool], (int64_t)S(a)->G);
    vra_stat_inc(&a->stats.reserved_bytes[pool], (int64_t)S(a)->G);
    g->pool = pool;
}

static void release_granule(vr_alloc *a, sgran *g);

/* Creates one new granule (into FREE) for pool. */
static vr_status create_granule(vr_alloc *a, int pool)
{
    st_state *s = S(a);
    if (s->nall == s->capall) {
        size_t ncap = s->capall ? s->capall * 2 : 256;
        sgran **na = realloc(s->all, ncap * sizeof *na);
        if (!na)
            return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
        s->all = na;
        s->capall = ncap;
    }
    sgran *g = calloc(1, sizeof *g);
    if (!g)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    vr_status st = vr_device_phys_create(a->dev, s->G, &g->ph);
    if (st != VR_OK) {
        free(g);
        return st;
    }
    for (int w = 0; w < 3; w++)
        g->link[w].bucket = -1;
    g->pool = pool;
    g->idx = s->nall;
    s->all[s->nall++] = g;
    link_into(s, g, FREE, 0);
    a->reserved += s->G;
    vra_stat_inc(&a->stats.reserved_bytes[VR_POOL_ALL], (int64_t)s->G);
    vra_stat_inc(&a->stats.reserved_bytes[pool], (int64_t)s->G);
    return VR_OK;
}

/* Creates `count` new granules for pool, all or none; VR_ERR_OOM at the cap
 * or when the device refuses. */
static vr_status create_granules(vr_alloc *a, size_t count, int pool)
{
    st_state *s = S(a);
    if (a->limit != UINT64_MAX && (a->reserved + count * s->G > a->limit || count * s->G > a->limit))
        return VR_ERR_OOM;
    for (size_t i = 0; i < count; i++) {
        vr_status st = create_granule(a, pool);
        if (st != VR_OK) {
            while (i--) /* the newest granules are at the front of FREE */
                release_granule(a, s->freelist);
            return st;
        }
    }
    return VR_OK;
}

static void release_granule(vr_alloc *a, sgran *g)
{
    st_state *s = S(a);
    unlink_from(s, g, FREE);
    vr_device_phys_release(a->dev, g->ph);
    a->reserved -= s->G;
    vra_stat_dec(&a->stats.reserved_bytes[VR_POOL_ALL], (int64_t)s->G);
    vra_stat_dec(&a->stats.reserved_bytes[g->pool], (int64_t)s->G);
    s->all[g->idx] = s->all[--s->nall];
    s->all[g->idx]->idx = g->idx;
    free(g->used);
    free(g);
}

/* ---------------------------------------------------------------- stale ranges */

/* Unmaps a stale range (its event has completed) without waiting for the device, and frees it. */
static void stale_drop(vr_alloc *a, stale *x)
{
    st_state *s = S(a);
    vr_device_phys_unmap_idle(a->dev, (void *)x->va, x->n * s->G);
    vr_device_vm_release(a->dev, (void *)x->va, x->n * s->G);
    vr_event_destroy(a->dev, x->ev);
    a->stats.num_device_free += (int64_t)x->n;
    free(x);
}

/* Unmaps stale ranges. With wait_all: every one, waiting for its event. With other: those of streams other
 * than *other, waiting for theirs (no look at the rest). Else the oldest ones whose events have completed,
 * up to the first that has not: a grow asks one event, not every pending one. */
static void stale_reap(vr_alloc *a, const vr_stream *other, bool wait_all)
{
    st_state *s = S(a);
    stale **pp = &s->stale_first, *last = NULL;
    while (*pp) {
        stale *x = *pp;
        bool wait = wait_all || (other && x->stream != *other);
        if (!wait && (other || !vr_event_query(a->dev, x->ev))) {
            if (!other)
                return; /* the younger ones stay; stale_last is unchanged */
            last = x;
            pp = &x->next;
            continue;
        }
        if (wait) {
            vr_event_sync(a->dev, x->ev); /* frees the event */
            x->ev = NULL;
        }
        *pp = x->next;
        s->nstale--;
        stale_drop(a, x);
    }
    s->stale_last = last;
}

/* ---------------------------------------------------------------- LRU of cached segments */

static void lru_remove(st_state *s, sext *e)
{
    if (!e->cached)
        return;
    if (e->lprev) e->lprev->lnext = e->lnext; else s->oldest = e->lnext;
    if (e->lnext) e->lnext->lprev = e->lprev; else s->newest = e->lprev;
    e->lprev = e->lnext = NULL;
    e->cached = false;
}

static void lru_append(st_state *s, sext *e)
{
    if (e->cached)
        return;
    e->cached = true;
    e->lnext = NULL;
    e->lprev = s->newest;
    if (s->newest) s->newest->lnext = e; else s->oldest = e;
    s->newest = e;
}

/* Unmaps a cached segment, gives its spans back and deletes it. */
static void evict(vr_alloc *a, sext *e)
{
    st_state *s = S(a);
    vr_segment *seg = e->seg;
    lru_remove(s, e);
    vr_block *b = seg->head;
    vra_tree_remove(&b->pool->blocks, b);
    stale *x = malloc(sizeof *x);
    if (x)
        *x = (stale){.va = e->va, .n = e->n, .stream = seg->stream};
    if (!x || vr_event_record(a->dev, seg->stream, &x->ev) != VR_OK) { /* unmap now, waiting for the device */
        free(x);
        vr_device_phys_unmap(a->dev, (void *)e->va, e->n * s->G);
        vr_device_vm_release(a->dev, (void *)e->va, e->n * s->G);
        a->stats.num_device_free += (int64_t)e->n;
    } else {
        if (s->stale_last)
            s->stale_last->next = x;
        else
            s->stale_first = x;
        s->stale_last = x;
        s->nstale++;
    }
    for (size_t i = 0; i < e->n; i++) {
        span_del(e->p[i].g, e->p[i].lo);
        reclass(s, e->p[i].g);
    }
    vra_pool_dec(a->stats.segment, seg->pool, 1);
    vra_record(a, VRA_SEGMENT_UNMAP, e->va, e->n * s->G, seg->stream);
    vra_block_delete(a, b);
    vra_segment_delete(a, seg);
    free(e);
}

/* ---------------------------------------------------------------- placement */

/* Where u units (u > 0) would go with the granules free now. */
static plan make_plan(const st_state *s, uint32_t u_small, size_t u)
{
    plan p = {0};
    uint32_t nb = s->nb;
    if (u_small) { /* a small-pool segment: one whole fresh granule */
        p.nfresh = 1;
        p.e = nb;
        return p;
    }
    if (u < nb) {
        sgran *g = find_ge(s, HEADS, (uint32_t)u);
        if (g) { /* right after what is used at the end of g */
            p.head = g;
            p.hlo = nb - free_end(s, g);
            p.hhi = p.hlo + (uint32_t)u;
            return p;
        }
        if ((g = find_ge(s, TAILS, (uint32_t)u))) {
            p.head = g;
            p.hlo = 0;
            p.hhi = (uint32_t)u;
            return p;
        }
    }
    sgran *h = find_lt(s, HEADS, u < nb ? (uint32_t)u : nb);
    size_t rest = u;
    if (h) {
        p.head = h;
        p.hlo = nb - free_end(s, h);
        p.hhi = nb;
        rest -= p.hhi - p.hlo;
    }
    p.k = rest / nb;
    p.e = (uint32_t)(rest % nb);
    if (p.e)
        p.tail = find_ge(s, TAILS, p.e);
    p.nfresh = p.k + (p.e && !p.tail);
    return p;
}

static sgran *take_fresh(vr_alloc *a, int pool)
{
    st_state *s = S(a);
    sgran *g = s->freelist;
    unlink_from(s, g, FREE);
    move_reserved(a, g, pool);
    return g;
}

/* Maps the plan's pieces at a fresh virtual range and makes the segment. */
static vr_status execute(vr_alloc *a, vra_request *req, const plan *p)
{
    st_state *s = S(a);
    int pool = req->pool->stat;
    size_t n = (p->head ? 1 : 0) + p->k + (p->e ? 1 : 0);
    sext *e = calloc(1, sizeof *e + n * sizeof(piece));
    if (!e)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    size_t i = 0;
    if (p->head)
        e->p[i++] = (piece){p->head, p->hlo, p->hhi};
    for (size_t j = 0; j < p->k; j++)
        e->p[i++] = (piece){take_fresh(a, pool), 0, s->nb};
    if (p->e)
        e->p[i++] = (piece){p->tail ? p->tail : take_fresh(a, pool), 0, p->e};
    e->n = n;
    void *va = NULL;
    vr_status st = VR_OK;
    for (i = 0; i < n && st == VR_OK; i++)
        if (!span_reserve(e->p[i].g))
            st = vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    if (st == VR_OK)
        st = vr_device_vm_reserve(a->dev, n * s->G, &va);
    vr_phys **phs = st == VR_OK ? malloc(n * sizeof *phs) : NULL;
    if (st == VR_OK && !phs)
        st = vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    for (i = 0; st == VR_OK && i < n; i++)
        phs[i] = e->p[i].g->ph;
    if (st == VR_OK)
        st = vr_device_phys_map_granules(a->dev, va, phs, n);
    free(phs);
    size_t mapped = st == VR_OK ? n : 0;
    size_t bytes = 0;
    for (i = 0; i < n; i++)
        bytes += (size_t)(e->p[i].hi - e->p[i].lo) * UNIT;
    uintptr_t base = (uintptr_t)va + (size_t)e->p[0].lo * UNIT;
    vr_segment *seg = st == VR_OK ? vra_segment_new(a, base, bytes, req->stream, req->pool, false, true) : NULL;
    if (!seg) { /* undo the mappings and the range; fresh granules go back to FREE */
        if (mapped)
            vr_device_phys_unmap(a->dev, va, mapped * s->G);
        if (va)
            vr_device_vm_release(a->dev, va, n * s->G);
        for (size_t j = 0; j < n; j++)
            reclass(s, e->p[j].g);
        free(e);
        return st != VR_OK ? st : vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    }
    for (i = 0; i < n; i++)
        span_add(e->p[i].g, e->p[i].lo, e->p[i].hi);
    for (i = 0; i < n; i++)
        reclass(s, e->p[i].g);
    e->va = (uintptr_t)va;
    e->seg = seg;
    seg->pdata = e;
    a->stats.num_device_alloc += (int64_t)n;
    vra_pool_inc(a->stats.segment, req->pool, 1);
    vra_record(a, VRA_SEGMENT_MAP, e->va, n * s->G, req->stream);
    req->block = seg->head;
    return VR_OK;
}

static vr_status grow(vr_alloc *a, vra_request *req)
{
    st_state *s = S(a);
    bool small = req->pool->is_small;
    size_t u = req->size / UNIT;
    stale_reap(a, NULL, s->nstale > 4096); /* bounded: the stale ranges hold address space */
    plan p = make_plan(s, small, u);
    while (p.nfresh > s->nfree && s->oldest) {
        evict(a, s->oldest);
        p = make_plan(s, small, u);
    }
    req->alloc_size = p.nfresh * s->G;
    if (p.nfresh > s->nfree) {
        vr_status st = create_granules(a, p.nfresh - s->nfree, req->pool->stat);
        if (st != VR_OK)
            return st;
    }
    stale_reap(a, &req->stream, false); /* pages evicted on other streams: their work first */
    return execute(a, req, &p);
}

/* ---------------------------------------------------------------- the other decisions */

static vr_block *find_free(vr_alloc *a, vra_request *req)
{
    vr_block key = {.stream = req->stream, .size = req->size, .addr = 0};
    vra_tree *t = &req->pool->blocks;
    vr_block *b = vra_tree_lower_bound(t, &key);
    if (!b || b->stream != req->stream || (!req->pool->is_small && b->size != req->size))
        return NULL;
    vra_tree_remove(t, b);
    lru_remove(S(a), b->seg->pdata);
    return b;
}

static bool should_split(const vr_alloc *a, const vr_block *b, size_t size)
{
    (void)a;
    return b->pool->is_small && b->size - size >= VRA_MIN_BLOCK;
}

static void on_free(vr_alloc *a, vr_block *b)
{
    if (!vra_block_is_split(b))
        lru_append(S(a), b->seg->pdata);
}

static void release_cached(vr_alloc *a)
{
    st_state *s = S(a);
    while (s->oldest)
        evict(a, s->oldest);
    stale_reap(a, NULL, true);
    while (s->freelist)
        release_granule(a, s->freelist);
}

static void fini(vr_alloc *a);

static vr_status init(vr_alloc *a)
{
    size_t G = vr_device_vm_granularity(a->dev);
    vr_phys *probe = NULL;
    if (vr_device_phys_create(a->dev, G, &probe) == VR_ERR_UNSUPPORTED)
        return vr_error(VR_ERR_UNSUPPORTED, "allocator: policy 'stitch' needs physical memory handles, which %s does "
                        "not have (use it on meta or cuda)", vr_device_name(a->dev));
    vr_device_phys_release(a->dev, probe);
    st_state *s = calloc(1, sizeof *s);
    if (!s)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory");
    s->G = G;
    s->nb = (uint32_t)(G / UNIT);
    size_t words = (s->nb + 64) / 64;
    for (int w = 0; w < 2; w++) {
        s->set[w].first = calloc(s->nb + 1, sizeof *s->set[w].first);
        s->set[w].bits = calloc(words, sizeof *s->set[w].bits);
    }
    a->pstate = s;
    if (!s->set[0].first || !s->set[1].first || !s->set[0].bits || !s->set[1].bits) {
        fini(a);
        return vr_error(VR_ERR_OOM, "allocator: out of host memory");
    }
    return VR_OK;
}

static void fini(vr_alloc *a)
{
    st_state *s = S(a);
    if (!s)
        return;
    for (vr_segment *seg = a->segs; seg; seg = seg->lnext) { /* live blocks: leaked to the device */
        free(seg->pdata);
        seg->pdata = NULL;
    }
    while (s->stale_first) { /* still mapped: left to the device like live blocks; events freed */
        stale *x = s->stale_first;
        s->stale_first = x->next;
        vr_event_destroy(a->dev, x->ev);
        free(x);
    }
    for (size_t i = 0; i < s->nall; i++) {
        free(s->all[i]->used);
        free(s->all[i]);
    }
    free(s->all);
    for (int w = 0; w < 2; w++) {
        free(s->set[w].first);
        free(s->set[w].bits);
    }
    free(s);
    a->pstate = NULL;
}

/* ---------------------------------------------------------------- check */

/* Recounts every granule's spans from the segments' pieces, checks the lists
 * and the LRU, and sums reserved bytes per pool. */
static vr_status check(vr_alloc *a, int64_t reserved[VR_POOL_COUNT])
{
    st_state *s = S(a);
    size_t units = 0, spans = 0, cached = 0;
    for (const vr_segment *seg = a->segs; seg; seg = seg->lnext) {
        const sext *e = seg->pdata;
        if (!e || e->seg != seg)
            return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx has no pieces", (unsigned long)seg->base);
        size_t bytes = 0;
        for (size_t i = 0; i < e->n; i++) {
            const sgran *g = e->p[i].g;
            bool found = false;
            for (uint32_t j = 0; j < g->nused; j++)
                found |= g->used[j].lo == e->p[i].lo && g->used[j].hi == e->p[i].hi;
            if (!found || e->p[i].lo >= e->p[i].hi || e->p[i].hi > s->nb)
                return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx: piece %zu is not a span of its granule",
                                (unsigned long)seg->base, i);
            bytes += (size_t)(e->p[i].hi - e->p[i].lo) * UNIT;
            units += e->p[i].hi - e->p[i].lo;
            spans++;
        }
        if (bytes != seg->size || seg->base != e->va + (size_t)e->p[0].lo * UNIT)
            return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx: pieces do not make it", (unsigned long)seg->base);
        bool whole_free = vra_block_available(seg->head) && !seg->head->next;
        if (whole_free != e->cached)
            return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx: cached is %d, free is %d", (unsigned long)seg->base,
                            e->cached, whole_free);
        cached += e->cached;
    }
    size_t gunits = 0, gspans = 0, nfree = 0, lru = 0;
    for (size_t i = 0; i < s->nall; i++) {
        const sgran *g = s->all[i];
        for (uint32_t j = 0; j < g->nused; j++) {
            if (j && g->used[j - 1].hi > g->used[j].lo)
                return vr_error(VR_ERR_INVALID, "check: stitch granule %zu has overlapping spans", i);
            gunits += g->used[j].hi - g->used[j].lo;
        }
        gspans += g->nused;
        uint32_t fe = free_end(s, g), fs = free_start(s, g);
        bool want_free = !g->nused, want_head = g->nused && fe, want_tail = g->nused && fs;
        if ((g->link[FREE].bucket >= 0) != want_free || (g->link[HEADS].bucket >= 0) != want_head ||
            (g->link[TAILS].bucket >= 0) != want_tail || (want_head && g->link[HEADS].bucket != (int)fe) ||
            (want_tail && g->link[TAILS].bucket != (int)fs) || g->idx != i)
            return vr_error(VR_ERR_INVALID, "check: stitch granule %zu is in the wrong lists", i);
        nfree += want_free;
        reserved[VR_POOL_ALL] += (int64_t)s->G;
        reserved[g->pool] += (int64_t)s->G;
    }
    for (const sext *e = s->oldest; e; e = e->lnext)
        lru++;
    if (units != gunits || spans != gspans || nfree != s->nfree || lru != cached)
        return vr_error(VR_ERR_INVALID, "check: stitch: pieces %zu units / %zu spans, granules %zu / %zu; free %zu/%zu; "
                        "cached %zu/%zu", units, spans, gunits, gspans, nfree, s->nfree, lru, cached);
    return VR_OK;
}

const vr_policy vra_policy_stitch = {
    .name = "stitch",
    .summary = "physical granules stitched into fresh virtual ranges; a block's tail shares a granule with another's head",
    .needs_vm = true,
    .init = init,
    .fini = fini,
    .round_size = vra_round_512,
    .find_free = find_free,
    .grow = grow,
    .release_some = NULL,
    .release_cached = release_cached,
    .should_split = should_split,
    .on_free = on_free,
    .check = check,
};
