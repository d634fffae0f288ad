/* Policy "stitch": large blocks at fresh virtual ranges stitched from
 * physical granules; a block's tail granule is shared with the next block's
 * head; exact-size reuse of cached mappings; eviction of cached blocks before
 * new physical memory; small pool in whole granules; empty_cache; OOM. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "alloc/alloc_helpers.h"
#include "alloc/stitch_space.h"

static void tail_and_head_share_a_granule(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "stitch", NULL);
    assert_string_equal(vr_alloc_policy(a), "stitch");
    char *p = xmalloc(a, 3 * MiB, 0); /* one full granule + a 1 MiB tail */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_LARGE), 4 * MiB);
    char *q = xmalloc(a, 3 * MiB, 0); /* 1 MiB head in p's tail granule + one full granule */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_LARGE), 6 * MiB);
    assert_int_equal(CUR(a, allocated_bytes, VR_POOL_LARGE), 6 * MiB);
    assert_int_equal((uintptr_t)q % (2 * MiB), 1 * MiB); /* it starts inside its first granule */
    assert_int_equal(CUR(a, segment, VR_POOL_LARGE), 2);
    char *r = xmalloc(a, 1536 * KiB, 0); /* under a granule: a fresh granule's start */
    char *t = xmalloc(a, 512 * KiB + 512, 0); /* small pool: a granule of its own */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_SMALL), 2 * MiB);
    char *u = xmalloc(a, 1024 * KiB + 512, 0); /* large; best fit in the end of r's granule is too small */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_LARGE), 10 * MiB);
    char *v = xmalloc(a, 512 * KiB + 512 * 2, 1); (void)v;
    xfree(a, t);
    xfree(a, u);
    xfree(a, r);
    xfree(a, p);
    xfree(a, q);
    vr_alloc_empty_cache(a);
    check_invariants(a);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_LARGE), 0);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_SMALL), 2 * MiB); /* v is live */
    xfree(a, v);
    vr_alloc_empty_cache(a);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
    assert_int_equal(CUR(a, segment, VR_POOL_ALL), 0);
    vr_device_mem m;
    vr_device_mem_info(d, &m);
    assert_int_equal(m.used_by_us, 0);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void same_size_reuses_the_mapping(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "stitch", NULL);
    char *p = xmalloc(a, 37 * MiB + 4096, 0);
    int64_t maps = stats_of(a).num_device_alloc;
    xfree(a, p);
    assert_ptr_equal(xmalloc(a, 37 * MiB + 4096, 0), p); /* same size, same stream: no device call */
    assert_int_equal(stats_of(a).num_device_alloc, maps);
    xfree(a, p);
    char *q = xmalloc(a, 37 * MiB + 4096, 1); /* another stream: not the cached one */
    assert_ptr_not_equal(q, p);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void evicts_cached_before_growing(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "stitch", NULL);
    void *p[8];
    for (int i = 0; i < 8; i++)
        p[i] = xmalloc(a, 5 * MiB, 0);
    int64_t res = CUR(a, reserved_bytes, VR_POOL_ALL);
    assert_int_equal(res, 40 * MiB); /* 8 x 5 MiB tile 20 granules exactly */
    for (int i = 0; i < 8; i += 2)
        xfree(a, p[i]); /* holes of 5 MiB between live blocks */
    /* Stitched from the holes' 8 full granules; their four 1 MiB ends cannot
     * join one block (a block has one partial granule at each end), so it
     * takes 2 new granules, not 20 MiB of new memory. */
    void *big = xmalloc(a, 20 * MiB, 0);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), res + 4 * (int64_t)MiB);
    xfree(a, big);
    /* 29 MiB: 14 whole granules (big's 10, evicted, and 4 new) and a 1 MiB
     * tail in the free start of one of the holes' granules. */
    void *huge = xmalloc(a, 29 * MiB, 0);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 52 * MiB);
    xfree(a, huge);
    for (int i = 1; i < 8; i += 2)
        xfree(a, p[i]);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void out_of_memory_and_retry(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:16MiB");
    vr_alloc *a = make_alloc(d, "stitch", NULL);
    void *p = xmalloc(a, 10 * MiB, 0);
    void *q = NULL;
    assert_int_equal(vr_alloc_malloc(a, 8 * MiB, 0, &q), VR_ERR_OOM);
    assert_non_null(strstr(vr_last_error(), "out of memory"));
    assert_int_equal(stats_of(a).num_ooms, 1);
    check_invariants(a);
    xfree(a, p);
    assert_non_null(q = xmalloc(a, 14 * MiB, 0)); /* the cached 10 MiB is evicted for it */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 14 * MiB);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static uint64_t calls_now(vr_device *d)
{
    vr_device_calls c;
    vr_device_get_calls(d, &c);
    return vr_device_calls_vm_total(&c);
}

