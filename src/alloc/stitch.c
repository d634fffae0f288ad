/* Policy "stitch": physical granules stitched into virtual ranges (after GMLake, ASPLOS 2024), on devices
 * with physical memory handles (vr_device_phys_*: meta, cuda).
 *
 * Reserved bytes are the physical granules held (the device's granularity, 2 MiB on current GPUs, or
 * vr_alloc_config.stitch_granule: the driver's cuMemSetAccess and cuMemUnmap cost per physical allocation in a
 * range, bench/alloc/vmm_cost.c), each a vr_phys of its own. A
 * granule can be mapped at several virtual addresses at once, so the bytes of one granule may belong to
 * several blocks, each using a different interval of it ("spans", in 512-byte units).
 *
 * - Rounding (512 bytes), the small/large pool split (1 MiB) and per-stream reuse are those of policy
 *   "pytorch".
 * - Small pool: a segment is one granule mapped at its own 2 MiB range, split and coalesced best-fit as in
 *   "pytorch".
 * - Large pool: every block is a segment of its own, exactly the rounded request, on a *mapping*: a
 *   virtual range of n granules mapped side by side. A block uses a prefix of its mapping from unit `off`
 *   of the first granule: an optional *head* piece (the free end [off, G) of a granule whose start is used
 *   by others), full granules, and an optional *tail* piece (the free start [0, e) of a granule). So a
 *   granule holds the tail of one block and the head of another, and no request is rounded up to a granule.
 *   Its free blocks are found through their mappings, so the pool keeps no tree of them (vr_pool.untreed:
 *   the tree's insert and remove on every free and take were ~10% of the policy's cache misses).
 * - Mappings outlive their blocks. A freed block is *cached*: it keeps its spans. A cached block is
 *   *evicted* when its units are wanted by another block: its spans are given back, its segment deleted,
 *   and its mapping stays mapped, *idle*. A large request looks at the mappings last used for exactly its
 *   size (cached on the request's stream, or idle): first those whose last request had the same *key* (its
 *   size and the sizes of the 2 large requests before it: which request of the step it is, when a step
 *   asks a size several times), least recently used first, then the others, most recently used first; it
 *   takes the first whose units no live block uses: its own cached block is handed out as it is;
 *   otherwise the cached blocks on those units are evicted and a new block is put on it. No device call
 *   either way. Before those, once the large requests' sizes repeat with a period (a training step's:
 *   stitch_period.c), the mapping that served the request one period before is tried the same way: a step
 *   whose requests all take the mappings of the step before meets no live block on them, and makes no
 *   device call (keys alone did not settle a step that asks one size many times under one key: ResNet-50's
 *   trace repeated kept ~216 calls a step). Small requests: best fit in the small
 *   pool's segments, as pytorch; a new small segment first takes an idle small mapping whose granule is
 *   free.
 * - A large request failing those, when lending is on (vr_alloc_config.stitch_lend_pct = P; `vram replay
 *   --stitch-lend P`, vram_torch.enable(stitch_lend=P); off by default), is *lent* a mapping: the smallest (by units from its off to its end) idle or cached mapping up
 *   to P% larger than the request whose first u units no live block uses, found in a second index of the
 *   candidates, by that capacity. The block is its prefix (within the units its own block used), and the
 *   mapping keeps its size and key: a later request of its own size finds it again (the lent block, cached, is
 *   evicted: no device call), a request of the lent size finds the lent block by capacity and takes it as it
 *   is. A step of a new sequence length (BERT with a new length every step: every size new) so runs on the
 *   mappings of earlier, longer steps instead of mapping new ones (10,000 -> 1,500 driver calls per step of
 *   bench/alloc's bert_varlen with P = 100). A lent mapping is missing when its own size comes next, and that
 *   request then takes another's, and so on; so a mapping is *kept* for its own size, never lent, while that
 *   size was asked within the last ST_LEND_KEEP (2,048) large requests or the period's (a size of the step
 *   comes back next step), and nothing is lent while the large requests repeat with a period of LEND_STEADY
 *   (128) requests or more (a training loop's steady state): with 8 MiB granules a warm pass of
 *   gpt2_bf16_varlen_b16 (a few lengths in turn) went from 841 to 4 driver calls, gpt2_bf16_b32's from 196 to
 *   66 (68 without lending), ResNet-50's from 123 to 18, while bert_varlen's new lengths take 408 a step
 *   (183 when every mapping could be lent; 1,555 without lending) (bench/alloc/README.md). Lending is off by
 *   default (vram's executor repeats its sizes); libvram_torch turns it on.
 * - When every such mapping has units under live blocks, the idle mapping of the size (or up to twice it:
 *   the block is its prefix) with the fewest such granules is *patched* if they are few (at most 1/8 of
 *   its granules): they are replaced in its range by free granules (cached blocks evicted for them, oldest
 *   first), an unmap and a map each, once the work queued on its range (before its last block was freed)
 *   has completed: an event is recorded on a block's stream every ST_EPOCH_FREES large frees (the last
 *   ST_EPOCHS kept), and the first recorded after that free is queried, and waited for only when it has not
 *   completed (without one, an event recorded now: a host wait for all the stream's queued work). A block
 *   freed a step before has usually completed: no wait. A new mapping would map every granule, and unmap
 *   as many later.
 * - With lending on, the patch looks wider and never waits: at the idle *or cached* mappings (this stream's;
 *   the cached block is evicted) whose capacity (not size) is the request's to twice it, only those whose
 *   event recorded after their last free has completed (queried: the work on their range is done), and it
 *   patches the one with the fewest granules under live blocks when they are at most half of its granules (a
 *   patch costs an unmap and a map per granule replaced; a new mapping a map per granule, and as many unmaps
 *   when it is dropped). One with none under a live block (and at most P% larger) is taken as it is, lent
 *   when of another size: the scans above look at only CAND_SCAN mappings each, and such a mapping went
 *   unused while a new one was mapped. On bench/alloc's bert_varlen (P = 100) this takes the driver calls of
 *   a warm step from 1,464 to 706, and no patch waits for the host (bench/alloc/README.md).
 * - Only a request no mapping can take gets a new one: placed with the granules free now (a request of u
 *   units uses the largest free granule end as its head, then u - h rounds into full granules plus a tail
 *   placed best-fit in the smallest free granule start that holds it, else a fresh granule, whose rest
 *   becomes a head for the next request; a request under a granule first goes best-fit into one free
 *   granule end or start); when fresh granules run out, cached blocks are evicted, least recently freed
 *   first, and only when nothing is cached is new physical memory created. Hence reserved grows only when
 *   the live blocks plus unusable gaps fill every granule held. The new mapping's range comes from chunks
 *   of reserved address space (no cuMemAddressReserve per mapping); its granules are mapped with a cuMemMap
 *   each (CUDA maps only whole physical allocations) and one cuMemSetAccess.
 * - Idle mappings are kept up to 8 times the granules held (at least 1 GiB's worth: a step of a length
 *   seen a few steps before finds its mappings); beyond that the least recently used are unmapped, in a
 *   batch: an event is recorded on each one's stream, and the ranges are unmapped (without a device-wide
 *   wait) once it has completed, looked at on every new mapping.
 * - Streams: units evicted from a block of stream s go to a block of another stream only after the host
 *   has waited for an event recorded on s (each grow for stream t waits for the streams other than t that
 *   evicted since their last wait). With one stream nothing waits.
 * - Unavoidable overhead: gaps inside granules between pieces (a gap touching a granule's end or start is
 *   reused as head or tail; one in the middle waits for a neighbour's free), fragmentation of the small
 *   pool's granules, and granules held for pieces of blocks that are still live.
 * - empty_cache (and the out-of-memory retry) evicts every cached block, unmaps every idle mapping and the
 *   unused granules at the end of live blocks' mappings, and releases every granule with nothing in it.
 * - Statistics: reserved_bytes counts granules held, per the pool that last took them (a cached block is
 *   reserved, not allocated, and inactive, as in PyTorch); segment counts blocks' virtual ranges (small
 *   segments and large blocks, live or cached), not idle mappings; num_device_alloc / num_device_free
 *   count granule mappings / unmappings. max_split_size does not apply (large blocks never split). */
