/* The rules of policy "pytorch", one test each: rounding, pool choice,
 * segment sizes, split thresholds, coalescing, per-stream reuse, deferred
 * frees through events, out-of-memory retry, empty_cache, max_split_size,
 * memory fraction and capacity caps, peaks. Invariants are checked after
 * every operation (alloc_helpers.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "alloc/alloc_helpers.h"

typedef struct fixture {
    vr_device *dev;
    vr_alloc *a;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dev = open_dev("meta:1GiB");
    f->a = make_alloc(f->dev, "pytorch", NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    vr_alloc_destroy(f->a);
    vr_device_close(f->dev);
    free(f);
    return 0;
}

static void rounds_to_512(void **state)
{
    fixture *f = *state;
    assert_int_equal(vr_alloc_round_size(f->a, 1), 512);
    assert_int_equal(vr_alloc_round_size(f->a, 512), 512);
    assert_int_equal(vr_alloc_round_size(f->a, 513), 1024);
    assert_int_equal(vr_alloc_round_size(f->a, MiB + 1), MiB + 512);
    void *p = xmalloc(f->a, 1000, 0);
    assert_int_equal(vr_alloc_block_size(f->a, p), 1024);
    vr_alloc_stats s = stats_of(f->a);
    assert_int_equal(s.requested_bytes[VR_POOL_ALL].current, 1000);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].current, 1024);
    xfree(f->a, p);
    void *z = (void *)1;
    assert_int_equal(vr_alloc_malloc(f->a, 0, 0, &z), VR_OK);
    assert_null(z);
    assert_int_equal(vr_alloc_free(f->a, NULL), VR_OK);
}

static void chooses_pool_and_segment_size(void **state)
{
    fixture *f = *state;
    static const struct { size_t req, pool, seg; } cases[] = {
        {1, VR_POOL_SMALL, 2 * MiB},
        {MiB, VR_POOL_SMALL, 2 * MiB},
        {MiB + 1, VR_POOL_LARGE, 20 * MiB},
        {10 * MiB - 512, VR_POOL_LARGE, 20 * MiB},
        {10 * MiB, VR_POOL_LARGE, 10 * MiB},
        {11 * MiB, VR_POOL_LARGE, 12 * MiB},
        {100 * MiB + 1, VR_POOL_LARGE, 102 * MiB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *p = xmalloc(f->a, cases[i].req, 0);
        vr_alloc_stats s = stats_of(f->a);
        assert_int_equal(s.reserved_bytes[cases[i].pool].current, cases[i].seg);
        assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, cases[i].seg);
        assert_int_equal(s.segment[cases[i].pool].current, 1);
        xfree(f->a, p);
        vr_alloc_empty_cache(f->a);
        check_invariants(f->a);
        assert_int_equal(CUR(f->a, reserved_bytes, VR_POOL_ALL), 0);
    }
}

static void splits_small_pool_down_to_512(void **state)
{
    fixture *f = *state;
    void *p = xmalloc(f->a, MiB, 0); /* small pool: 2 MiB segment, 1 MiB stays cached */
    vr_alloc_stats s = stats_of(f->a);
    assert_int_equal(s.reserved_bytes[VR_POOL_SMALL].current, 2 * MiB);
    assert_int_equal(s.inactive_split[VR_POOL_SMALL].current, 1);
    assert_int_equal(s.inactive_split_bytes[VR_POOL_SMALL].current, MiB);
    void *q = xmalloc(f->a, MiB - 512, 0); /* remainder 512: still split */
    assert_ptr_equal((char *)q, (char *)p + MiB);
    assert_int_equal(vr_alloc_block_size(f->a, q), MiB - 512);
    assert_int_equal(CUR(f->a, inactive_split_bytes, VR_POOL_SMALL), 512);
    void *r = xmalloc(f->a, 100, 0); /* takes the 512-byte remainder */
    assert_ptr_equal((char *)r, (char *)q + MiB - 512);
    assert_int_equal(CUR(f->a, segment, VR_POOL_ALL), 1);
    assert_int_equal(CUR(f->a, inactive_split, VR_POOL_ALL), 0);
    assert_int_equal(CUR(f->a, allocated_bytes, VR_POOL_SMALL), 2 * MiB);
    xfree(f->a, p);
    xfree(f->a, q);
    xfree(f->a, r);
}