/* An evicted block's mapping stays mapped (idle): a later request of its size takes it back with no
 * device call once its units are free again. */
static void evicted_mapping_is_reused(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "stitch", NULL);
    char *p = xmalloc(a, 64 * MiB, 0); /* 32 fresh granules */
    assert_int_equal(stats_of(a).num_device_alloc, 32);
    xfree(a, p);
    char *q = xmalloc(a, 60 * MiB, 0); /* no free granule: p is evicted, its units reused, its range kept */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 64 * MiB);
    assert_int_equal(stats_of(a).num_device_free, 0);
    assert_int_equal(stats_of(a).num_device_alloc, 32 + 30);
    xfree(a, q);
    uint64_t c0 = calls_now(d);
    char *p2 = xmalloc(a, 64 * MiB, 0); /* p's mapping again (q's cached block evicted): no device call */
    assert_ptr_equal(p2, p);
    assert_int_equal(calls_now(d), c0);
    xfree(a, p2);
    char *q2 = xmalloc(a, 60 * MiB, 0);
    assert_ptr_equal(q2, q);
    assert_int_equal(calls_now(d), c0);
    xfree(a, q2);
    /* pages evicted on stream 0 go to a block of stream 1 only after the host waited for stream 0 */
    vr_device_calls c;
    vr_device_get_calls(d, &c);
    uint64_t syncs = c.event_sync;
    char *s1 = xmalloc(a, 64 * MiB, 1);
    vr_device_get_calls(d, &c);
    assert_true(c.event_sync > syncs);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 64 * MiB);
    xfree(a, s1);
    vr_alloc_empty_cache(a); /* unmaps every idle mapping, releases every granule */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
    assert_int_equal(stats_of(a).num_device_free, stats_of(a).num_device_alloc);
    vr_device_mem m;
    vr_device_mem_info(d, &m);
    assert_int_equal(m.used_by_us, 0);
    check_invariants(a);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

/* ST_LEND_KEEP large requests of one other size (2 MiB): the sizes asked before are no longer recent, and
 * their mappings may be lent. */
static void forget_sizes(vr_alloc *a)
{
    for (int i = 0; i <= ST_LEND_KEEP; i++)
        xfree(a, xmalloc(a, 2 * MiB, 0));
}

/* With lending on (stitch_lend_pct 100), a request of a new size up to twice smaller than a free
 * mapping whose own size has not been asked lately is lent it (its prefix, no device call); the mapping
 * keeps its size: a request of that size takes it back, again with no device call. Right after, the
 * mapping is kept for its own size: a new size gets a mapping of its own. */