#include <stdlib.h>
#include <string.h>

#include "alloc/stitch_space.h"

#define UNIT ST_UNIT
#define CAND_SCAN 64              /* mappings of the size looked at per request */
#define IDLE_PER_HELD 8           /* idle mappings may map this many times the granules held */
#define IDLE_MIN ((size_t)1 << 30) /* ... or this many bytes, whichever is more */
#define PATCH_DIV 8               /* a mapping is patched when at most 1/8 of its granules are taken */
#define PATCH_DIV_LEND 2          /* ... with lending on, at most half (2 calls a granule, vs 1 a granule new) */
#define PATCH_MIN 8               /* ... and it has at least this many */
#define PATCH_LARGER 2            /* mappings up to twice the request are patched for it */
#define LEND_STEADY 128           /* no lending while the large requests repeat with a period this long */
#define SMALL_SCAN 16             /* idle small-pool mappings looked at per small grow */

static st_state *S(const vr_alloc *a) { return a->pstate; }


/* A placement: single piece (k == 0, no tail) or head + k full + tail. */
typedef struct plan {
    sgran *head;
    uint32_t hlo, hhi;            /* head piece (or the single piece) */
    size_t k;                     /* full fresh granules */
    sgran *tail;                  /* NULL: e units at the start of a fresh granule */
    uint32_t e;
    size_t nfresh;
} plan;

/* ---------------------------------------------------------------- LRU of cached blocks */

static void lru_remove(st_state *s, sext *e)
{
    if (!e->cached)
        return;
    ST_LIST_REMOVE(s->oldest, s->newest, e, lprev, lnext);
    e->cached = false;
}

static void lru_append(st_state *s, sext *e)
{
    if (e->cached)
        return;
    e->cached = true;
    ST_LIST_APPEND(s->oldest, s->newest, e, lprev, lnext);
}