static void splits_large_pool_only_above_1mib(void **state)
{
    fixture *f = *state;
    void *p = xmalloc(f->a, 5 * MiB, 0); /* 20 MiB segment, 15 MiB stay cached */
    assert_int_equal(vr_alloc_block_size(f->a, p), 5 * MiB);
    assert_int_equal(CUR(f->a, inactive_split_bytes, VR_POOL_LARGE), 15 * MiB);
    void *q = xmalloc(f->a, 14 * MiB + 512, 0); /* remainder 1 MiB - 512: not split */
    assert_ptr_equal((char *)q, (char *)p + 5 * MiB);
    assert_int_equal(vr_alloc_block_size(f->a, q), 15 * MiB);
    assert_int_equal(CUR(f->a, allocated_bytes, VR_POOL_ALL), 20 * MiB);
    assert_int_equal(CUR(f->a, requested_bytes, VR_POOL_ALL), 19 * MiB + 512);
    xfree(f->a, q);
    void *r = xmalloc(f->a, 14 * MiB - 512, 0); /* remainder 1 MiB + 512 (> 1 MiB): split */
    assert_int_equal(vr_alloc_block_size(f->a, r), 14 * MiB - 512);
    void *t = xmalloc(f->a, MiB + 512, 0);  /* exactly the remainder */
    assert_ptr_equal((char *)t, (char *)r + 14 * MiB - 512);
    assert_int_equal(CUR(f->a, segment, VR_POOL_ALL), 1);
    xfree(f->a, p);
    xfree(f->a, r);
    xfree(f->a, t);
}

static void coalesces_free_neighbours(void **state)
{
    fixture *f = *state;
    void *a = xmalloc(f->a, 5 * MiB, 0), *b = xmalloc(f->a, 5 * MiB, 0), *c = xmalloc(f->a, 5 * MiB, 0);
    assert_ptr_equal((char *)b, (char *)a + 5 * MiB);
    assert_ptr_equal((char *)c, (char *)b + 5 * MiB);
    assert_int_equal(CUR(f->a, inactive_split, VR_POOL_LARGE), 1); /* the last 5 MiB */
    xfree(f->a, b);
    assert_int_equal(CUR(f->a, inactive_split, VR_POOL_LARGE), 2);
    xfree(f->a, a); /* merges with b */
    assert_int_equal(CUR(f->a, inactive_split, VR_POOL_LARGE), 2);
    assert_int_equal(CUR(f->a, inactive_split_bytes, VR_POOL_LARGE), 15 * MiB);
    void *d = xmalloc(f->a, 10 * MiB - 512, 0); /* fits only in the merged a+b */
    assert_ptr_equal(d, a);
    xfree(f->a, d);
    xfree(f->a, c); /* whole segment free again: one block, not split */
    assert_int_equal(CUR(f->a, inactive_split, VR_POOL_LARGE), 0);
    assert_int_equal(vr_alloc_largest_free_block(f->a), 20 * MiB);
    vr_alloc_empty_cache(f->a);
    assert_int_equal(CUR(f->a, reserved_bytes, VR_POOL_ALL), 0);
    assert_int_equal(CUR(f->a, segment, VR_POOL_ALL), 0);
}

static void reuses_blocks_per_stream(void **state)
{
    fixture *f = *state;
    void *p = xmalloc(f->a, 3 * MiB, 1);
    xfree(f->a, p);
    void *q = xmalloc(f->a, 3 * MiB, 2); /* another stream: a new segment */
    assert_ptr_not_equal(p, q);
    assert_int_equal(CUR(f->a, segment, VR_POOL_ALL), 2);
    void *r = xmalloc(f->a, 3 * MiB, 1); /* same stream: the cached block */
    assert_ptr_equal(p, r);
    assert_int_equal(CUR(f->a, segment, VR_POOL_ALL), 2);
    xfree(f->a, q);
    xfree(f->a, r);
}

