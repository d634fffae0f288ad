/* Policy "expandable": one growing range per (stream, pool), mapped in 2 MiB
 * granules; best fit inside; empty_cache unmaps free granules; OOM retry. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "alloc/alloc_helpers.h"

static void tiles_blocks_in_one_range(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "expandable", NULL);
    assert_string_equal(vr_alloc_policy(a), "expandable");
    char *p = xmalloc(a, 3 * MiB, 0);
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[VR_POOL_LARGE].current, 4 * MiB); /* two granules */
    assert_int_equal(s.segment[VR_POOL_LARGE].current, 1);
    char *q = xmalloc(a, 3 * MiB, 0); /* 1 MiB left + one more granule */
    assert_ptr_equal(q, p + 3 * MiB);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 6 * MiB);
    assert_int_equal(CUR(a, segment, VR_POOL_ALL), 1);
    assert_int_equal(CUR(a, inactive_split, VR_POOL_ALL), 0); /* expandable memory is left out */
    char *t = xmalloc(a, 500 * KiB, 0); /* the small pool has its own range */
    assert_int_equal(CUR(a, segment, VR_POOL_ALL), 2);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_SMALL), 2 * MiB);
    char *u = xmalloc(a, 3 * MiB, 1); /* and so has each stream */
    assert_int_equal(CUR(a, segment, VR_POOL_ALL), 3);

    xfree(a, p); /* a 3 MiB hole at the start */
    char *r = xmalloc(a, 2 * MiB, 0);
    assert_ptr_equal(r, p);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_LARGE), 10 * MiB);

    xfree(a, q); /* [2, 6) MiB free: granules [2,4) and [4,6) can go */
    vr_alloc_empty_cache(a);
    check_invariants(a);
    s = stats_of(a);
    assert_int_equal(s.reserved_bytes[VR_POOL_LARGE].current, 2 * MiB + 4 * MiB);
    assert_true(s.num_device_free >= 1);
    xfree(a, r);
    xfree(a, t);
    xfree(a, u);
    vr_alloc_empty_cache(a);
    check_invariants(a);
    s = stats_of(a);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, 0);
    assert_int_equal(s.segment[VR_POOL_ALL].current, 0);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void grows_the_free_end_and_fails_cleanly(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:8MiB");
    vr_alloc *a = make_alloc(d, "expandable", NULL);
    char *p = xmalloc(a, 6 * MiB, 0);
    void *q = NULL;
    assert_int_equal(vr_alloc_malloc(a, 4 * MiB, 0, &q), VR_ERR_OOM);
    check_invariants(a);
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_non_null(strstr(vr_last_error(), "out of memory: tried to allocate 4.00 MiB"));
    xfree(a, p);
    q = xmalloc(a, 7 * MiB, 0); /* the free 6 MiB plus one more granule */
    assert_ptr_equal(q, p);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 8 * MiB);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void oom_retry_unmaps_other_streams_cache(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:10MiB");
    vr_alloc *a = make_alloc(d, "expandable", NULL);
    void *p = xmalloc(a, 8 * MiB, 1);
    xfree(a, p);
    void *q = xmalloc(a, 6 * MiB, 0); /* 8 + 6 > 10: stream 1's granules are unmapped first */
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, 6 * MiB);
    assert_int_equal(s.segment[VR_POOL_ALL].current, 1); /* stream 1's range was released */
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void defers_cross_stream_free(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "expandable", NULL);
    vr_device_set_manual_events(d, true);
    char *p = xmalloc(a, 4 * MiB, 0);
    assert_int_equal(vr_alloc_record_stream(a, p, 3), VR_OK);
    xfree(a, p);
    char *q = xmalloc(a, 4 * MiB, 0);
    assert_ptr_equal(q, p + 4 * MiB); /* p still pending */
    vr_device_complete_events(d);
    char *r = xmalloc(a, 4 * MiB, 0);
    assert_ptr_equal(r, p);
    xfree(a, q);
    xfree(a, r);
    vr_device_set_manual_events(d, false);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void works_on_cpu_virtual_memory(void **state)
{
    (void)state;
    vr_device *d = open_dev("cpu:64MiB");
    vr_alloc *a = make_alloc(d, "expandable", NULL);
    char *p = xmalloc(a, 5 * MiB, 0), *q = xmalloc(a, 3 * MiB, 0);
    memset(p, 1, 5 * MiB); /* mapped memory is real */
    memset(q, 2, 3 * MiB);
    assert_int_equal(p[5 * MiB - 1], 1);
    xfree(a, p);
    vr_alloc_empty_cache(a);
    check_invariants(a);
    q[0] = 3; /* still mapped */
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiles_blocks_in_one_range),
        cmocka_unit_test(grows_the_free_end_and_fails_cleanly),
        cmocka_unit_test(oom_retry_unmaps_other_streams_cache),
        cmocka_unit_test(defers_cross_stream_free),
        cmocka_unit_test(works_on_cpu_virtual_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
