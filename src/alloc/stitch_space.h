/* Policy "stitch", inside: the physical granules and what uses them, the virtual address space, and the
 * mappings of granules at virtual ranges (stitch_space.c), the candidates' indexes (stitch_cand.c). The policy's decisions are in stitch.c, which
 * states the whole design at its top. */
#ifndef VRAM_ALLOC_STITCH_SPACE_H
#define VRAM_ALLOC_STITCH_SPACE_H

#include "alloc/policy.h"

#define ST_UNIT VRA_MIN_BLOCK
#define ST_EPOCHS 16              /* events kept of those recorded every ST_EPOCH_FREES large frees */
#define ST_EPOCH_FREES 32
#define ST_LEND_KEEP 2048         /* a mapping whose size was asked within this many large requests is not lent */
#define ST_HIST 2                 /* large request sizes before a request in its key (4 or 1: more calls) */

typedef struct sgran sgran;
typedef struct sext sext;
typedef struct smap smap;
typedef struct sbucket sbucket;

/* Intrusive doubly linked lists with a first and a last element, through a pair of fields (prev, next) of the
 * elements: the LRU of cached blocks, the LRU of idle mappings, every mapping. */
#define ST_LIST_APPEND(first, last, x, prev, next) \
    do {                                           \
        (x)->next = NULL;                          \
        (x)->prev = (last);                        \
        if (last) (last)->next = (x);              \
        else (first) = (x);                        \
        (last) = (x);                              \
    } while (0)
/* the mirror image of APPEND: first and last, prev and next exchanged */
#define ST_LIST_PREPEND(first, last, x, prev, next) ST_LIST_APPEND(last, first, x, next, prev)
#define ST_LIST_REMOVE(first, last, x, prev, next)             \
    do {                                                       \
        if ((x)->prev) (x)->prev->next = (x)->next;            \
        else (first) = (x)->next;                              \
        if ((x)->next) (x)->next->prev = (x)->prev;            \
        else (last) = (x)->prev;                               \
        (x)->prev = (x)->next = NULL;                          \
    } while (0)

typedef struct span {
    uint32_t lo, hi;              /* used units [lo, hi) of a granule */
    sext *owner;                  /* the block (live or cached) using them */
} span;

typedef struct glink {
    sgran *prev, *next;
    int bucket;                   /* -1: in no list */
} glink;

enum { ST_HEADS = 0, ST_TAILS = 1, ST_FREE = 2 };

struct sgran {
    vr_phys *ph;
    int pool;                     /* VR_POOL_SMALL / LARGE: where its reserved bytes count */
    span *used;                   /* sorted by lo, disjoint */
    uint32_t nused, capused;
    glink link[3];                /* HEADS (by free end), TAILS (by free start), FREE */
    size_t idx;                   /* in st->all */
    size_t nmaps;                 /* mappings (smap) that map it: it is released only at 0 */
    uint64_t mark;                /* scratch (st->epoch) */
};

typedef struct piece {
    sgran *g;
    uint32_t lo, hi;
} piece;

/* A virtual range of n granules mapped side by side. A block uses a prefix of it from unit `off` of
 * its first granule; the rest is mapped but unused (its units may serve other mappings). */
struct smap {
    uintptr_t va;
    size_t n;
    uint32_t off;                 /* units: where a block starts in g[0] */
    size_t cap;                   /* units from there to the end: n * nb - off */
    bool small;                   /* a small-pool segment's granule (off 0, n 1) */
    sext *user;                   /* the block on it (live or cached), or NULL: idle */
    vr_stream stream;             /* stream of its last user */
    uint64_t tick;                /* when a block was last put on it (st->tick) */
    size_t bsize;                 /* its size: units of the last block put on it that was not lent it */
    bool in_cand;                 /* among the candidates (large, idle or cached): st->bysize, st->bycap */
    sbucket *bk;                  /* the bucket of its size in st->bysize when it was last a candidate (or NULL) */
    bool in_bycap, bc_pending;    /* in st->bycap (by bc_cap, bc_tick); in st->bc_pending */
    size_t bc_cap;
    uint64_t bc_tick;
    smap *bc_prev, *bc_next;      /* st->bc_pending */
    smap *iprev, *inext;          /* LRU of idle mappings (oldest first) */
    bool in_idle;
    bool stale;                   /* in the stale list: being unmapped */
    uint64_t key;                 /* of the last request it served (st->key) */
    uint32_t nring;               /* entries of the period's ring naming it (stitch_period.c) */
    uint64_t freed;               /* st->frees when its last block was freed: work on it came before */
    smap *aprev, *anext;          /* every mapping */
    struct vchunk *chunk;         /* the address chunk its range comes from */
    sgran *g[];
};

