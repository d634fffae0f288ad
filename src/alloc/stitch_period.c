/* Policy "stitch": the period of a training loop's large requests (stitch_space.h, st_period_*).
 *
 * A training step asks the same large sizes in the same order step after step; the request one step (one
 * period) before this one was served by a mapping which, if every request since has been served as one
 * period before, has its units free now, as they were then. Keys of a few sizes (st->key) cannot say which
 * of a step's several requests of one key this is (ResNet-50 repeats its bottleneck blocks: 419 large
 * requests a step, 179 keys), and a step served on other mappings than the step before meets live blocks where
 * the step before did not: new mappings, which displace others in turn, and no step settles. So the policy
 * first tries the mapping of one period before.
 *
 * The period: every request's units and mapping go into a ring (ST_RING); each W-gram of sizes (ST_GRAM) is
 * hashed into a table of where it last ended, and the distance to that end is a candidate lag. Up to
 * ST_LAGS lags are tracked, each with its run: how many requests in a row equal the one a lag before. A
 * lag is the period once its run covers it (a whole period repeated) and at least ST_RUN_MIN requests;
 * of several, the one with the longest run (a step's lag outlasts the lag between a model's repeated
 * blocks, which breaks at the end of their stack). A workload whose sizes change every step (BERT with a
 * new sequence length) has no period, and nothing changes for it.
 *
 * It also remembers when each large size was last asked (up to 8,192 sizes; more and it starts over), so that
 * lending (stitch.c) leaves alone the mappings of sizes still in use: asked within a window or the period. */
#include <stdlib.h>
#include <string.h>

#include "alloc/stitch_space.h"

#define ST_RING 8192      /* large requests remembered: the longest period found */
#define ST_GRAM 8         /* sizes in a W-gram */
#define ST_RUN_MIN 16     /* a period repeats at least this many requests in a row */
#define ST_LAGS 8         /* lags tracked */
#define GRAM_SLOTS (2 * ST_RING)
#define ST_SIZES 16384    /* slots of the sizes asked (emptied when half full) */

/* A size asked (a large request's units, + 1: 0 is an empty slot) and when it was last asked (p->t). */
struct st_size {
    uint64_t u1, asked;
};

struct st_period {
    struct st_size sizes[ST_SIZES]; /* open addressing by mix(0, u) */
    size_t nsizes;
    size_t u[ST_RING];            /* units of request t at t % ST_RING */
    smap *m[ST_RING];             /* the mapping that served it, NULL once unmapped */
    uint64_t t;                   /* large requests served so far */
    struct {
        uint64_t lag, run;        /* lag 0: unused */
    } lag[ST_LAGS];
    struct {
        uint64_t h, end;          /* end: t + 1 of the request that ended the W-gram (0: empty) */
    } gram[GRAM_SLOTS];
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

vr_status st_period_init(st_state *s)
{
    s->per = calloc(1, sizeof *s->per);
    return s->per ? VR_OK : vr_error(VR_ERR_OOM, "allocator: out of host memory");
}

void st_period_fini(st_state *s)
{
    free(s->per);
    s->per = NULL;
}

/* The lag that is the period now (0: none). */
static uint64_t period(const struct st_period *p)
{
    uint64_t best = 0, run = 0;
    for (int i = 0; i < ST_LAGS; i++)
        if (p->lag[i].lag && p->lag[i].run >= p->lag[i].lag && p->lag[i].run >= ST_RUN_MIN && p->lag[i].run > run) {
            best = p->lag[i].lag;
            run = p->lag[i].run;
        }
    return best;
}

uint64_t st_period_now(const st_state *s) { return period(s->per); }

/* The slot of size u: its own, or the empty one where it goes. */
static struct st_size *size_slot(const struct st_period *p, size_t u)
{
    for (uint64_t h = mix(0, u);; h++) {
        const struct st_size *e = &p->sizes[h & (ST_SIZES - 1)];
        if (!e->u1 || e->u1 == (uint64_t)u + 1)
            return (struct st_size *)e;
    }
}

static void size_asked(struct st_period *p, size_t u)
{
    struct st_size *e = size_slot(p, u);
    if (!e->u1 && p->nsizes >= ST_SIZES / 2) { /* this many sizes: the oldest are forgotten with the rest */
        memset(p->sizes, 0, sizeof p->sizes);
        p->nsizes = 0;
        e = size_slot(p, u);
    }
    if (!e->u1) {
        e->u1 = (uint64_t)u + 1;
        p->nsizes++;
    }
    e->asked = p->t;
}

bool st_period_asked_within(const st_state *s, size_t u, uint64_t within)
{
    const struct st_period *p = s->per;
    const struct st_size *e = size_slot(p, u);
    uint64_t L = period(p);
    return e->u1 && p->t - e->asked < (L > within ? L : within);
}

smap *st_period_predict(const st_state *s, size_t u)
{
    const struct st_period *p = s->per;
    uint64_t L = period(p);
    if (!L || L > p->t)
        return NULL;
    size_t i = (size_t)((p->t - L) % ST_RING);
    return p->u[i] == u ? p->m[i] : NULL;
}

/* A lag seen at a W-gram's end: tracked (in the place of the shortest run not yet a period) unless it is. */
static void track(struct st_period *p, uint64_t lag)
{
    int k = -1;
    for (int i = 0; i < ST_LAGS; i++) {
        if (p->lag[i].lag == lag)
            return;
        bool free_slot = !p->lag[i].lag || p->lag[i].run < p->lag[i].lag;
        if (free_slot && (k < 0 || p->lag[i].run < p->lag[k].run))
            k = i;
    }
    if (k >= 0) {
        p->lag[k].lag = lag;
        p->lag[k].run = 0;
    }
}

void st_period_learn(st_state *s, size_t u, smap *m)
{
    struct st_period *p = s->per;
    size_asked(p, u);
    uint64_t t = p->t;
    for (int i = 0; i < ST_LAGS; i++) {
        uint64_t L = p->lag[i].lag;
        if (L && L <= t && L < ST_RING && p->u[(t - L) % ST_RING] == u)
            p->lag[i].run++;
        else if (L)
            p->lag[i].run = 0;
    }
    size_t at = (size_t)(t % ST_RING);
    if (p->m[at])
        p->m[at]->nring--;
    p->u[at] = u;
    p->m[at] = m;
    m->nring++;
    p->t = ++t;
    if (t < ST_GRAM)
        return;
    uint64_t h = 0;
    for (uint64_t j = t - ST_GRAM; j < t; j++)
        h = mix(h, p->u[j % ST_RING]);
    size_t slot = (size_t)(h % GRAM_SLOTS);
    uint64_t end = p->gram[slot].end;
    if (end && p->gram[slot].h == h && t - end < ST_RING - ST_GRAM) {
        bool same = true;
        for (uint64_t j = 0; j < ST_GRAM && same; j++)
            same = p->u[(t - 1 - j) % ST_RING] == p->u[(end - 1 - j) % ST_RING];
        if (same)
            track(p, t - end);
    }
    p->gram[slot].h = h;
    p->gram[slot].end = t;
}

void st_period_forget(st_state *s, smap *m)
{
    struct st_period *p = s->per;
    if (!p)
        return;
    for (size_t i = 0; i < ST_RING && m->nring; i++)
        if (p->m[i] == m) {
            p->m[i] = NULL;
            m->nring--;
        }
}