static void larger_mapping_is_lent(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_device_set_manual_events(d, true); /* no host wait either */
    vr_alloc_config cfg = {.stitch_lend_pct = 100};
    vr_alloc *a = make_alloc(d, "stitch", &cfg);
    char *p = xmalloc(a, 64 * MiB, 0);
    xfree(a, p);
    uint64_t c0 = 0;
    for (int i = 0; i < 3; i++) {
        forget_sizes(a);
        c0 = calls_now(d);
        char *q = xmalloc(a, 40 * MiB + 4096, 0); /* lent p's mapping */
        assert_ptr_equal(q, p);
        xfree(a, q);
        char *q2 = xmalloc(a, 40 * MiB + 4096, 0); /* the lent block itself, cached */
        assert_ptr_equal(q2, p);
        xfree(a, q2);
        char *p2 = xmalloc(a, 64 * MiB, 0); /* its own size: the mapping back */
        assert_ptr_equal(p2, p);
        xfree(a, p2);
        check_invariants(a);
        assert_int_equal(calls_now(d), c0);
    }
    char *n = xmalloc(a, 48 * MiB, 0); /* 64 MiB was just asked: its mapping is kept */
    assert_ptr_not_equal(n, p);
    assert_true(calls_now(d) > c0);
    xfree(a, n);
    check_invariants(a);
    assert_int_equal(stats_of(a).reserved_bytes[VR_POOL_ALL].peak, 64 * MiB);
    char *r = xmalloc(a, 31 * MiB, 0); /* over twice smaller: not lent, a mapping of its own */
    assert_true(calls_now(d) > c0);
    xfree(a, r);
    vr_alloc_empty_cache(a);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

/* The end of a run of steps: invariants checked, params freed, empty_cache gives every byte back, a and d gone;
 * peak reserved / allocated. */
static double finish_run(vr_device *d, vr_alloc *a, void *params)
{
    check_invariants(a);
    vr_alloc_stats st = stats_of(a);
    double ratio = (double)st.reserved_bytes[VR_POOL_ALL].peak / (double)st.allocated_bytes[VR_POOL_ALL].peak;
    xfree(a, params);
    vr_alloc_empty_cache(a);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
    vr_alloc_destroy(a);
    vr_device_close(d);
    return ratio;
}

/* A training-like loop (forward activations of several sizes, a backward that frees them in reverse
 * while taking gradients of other sizes through the same memory, an optimizer step) makes no device
 * call after its first steps, at the reserved bytes of the first step (up to `slack` more); with cfg. */
static void steady_steps(const vr_alloc_config *cfg, int64_t slack)
{
    vr_device *d = open_dev("meta:4GiB");
    vr_device_set_manual_events(d, true); /* an event that would have to complete would show */
    vr_alloc *a = make_alloc(d, "stitch", cfg);
    static const size_t act[] = {3 * MiB + 512, 12 * MiB, 5 * MiB + 4096, 7 * MiB, 12 * MiB, 1 * MiB + 512,
                                 33 * MiB, 3 * MiB + 512, 12 * MiB, 9 * MiB + 1024};
    static const size_t grad[] = {6 * MiB + 2048, 2 * MiB + 512, 11 * MiB, 4 * MiB, 17 * MiB + 512};
    enum { NA = sizeof act / sizeof *act, NG = sizeof grad / sizeof *grad, STEPS = 8 };
    void *params = xmalloc(a, 40 * MiB, 0);
    uint64_t per_step[STEPS];
    int64_t reserved_first = 0;
    for (int step = 0; step < STEPS; step++) {
        uint64_t c0 = calls_now(d);
        void *saved[NA], *gr[NG];
        for (int i = 0; i < NA; i++) {
            saved[i] = xmalloc(a, act[i], 0);
            void *tmp = xmalloc(a, act[i] / 2 + 512, 0); /* scratch of the layer */
            xfree(a, tmp);
        }
        for (int i = NA - 1, g = 0; i >= 0; i--) {
            void *dt = xmalloc(a, act[i] + 2 * MiB, 0); /* a gradient, not the activation's size */
            if (i % 2 == 0 && g < NG)
                gr[g] = xmalloc(a, grad[g], 0), g++;
            xfree(a, saved[i]);
            xfree(a, dt);
        }
        for (int g = 0; g < NG; g++)
            xfree(a, gr[g]);
        per_step[step] = calls_now(d) - c0;
        if (step == 0)
            reserved_first = stats_of(a).reserved_bytes[VR_POOL_ALL].peak;
    }
    print_message("device calls per step:");
    for (int step = 0; step < STEPS; step++)
        print_message(" %llu", (unsigned long long)per_step[step]);
    print_message("\n");
    assert_true(per_step[0] > 0);
    for (int step = STEPS - 3; step < STEPS; step++)
        assert_int_equal(per_step[step], 0);
    assert_true(stats_of(a).reserved_bytes[VR_POOL_ALL].peak >= reserved_first);
    assert_true(stats_of(a).reserved_bytes[VR_POOL_ALL].peak <= reserved_first + slack);
    finish_run(d, a, params);
}

static void steady_state_makes_no_device_calls(void **state)
{
    (void)state;
    steady_steps(NULL, 0);
}

/* The same with lending on: a step's sizes are asked again every step, so their mappings are kept for them,
 * not lent (lent, each would be missing when its own size came next). */
static void steady_state_with_lending(void **state)
{
    (void)state;
    vr_alloc_config cfg = {.stitch_lend_pct = 100};
    steady_steps(&cfg, 0);
    cfg.stitch_granule = 8 * MiB;
    steady_steps(&cfg, 8 * MiB); /* one granule more than the first step's peak */
}


/* A CNN-like step (ResNet-50's shape of requests): stages of identical blocks, each saving several activations of
 * its stage's sizes until the backward, with a scratch block between; the backward frees them in reverse, each
 * block's gradients of the same sizes. Many requests of one size a step, under the same key: without the period
 * (stitch_period.c) such a step never settled (ResNet-50's trace: ~216 device calls a step after 30 steps). Runs
 * `steps` steps with cfg (empty_cache after step empty_after, -1: never); each step's device calls in calls[];
 * returns peak reserved / allocated. */
static double cnn_steps(const vr_alloc_config *cfg, int steps, uint64_t *calls, int empty_after)
{
    vr_device *d = open_dev("meta:8GiB");
    vr_device_set_manual_events(d, true);
    vr_alloc *a = make_alloc(d, "stitch", cfg);
    static const struct { int blocks; size_t c; } stage[] = {{3, 4}, {4, 2}, {6, 1}, {3, 1}};
    enum { NS = sizeof stage / sizeof *stage, SAVED = 6, MAXB = 16 * SAVED };
    void *params = xmalloc(a, 100 * MiB, 0);
    for (int step = 0; step < steps; step++) {
        uint64_t c0 = calls_now(d);
        void *saved[MAXB];
        size_t size[MAXB];
        int n = 0;
        for (int st = 0; st < NS; st++)
            for (int b = 0; b < stage[st].blocks; b++)
                for (int k = 0; k < SAVED; k++) {
                    size_t sz = stage[st].c * (k % 3 == 2 ? 4 : 1) * 3 * MiB + (size_t)st * 512;
                    saved[n] = xmalloc(a, sz, 0);
                    size[n++] = sz;
                    if (k == 3)
                        xfree(a, xmalloc(a, sz / 2 + 1024, 0)); /* a kernel's workspace */
                }
        void *g = NULL;
        for (int i = n - 1; i >= 0; i--) {
            void *gi = xmalloc(a, size[i], 0); /* the gradient of saved[i] */
            xfree(a, saved[i]);
            if (g)
                xfree(a, g);
            g = gi;
        }
        xfree(a, g);
        vr_device_complete_events(d);
        if (step == empty_after) /* every mapping the period remembers is unmapped: it must forget them */
            vr_alloc_empty_cache(a);
        calls[step] = calls_now(d) - c0;
    }
    double ratio = finish_run(d, a, params);
    print_message("lending %u%%, granule %zu MiB (0: the device's): device calls per step:", cfg->stitch_lend_pct,
                  (size_t)cfg->stitch_granule / MiB);
    for (int i = 0; i < steps; i++)
        print_message(" %llu", (unsigned long long)calls[i]);
    print_message("; peak reserved / allocated %.4f\n", ratio);
    return ratio;
}

/* Such steps settle once their period is seen: no device call in the last steps, with the device's granule and
 * no lending (vram train's dynamic mode) and with libvram_torch's 8 MiB granules and lending. */
static void repeated_blocks_settle(void **state)
{
    (void)state;
    enum { STEPS = 12 };
    const vr_alloc_config cfgs[] = {{.stitch_lend_pct = 0}, {.stitch_lend_pct = 100, .stitch_granule = 8 * MiB}};
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        uint64_t calls[STEPS];
        double ratio = cnn_steps(&cfgs[c], STEPS, calls, -1);
        assert_true(calls[0] > 0);
        for (int i = STEPS - 4; i < STEPS; i++)
            assert_int_equal(calls[i], 0);
        assert_true(ratio <= 1.05);
    }
}

