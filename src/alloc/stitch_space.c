/* Policy "stitch", inside (stitch_space.h): granules and their spans, chunks of reserved address space,
 * mappings and their unmapping. Every driver call of the policy is made here: cuMemCreate/cuMemRelease
 * (granules), cuMemAddressReserve/Free (chunks of ST_VA_CHUNK, ranges carved from them), cuMemMap and one
 * cuMemSetAccess per new mapping, one cuMemUnmap per run of granules unmapped together (cuda_phys_cuda.c). */
#include <stdlib.h>
#include <string.h>

#include "alloc/stitch_space.h"

/* Address space is reserved in chunks this large (or one range's size when larger): the reservation is
 * free (no memory behind it), so one is made per 256 GiB of ranges instead of one per range. */
#define ST_VA_CHUNK ((size_t)256 << 30)

/* ---------------------------------------------------------------- granule lists */

void st_unlink(st_state *s, sgran *g, int which)
{
    glink *l = &g->link[which];
    if (l->bucket < 0)
        return;
    sgran **first = which == ST_FREE ? &s->freelist : &s->set[which].first[l->bucket];
    if (l->prev)
        l->prev->link[which].next = l->next;
    else
        *first = l->next;
    if (l->next)
        l->next->link[which].prev = l->prev;
    if (which == ST_FREE)
        s->nfree--;
    else if (!*first)
        s->set[which].bits[l->bucket / 64] &= ~((uint64_t)1 << (l->bucket % 64));
    l->prev = l->next = NULL;
    l->bucket = -1;
}

static void link_into(st_state *s, sgran *g, int which, uint32_t bucket)
{
    sgran **first = which == ST_FREE ? &s->freelist : &s->set[which].first[bucket];
    glink *l = &g->link[which];
    l->bucket = (int)bucket;
    l->prev = NULL;
    l->next = *first;
    if (*first)
        (*first)->link[which].prev = g;
    *first = g;
    if (which == ST_FREE)
        s->nfree++;
    else
        s->set[which].bits[bucket / 64] |= (uint64_t)1 << (bucket % 64);
}

/* Puts g in the lists its spans call for: empty -> FREE; else a free end ->
 * HEADS, a free start -> TAILS (both when only its middle is used). */
void st_reclass(st_state *s, sgran *g)
{
    uint32_t fe = st_free_end(s, g), fs = st_free_start(s, g);
    bool want_free = !g->nused;
    int want_h = g->nused && fe ? (int)fe : -1, want_t = g->nused && fs ? (int)fs : -1;
    if (g->link[ST_FREE].bucket >= 0 && want_free && want_h < 0 && want_t < 0 && g->link[ST_HEADS].bucket < 0 &&
        g->link[ST_TAILS].bucket < 0)
        return; /* already right (keeps its place in FREE) */
    for (int w = 0; w < 3; w++)
        st_unlink(s, g, w);
    if (want_free) {
        link_into(s, g, ST_FREE, 0);
        return;
    }
    if (want_h >= 0)
        link_into(s, g, ST_HEADS, (uint32_t)want_h);
    if (want_t >= 0)
        link_into(s, g, ST_TAILS, (uint32_t)want_t);
}

/* The granule of the smallest non-empty bucket >= k, or NULL. */
sgran *st_find_ge(const st_state *s, int which, uint32_t k)
{
    uint32_t words = (s->nb + 64) / 64;
    const uint64_t *bits = s->set[which].bits;
    for (uint32_t w = k / 64; w < words; w++) {
        uint64_t m = bits[w] & (w == k / 64 ? ~(uint64_t)0 << (k % 64) : ~(uint64_t)0);
        if (m)
            return s->set[which].first[w * 64 + (uint32_t)__builtin_ctzll(m)];
    }
    return NULL;
}

/* The granule of the largest non-empty bucket below k, or NULL. */
sgran *st_find_lt(const st_state *s, int which, uint32_t k)
{
    const uint64_t *bits = s->set[which].bits;
    for (int64_t w = (int64_t)(k / 64); w >= 0; w--) {
        uint64_t m = bits[w];
        if ((uint32_t)w == k / 64)
            m &= k % 64 ? ((uint64_t)1 << (k % 64)) - 1 : 0;
        if (m)
            return s->set[which].first[(uint32_t)w * 64 + 63 - (uint32_t)__builtin_clzll(m)];
    }
    return NULL;
}

/* Makes room for two more spans in g (a block may use a granule twice: as its tail and as its head). */
bool st_span_reserve(sgran *g)
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