static void best_fit_takes_smallest_block(void **state)
{
    fixture *f = *state;
    void *big = xmalloc(f->a, 40 * MiB, 0), *mid = xmalloc(f->a, 24 * MiB, 0), *sm = xmalloc(f->a, 12 * MiB, 0);
    xfree(f->a, big);
    xfree(f->a, mid);
    xfree(f->a, sm);
    void *p = xmalloc(f->a, 11 * MiB, 0);
    assert_ptr_equal(p, sm);
    void *q = xmalloc(f->a, 13 * MiB, 0);
    assert_ptr_equal(q, mid);
    xfree(f->a, p);
    xfree(f->a, q);
}

static void defers_cross_stream_free_until_events_complete(void **state)
{
    fixture *f = *state;
    vr_device_set_manual_events(f->dev, true);
    void *p = xmalloc(f->a, 3 * MiB, 0);
    assert_int_equal(vr_alloc_record_stream(f->a, p, 5), VR_OK);
    assert_int_equal(vr_alloc_record_stream(f->a, p, 0), VR_OK); /* own stream: ignored */
    xfree(f->a, p);
    vr_alloc_stats s = stats_of(f->a);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].current, 0);
    assert_int_equal(s.active_bytes[VR_POOL_ALL].current, 3 * MiB);
    assert_int_equal(s.active[VR_POOL_ALL].current, 1);
    void *q = xmalloc(f->a, 3 * MiB, 0); /* event pending: p is not reused */
    assert_ptr_not_equal(p, q);
    vr_device_complete_events(f->dev);
    void *r = xmalloc(f->a, 3 * MiB, 0); /* processed at this malloc: p is back */
    assert_ptr_equal(p, r);
    assert_int_equal(CUR(f->a, active, VR_POOL_ALL), 2);
    /* empty_cache waits for pending events itself */
    assert_int_equal(vr_alloc_record_stream(f->a, r, 7), VR_OK);
    xfree(f->a, r);
    xfree(f->a, q);
    vr_alloc_empty_cache(f->a);
    check_invariants(f->a);
    assert_int_equal(CUR(f->a, reserved_bytes, VR_POOL_ALL), 0);
    assert_true(stats_of(f->a).num_sync_all_streams >= 1);
    vr_device_set_manual_events(f->dev, false);
}