/* empty_cache in the middle of such a run unmaps every idle mapping the period remembers (stitch_period.c forgets
 * them: under AddressSanitizer a mapping used after its unmapping would show): the steps after it map again, then
 * settle again. */
static void period_after_empty_cache(void **state)
{
    (void)state;
    enum { STEPS = 14, EMPTY = 5 };
    const vr_alloc_config cfg = {.stitch_lend_pct = 100, .stitch_granule = 8 * MiB};
    uint64_t calls[STEPS];
    cnn_steps(&cfg, STEPS, calls, EMPTY);
    assert_int_equal(calls[EMPTY - 1], 0); /* settled before */
    assert_true(calls[EMPTY] > 0);         /* the unmapping itself */
    assert_true(calls[EMPTY + 1] > 0);     /* mapped again */
    for (int i = STEPS - 4; i < STEPS; i++)
        assert_int_equal(calls[i], 0);
}

/* A PyTorch-like training loop whose sequence length changes every step (4 lengths in turn): per layer
 * the same sizes (saved activations, scratch, gradients), a large logits block, parameter gradients freed
 * at the end of the step. Runs VARY_ROUNDS rounds of the 4 lengths on a fresh allocator with cfg; the
 * device calls (vm total) and host waits (event syncs) of each round, and peak reserved / allocated. */