void st_span_add(sgran *g, uint32_t lo, uint32_t hi, sext *owner)
{
    uint32_t i = g->nused;
    while (i > 0 && g->used[i - 1].lo > lo)
        i--;
    memmove(&g->used[i + 1], &g->used[i], (g->nused - i) * sizeof *g->used);
    g->used[i] = (span){lo, hi, owner};
    g->nused++;
}

void st_span_del(sgran *g, uint32_t lo)
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

void st_move_reserved(vr_alloc *a, sgran *g, int pool)
{
    if (g->pool == pool)
        return;
    vra_stat_dec(&a->stats.reserved_bytes[g->pool], (int64_t)st_of(a)->G);
    vra_stat_inc(&a->stats.reserved_bytes[pool], (int64_t)st_of(a)->G);
    g->pool = pool;
}

static vr_status create_granule(vr_alloc *a, int pool)
{
    st_state *s = st_of(a);
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
    link_into(s, g, ST_FREE, 0);
    a->reserved += s->G;
    vra_stat_inc(&a->stats.reserved_bytes[VR_POOL_ALL], (int64_t)s->G);
    vra_stat_inc(&a->stats.reserved_bytes[pool], (int64_t)s->G);
    return VR_OK;
}

/* Creates `count` new granules for pool, all or none; VR_ERR_OOM at the cap or when the device refuses. */
vr_status st_create_granules(vr_alloc *a, size_t count, int pool)
{
    st_state *s = st_of(a);
    if (a->limit != UINT64_MAX && (a->reserved + count * s->G > a->limit || count * s->G > a->limit))
        return VR_ERR_OOM;
    for (size_t i = 0; i < count; i++) {
        vr_status st = create_granule(a, pool);
        if (st != VR_OK) {
            while (i--) /* the newest granules are at the front of FREE */
                st_release_granule(a, s->freelist);
            return st;
        }
    }
    return VR_OK;
}

void st_release_granule(vr_alloc *a, sgran *g)
{
    st_state *s = st_of(a);
    st_unlink(s, g, ST_FREE);
    vr_device_phys_release(a->dev, g->ph);
    a->reserved -= s->G;
    vra_stat_dec(&a->stats.reserved_bytes[VR_POOL_ALL], (int64_t)s->G);
    vra_stat_dec(&a->stats.reserved_bytes[g->pool], (int64_t)s->G);
    s->all[g->idx] = s->all[--s->nall];
    s->all[g->idx]->idx = g->idx;
    free(g->used);
    free(g);
}

/* ---------------------------------------------------------------- address space */

/* Takes n granules of address space (best fit among the chunks' free extents; a new chunk if none). */
static vr_status va_take(vr_alloc *a, size_t n, uintptr_t *va, vchunk **out)
{
    st_state *s = st_of(a);
    vchunk *best = NULL;
    size_t bi = 0;
    for (vchunk *c = s->chunks; c; c = c->next)
        for (size_t i = 0; i < c->nfx; i++)
            if (c->fx[i].n >= n && (!best || c->fx[i].n < best->fx[bi].n)) {
                best = c;
                bi = i;
            }
    if (!best) {
        size_t gn = ST_VA_CHUNK / s->G > n ? ST_VA_CHUNK / s->G : n;
        vchunk *c = calloc(1, sizeof *c);
        void *base = NULL;
        if (!c || !(c->fx = malloc(4 * sizeof *c->fx))) {
            free(c);
            return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
        }
        vr_status st = vr_device_vm_reserve(a->dev, gn * s->G, &base);
        if (st != VR_OK) {
            free(c->fx);
            free(c);
            return st;
        }
        c->base = (uintptr_t)base;
        c->n = gn;
        c->capfx = 4;
        c->nfx = 1;
        c->fx[0] = (vext){0, gn};
        c->next = s->chunks;
        s->chunks = c;
        best = c;
        bi = 0;
    }
    vext *x = &best->fx[bi];
    *va = best->base + x->at * s->G;
    x->at += n;
    x->n -= n;
    if (!x->n) {
        memmove(x, x + 1, (best->nfx - bi - 1) * sizeof *x);
        best->nfx--;
    }
    *out = best;
    return VR_OK;
}