/* ---------------------------------------------------------------- streams */

static void dirty_mark(st_state *s, vr_stream stream)
{
    for (size_t i = 0; i < s->ndirty; i++)
        if (s->dirty[i] == stream)
            return;
    if (s->ndirty == s->capdirty) {
        size_t ncap = s->capdirty ? s->capdirty * 2 : 4;
        vr_stream *nd = realloc(s->dirty, ncap * sizeof *nd);
        if (!nd) { /* cannot remember it: forget them all after waiting for the device */
            s->ndirty = 0;
            return;
        }
        s->dirty = nd;
        s->capdirty = ncap;
    }
    s->dirty[s->ndirty++] = stream;
}

/* Waits for every stream other than t that evicted units since its last wait (their work first). */
static void fence_others(vr_alloc *a, vr_stream t)
{
    st_state *s = S(a);
    for (size_t i = 0; i < s->ndirty;) {
        if (s->dirty[i] == t) {
            i++;
            continue;
        }
        vr_event *ev = NULL;
        if (vr_event_record(a->dev, s->dirty[i], &ev) == VR_OK)
            vr_event_sync(a->dev, ev);
        else
            vr_device_synchronize(a->dev);
        s->dirty[i] = s->dirty[--s->ndirty];
    }
}

/* ---------------------------------------------------------------- blocks on mappings */

/* Gives a cached block's spans back and deletes it; its mapping stays, idle. */
static void evict(vr_alloc *a, sext *e)
{
    st_state *s = S(a);
    vr_segment *seg = e->seg;
    smap *m = e->m;
    lru_remove(s, e);
    vr_block *b = seg->head;
    if (!b->pool->untreed)
        vra_tree_remove(&b->pool->blocks, b);
    for (size_t i = 0; i < e->n; i++) {
        st_span_del(e->p[i].g, e->p[i].lo);
        st_reclass(s, e->p[i].g);
    }
    m->user = NULL;
    m->stream = seg->stream;
    st_idle_push(s, m);
    st_cand_insert(s, m);
    dirty_mark(s, seg->stream);
    vra_pool_dec(a->stats.segment, seg->pool, 1);
    vra_record(a, VRA_SEGMENT_UNMAP, seg->base, seg->size, seg->stream);
    vra_block_delete(a, b);
    vra_segment_delete(a, seg);
    free(e);
}

/* The pieces of a block of u units on m (its prefix); returns how many. */
static size_t prefix_pieces(const st_state *s, const smap *m, size_t u, piece *out)
{
    size_t n = 0;
    for (size_t left = u; left; n++) {
        uint32_t lo = n ? 0 : m->off;
        uint32_t hi = left < s->nb - lo ? lo + (uint32_t)left : s->nb;
        if (out)
            out[n] = (piece){m->g[n], lo, hi};
        left -= hi - lo;
    }
    return n;
}

/* ---------------------------------------------------------------- keys of large requests */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* The key of a large request of u units after the sizes in hist (set before looking for a mapping). */
static void pred_key(st_state *s, size_t u)
{
    uint64_t h = mix(0, u);
    for (int i = 0; i < ST_HIST; i++)
        h = mix(h, s->hist[i]);
    s->key = h ? h : 1;
}

/* m serves the request being served (of u units): it remembers the request's key unless it is only lent to
 * it (see attach); u goes into the history. */
static void learn(st_state *s, smap *m, size_t u, bool lent)
{
    if (!lent)
        m->key = s->key;
    memmove(&s->hist[1], &s->hist[0], (ST_HIST - 1) * sizeof s->hist[0]);
    s->hist[0] = u;
    st_period_learn(s, u, m);
}

/* Puts a new block on m, whose prefix lies on free units: segment, spans, statistics. The block is
 * req->size (large) or the whole granule (a small-pool segment, split by the caller). lend: m is lent to
 * the request (a larger mapping keeps its size and key). */
static vr_status attach(vr_alloc *a, vra_request *req, smap *m, bool lend)
{
    st_state *s = S(a);
    size_t u = m->small ? s->nb : req->size / UNIT;
    size_t n = prefix_pieces(s, m, u, NULL);
    sext *e = calloc(1, sizeof *e + n * sizeof(piece));
    if (!e)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    e->n = prefix_pieces(s, m, u, e->p);
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        ok &= st_span_reserve(e->p[i].g);
    vr_segment *seg = ok ? vra_segment_new(a, m->va + (size_t)m->off * UNIT, u * UNIT, req->stream, req->pool,
                                           false, true) : NULL;
    if (!seg) {
        free(e);
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    }
    for (size_t i = 0; i < n; i++) {
        sgran *g = e->p[i].g;
        if (!g->nused)
            st_move_reserved(a, g, req->pool->stat);
        st_span_add(g, e->p[i].lo, e->p[i].hi, e);
        st_reclass(s, g);
    }
    e->m = m;
    e->seg = seg;
    seg->pdata = e;
    st_idle_remove(s, m);
    st_cand_remove(s, m);
    m->user = e;
    m->stream = req->stream;
    m->tick = ++s->tick;
    bool lent = lend && u < m->bsize; /* lent to a smaller block: it keeps its size and key */
    if (!lent)
        m->bsize = u;
    if (!m->small)
        learn(s, m, u, lent);
    vra_pool_inc(a->stats.segment, req->pool, 1);
    vra_record(a, VRA_SEGMENT_MAP, seg->base, seg->size, req->stream);
    req->block = seg->head;
    return VR_OK;
}