static void frees_cache_and_retries_once_on_oom(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:40MiB");
    vr_alloc *a = make_alloc(d, "pytorch", NULL);
    void *p = xmalloc(a, 30 * MiB, 1);
    xfree(a, p); /* 30 MiB cached, on stream 1 */
    void *q = xmalloc(a, 20 * MiB, 0); /* 50 > 40: free the cache, retry */
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, 20 * MiB);
    void *r = NULL;
    assert_int_equal(vr_alloc_malloc(a, 30 * MiB, 0, &r), VR_ERR_OOM);
    assert_null(r);
    check_invariants(a);
    const char *m = vr_last_error();
    assert_non_null(strstr(m, "out of memory: tried to allocate 30.00 MiB on meta"));
    assert_non_null(strstr(m, "device capacity 40.00 MiB, 20.00 MiB free"));
    assert_non_null(strstr(m, "20.00 MiB reserved, of which 20.00 MiB allocated and 0 B reserved but unused"));
    assert_non_null(strstr(m, "largest free block"));
    assert_non_null(strstr(m, "Try:"));
    assert_non_null(strstr(m, "vram plan"));
    s = stats_of(a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 2);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void oom_message_points_at_fragmentation(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:60MiB");
    vr_alloc *a = make_alloc(d, NULL, NULL);
    void *x = xmalloc(a, 5 * MiB, 0), *y = xmalloc(a, 5 * MiB, 0), *z = xmalloc(a, 5 * MiB, 0);
    void *w = xmalloc(a, 2 * MiB, 0); /* 20 MiB segment: 5+5+5+2, 3 MiB left */
    xfree(a, x);
    xfree(a, z);                      /* 5 + 5 + 3 MiB free but split: not releasable */
    void *big = NULL;
    assert_int_equal(vr_alloc_malloc(a, 42 * MiB, 0, &big), VR_ERR_OOM);
    const char *m = vr_last_error();
    assert_non_null(strstr(m, "7.00 MiB allocated and 13.00 MiB reserved but unused"));
    assert_non_null(strstr(m, "largest free block 5.00 MiB"));
    assert_non_null(strstr(m, "vr_alloc_config.policy expandable"));
    xfree(a, y);
    xfree(a, w);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void empty_cache_keeps_segments_in_use(void **state)
{
    fixture *f = *state;
    void *a = xmalloc(f->a, 5 * MiB, 0), *b = xmalloc(f->a, 5 * MiB, 0);
    void *s1 = xmalloc(f->a, 4 * KiB, 0);
    void *other = xmalloc(f->a, 30 * MiB, 0);
    xfree(f->a, other);
    xfree(f->a, a);
    vr_alloc_empty_cache(f->a);
    check_invariants(f->a);
    vr_alloc_stats s = stats_of(f->a);
    assert_int_equal(s.reserved_bytes[VR_POOL_LARGE].current, 20 * MiB); /* b holds it */
    assert_int_equal(s.reserved_bytes[VR_POOL_SMALL].current, 2 * MiB);
    assert_int_equal(s.num_device_free, 1);
    xfree(f->a, b);
    xfree(f->a, s1);
    vr_alloc_empty_cache(f->a);
    assert_int_equal(CUR(f->a, reserved_bytes, VR_POOL_ALL), 0);
}

static void max_split_size_rules(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc_config c = {.max_split_size = 16 * MiB};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    void *big = xmalloc(a, 40 * MiB, 0);
    assert_int_equal(stats_of(a).oversize_allocations.current, 1);
    assert_int_equal(stats_of(a).oversize_segments.current, 1);
    xfree(a, big);
    void *sm = xmalloc(a, 8 * MiB, 0); /* below max_split: never an oversize block */
    assert_ptr_not_equal(sm, big);
    assert_int_equal(CUR(a, segment, VR_POOL_ALL), 2);
    void *near = xmalloc(a, 30 * MiB, 0); /* 40 < 30 + 20: reused, not split */
    assert_ptr_equal(near, big);
    assert_int_equal(vr_alloc_block_size(a, near), 40 * MiB);
    xfree(a, near);
    void *far = xmalloc(a, 18 * MiB, 0); /* 40 >= 18 + 20: too wasteful, new segment */
    assert_ptr_not_equal(far, big);
    assert_int_equal(CUR(a, segment, VR_POOL_ALL), 3);
    /* a 20 MiB segment for small requests is split as usual */
    void *sm2 = xmalloc(a, 8 * MiB, 0);
    assert_ptr_equal((char *)sm2, (char *)sm + 8 * MiB);
    xfree(a, sm);
    xfree(a, sm2);
    xfree(a, far);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void max_split_size_releases_oversize_blocks_first(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:50MiB");
    vr_alloc_config c = {.max_split_size = 16 * MiB};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    void *big = xmalloc(a, 40 * MiB, 0);
    xfree(a, big);
    void *p = xmalloc(a, 5 * MiB, 0); /* 40 + 20 > 50: the cached 40 MiB goes, no full retry */
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, 20 * MiB);
    assert_int_equal(s.oversize_segments.current, 1); /* the 20 MiB segment is >= 16 MiB too */
    assert_int_equal(s.num_device_free, 1);
    xfree(a, p);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void memory_fraction_caps_reserved(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:100MiB");
    vr_alloc_config c = {.memory_fraction = 0.5};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    assert_int_equal(vr_alloc_limit(a), 50 * MiB);
    void *p = xmalloc(a, 40 * MiB, 0), *q = NULL;
    assert_int_equal(vr_alloc_malloc(a, 20 * MiB, 0, &q), VR_ERR_OOM); /* 60 > 50 although the device has room */
    assert_non_null(strstr(vr_last_error(), "may reserve 50.00 MiB"));
    check_invariants(a);
    assert_int_equal(vr_alloc_set_memory_fraction(a, 1.0), VR_OK);
    q = xmalloc(a, 20 * MiB, 0);
    assert_int_equal(vr_alloc_set_memory_fraction(a, 1.5), VR_ERR_INVALID);
    xfree(a, p);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void capacity_caps_reserved(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc_config c = {.capacity = 30 * MiB};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    void *p = xmalloc(a, 20 * MiB, 0), *q = NULL;
    assert_int_equal(vr_alloc_malloc(a, 12 * MiB, 0, &q), VR_ERR_OOM);
    assert_int_equal(stats_of(a).num_ooms, 1);
    assert_true((uint64_t)CUR(a, reserved_bytes, VR_POOL_ALL) <= 30 * MiB);
    xfree(a, p);
    q = xmalloc(a, 12 * MiB, 0); /* the 20 MiB cached segment serves it */
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void peaks_and_reset(void **state)
{
    fixture *f = *state;
    void *p = xmalloc(f->a, 30 * MiB, 0);
    xfree(f->a, p);
    vr_alloc_stats s = stats_of(f->a);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].peak, 30 * MiB);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].allocated, 30 * MiB);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].freed, 30 * MiB);
    assert_int_equal(s.allocation[VR_POOL_LARGE].peak, 1);
    vr_alloc_reset_peak(f->a);
    s = stats_of(f->a);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].peak, 0);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].peak, 30 * MiB); /* still cached */
    vr_alloc_reset_accumulated(f->a);
    s = stats_of(f->a);
    assert_int_equal(s.allocated_bytes[VR_POOL_ALL].allocated, 0);
    assert_int_equal(s.num_device_alloc, 0);
}

