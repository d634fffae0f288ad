/* Randomized mixed operations against a shadow model: thousands of allocs,
 * frees, cross-stream uses, event completions, empty_cache and peak resets
 * on several streams, sizes spanning both pools, under a capacity that makes
 * some requests fail. After every operation: every allocator invariant
 * (vr_alloc_check), no two live blocks overlap, counts and bytes agree with
 * the shadow, allocated <= reserved <= capacity. On cpu devices the blocks
 * are real memory and are written and verified, so that overlaps or wrong
 * addresses show up as corrupted patterns (and under ASan). Last, several
 * threads share one allocator. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include "alloc/alloc_helpers.h"

#define MAX_LIVE 300

typedef struct live {
    unsigned char *p;
    size_t size, rsize;
    vr_stream stream;
    unsigned char tag;
} live;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Log-uniform from 1 byte to 32 MiB, so both pools and all segment rules are hit. */
static size_t random_size(uint64_t *rng)
{
    unsigned e = (unsigned)(next_rand(rng) % 26);
    size_t lo = (size_t)1 << e;
    return lo + (size_t)(next_rand(rng) % lo);
}

static void mark(live *l, bool touch)
{
    if (!touch)
        return;
    l->p[0] = l->tag;
    l->p[l->size - 1] = l->tag;
    l->p[l->size / 2] = l->tag;
}

static void verify(const live *l, bool touch)
{
    if (touch && (l->p[0] != l->tag || l->p[l->size - 1] != l->tag || l->p[l->size / 2] != l->tag))
        fail_msg("block %p (%zu bytes) was overwritten", (void *)l->p, l->size);
}

typedef struct config {
    const char *device, *policy;
    uint64_t max_split, seed;
    int ops;
    bool touch;
    unsigned lend;   /* stitch: vr_alloc_config.stitch_lend_pct */
    size_t granule;  /* stitch: vr_alloc_config.stitch_granule */
} config;

static void run(const config *c)
{
    vr_device *d = open_dev(c->device);
    vr_alloc_config ac = {.max_split_size = c->max_split, .history = 256, .stitch_lend_pct = c->lend,
                          .stitch_granule = c->granule};
    vr_alloc *a = make_alloc(d, c->policy, &ac);
    vr_device_set_manual_events(d, true);
    vr_device_mem mem;
    vr_device_mem_info(d, &mem);
    live lv[MAX_LIVE];
    int n = 0;
    int64_t ooms = 0, oks = 0;
    uint64_t rng = c->seed;
    for (int op = 0; op < c->ops; op++) {
        unsigned r = (unsigned)(next_rand(&rng) % 100);
        if (r < 46 && n < MAX_LIVE) {
            size_t size = random_size(&rng);
            vr_stream s = (vr_stream)(next_rand(&rng) % 4);
            void *p = NULL;
            vr_status st = vr_alloc_malloc(a, size, s, &p);
            if (st == VR_ERR_OOM) {
                assert_null(p);
                assert_non_null(strstr(vr_last_error(), "out of memory: tried to allocate"));
                ooms++;
            } else {
                assert_int_equal(st, VR_OK);
                oks++;
                live l = {p, size, vr_alloc_block_size(a, p), s, (unsigned char)(op | 1)};
                assert_true(l.rsize >= vr_alloc_round_size(a, size));
                for (int i = 0; i < n; i++)
                    if (l.p < lv[i].p + lv[i].rsize && lv[i].p < l.p + l.rsize)
                        fail_msg("op %d: new block [%p, +%zu) overlaps live [%p, +%zu)", op, p, l.rsize,
                                 (void *)lv[i].p, lv[i].rsize);
                mark(&l, c->touch);
                lv[n++] = l;
            }
        } else if (r < 90 && n > 0) {
            int i = (int)(next_rand(&rng) % (uint64_t)n);
            verify(&lv[i], c->touch);
            assert_int_equal(vr_alloc_free(a, lv[i].p), VR_OK);
            lv[i] = lv[--n];
        } else if (r < 94 && n > 0) {
            int i = (int)(next_rand(&rng) % (uint64_t)n);
            assert_int_equal(vr_alloc_record_stream(a, lv[i].p, (vr_stream)(next_rand(&rng) % 4)), VR_OK);
        } else if (r < 97) {
            vr_device_complete_events(d);
        } else if (r < 99) {
            vr_alloc_empty_cache(a);
        } else {
            vr_alloc_reset_peak(a);
        }
        check_invariants(a);
        vr_alloc_stats s = stats_of(a);
        int64_t bytes = 0, req = 0;
        for (int i = 0; i < n; i++) {
            bytes += (int64_t)lv[i].rsize;
            req += (int64_t)lv[i].size;
        }
        assert_int_equal(s.allocation[VR_POOL_ALL].current, n);
        assert_int_equal(s.allocated_bytes[VR_POOL_ALL].current, bytes);
        assert_true(s.requested_bytes[VR_POOL_ALL].current >= req);
        if (r >= 97 && r < 99) /* empty_cache waited for every event */
            assert_int_equal(s.requested_bytes[VR_POOL_ALL].current, req);
        assert_int_equal(s.num_ooms, ooms);
        assert_true((uint64_t)s.reserved_bytes[VR_POOL_ALL].current <= mem.total);
        assert_true(s.allocated_bytes[VR_POOL_ALL].current <= s.reserved_bytes[VR_POOL_ALL].current);
    }
    for (int i = 0; i < n; i++) {
        verify(&lv[i], c->touch);
        xfree(a, lv[i].p);
    }
    vr_device_set_manual_events(d, false);
    vr_alloc_empty_cache(a);
    check_invariants(a);
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, 0);
    assert_int_equal(s.active_bytes[VR_POOL_ALL].current, 0);
    assert_int_equal(s.requested_bytes[VR_POOL_ALL].current, 0);
    assert_int_equal(s.segment[VR_POOL_ALL].current, 0);
    assert_true(oks > c->ops / 10);
    print_message("%s %s: %d ops, %lld allocs, %lld OOMs, %lld retries, peak reserved %.1f MiB\n", c->device,
                  c->policy, c->ops, (long long)oks, (long long)ooms, (long long)s.num_alloc_retries,
                  (double)s.reserved_bytes[VR_POOL_ALL].peak / (double)MiB);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void random_pytorch_meta(void **state)
{
    (void)state;
    run(&(config){"meta:512MiB", "pytorch", 0, 0x9E3779B97F4A7C15ull, 20000, false, 0, 0});
}