/* A block's pieces (the pdata of every segment of this policy): a prefix of its mapping. */
struct sext {
    smap *m;
    vr_segment *seg;
    bool cached;                  /* in the LRU list: free and evictable */
    sext *lprev, *lnext;
    uint64_t mark;                /* scratch for the candidate search */
    size_t n;
    piece p[];
};

/* Free extents of a chunk of reserved address space, in granules from its base. */
typedef struct vext {
    size_t at, n;
} vext;

/* The candidates (large mappings with no live block: idle, or with a cached block) are in order by (bsize, tick)
 * and, with lending on, in a second index by (cap, tick) (tick does not change while a mapping is a candidate, nor
 * its size or capacity: patch takes it out around st_remap). A single sorted array of pointers moved half of
 * every candidate on each insert and remove, and its binary search read a mapping at every step.
 *
 * By size, the index has a bucket per size (sbucket): that size's candidates by tick, in an array. The buckets
 * are in an array by size (sbuckets); a bucket lives while some mapping points to it (smap.bk), so a step that
 * frees and takes the same mappings finds their buckets through them: an insert or remove touches the mapping,
 * its bucket and the bucket's array. A request looks up its own size there.
 *
 * By capacity, the lending and patch scans read every capacity in a range, mostly one mapping each (one bucket
 * each would be a pointer to follow per candidate): one sorted sequence cut into leaves of at most ST_LEAF
 * entries, each entry with its key and tick beside the mapping, in an array of leaves that holds each leaf's
 * first key (sindex): an insert or remove searches that array and one leaf and moves part of one leaf, and a
 * scan reads entries side by side. It is brought up to date only before it is read: the mappings whose
 * candidacy changed since are listed (st->bc_pending), so a step served by the period's mappings, which reads
 * it never, does not keep it. */
#define ST_LEAF 32
enum { ST_BY_SIZE = 0, ST_BY_CAP = 1 };

typedef struct scand {
    size_t key;                   /* m->cap (by capacity); m->bsize (by size: the bucket's) */
    uint64_t tick;                /* m->tick */
    smap *m;
} scand;

struct sbucket {
    size_t key;                   /* the size */
    size_t refs;                  /* mappings whose bk points to it: freed at 0 */
    scand *c;                     /* its candidates, by tick */
    uint32_t n, capn;
};

typedef struct sbuckets {
    struct skey {
        size_t key;
        sbucket *b;
    } *k;                         /* every bucket, by size (some may be empty) */
    size_t nk, capk;
} sbuckets;

typedef struct sleaf {
    uint32_t n;                   /* 1..ST_LEAF */
    scand c[ST_LEAF];
} sleaf;

typedef struct sindex {
    struct sfirst {
        size_t key;               /* of l->c[0] */
        uint64_t tick;
        sleaf *l;
    } *leaf;                      /* in order */
    size_t nleaf, capleaf;
} sindex;

/* A position in an index: by size, entry i of bucket k[l]; by capacity, entry i of leaf l. */
typedef struct st_iter {
    const struct st_state *s;
    int by;
    size_t l;
    uint32_t i;
} st_iter;

typedef struct vchunk {
    uintptr_t base;
    size_t n;                     /* granules */
    vext *fx;                     /* free extents, sorted by at, never adjacent */
    size_t nfx, capfx;
    size_t live;                  /* mappings in it */
    struct vchunk *next;
} vchunk;

/* Mappings being unmapped: their ranges stay mapped until an event recorded on their stream has
 * completed (work queued before may still use them); then they are unmapped without a device-wide wait. */
typedef struct stale {
    vr_stream stream;
    vr_event *ev;
    size_t nm;
    smap **m;
    struct stale *next;
} stale;

typedef struct st_state {
    size_t G;                     /* granule bytes */
    uint32_t nb;                  /* units per granule */
    sgran **all;
    size_t nall, capall;
    struct {
        sgran **first;            /* one list per bucket */
        uint64_t *bits;           /* non-empty buckets */
    } set[2];                     /* HEADS, TAILS */
    sgran *freelist;
    size_t nfree;
    sext *oldest, *newest;        /* LRU of cached blocks */
    sbuckets bysize;              /* the candidates by (bsize, tick) */
    sindex bycap;                 /* with lending on, the same by (cap, tick): mappings lent to a new size */
    smap *bc_pending;             /* mappings that may have to go into or out of bycap */
    size_t ncand;
    size_t borrow;                /* percent larger than a request a lent mapping may be (0: none) */
    smap *idle_oldest, *idle_newest; /* mappings with no block, least recently used first */
    size_t idle_granules;         /* granules mapped by idle mappings */
    smap *maps, *maps_last;       /* every mapping, newest first */
    size_t nmaps, mapped_granules;
    vchunk *chunks;
    stale *stale_first, *stale_last;
    size_t nstale;                /* mappings in the stale list */
    vr_stream *dirty;             /* streams whose blocks were evicted since their last fence */
    size_t ndirty, capdirty;
    uint64_t epoch;               /* for sext.mark */
    uint64_t tick;                /* blocks put on mappings so far */
    uint64_t frees;               /* large blocks freed so far */
    struct sepoch {
        vr_event *ev;             /* recorded on stream after the frees up to seq */
        vr_stream stream;
        uint64_t seq;
    } ep[ST_EPOCHS];              /* oldest first */
    size_t nep;
    uint64_t hist[ST_HIST];       /* units of the last large requests, newest first */
    uint64_t key;                 /* of the request being served: hash of hist and its units */
    struct st_period *per;        /* the large requests' period (stitch_period.c) */
} st_state;