/* Would the first u units of m use some units of one granule twice? A new mapping may put the tail of its block
 * at the start of the granule whose end holds the block's head (below the head's units); a larger block put on
 * the mapping later (lent, or up to its capacity) reaches further into that last granule, over its own head. */
static bool self_overlap(st_state *s, const smap *m, size_t u)
{
    uint64_t mark = ++s->epoch;
    bool twice = false;
    size_t n = prefix_pieces(s, m, u, NULL);
    for (size_t i = 0; i < n; i++) {
        twice |= m->g[i]->mark == mark;
        m->g[i]->mark = mark;
    }
    piece *pc = twice ? malloc(n * sizeof *pc) : NULL;
    if (!pc) /* no granule twice (or no memory to look closer: refused) */
        return twice;
    prefix_pieces(s, m, u, pc);
    bool over = false;
    for (size_t i = 0; i < n && !over; i++)
        for (size_t j = i + 1; j < n && !over; j++)
            over = pc[j].g == pc[i].g && pc[j].lo < pc[i].hi && pc[i].lo < pc[j].hi;
    free(pc);
    return over;
}

/* What putting u units on m would evict: SIZE_MAX when a live block uses some of them, or when they would use
 * some units of a granule twice (self_overlap), else the bytes of the cached blocks other than m's own that do.
 * With evict_them, evicts them (and m's own); its callers have asked first (take) or picked m knowing (patch). */
static size_t conflicts(vr_alloc *a, smap *m, size_t u, bool evict_them)
{
    st_state *s = S(a);
    if (!evict_them && self_overlap(s, m, u))
        return SIZE_MAX;
    uint64_t mark = ++s->epoch;
    size_t cost = 0, nown = 0;
    sext *owners[64];
    bool again = false;
    size_t left = u;
    for (size_t i = 0; left; i++) {
        const sgran *g = m->g[i];
        uint32_t lo = i ? 0 : m->off;
        uint32_t hi = left < s->nb - lo ? lo + (uint32_t)left : s->nb;
        left -= hi - lo;
        for (uint32_t j = 0; j < g->nused && g->used[j].lo < hi; j++) {
            sext *o = g->used[j].owner;
            if (g->used[j].hi <= lo || o->mark == mark)
                continue;
            if (!o->cached)
                return SIZE_MAX;
            o->mark = mark;
            if (o != m->user)
                cost += o->seg->size;
            if (evict_them) {
                if (nown < 64)
                    owners[nown++] = o;
                else
                    again = true;
            }
        }
    }
    for (size_t i = 0; i < nown; i++)
        evict(a, owners[i]);
    if (again) /* more than 64 owners: the rest now */
        conflicts(a, m, u, true);
    return cost;
}

/* ---------------------------------------------------------------- new mappings */

/* Where u units (u > 0) would go with the granules free now. */
static plan make_plan(const st_state *s, bool small, size_t u)
{
    plan p = {0};
    uint32_t nb = s->nb;
    if (small) { /* a small-pool segment: one whole fresh granule */
        p.nfresh = 1;
        p.e = nb;
        return p;
    }
    if (u < nb) {
        sgran *g = st_find_ge(s, ST_HEADS, (uint32_t)u);
        if (g) { /* right after what is used at the end of g */
            p.head = g;
            p.hlo = nb - st_free_end(s, g);
            p.hhi = p.hlo + (uint32_t)u;
            return p;
        }
        if ((g = st_find_ge(s, ST_TAILS, (uint32_t)u))) {
            p.head = g;
            p.hlo = 0;
            p.hhi = (uint32_t)u;
            return p;
        }
    }
    sgran *h = st_find_lt(s, ST_HEADS, u < nb ? (uint32_t)u : nb);
    size_t rest = u;
    if (h) {
        p.head = h;
        p.hlo = nb - st_free_end(s, h);
        p.hhi = nb;
        rest -= p.hhi - p.hlo;
    }
    p.k = rest / nb;
    p.e = (uint32_t)(rest % nb);
    if (p.e)
        p.tail = st_find_ge(s, ST_TAILS, p.e);
    p.nfresh = p.k + (p.e && !p.tail);
    return p;
}

/* Takes n free granules, the most recently emptied first, none marked skip (there must be n others). */
static void take_fresh(st_state *s, sgran **out, size_t n, uint64_t skip)
{
    size_t k = 0;
    for (sgran *g = s->freelist, *next; g && k < n; g = next) {
        next = g->link[ST_FREE].next;
        if (skip && g->mark == skip)
            continue;
        out[k++] = g;
        st_unlink(s, g, ST_FREE);
    }
}