static void random_pytorch_max_split(void **state)
{
    (void)state;
    run(&(config){"meta:512MiB", "pytorch", 8 * MiB, 12345, 10000, false, 0, 0});
}

static void random_expandable_meta(void **state)
{
    (void)state;
    run(&(config){"meta:512MiB", "expandable", 0, 777, 20000, false, 0, 0});
}

static void random_stitch_meta(void **state)
{
    (void)state;
    run(&(config){"meta:512MiB", "stitch", 0, 4242, 20000, false, 0, 0});
}

/* Lending (as libvram_torch runs stitch) with 2 and 8 MiB granules: a lent or patched mapping whose last granule is
 * also its first once let a larger block overlap its own head (the invariant check saw overlapping spans). */
static void random_stitch_lending(void **state)
{
    (void)state;
    for (int k = 0; k < 4; k++) {
        config c = {"meta:512MiB", "stitch", 0, 4242 + (uint64_t)k, 12000, false, k % 2 ? 300u : 100u,
                    (size_t)(k < 2 ? 2 : 8) << 20};
        run(&c);
    }
}

static void random_pytorch_cpu(void **state)
{
    (void)state;
    run(&(config){"cpu:256MiB", "pytorch", 0, 4242, 4000, true, 0, 0});
}

static void random_expandable_cpu(void **state)
{
    (void)state;
    run(&(config){"cpu:256MiB", "expandable", 0, 99, 4000, true, 0, 0});
}

/* ------------------------------------------------ threads */

typedef struct worker {
    vr_alloc *a;
    vr_stream stream;
    uint64_t seed;
    int failures;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    void *ptrs[64] = {0};
    uint64_t rng = w->seed;
    for (int op = 0; op < 5000; op++) {
        int i = (int)(next_rand(&rng) % 64);
        if (ptrs[i]) {
            w->failures += vr_alloc_free(w->a, ptrs[i]) != VR_OK;
            ptrs[i] = NULL;
        } else {
            vr_status st = vr_alloc_malloc(w->a, random_size(&rng) / 4 + 1, w->stream, &ptrs[i]);
            w->failures += st != VR_OK && st != VR_ERR_OOM;
        }
    }
    for (int i = 0; i < 64; i++)
        w->failures += vr_alloc_free(w->a, ptrs[i]) != VR_OK;
    return NULL;
}

static void threads_share_one_allocator(void **state)
{
    (void)state;
    const char *policies[] = {"pytorch", "expandable", "stitch"};
    for (int pi = 0; pi < 3; pi++) {
        vr_device *d = open_dev("meta:4GiB");
        vr_alloc *a = make_alloc(d, policies[pi], NULL);
        pthread_t th[4];
        worker w[4];
        for (int i = 0; i < 4; i++) {
            w[i] = (worker){a, (vr_stream)(i % 2), (uint64_t)(i + 1) * 7919, 0};
            assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
        }
        for (int k = 0; k < 50; k++)
            check_invariants(a); /* concurrently with the workers */
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(w[i].failures, 0);
        }
        check_invariants(a);
        assert_int_equal(CUR(a, allocated_bytes, VR_POOL_ALL), 0);
        vr_alloc_empty_cache(a);
        assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
        vr_alloc_destroy(a);
        vr_device_close(d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_pytorch_meta),
        cmocka_unit_test(random_pytorch_max_split),
        cmocka_unit_test(random_expandable_meta),
        cmocka_unit_test(random_stitch_meta),
        cmocka_unit_test(random_stitch_lending),
        cmocka_unit_test(random_pytorch_cpu),
        cmocka_unit_test(random_expandable_cpu),
        cmocka_unit_test(threads_share_one_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