/* Gives [va, va + n granules) back to chunk c (coalescing with its neighbours). */
static void va_give(st_state *s, vchunk *c, uintptr_t va, size_t n)
{
    size_t at = (va - c->base) / s->G, lo = 0, hi = c->nfx;
    while (lo < hi) { /* first extent after at */
        size_t mid = (lo + hi) / 2;
        if (c->fx[mid].at < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool left = lo > 0 && c->fx[lo - 1].at + c->fx[lo - 1].n == at;
    bool right = lo < c->nfx && at + n == c->fx[lo].at;
    if (left && right) {
        c->fx[lo - 1].n += n + c->fx[lo].n;
        memmove(&c->fx[lo], &c->fx[lo + 1], (c->nfx - lo - 1) * sizeof *c->fx);
        c->nfx--;
    } else if (left) {
        c->fx[lo - 1].n += n;
    } else if (right) {
        c->fx[lo].at = at;
        c->fx[lo].n += n;
    } else {
        if (c->nfx == c->capfx) {
            vext *nf = realloc(c->fx, c->capfx * 2 * sizeof *nf);
            if (!nf)
                return; /* the range is lost to reuse; harmless */
            c->fx = nf;
            c->capfx *= 2;
        }
        memmove(&c->fx[lo + 1], &c->fx[lo], (c->nfx - lo) * sizeof *c->fx);
        c->fx[lo] = (vext){at, n};
        c->nfx++;
    }
}

/* ---------------------------------------------------------------- mappings */

static void maps_link(st_state *s, smap *m)
{
    ST_LIST_PREPEND(s->maps, s->maps_last, m, aprev, anext);
    s->nmaps++;
    s->mapped_granules += m->n;
}

static void maps_unlink(st_state *s, smap *m)
{
    ST_LIST_REMOVE(s->maps, s->maps_last, m, aprev, anext);
    s->nmaps--;
    s->mapped_granules -= m->n;
}

vr_status st_map_new(vr_alloc *a, sgran *const *g, size_t n, uint32_t off, bool small, smap **out)
{
    st_state *s = st_of(a);
    smap *m = calloc(1, sizeof *m + n * sizeof(sgran *));
    vr_phys **phs = malloc(n * sizeof *phs);
    if (!m || !phs) {
        free(m);
        free(phs);
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    }
    uintptr_t va = 0;
    vchunk *c = NULL;
    vr_status st = va_take(a, n, &va, &c);
    for (size_t i = 0; st == VR_OK && i < n; i++)
        phs[i] = g[i]->ph;
    if (st == VR_OK && (st = vr_device_phys_map_granules(a->dev, (void *)va, phs, n, s->G)) != VR_OK)
        va_give(s, c, va, n);
    free(phs);
    if (st != VR_OK) {
        free(m);
        return st;
    }
    m->va = va;
    m->n = n;
    m->off = off;
    m->cap = n * s->nb - off;
    m->small = small;
    m->chunk = c;
    c->live++;
    for (size_t i = 0; i < n; i++) {
        m->g[i] = g[i];
        g[i]->nmaps++;
    }
    maps_link(s, m);
    a->stats.num_device_alloc += (int64_t)n;
    *out = m;
    return VR_OK;
}

vr_status st_remap(vr_alloc *a, smap *m, size_t at, size_t n, sgran *const *g)
{
    st_state *s = st_of(a);
    vr_phys **phs = malloc(n * sizeof *phs);
    if (!phs)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    for (size_t i = 0; i < n; i++)
        phs[i] = g[i]->ph;
    uintptr_t va = m->va + at * s->G;
    vr_device_phys_unmap_idle(a->dev, (void *)va, n * s->G);
    a->stats.num_device_free += (int64_t)n;
    for (size_t i = 0; i < n; i++)
        m->g[at + i]->nmaps--;
    vr_status st = vr_device_phys_map_granules(a->dev, (void *)va, phs, n, s->G);
    if (st != VR_OK) { /* the old granules back; failing that, m keeps only what comes before them */
        for (size_t i = 0; i < n; i++)
            phs[i] = m->g[at + i]->ph;
        if (vr_device_phys_map_granules(a->dev, (void *)va, phs, n, s->G) == VR_OK) {
            for (size_t i = 0; i < n; i++)
                m->g[at + i]->nmaps++;
        } else {
            size_t rest = m->n - at - n;
            if (rest)
                vr_device_phys_unmap_idle(a->dev, (void *)(va + n * s->G), rest * s->G);
            for (size_t i = at + n; i < m->n; i++)
                m->g[i]->nmaps--;
            if (!at) {
                m->cap += m->off;
                m->off = 0;
            }
            st_give_tail(a, m, at);
        }
        free(phs);
        return st;
    }
    free(phs);
    a->stats.num_device_alloc += (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        m->g[at + i] = g[i];
        g[i]->nmaps++;
    }
    return VR_OK;
}

void st_give_tail(vr_alloc *a, smap *m, size_t keep)
{
    st_state *s = st_of(a);
    va_give(s, m->chunk, m->va + keep * s->G, m->n - keep);
    s->mapped_granules -= m->n - keep;
    m->cap -= (m->n - keep) * s->nb;
    m->n = keep;
}

void st_idle_push(st_state *s, smap *m)
{
    if (m->in_idle)
        return;
    m->in_idle = true;
    ST_LIST_APPEND(s->idle_oldest, s->idle_newest, m, iprev, inext);
    s->idle_granules += m->n;
}

void st_idle_remove(st_state *s, smap *m)
{
    if (!m->in_idle)
        return;
    ST_LIST_REMOVE(s->idle_oldest, s->idle_newest, m, iprev, inext);
    m->in_idle = false;
    s->idle_granules -= m->n;
}

/* The candidates' indexes (stitch_space.h). */
static bool before(size_t k1, uint64_t t1, size_t k2, uint64_t t2) { return k1 < k2 || (k1 == k2 && t1 < t2); }

/* ---- by size: buckets */

/* Position in bs->k of the first bucket of size >= key. */
static size_t key_lower_bound(const sbuckets *bs, size_t key)
{
    size_t lo = 0, hi = bs->nk;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (bs->k[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Position in b->c of the first candidate of tick >= tick. */
static uint32_t tick_lower_bound(const sbucket *b, uint64_t tick)
{
    uint32_t lo = 0, hi = b->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (b->c[mid].tick < tick)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void ix_remove(st_state *s, const smap *m, size_t key, uint64_t tick);
static void bc_unlist(st_state *s, smap *m);
static void bucket_unref(st_state *s, smap *m);

/* m lets go of its bucket (a bucket nothing points to is freed: it is empty, its candidates point to it) and of
 * bycap. */
void st_cand_forget(st_state *s, smap *m)
{
    if (m->in_bycap)
        ix_remove(s, m, m->bc_cap, m->bc_tick);
    m->in_bycap = false;
    bc_unlist(s, m);
    bucket_unref(s, m);
}

static void bucket_unref(st_state *s, smap *m)
{
    sbucket *b = m->bk;
    m->bk = NULL;
    if (!b || --b->refs)
        return;
    sbuckets *bs = &s->bysize;
    size_t i = key_lower_bound(bs, b->key);
    memmove(&bs->k[i], &bs->k[i + 1], (bs->nk - i - 1) * sizeof *bs->k);
    bs->nk--;
    free(b->c);
    free(b);
}

/* Points m->bk at the bucket of its size (made when there is none); false without host memory. */
static bool bucket_bind(st_state *s, smap *m)
{
    if (m->bk && m->bk->key == m->bsize)
        return true;
    bucket_unref(s, m);
    sbuckets *bs = &s->bysize;
    size_t i = key_lower_bound(bs, m->bsize);
    if (i == bs->nk || bs->k[i].key != m->bsize) {
        if (bs->nk == bs->capk) {
            size_t ncap = bs->capk ? bs->capk * 2 : 64;
            struct skey *nk = realloc(bs->k, ncap * sizeof *nk);
            if (!nk)
                return false;
            bs->k = nk;
            bs->capk = ncap;
        }
        sbucket *b = calloc(1, sizeof *b);
        if (!b)
            return false;
        b->key = m->bsize;
        memmove(&bs->k[i + 1], &bs->k[i], (bs->nk - i) * sizeof *bs->k);
        bs->k[i] = (struct skey){m->bsize, b};
        bs->nk++;
    }
    m->bk = bs->k[i].b;
    m->bk->refs++;
    return true;
}

static bool bucket_insert(st_state *s, smap *m)
{
    if (!bucket_bind(s, m))
        return false;
    sbucket *b = m->bk;
    if (b->n == b->capn) {
        uint32_t ncap = b->capn ? b->capn * 2 : 4;
        scand *nc = realloc(b->c, ncap * sizeof *nc);
        if (!nc)
            return false;
        b->c = nc;
        b->capn = ncap;
    }
    uint32_t i = tick_lower_bound(b, m->tick);
    memmove(&b->c[i + 1], &b->c[i], (b->n - i) * sizeof *b->c);
    b->c[i] = (scand){m->bsize, m->tick, m};
    b->n++;
    return true;
}

static void bucket_remove(smap *m)
{
    sbucket *b = m->bk;
    uint32_t i = tick_lower_bound(b, m->tick);
    while (b->c[i].m != m) /* ticks are unique but for mappings never used (0) */
        i++;
    memmove(&b->c[i], &b->c[i + 1], (b->n - i - 1) * sizeof *b->c);
    b->n--;
}

/* ---- by capacity: leaves */

/* The first position not before (key, tick). */
static st_iter ix_lower_bound(const st_state *s, size_t key, uint64_t tick)
{
    const sindex *ix = &s->bycap;
    size_t lo = 0, hi = ix->nleaf; /* the last leaf whose first entry is before it (else leaf 0) */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (before(ix->leaf[mid].key, ix->leaf[mid].tick, key, tick))
            lo = mid + 1;
        else
            hi = mid;
    }
    st_iter it = {s, ST_BY_CAP, lo ? lo - 1 : 0, 0};
    if (it.l == ix->nleaf)
        return it;
    const sleaf *l = ix->leaf[it.l].l;
    uint32_t a = 0, b = l->n;
    while (a < b) {
        uint32_t mid = (a + b) / 2;
        if (before(l->c[mid].key, l->c[mid].tick, key, tick))
            a = mid + 1;
        else
            b = mid;
    }
    it.i = a;
    if (a == l->n && it.l + 1 < ix->nleaf) { /* the start of the next leaf */
        it.l++;
        it.i = 0;
    }
    return it;
}

static void set_first(sindex *ix, size_t l)
{
    ix->leaf[l].key = ix->leaf[l].l->c[0].key;
    ix->leaf[l].tick = ix->leaf[l].l->c[0].tick;
}

/* Puts leaf nl (not empty) at position at of ix->leaf (room made by the caller). */
static void leaf_put(sindex *ix, size_t at, sleaf *nl)
{
    memmove(&ix->leaf[at + 1], &ix->leaf[at], (ix->nleaf - at) * sizeof *ix->leaf);
    ix->leaf[at].l = nl;
    ix->nleaf++;
    set_first(ix, at);
}

static void leaf_drop(sindex *ix, size_t at)
{
    free(ix->leaf[at].l);
    memmove(&ix->leaf[at], &ix->leaf[at + 1], (ix->nleaf - at - 1) * sizeof *ix->leaf);
    ix->nleaf--;
}

/* Inserts c before the entries not before it; false without host memory. */
static bool ix_insert(st_state *s, scand c)
{
    sindex *ix = &s->bycap;
    if (ix->nleaf == ix->capleaf) { /* room for a new leaf, whether it is needed or not */
        size_t ncap = ix->capleaf ? ix->capleaf * 2 : 16;
        struct sfirst *nf = realloc(ix->leaf, ncap * sizeof *nf);
        if (!nf)
            return false;
        ix->leaf = nf;
        ix->capleaf = ncap;
    }
    if (!ix->nleaf) {
        sleaf *nl = malloc(sizeof *nl);
        if (!nl)
            return false;
        nl->n = 1;
        nl->c[0] = c;
        leaf_put(ix, 0, nl);
        return true;
    }
    st_iter it = ix_lower_bound(s, c.key, c.tick);
    if (it.i == 0 && it.l > 0) /* at the start of a leaf: at the end of the one before, when it has room */
        if (ix->leaf[it.l - 1].l->n < ST_LEAF)
            it.i = ix->leaf[--it.l].l->n;
    sleaf *l = ix->leaf[it.l].l;
    if (l->n == ST_LEAF) { /* split in halves */
        sleaf *nl = malloc(sizeof *nl);
        if (!nl)
            return false;
        nl->n = ST_LEAF / 2;
        memcpy(nl->c, &l->c[ST_LEAF / 2], ST_LEAF / 2 * sizeof *nl->c);
        l->n = ST_LEAF / 2;
        leaf_put(ix, it.l + 1, nl);
        if (it.i > ST_LEAF / 2) {
            it.l++;
            it.i -= ST_LEAF / 2;
            l = nl;
        }
    }
    memmove(&l->c[it.i + 1], &l->c[it.i], (l->n - it.i) * sizeof *l->c);
    l->c[it.i] = c;
    l->n++;
    if (!it.i)
        set_first(ix, it.l);
    return true;
}

/* Removes m's entry (of key and tick). */
static void ix_remove(st_state *s, const smap *m, size_t key, uint64_t tick)
{
    sindex *ix = &s->bycap;
    st_iter it = ix_lower_bound(s, key, tick);
    while (ix->leaf[it.l].l->c[it.i].m != m) /* ticks are unique but for mappings never used (0) */
        if (++it.i == ix->leaf[it.l].l->n) {
            it.l++;
            it.i = 0;
        }
    sleaf *l = ix->leaf[it.l].l;
    memmove(&l->c[it.i], &l->c[it.i + 1], (l->n - it.i - 1) * sizeof *l->c);
    if (!--l->n) {
        leaf_drop(ix, it.l);
        return;
    }
    if (!it.i)
        set_first(ix, it.l);
    if (l->n >= ST_LEAF / 4) /* else merged into a neighbour with room (scans read fewer leaves) */
        return;
    size_t at = it.l;
    if (at > 0 && ix->leaf[at - 1].l->n + l->n <= ST_LEAF * 3 / 4)
        at--;
    else if (!(at + 1 < ix->nleaf && ix->leaf[at + 1].l->n + l->n <= ST_LEAF * 3 / 4))
        return;
    sleaf *x = ix->leaf[at].l, *y = ix->leaf[at + 1].l;
    memcpy(&x->c[x->n], y->c, y->n * sizeof *y->c);
    x->n += y->n;
    leaf_drop(ix, at + 1);
}

/* m's candidacy changed: bycap is brought up to date for it before it is read next (bc_sync). */
static void bc_touch(st_state *s, smap *m)
{
    if (m->bc_pending)
        return;
    m->bc_pending = true;
    m->bc_prev = NULL;
    m->bc_next = s->bc_pending;
    if (m->bc_next)
        m->bc_next->bc_prev = m;
    s->bc_pending = m;
}

static void bc_unlist(st_state *s, smap *m)
{
    if (!m->bc_pending)
        return;
    if (m->bc_prev)
        m->bc_prev->bc_next = m->bc_next;
    else
        s->bc_pending = m->bc_next;
    if (m->bc_next)
        m->bc_next->bc_prev = m->bc_prev;
    m->bc_pending = false;
}

/* bycap: out of it what it holds under another key or is no candidate; into it the candidates it lacks. A
 * candidate that finds no host memory is only never lent: harmless. */
static void bc_sync(st_state *s)
{
    while (s->bc_pending) {
        smap *m = s->bc_pending;
        bc_unlist(s, m);
        if (m->in_bycap && (!m->in_cand || m->bc_cap != m->cap || m->bc_tick != m->tick)) {
            ix_remove(s, m, m->bc_cap, m->bc_tick);
            m->in_bycap = false;
        }
        if (m->in_cand && !m->in_bycap && ix_insert(s, (scand){m->cap, m->tick, m})) {
            m->in_bycap = true;
            m->bc_cap = m->cap;
            m->bc_tick = m->tick;
        }
    }
}

/* ---- both */

st_iter st_cand_from(st_state *s, int by, size_t key)
{
    if (by == ST_BY_CAP) {
        bc_sync(s);
        return ix_lower_bound(s, key, 0);
    }
    return (st_iter){s, ST_BY_SIZE, key_lower_bound(&s->bysize, key), 0};
}

/* The entries of bucket or leaf l (NULL past the end). */
static const scand *run_of(const st_iter *it, size_t l, uint32_t *n)
{
    if (it->by == ST_BY_CAP) {
        if (l >= it->s->bycap.nleaf)
            return NULL;
        *n = it->s->bycap.leaf[l].l->n;
        return it->s->bycap.leaf[l].l->c;
    }
    if (l >= it->s->bysize.nk)
        return NULL;
    *n = it->s->bysize.k[l].b->n;
    return it->s->bysize.k[l].b->c;
}

/* Positions are checked against the index as it is now: a caller's change to it (a take that fails after
 * evicting, without host memory) ends a scan early at worst. */
smap *st_cand_next(st_iter *it, size_t max)
{
    uint32_t n = 0;
    for (const scand *c; (c = run_of(it, it->l, &n)); it->l++, it->i = 0)
        if (it->i < n)
            return c[it->i].key <= max ? c[it->i++].m : NULL;
    return NULL;
}

smap *st_cand_prev(st_iter *it, size_t min)
{
    uint32_t n = 0;
    const scand *c = run_of(it, it->l, &n);
    while (!c || !it->i || it->i > n) { /* to the end of the run before */
        if (!it->l || (c && it->i))
            return NULL;
        c = run_of(it, --it->l, &n);
        it->i = n;
    }
    if (c[it->i - 1].key < min)
        return NULL;
    return c[--it->i].m;
}

/* A mapping left out of the index (no host memory) is only never reused: harmless. */
void st_cand_insert(st_state *s, smap *m)
{
    if (m->in_cand || m->small)
        return;
    if (!bucket_insert(s, m))
        return;
    if (s->borrow)
        bc_touch(s, m);
    s->ncand++;
    m->in_cand = true;
}

void st_cand_remove(st_state *s, smap *m)
{
    if (!m->in_cand)
        return;
    bucket_remove(m);
    if (s->borrow)
        bc_touch(s, m);
    s->ncand--;
    m->in_cand = false;
}

/* Unmaps m (nothing may use it any more) and frees it. */
static void unmap_now(vr_alloc *a, smap *m)
{
    st_state *s = st_of(a);
    vr_device_phys_unmap_idle(a->dev, (void *)m->va, m->n * s->G);
    a->stats.num_device_free += (int64_t)m->n;
    for (size_t i = 0; i < m->n; i++)
        m->g[i]->nmaps--;
    va_give(s, m->chunk, m->va, m->n);
    m->chunk->live--;
    maps_unlink(s, m);
    st_period_forget(s, m);
    st_cand_forget(s, m);
    free(m);
}

static void stale_unmap(vr_alloc *a, stale *x)
{
    for (size_t i = 0; i < x->nm; i++)
        unmap_now(a, x->m[i]);
    st_of(a)->nstale -= x->nm;
    free(x->m);
    free(x);
}

void st_stale_reap(vr_alloc *a, bool wait_all)
{
    st_state *s = st_of(a);
    while (s->stale_first) {
        stale *x = s->stale_first;
        if (wait_all)
            vr_event_sync(a->dev, x->ev); /* frees the event */
        else if (vr_event_query(a->dev, x->ev))
            vr_event_destroy(a->dev, x->ev);
        else
            return;
        s->stale_first = x->next;
        if (!s->stale_first)
            s->stale_last = NULL;
        stale_unmap(a, x);
    }
}

void st_drop_idle(vr_alloc *a, size_t keep_granules, bool wait)
{
    st_state *s = st_of(a);
    stale *batch[8] = {0};
    int nb = 0;
    while (s->idle_granules > keep_granules && s->idle_oldest) {
        smap *m = s->idle_oldest;
        st_idle_remove(s, m);
        st_cand_remove(s, m);
        int k = 0;
        while (k < nb && batch[k]->stream != m->stream)
            k++;
        if (k == nb && nb == 8) { /* many streams: wait for the device, unmap at once */
            vr_device_synchronize(a->dev);
            unmap_now(a, m);
            continue;
        }
        if (k == nb) {
            batch[k] = calloc(1, sizeof *batch[k]);
            if (!batch[k]) {
                vr_device_synchronize(a->dev);
                unmap_now(a, m);
                continue;
            }
            batch[k]->stream = m->stream;
            nb++;
        }
        stale *x = batch[k];
        smap **nm = realloc(x->m, (x->nm + 1) * sizeof *nm);
        if (!nm) {
            vr_device_synchronize(a->dev);
            unmap_now(a, m);
            continue;
        }
        x->m = nm;
        x->m[x->nm++] = m;
        m->stale = true;
        s->nstale++;
    }
    for (int k = 0; k < nb; k++) {
        stale *x = batch[k];
        if (wait || vr_event_record(a->dev, x->stream, &x->ev) != VR_OK) {
            if (x->ev)
                vr_event_sync(a->dev, x->ev);
            else
                vr_device_synchronize(a->dev);
            stale_unmap(a, x);
            continue;
        }
        if (s->stale_last)
            s->stale_last->next = x;
        else
            s->stale_first = x;
        s->stale_last = x;
    }
}

void st_space_fini(vr_alloc *a)
{
    st_state *s = st_of(a);
    while (s->stale_first) { /* still mapped: left to the device like live blocks; events freed (their mappings
                                * are in s->maps too, freed below: st_space_check) */
        stale *x = s->stale_first;
        s->stale_first = x->next;
        vr_event_destroy(a->dev, x->ev);
        free(x->m);
        free(x);
    }
    while (s->maps) {
        smap *m = s->maps;
        s->maps = m->anext;
        free(m);
    }
    s->maps_last = NULL;
    for (size_t i = 0; i < s->bysize.nk; i++) {
        free(s->bysize.k[i].b->c);
        free(s->bysize.k[i].b);
    }
    free(s->bysize.k);
    s->bysize = (sbuckets){0};
    for (size_t i = 0; i < s->bycap.nleaf; i++)
        free(s->bycap.leaf[i].l);
    free(s->bycap.leaf);
    s->bycap = (sindex){0};
    for (vchunk *c = s->chunks, *n; c; c = n) {
        n = c->next;
        if (!c->live)
            vr_device_vm_release(a->dev, (void *)c->base, c->n * s->G);
        free(c->fx);
        free(c);
    }
    s->chunks = NULL;
}

/* Mappings: each in the right lists, granule map counts, the index sorted, chunk extents disjoint. */
vr_status st_space_check(vr_alloc *a)
{
    st_state *s = st_of(a);
    size_t nmaps = 0, granules = 0, idle = 0, idle_g = 0, ncand = 0, stale_m = 0;
    size_t *counts = calloc(s->nall + 1, sizeof *counts);
    if (!counts)
        return VR_OK;
    vr_status st = VR_OK;
    for (const smap *m = s->maps; m && st == VR_OK; m = m->anext) {
        nmaps++;
        granules += m->n;
        for (size_t i = 0; i < m->n; i++)
            counts[m->g[i]->idx]++;
        bool want_cand = !m->stale && !m->small && (!m->user || m->user->cached);
        if (m->in_cand != want_cand || m->in_idle != (!m->user && !m->stale) || (m->user && m->user->m != m) ||
            (m->stale && m->user) ||
            m->cap != m->n * s->nb - m->off || (m->small && (m->off || m->n != 1)))
            st = vr_error(VR_ERR_INVALID, "check: stitch mapping %#lx is in the wrong lists", (unsigned long)m->va);
        ncand += m->in_cand;
    }
    for (const stale *x = s->stale_first; x; x = x->next) /* still in s->maps: counted above */
        for (size_t i = 0; i < x->nm; i++)
            stale_m += x->m[i]->stale;
    for (const smap *m = s->idle_oldest; m; m = m->inext) {
        idle++;
        idle_g += m->n;
    }
    for (size_t i = 0; st == VR_OK && i < s->nall; i++)
        if (counts[i] != s->all[i]->nmaps)
            st = vr_error(VR_ERR_INVALID, "check: stitch granule %zu: %zu mappings, counted %zu", i, s->all[i]->nmaps,
                          counts[i]);
    free(counts);
    size_t n = 0, refs = 0, bound = 0; /* by size: buckets in order, each candidate once, in order */
    for (size_t i = 0; i < s->bysize.nk && st == VR_OK; i++) {
        const sbucket *b = s->bysize.k[i].b;
        if (b->key != s->bysize.k[i].key || (i && s->bysize.k[i - 1].key >= b->key) || !b->refs)
            st = vr_error(VR_ERR_INVALID, "check: stitch candidates: bucket %zu is out of order", i);
        for (uint32_t j = 0; j < b->n && st == VR_OK; j++) {
            const smap *m = b->c[j].m;
            if (!m->in_cand || m->bk != b || m->bsize != b->key || b->c[j].key != b->key || b->c[j].tick != m->tick ||
                (j && b->c[j - 1].tick >= m->tick))
                st = vr_error(VR_ERR_INVALID, "check: stitch candidates of size %zu: %u is out of order", b->key, j);
        }
        n += b->n;
        refs += b->refs;
    }
    for (const smap *m = s->maps; m; m = m->anext)
        bound += m->bk != NULL;
    if (st == VR_OK && (n != s->ncand || refs != bound))
        st = vr_error(VR_ERR_INVALID, "check: stitch candidates by size: %zu of %zu, %zu references of %zu", n,
                      s->ncand, refs, bound);
    bc_sync(s); /* by capacity: the leaves in order */
    const scand *last = NULL;
    n = 0;
    for (size_t i = 0; s->borrow && i < s->bycap.nleaf && st == VR_OK; i++) {
        const sleaf *l = s->bycap.leaf[i].l;
        if (!l->n || l->n > ST_LEAF || s->bycap.leaf[i].key != l->c[0].key || s->bycap.leaf[i].tick != l->c[0].tick)
            st = vr_error(VR_ERR_INVALID, "check: stitch candidates by capacity: leaf %zu is wrong", i);
        for (uint32_t j = 0; j < l->n && st == VR_OK; j++) {
            const scand *c = &l->c[j];
            if (!c->m->in_cand || !c->m->in_bycap || c->key != c->m->cap || c->tick != c->m->tick ||
                (last && !before(last->key, last->tick, c->key, c->tick)))
                st = vr_error(VR_ERR_INVALID, "check: stitch candidates by capacity: %zu is out of order", n);
            last = c;
            n++;
        }
    }
    if (st == VR_OK && s->borrow && n != s->ncand)
        st = vr_error(VR_ERR_INVALID, "check: stitch candidates by capacity: %zu of %zu", n, s->ncand);
    if (st == VR_OK && (nmaps != s->nmaps || granules != s->mapped_granules || idle_g != s->idle_granules ||
                        ncand != s->ncand || stale_m != s->nstale))
        st = vr_error(VR_ERR_INVALID, "check: stitch mappings %zu/%zu (%zu/%zu granules), idle %zu granules/%zu, "
                      "candidates %zu/%zu, stale %zu/%zu", nmaps, s->nmaps, granules, s->mapped_granules, idle_g,
                      s->idle_granules, ncand, s->ncand, stale_m, s->nstale);
    (void)idle;
    for (const vchunk *c = s->chunks; st == VR_OK && c; c = c->next)
        for (size_t i = 0; i < c->nfx; i++)
            if (!c->fx[i].n || c->fx[i].at + c->fx[i].n > c->n || (i && c->fx[i - 1].at + c->fx[i - 1].n >= c->fx[i].at))
                st = vr_error(VR_ERR_INVALID, "check: stitch address chunk %#lx: bad free extent %zu",
                              (unsigned long)c->base, i);
    return st;
}
