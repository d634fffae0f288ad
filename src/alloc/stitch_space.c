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
    st_cand_fini(s);
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
    if (st == VR_OK)
        st = st_cand_check(s);
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