static inline st_state *st_of(const vr_alloc *a) { return a->pstate; }
static inline uint32_t st_free_start(const st_state *s, const sgran *g) { return g->nused ? g->used[0].lo : s->nb; }
static inline uint32_t st_free_end(const st_state *s, const sgran *g)
{
    return g->nused ? s->nb - g->used[g->nused - 1].hi : s->nb;
}

/* --- granules: lists by free start / free end, spans --- */
void st_reclass(st_state *s, sgran *g);
void st_unlink(st_state *s, sgran *g, int which);
sgran *st_find_ge(const st_state *s, int which, uint32_t k);
sgran *st_find_lt(const st_state *s, int which, uint32_t k);
bool st_span_reserve(sgran *g);
void st_span_add(sgran *g, uint32_t lo, uint32_t hi, sext *owner);
void st_span_del(sgran *g, uint32_t lo);
void st_move_reserved(vr_alloc *a, sgran *g, int pool);
vr_status st_create_granules(vr_alloc *a, size_t count, int pool);
void st_release_granule(vr_alloc *a, sgran *g);

/* --- mappings --- */
/* Maps granules g[0..n) side by side at a fresh range (the driver calls of the policy). */
vr_status st_map_new(vr_alloc *a, sgran *const *g, size_t n, uint32_t off, bool small, smap **out);
/* Sends an idle mapping to the stale list (batched: one event per stream and call of st_drop_idle). */
void st_drop_idle(vr_alloc *a, size_t keep_granules, bool wait);
/* Unmaps stale mappings: every one, waiting (wait_all); else the oldest whose events have completed. */
void st_stale_reap(vr_alloc *a, bool wait_all);
/* Maps g[0..n) at granules [at, at + n) of m in place of the ones there (unmapped first; the caller has
 * made sure no work in flight uses that range). On failure m keeps only its granules before `at`. */
vr_status st_remap(vr_alloc *a, smap *m, size_t at, size_t n, sgran *const *g);
/* Forgets granules [keep, n) of a live mapping, already unmapped: their addresses go back to the chunk. */
void st_give_tail(vr_alloc *a, smap *m, size_t keep);
void st_idle_push(st_state *s, smap *m);
void st_idle_remove(st_state *s, smap *m);
void st_cand_insert(st_state *s, smap *m);
void st_cand_remove(st_state *s, smap *m);
/* m is unmapped: it lets go of its bucket. */
void st_cand_forget(st_state *s, smap *m);
/* Frees both indexes (st_space_fini). */
void st_cand_fini(st_state *s);
/* Both indexes in order, each candidate once (st_space_check). */
vr_status st_cand_check(st_state *s);
/* The position of the first candidate of index `by` (ST_BY_SIZE, ST_BY_CAP) whose key is at least key. From
 * there st_cand_next gives the candidates in order, by (key, tick), up to key max (then NULL), and st_cand_prev
 * those before it in reverse order down to key min (then NULL). */
st_iter st_cand_from(st_state *s, int by, size_t key);
smap *st_cand_next(st_iter *it, size_t max);
smap *st_cand_prev(st_iter *it, size_t min);
/* --- the period of the large requests (stitch_period.c) --- */
vr_status st_period_init(st_state *s);
void st_period_fini(st_state *s);
/* The mapping that served the large request one period before this one (of u units), when the requests
 * repeat with a period and that one was of u units too; NULL otherwise. */
smap *st_period_predict(const st_state *s, size_t u);
/* The period of the large requests now, in requests (0: none). */
uint64_t st_period_now(const st_state *s);
/* Whether a request of u units was served within the last `within` large requests, or the period's when
 * that is longer (the sizes of the last 8,192 remembered). */
bool st_period_asked_within(const st_state *s, size_t u, uint64_t within);
/* Request served: u units on m. */
void st_period_learn(st_state *s, size_t u, smap *m);
/* m is unmapped: forgotten. */
void st_period_forget(st_state *s, smap *m);

/* Frees what stitch_space holds (fini): mappings' bookkeeping, chunks without live mappings. */
void st_space_fini(vr_alloc *a);
vr_status st_space_check(vr_alloc *a);

#endif