/* Maps the plan's granules at a new range and puts the block on it. */
static vr_status execute(vr_alloc *a, vra_request *req, const plan *p, bool small)
{
    st_state *s = S(a);
    size_t n = (p->head ? 1 : 0) + p->k + (p->e ? 1 : 0);
    sgran **g = malloc(n * sizeof *g);
    if (!g)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory for bookkeeping");
    size_t i = 0;
    if (p->head)
        g[i++] = p->head;
    take_fresh(s, &g[i], p->nfresh, 0);
    if (p->e && p->tail) { /* the tail goes last, after the fresh ones */
        g[i + p->k] = p->tail;
    }
    smap *m = NULL;
    vr_status st = st_map_new(a, g, n, p->head ? p->hlo : 0, small, &m);
    for (i = 0; i < n; i++) /* fresh granules back to FREE until the block's spans are added */
        st_reclass(s, g[i]);
    free(g);
    if (st == VR_OK && (st = attach(a, req, m, false)) != VR_OK) {
        st_idle_push(s, m);
        st_cand_insert(s, m);
    }
    return st;
}

static vr_status grow_new(vr_alloc *a, vra_request *req, bool small, size_t u)
{
    st_state *s = S(a);
    st_stale_reap(a, false);
    plan p = make_plan(s, small, u);
    while (p.nfresh > s->nfree && s->oldest) {
        evict(a, s->oldest);
        p = make_plan(s, small, u);
    }
    req->alloc_size = p.nfresh * s->G;
    if (p.nfresh > s->nfree) {
        vr_status st = st_create_granules(a, p.nfresh - s->nfree, req->pool->stat);
        if (st != VR_OK)
            return st;
    }
    fence_others(a, req->stream);
    vr_status st = execute(a, req, &p, small);
    size_t keep = s->nall * IDLE_PER_HELD;
    if (keep < IDLE_MIN / s->G)
        keep = IDLE_MIN / s->G;
    if (s->idle_granules > keep)
        st_drop_idle(a, keep - keep / 8, false);
    return st;
}

/* A small-pool request: an idle small-pool mapping whose granule is free, else a new one. A large request
 * found no mapping of its size, or one lent, to take or patch (find_free): a new one. */
static vr_status grow(vr_alloc *a, vra_request *req)
{
    st_state *s = S(a);
    bool small = req->pool->is_small;
    if (small) {
        int k = 0;
        for (smap *m = s->idle_newest; m && k < SMALL_SCAN; m = m->iprev)
            if (m->small && ++k && !m->g[0]->nused) {
                req->alloc_size = 0;
                fence_others(a, req->stream);
                return attach(a, req, m, false);
            }
    }
    return grow_new(a, req, small, req->size / UNIT);
}

/* ---------------------------------------------------------------- the other decisions */

/* Tries to serve a large request of u units on m (idle or with a cached block): its own cached block of
 * exactly the size on the request's stream, handed out as it is; else, when no live block uses the first u
 * units of m, a new block there (the cached blocks on those units evicted). NULL if m cannot serve it.
 * lend: m is a larger mapping lent to the request. */
static vr_block *take(vr_alloc *a, vra_request *req, smap *m, size_t u, bool lend)
{
    st_state *s = S(a);
    sext *e = m->user;
    if (m->small || u > m->cap || (e && (!e->cached || e->seg->stream != req->stream)))
        return NULL; /* another stream's cached block stays its own, as in pytorch */
    if (e && e->seg->size == req->size) {
        vr_block *b = e->seg->head; /* large: in no tree (untreed) */
        lru_remove(s, e);
        st_cand_remove(s, m);
        m->tick = ++s->tick;
        learn(s, m, u, lend && u < m->bsize);
        return b;
    }
    if (conflicts(a, m, u, false) == SIZE_MAX)
        return NULL;
    conflicts(a, m, u, true);
    if (m->user)
        evict(a, m->user);
    fence_others(a, req->stream);
    if (attach(a, req, m, lend) != VR_OK)
        return NULL;
    return req->block;
}

/* Indexes of the granules of m's first u units that a live block uses (into idx, when not NULL; at most
 * max of them counted: more means too many); their count. */
static size_t live_granules(st_state *s, const smap *m, size_t u, size_t *idx, size_t max)
{
    size_t n = 0, left = u;
    for (size_t i = 0; left && n <= max; i++) {
        const sgran *g = m->g[i];
        uint32_t lo = i ? 0 : m->off;
        uint32_t hi = left < s->nb - lo ? lo + (uint32_t)left : s->nb;
        left -= hi - lo;
        for (uint32_t j = 0; j < g->nused && g->used[j].lo < hi; j++)
            if (g->used[j].hi > lo && !g->used[j].owner->cached) {
                if (idx && n < max)
                    idx[n] = i;
                n++;
                break;
            }
    }
    return n;
}

/* Whether m is kept for requests of its own size, not lent: one was served lately (ST_LEND_KEEP large requests,
 * or the period). */
