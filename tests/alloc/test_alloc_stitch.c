/* Policy "stitch": large blocks at fresh virtual ranges stitched from
 * physical granules; a block's tail granule is shared with the next block's
 * head; exact-size reuse of cached mappings; eviction of cached blocks before
 * new physical memory; small pool in whole granules; empty_cache; OOM. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "alloc/alloc_helpers.h"

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

/* An evicted range stays mapped until its stream has passed the eviction (no device-wide wait), and its
 * pages go to another stream only after that stream's work. */
static void unmaps_late(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_device_set_manual_events(d, true);
    vr_alloc *a = make_alloc(d, "stitch", NULL);
    char *p = xmalloc(a, 64 * MiB, 0); /* 32 fresh granules */
    assert_int_equal(stats_of(a).num_device_alloc, 32);
    xfree(a, p);
    char *q = xmalloc(a, 60 * MiB, 0); /* no free granule: p is evicted, its pages reused on stream 0 */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 64 * MiB);
    assert_int_equal(stats_of(a).num_device_free, 0); /* p's range: stale, its event pending */
    assert_int_equal(stats_of(a).num_device_alloc, 32 + 30);
    check_invariants(a);
    vr_device_complete_events(d);
    xfree(a, q);
    char *r = xmalloc(a, 2 * MiB, 0); /* a grow: the completed stale range is unmapped now */
    assert_int_equal(stats_of(a).num_device_free, 32);
    xfree(a, r);
    /* pages evicted on stream 0 go to stream 1 only after stream 0's event: waited for (manual mode:
     * vr_event_sync completes it), then unmapped */
    int64_t frees = stats_of(a).num_device_free;
    char *s1 = xmalloc(a, 64 * MiB, 1);
    assert_true(stats_of(a).num_device_free > frees);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 64 * MiB);
    xfree(a, s1);
    vr_alloc_empty_cache(a); /* waits for every stale range, releases every granule */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
    vr_device_mem m;
    vr_device_mem_info(d, &m);
    assert_int_equal(m.used_by_us, 0);
    check_invariants(a);
    vr_alloc_destroy(a);
    vr_device_close(d);
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
        cmocka_unit_test(unmaps_late),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