enum { VARY_ROUNDS = 6 };

static double varying_steps(const vr_alloc_config *cfg, uint64_t calls[VARY_ROUNDS], uint64_t waits[VARY_ROUNDS])
{
    vr_device *d = open_dev("meta:8GiB");
    vr_device_set_manual_events(d, true);
    vr_alloc *a = make_alloc(d, "stitch", cfg);
    static const size_t lens[] = {5, 3, 6, 4};
    enum { NT = sizeof lens / sizeof *lens, LAYERS = 8 };
    static const size_t pgrad[] = {9 * MiB, 3 * MiB, 12 * MiB + 512, 12 * MiB + 512};
    void *params = xmalloc(a, 160 * MiB, 0);
    for (int round = 0; round < VARY_ROUNDS; round++) {
        vr_device_calls c;
        vr_device_get_calls(d, &c);
        uint64_t c0 = calls_now(d), w0 = c.event_sync;
        for (int step = 0; step < NT; step++) {
            size_t T = lens[step];
            void *saved[LAYERS][3], *g[LAYERS][4];
            for (int l = 0; l < LAYERS; l++) {
                saved[l][0] = xmalloc(a, T * 3 * MiB, 0);
                void *tmp = xmalloc(a, T * 4 * MiB + 1024, 0); /* attention scratch */
                saved[l][1] = xmalloc(a, T * 3 * MiB / 2 + 512, 0);
                xfree(a, tmp);
                saved[l][2] = xmalloc(a, T * 12 * MiB, 0);
            }
            void *logits = xmalloc(a, T * 96 * MiB, 0);
            void *dlogits = xmalloc(a, T * 96 * MiB, 0);
            xfree(a, logits);
            void *dx = xmalloc(a, T * 3 * MiB, 0);
            xfree(a, dlogits);
            for (int l = LAYERS - 1; l >= 0; l--) {
                void *dh = xmalloc(a, T * 12 * MiB, 0);
                for (int k = 0; k < 4; k++)
                    g[l][k] = xmalloc(a, pgrad[k], 0);
                xfree(a, saved[l][2]);
                void *dx2 = xmalloc(a, T * 3 * MiB, 0);
                xfree(a, dh);
                xfree(a, saved[l][1]);
                xfree(a, saved[l][0]);
                xfree(a, dx);
                dx = dx2;
            }
            xfree(a, dx);
            void *upd = xmalloc(a, 40 * MiB, 0); /* the optimizer's scratch */
            xfree(a, upd);
            for (int l = 0; l < LAYERS; l++)
                for (int k = 0; k < 4; k++)
                    xfree(a, g[l][k]);
            vr_device_complete_events(d); /* the step's work done by the next step (a GPU keeping up) */
        }
        calls[round] = calls_now(d) - c0;
        vr_device_get_calls(d, &c);
        waits[round] = c.event_sync - w0;
    }
    double ratio = finish_run(d, a, params);
    unsigned lend = cfg ? (unsigned)cfg->stitch_lend_pct : 0u;
    print_message("lending %u%%: device calls (host waits) per round of %d steps:", lend, NT);
    for (int r = 0; r < VARY_ROUNDS; r++)
        print_message(" %llu (%llu)", (unsigned long long)calls[r], (unsigned long long)waits[r]);
    print_message("; peak reserved / allocated %.4f\n", ratio);
    return ratio;
}