static void rejects_bad_pointers_and_configs(void **state)
{
    fixture *f = *state;
    int x;
    assert_int_equal(vr_alloc_free(f->a, &x), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "not a live block"));
    assert_int_equal(vr_alloc_record_stream(f->a, &x, 1), VR_ERR_INVALID);
    void *p = xmalloc(f->a, 100, 0);
    xfree(f->a, p);
    assert_int_equal(vr_alloc_free(f->a, p), VR_ERR_INVALID); /* double free */
    check_invariants(f->a);
    vr_alloc *b = NULL;
    vr_alloc_config c = {.policy = "nonsense"};
    assert_int_equal(vr_alloc_create(f->dev, &c, &b), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "pytorch, expandable"));
    c = (vr_alloc_config){.memory_fraction = -1};
    assert_int_equal(vr_alloc_create(f->dev, &c, &b), VR_ERR_INVALID);
    void *huge = NULL;
    assert_int_equal(vr_alloc_malloc(f->a, SIZE_MAX - 10, 0, &huge), VR_ERR_OOM);
    assert_null(huge);
    check_invariants(f->a);
}

static void works_on_cpu_memory(void **state)
{
    (void)state;
    vr_device *d = open_dev("cpu:64MiB");
    vr_alloc *a = make_alloc(d, "pytorch", NULL);
    char *p = xmalloc(a, 3 * MiB, 0), *q = xmalloc(a, 1000, 0);
    memset(p, 1, 3 * MiB); /* real memory */
    memset(q, 2, 1000);
    assert_int_equal(p[3 * MiB - 1], 1);
    xfree(a, p);
    xfree(a, q);
    void *r = NULL;
    assert_int_equal(vr_alloc_malloc(a, 100 * MiB, 0, &r), VR_ERR_OOM);
    assert_non_null(strstr(vr_last_error(), "on cpu"));
    vr_alloc_destroy(a);
    vr_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rounds_to_512, setup, teardown),
        cmocka_unit_test_setup_teardown(chooses_pool_and_segment_size, setup, teardown),
        cmocka_unit_test_setup_teardown(splits_small_pool_down_to_512, setup, teardown),
        cmocka_unit_test_setup_teardown(splits_large_pool_only_above_1mib, setup, teardown),
        cmocka_unit_test_setup_teardown(coalesces_free_neighbours, setup, teardown),
        cmocka_unit_test_setup_teardown(reuses_blocks_per_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(best_fit_takes_smallest_block, setup, teardown),
        cmocka_unit_test_setup_teardown(defers_cross_stream_free_until_events_complete, setup, teardown),
        cmocka_unit_test(frees_cache_and_retries_once_on_oom),
        cmocka_unit_test(oom_message_points_at_fragmentation),
        cmocka_unit_test_setup_teardown(empty_cache_keeps_segments_in_use, setup, teardown),
        cmocka_unit_test(max_split_size_rules),
        cmocka_unit_test(max_split_size_releases_oversize_blocks_first),
        cmocka_unit_test(memory_fraction_caps_reserved),
        cmocka_unit_test(capacity_caps_reserved),
        cmocka_unit_test_setup_teardown(peaks_and_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(rejects_bad_pointers_and_configs, setup, teardown),
        cmocka_unit_test(works_on_cpu_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