static bool kept(const st_state *s, const smap *m) { return st_period_asked_within(s, m->bsize, ST_LEND_KEEP); }

/* The largest capacity (units) of a mapping lent to a request of u units: P% more. */
static size_t lend_cap(const st_state *s, size_t u) { return u + u * s->borrow / 100; }

/* The first event recorded on m's stream after its last block was freed (work queued on its range came
 * before it), or NULL when none has been recorded since. */
static struct sepoch *event_after_free(st_state *s, const smap *m)
{
    for (size_t i = 0; i < s->nep; i++)
        if (s->ep[i].seq >= m->freed && s->ep[i].stream == m->stream)
            return &s->ep[i];
    return NULL;
}

/* Returns once the work queued on m's range (before its last block was freed) has completed: the first event
 * recorded on its stream after that free, when it has completed (no wait) or else waited for; without one
 * (freed since the last), an event recorded now is waited for (all the stream's work). */
static void wait_unused(vr_alloc *a, const smap *m)
{
    st_state *s = S(a);
    for (size_t i = 0; i < s->nep; i++) {
        struct sepoch *p = &s->ep[i];
        if (p->seq < m->freed || p->stream != m->stream)
            continue;
        if (vr_event_query(a->dev, p->ev))
            return;
        vr_event_sync(a->dev, p->ev); /* frees it */
        memmove(p, p + 1, (s->nep - i - 1) * sizeof *p);
        s->nep--;
        return;
    }
    vr_event *ev = NULL;
    if (vr_event_record(a->dev, m->stream, &ev) == VR_OK)
        vr_event_sync(a->dev, ev);
    else
        vr_device_synchronize(a->dev);
}

/* Counts a large free; every ST_EPOCH_FREES of them an event on its stream (the oldest kept dropped). */
static void epoch_free(vr_alloc *a, smap *m, vr_stream stream)
{
    st_state *s = S(a);
    m->freed = ++s->frees;
    if (s->frees % ST_EPOCH_FREES)
        return;
    if (s->nep == ST_EPOCHS) {
        vr_event_destroy(a->dev, s->ep[0].ev);
        memmove(&s->ep[0], &s->ep[1], (ST_EPOCHS - 1) * sizeof s->ep[0]);
        s->nep--;
    }
    vr_event *ev = NULL;
    if (vr_event_record(a->dev, stream, &ev) == VR_OK)
        s->ep[s->nep++] = (struct sepoch){ev, stream, s->frees};
}

/* Large, no mapping of the size free: of the mappings of the size (up to PATCH_LARGER times it), the one with
 * the fewest granules under live blocks, when they are few: those granules are replaced by free ones in its
 * range, an unmap and a map each once the work queued on its last stream has completed (wait_unused), far
 * cheaper than a new mapping of the whole size. Without lending: idle mappings by size, at most 1 in PATCH_DIV
 * of their granules replaced. With lending: idle or cached ones (this stream's) by capacity, at most 1 in
 * PATCH_DIV_LEND, only those whose queued work has completed (no host wait); one with no granule under a live
 * block is taken as it is (lent when of another size). */
static vr_block *patch(vr_alloc *a, vra_request *req, size_t u, bool lend)
{
    st_state *s = S(a);
    st_iter it = st_cand_from(s, lend ? ST_BY_CAP : ST_BY_SIZE, u);
    size_t div = lend ? PATCH_DIV_LEND : PATCH_DIV;
    smap *best = NULL, *m;
    struct sepoch *best_ev = NULL; /* with lending: the event after best's last free */
    size_t nbest = SIZE_MAX;
    for (size_t i = 0; i < 4 * CAND_SCAN && (m = st_cand_next(&it, PATCH_LARGER * u)); i++) {
        size_t ng = prefix_pieces(s, m, u, NULL);
        if (u > m->cap || ng < PATCH_MIN || (m->user && (!lend || m->user->seg->stream != req->stream)) ||
            (lend && m->bsize != u && kept(s, m)) || self_overlap(s, m, u))
            continue;
        struct sepoch *ev = lend ? event_after_free(s, m) : NULL;
        if (lend && !ev)
            continue;
        size_t nl = live_granules(s, m, u, NULL, ng / div);
        if (nl <= ng / div && (nl < nbest || (nl == nbest && m->key == s->key))) {
            best = m;
            best_ev = ev;
            nbest = nl;
        }
    }
    if (lend && best && !vr_event_query(a->dev, best_ev->ev))
        return NULL; /* its range may still be in use: a new mapping rather than a host wait */
    if (lend && best && !nbest) /* missed by the lending scan (CAND_SCAN): taken, within its P% */
        return best->cap <= lend_cap(s, u) ? take(a, req, best, u, best->bsize != u) : NULL;
    if (!best || !nbest)
        return NULL;
    m = best;
    if (m->user) /* a cached block of this stream (lending): given back first */
        evict(a, m->user);
    size_t *idx = malloc(nbest * sizeof *idx);
    sgran **g = malloc(nbest * sizeof *g);
    if (!idx || !g)
        goto fail;
    live_granules(s, m, u, idx, nbest);
    uint64_t mark;
    size_t own_free;
    for (;;) { /* free granules other than m's own for the replacements: cached blocks evicted, oldest first */
        mark = ++s->epoch;
        own_free = 0;
        for (size_t i = 0; i < m->n; i++)
            if (m->g[i]->mark != mark) {
                m->g[i]->mark = mark;
                own_free += !m->g[i]->nused;
            }
        if (s->nfree - own_free >= nbest || !s->oldest)
            break;
        evict(a, s->oldest);
    }
    if (s->nfree - own_free < nbest &&
        st_create_granules(a, nbest - (s->nfree - own_free), req->pool->stat) != VR_OK)
        goto fail;
    take_fresh(s, g, nbest, mark);
    wait_unused(a, m);
    st_idle_remove(s, m);
    st_cand_remove(s, m); /* its cap may change (st_remap failing): out of the index meanwhile */
    vr_status st = VR_OK;
    for (size_t r = 0, run; r < nbest && st == VR_OK; r += run) {
        for (run = 1; r + run < nbest && idx[r + run] == idx[r] + run;)
            run++;
        st = st_remap(a, m, idx[r], run, &g[r]);
    }
    for (size_t i = 0; i < nbest; i++) /* back to FREE until the block's spans are added */
        st_reclass(s, g[i]);
    st_idle_push(s, m);
    st_cand_insert(s, m);
    if (st != VR_OK || u > m->cap)
        goto fail;
    free(idx);
    free(g);
    conflicts(a, m, u, true);
    fence_others(a, req->stream);
    return attach(a, req, m, false) == VR_OK ? req->block : NULL;
fail:
    free(idx);
    free(g);
    return NULL;
}