/* Without lending, once each length has come round its steps find their mappings again (or patch a few
 * granules of them): the device calls of the last round are a small fraction of the first's, and reserved
 * stays within 1% of allocated at the peak. */
static void varying_steps_reach_few_device_calls(void **state)
{
    (void)state;
    uint64_t calls[VARY_ROUNDS], waits[VARY_ROUNDS];
    double ratio = varying_steps(NULL, calls, waits);
    assert_true(calls[0] > 100);
    assert_true(calls[VARY_ROUNDS - 1] * 20 <= calls[0]);
    assert_true(ratio <= 1.01);
}

/* With lending (100%), the same: the last round a small fraction of the first, and no host wait in any round
 * (lending's patches take only mappings whose work has completed), at some reserved bytes more. */
static void varying_steps_with_lending(void **state)
{
    (void)state;
    vr_alloc_config cfg = {.stitch_lend_pct = 100};
    uint64_t calls[VARY_ROUNDS], waits[VARY_ROUNDS];
    double ratio = varying_steps(&cfg, calls, waits);
    assert_true(calls[0] > 100);
    assert_true(calls[VARY_ROUNDS - 1] * 10 <= calls[0]);
    for (int r = 0; r < VARY_ROUNDS; r++)
        assert_int_equal(waits[r], 0); /* a patch takes only mappings whose work has completed */
    assert_true(ratio <= 1.02); /* lending trades some reserved bytes for calls */
}

/* Granules of 8 MiB (stitch_granule, lending on, libvram_torch's setting): the invariants hold through the
 * varying steps (blocks on granules of 4 device granules), the first round maps a quarter or fewer of the 2 MiB
 * run's physical allocations, the last round few, and reserved stays within 5% of allocated at the peak;
 * a granule that is not a whole number of the device's is rounded up, one over 512 of them refused. */
static void larger_granules(void **state)
{
    (void)state;
    uint64_t calls[VARY_ROUNDS], waits[VARY_ROUNDS], small[VARY_ROUNDS], sw[VARY_ROUNDS];
    vr_alloc_config c2 = {.stitch_lend_pct = 100}, c8 = {.stitch_lend_pct = 100, .stitch_granule = 8 * MiB};
    double r2 = varying_steps(&c2, small, sw), r8 = varying_steps(&c8, calls, waits);
    print_message("8 MiB granules: first round %llu calls (2 MiB: %llu), last %llu; ratio %.4f (2 MiB: %.4f)\n",
                  (unsigned long long)calls[0], (unsigned long long)small[0],
                  (unsigned long long)calls[VARY_ROUNDS - 1], r8, r2);
    assert_true(calls[0] * 3 <= small[0]);
    assert_true(calls[VARY_ROUNDS - 1] * 10 <= calls[0]);
    assert_true(r8 <= 1.05);
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc_config odd = {.stitch_granule = 3 * MiB};
    vr_alloc *a = make_alloc(d, "stitch", &odd);
    vr_device_calls c;
    vr_device_get_calls(d, &c);
    uint64_t m0 = c.phys_create;
    void *p = xmalloc(a, 30 * MiB, 0); /* 4 MiB granules: 8 of them */
    vr_device_get_calls(d, &c);
    assert_int_equal(c.phys_create - m0, 8);
    check_invariants(a);
    xfree(a, p);
    vr_alloc_destroy(a);
    vr_alloc_config huge = {.stitch_granule = 2048 * MiB};
    vr_alloc_config hc = huge;
    hc.policy = "stitch";
    vr_alloc *b = NULL;
    assert_int_equal(vr_alloc_create(d, &hc, &b), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "vr_alloc_config.stitch_granule"));
    vr_device_close(d);
}

