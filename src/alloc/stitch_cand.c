/* Policy "stitch", inside (stitch_space.h): the candidates' indexes, the large mappings with no live block
 * (idle, or with a cached block) by size and, with lending on, by capacity; the layout is stitch_space.h's. */
#include <stdlib.h>
#include <string.h>

#include "alloc/stitch_space.h"

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

void st_cand_fini(st_state *s)
{
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
}

/* Both indexes in order, each candidate once, every bucket referenced as counted. */
vr_status st_cand_check(st_state *s)
{
    vr_status st = VR_OK;
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
    return st;
}