/* Large: the mappings of exactly the size, first those last used by a request of the same key (least
 * recently used first: a step's requests of that key take them in turn), then the others (most recently
 * used first); failing those, one lent: the smallest larger mapping (up to s->borrow percent larger, best
 * fit by cap) whose first u units are free of live blocks; failing that, a patch. Small: best fit, as
 * pytorch. */
static vr_block *find_free(vr_alloc *a, vra_request *req)
{
    st_state *s = S(a);
    vra_tree *t = &req->pool->blocks;
    if (req->pool->is_small) {
        vr_block key = {.stream = req->stream, .size = req->size, .addr = 0};
        vr_block *b = vra_tree_lower_bound(t, &key);
        if (!b || b->stream != req->stream)
            return NULL;
        vra_tree_remove(t, b);
        lru_remove(s, b->seg->pdata);
        return b;
    }
    size_t u = req->size / UNIT;
    vr_block *b = NULL;
    pred_key(s, u);
    smap *pm = st_period_predict(s, u);
    if (pm && !pm->stale && (b = take(a, req, pm, u, pm->bsize != u)))
        return b;
    for (int pass = 0; pass < 2; pass++) { /* a take that fails changes no candidate */
        st_iter it = st_cand_from(s, ST_BY_SIZE, pass ? u + 1 : u);
        smap *m;
        for (size_t k = 0; k < CAND_SCAN && (m = pass ? st_cand_prev(&it, u) : st_cand_next(&it, u)); k++)
            if ((m->key == s->key) == !pass && (b = take(a, req, m, u, false)))
                return b;
    }
    bool lend = s->borrow != 0 && st_period_now(s) < LEND_STEADY;
    if (lend) {
        st_iter it = st_cand_from(s, ST_BY_CAP, u);
        smap *m;
        for (size_t k = 0; k < CAND_SCAN && (m = st_cand_next(&it, lend_cap(s, u)));) {
            if (m->bsize == u || kept(s, m)) /* looked at above; kept for its own size */
                continue;
            k++;
            if ((b = take(a, req, m, u, true)))
                return b;
        }
    }
    return patch(a, req, u, lend);
}

static bool should_split(const vr_alloc *a, const vr_block *b, size_t size)
{
    (void)a;
    return b->pool->is_small && b->size - size >= VRA_MIN_BLOCK;
}

static void on_free(vr_alloc *a, vr_block *b)
{
    if (vra_block_is_split(b))
        return;
    sext *e = b->seg->pdata;
    lru_append(S(a), e);
    st_cand_insert(S(a), e->m);
    if (!e->m->small)
        epoch_free(a, e->m, b->seg->stream);
}

/* Unmaps the granules of live blocks' mappings that their blocks do not use (so that they can go). */
static void trim_live(vr_alloc *a)
{
    st_state *s = S(a);
    for (smap *m = s->maps; m; m = m->anext) {
        if (!m->user || m->user->n == m->n)
            continue;
        size_t keep = m->user->n, cut = m->n - keep;
        vr_device_phys_unmap(a->dev, (void *)(m->va + keep * s->G), cut * s->G);
        a->stats.num_device_free += (int64_t)cut;
        for (size_t i = keep; i < m->n; i++)
            m->g[i]->nmaps--;
        st_give_tail(a, m, keep);
    }
}