/* Lending on: p's mapping (40 MiB, 20 granules), idle, with `live` MiB of a live block q on its last
 * granules; r (36 MiB: 18 granules of it) comes. With the work on p's range done (its event completed),
 * r is p's range patched: the granules under q replaced, an unmap and a map each, up to half of them; with
 * it still pending, a new mapping, and no host wait. Returns r; *maps: the cuMemMap calls r cost. */
static char *patch_case(size_t live, bool done, char **p_out, uint64_t *maps, uint64_t *waits)
{
    vr_device *d = open_dev("meta:1GiB");
    vr_device_set_manual_events(d, true);
    vr_alloc_config cfg = {.stitch_lend_pct = 100};
    vr_alloc *a = make_alloc(d, "stitch", &cfg);
    char *p = NULL;
    for (int i = 0; i < 32; i++) {
        p = xmalloc(a, 40 * MiB, 0);
        xfree(a, p);
    }
    forget_sizes(a); /* p's size not recent; events recorded every 32 large frees, the last after p's free */
    if (done)
        vr_device_complete_events(d);
    char *q = xmalloc(a, live * MiB, 0); /* p's block evicted, q on granules of its mapping */
    vr_device_calls c;
    vr_device_get_calls(d, &c);
    uint64_t m0 = c.map, w0 = c.event_sync;
    char *r = xmalloc(a, 36 * MiB, 0);
    vr_device_get_calls(d, &c);
    *maps = c.map - m0;
    *waits = c.event_sync - w0;
    *p_out = p;
    check_invariants(a);
    xfree(a, r);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
    return r;
}

static void lending_patches_without_waiting(void **state)
{
    (void)state;
    char *p;
    uint64_t maps, waits;
    char *r = patch_case(12, true, &p, &maps, &waits); /* 5 of r's 18 granules under q: patched */
    assert_ptr_equal(r, p);
    assert_int_equal(waits, 0);
    assert_int_equal(maps, 5); /* and 5 unmaps (a new mapping: 18 maps) */
    r = patch_case(6, false, &p, &maps, &waits); /* few granules under q, but p's work may be running */
    assert_ptr_not_equal(r, p);
    assert_int_equal(maps, 18);
    assert_int_equal(waits, 0);
    r = patch_case(24, true, &p, &maps, &waits); /* over half of the 18 under q: a new mapping */
    assert_ptr_not_equal(r, p);
    assert_int_equal(maps, 18);
}

static void needs_phys_handles(void **state)
{
    (void)state;
    vr_device *d = open_dev("cpu");
    vr_alloc *a = NULL;
    vr_alloc_config c = {.policy = "stitch"};
    assert_int_equal(vr_alloc_create(d, &c, &a), VR_ERR_UNSUPPORTED);
    assert_non_null(strstr(vr_last_error(), "stitch"));
    vr_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tail_and_head_share_a_granule),
        cmocka_unit_test(same_size_reuses_the_mapping),
        cmocka_unit_test(evicts_cached_before_growing),
        cmocka_unit_test(out_of_memory_and_retry),
        cmocka_unit_test(needs_phys_handles),
        cmocka_unit_test(evicted_mapping_is_reused),
        cmocka_unit_test(larger_mapping_is_lent),
        cmocka_unit_test(steady_state_makes_no_device_calls),
        cmocka_unit_test(steady_state_with_lending),
        cmocka_unit_test(repeated_blocks_settle),
        cmocka_unit_test(period_after_empty_cache),
        cmocka_unit_test(varying_steps_reach_few_device_calls),
        cmocka_unit_test(varying_steps_with_lending),
        cmocka_unit_test(lending_patches_without_waiting),
        cmocka_unit_test(larger_granules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