static void release_cached(vr_alloc *a)
{
    st_state *s = S(a);
    while (s->oldest)
        evict(a, s->oldest);
    st_drop_idle(a, 0, true);
    st_stale_reap(a, true);
    trim_live(a);
    s->ndirty = 0; /* everything was waited for */
    for (sgran *g = s->freelist, *next; g; g = next) {
        next = g->link[ST_FREE].next;
        if (!g->nmaps)
            st_release_granule(a, g);
    }
}

static void fini(vr_alloc *a);

static vr_status init(vr_alloc *a)
{
    size_t G = vr_device_vm_granularity(a->dev), want = (size_t)a->cfg.stitch_granule;
    if (want && G && want > 512 * G)
        return vr_error(VR_ERR_INVALID, "vr_alloc_config.stitch_granule: %zu bytes: at most 512 times %s's "
                        "granularity (%zu bytes)", want, vr_device_name(a->dev), G);
    if (want && G)
        G = (want + G - 1) / G * G; /* a whole number of the device's granules */
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
    s->borrow = a->cfg.stitch_lend_pct;
    size_t words = (s->nb + 64) / 64;
    for (int w = 0; w < 2; w++) {
        s->set[w].first = calloc(s->nb + 1, sizeof *s->set[w].first);
        s->set[w].bits = calloc(words, sizeof *s->set[w].bits);
    }
    a->pstate = s;
    a->large.untreed = true; /* its cached blocks are found by their mappings (find_free), never in the tree */
    if (!s->set[0].first || !s->set[1].first || !s->set[0].bits || !s->set[1].bits || st_period_init(s) != VR_OK) {
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
    for (size_t i = 0; i < s->nep; i++)
        vr_event_destroy(a->dev, s->ep[i].ev);
    st_period_fini(s); /* first: the mappings unmapped below need not be forgotten one by one */
    st_space_fini(a);
    for (size_t i = 0; i < s->nall; i++) {
        free(s->all[i]->used);
        free(s->all[i]);
    }
    free(s->all);
    free(s->dirty);
    for (int w = 0; w < 2; w++) {
        free(s->set[w].first);
        free(s->set[w].bits);
    }
    free(s);
    a->pstate = NULL;
}

/* ---------------------------------------------------------------- check */

/* Recounts every granule's spans from the segments' pieces, checks the lists, the LRU and the mappings,
 * and sums reserved bytes per pool. */
static vr_status check(vr_alloc *a, int64_t reserved[VR_POOL_COUNT])
{
    st_state *s = S(a);
    size_t units = 0, spans = 0, cached = 0;
    for (const vr_segment *seg = a->segs; seg; seg = seg->lnext) {
        const sext *e = seg->pdata;
        if (!e || e->seg != seg || !e->m || e->m->user != e)
            return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx has no pieces", (unsigned long)seg->base);
        if (e->n > e->m->n || e->n != prefix_pieces(s, e->m, seg->size / UNIT, NULL))
            return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx: not a prefix of its mapping",
                            (unsigned long)seg->base);
        size_t left = seg->size / UNIT;
        for (size_t i = 0; i < e->n; i++) {
            piece w = {e->m->g[i], i ? 0 : e->m->off, 0};
            w.hi = left < s->nb - w.lo ? w.lo + (uint32_t)left : s->nb;
            left -= w.hi - w.lo;
            const sgran *g = e->p[i].g;
            bool found = false;
            for (uint32_t j = 0; j < g->nused; j++)
                found |= g->used[j].lo == e->p[i].lo && g->used[j].hi == e->p[i].hi && g->used[j].owner == e;
            if (!found || e->p[i].lo >= e->p[i].hi || e->p[i].hi > s->nb)
                return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx: piece %zu is not a span of its granule",
                                (unsigned long)seg->base, i);
            if (w.g != g || w.lo != e->p[i].lo || w.hi != e->p[i].hi)
                return vr_error(VR_ERR_INVALID, "check: stitch segment %#lx: piece %zu is not its mapping's",
                                (unsigned long)seg->base, i);
            units += e->p[i].hi - e->p[i].lo;
            spans++;
        }
        if (seg->base != e->m->va + (size_t)e->m->off * UNIT)
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
        uint32_t fe = st_free_end(s, g), fs = st_free_start(s, g);
        bool want_free = !g->nused, want_head = g->nused && fe, want_tail = g->nused && fs;
        if ((g->link[ST_FREE].bucket >= 0) != want_free || (g->link[ST_HEADS].bucket >= 0) != want_head ||
            (g->link[ST_TAILS].bucket >= 0) != want_tail || (want_head && g->link[ST_HEADS].bucket != (int)fe) ||
            (want_tail && g->link[ST_TAILS].bucket != (int)fs) || g->idx != i)
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
    return st_space_check(a);
}

const vr_policy vra_policy_stitch = {
    .name = "stitch",
    .summary = "physical granules stitched into virtual ranges that outlive their blocks; a block's tail shares a "
               "granule with another's head",
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
