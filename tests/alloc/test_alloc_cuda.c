/* Both policies on a real GPU (skipped without one): randomized allocs and
 * frees on two CUDA streams with cross-stream uses, every block filled with
 * its own byte pattern by cudaMemset and read back before it is freed (so an
 * overlap or a bad mapping of an expandable range shows as a wrong byte),
 * invariants after every operation, an out-of-memory path under a cap, and
 * everything returned to the driver by empty_cache. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "alloc/alloc_helpers.h"

static vr_device *gpu;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

typedef struct live {
    unsigned char *p;
    size_t size;
    unsigned char tag;
} live;

static void expect_bytes(const live *l)
{
    size_t at[3] = {0, l->size / 2, l->size - 1};
    for (int i = 0; i < 3; i++) {
        unsigned char b = 0;
        assert_int_equal(vr_device_memcpy(gpu, &b, l->p + at[i], 1, VR_COPY_DEVICE_TO_HOST), VR_OK);
        if (b != l->tag)
            fail_msg("block %p (%zu bytes): byte %zu is %u, expected %u", (void *)l->p, l->size, at[i], b, l->tag);
    }
}

static void random_on_gpu(const char *policy)
{
    vr_device_mem before;
    assert_int_equal(vr_device_mem_info(gpu, &before), VR_OK);
    vr_alloc_config c = {.capacity = 384 * MiB, .history = 1024};
    vr_alloc *a = make_alloc(gpu, policy, &c);
    vr_stream streams[2] = {0, 0};
    assert_int_equal(vr_stream_create(gpu, &streams[1]), VR_OK);
    live lv[128];
    int n = 0, ooms = 0;
    uint64_t rng = 2024;
    for (int op = 0; op < 3000; op++) {
        unsigned r = (unsigned)(next_rand(&rng) % 100);
        if (r < 48 && n < 128) {
            unsigned e = (unsigned)(next_rand(&rng) % 26);
            size_t size = ((size_t)1 << e) + (size_t)(next_rand(&rng) % ((size_t)1 << e));
            vr_stream s = streams[next_rand(&rng) % 2];
            void *p = NULL;
            vr_status st = vr_alloc_malloc(a, size, s, &p);
            if (st == VR_ERR_OOM) {
                ooms++;
                continue;
            }
            assert_int_equal(st, VR_OK);
            live l = {p, size, (unsigned char)(op % 251 + 1)};
            assert_int_equal(vr_device_memset(gpu, l.p, l.tag, l.size), VR_OK);
            lv[n++] = l;
        } else if (r < 92 && n > 0) {
            int i = (int)(next_rand(&rng) % (uint64_t)n);
            expect_bytes(&lv[i]);
            assert_int_equal(vr_alloc_free(a, lv[i].p), VR_OK);
            lv[i] = lv[--n];
        } else if (r < 97 && n > 0) {
            int i = (int)(next_rand(&rng) % (uint64_t)n);
            assert_int_equal(vr_alloc_record_stream(a, lv[i].p, streams[next_rand(&rng) % 2]), VR_OK);
        } else {
            vr_alloc_empty_cache(a);
        }
        check_invariants(a);
    }
    for (int i = 0; i < n; i++) {
        expect_bytes(&lv[i]);
        xfree(a, lv[i].p);
    }
    vr_alloc_empty_cache(a);
    check_invariants(a);
    vr_alloc_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[VR_POOL_ALL].current, 0);
    assert_true(s.reserved_bytes[VR_POOL_ALL].peak <= (int64_t)(384 * MiB));
    vr_device_mem after;
    assert_int_equal(vr_device_mem_info(gpu, &after), VR_OK);
    assert_int_equal(after.used_by_us, before.used_by_us);
    print_message("%s on %s: %lld device allocs, %d OOMs, %lld retries under a 384 MiB cap, peak reserved %.1f MiB\n", policy,
                  vr_device_name(gpu), (long long)s.num_device_alloc, ooms, (long long)s.num_alloc_retries,
                  (double)s.reserved_bytes[VR_POOL_ALL].peak / (double)MiB);
    vr_alloc_destroy(a);
    vr_stream_destroy(gpu, streams[1]);
}

static void random_pytorch(void **state)
{
    (void)state;
    if (!gpu)
        skip();
    random_on_gpu("pytorch");
}

static void random_expandable(void **state)
{
    (void)state;
    if (!gpu)
        skip();
    random_on_gpu("expandable");
}

static void expandable_tiles_and_unmaps(void **state)
{
    (void)state;
    if (!gpu)
        skip();
    vr_alloc *a = make_alloc(gpu, "expandable", NULL);
    size_t g = vr_device_vm_granularity(gpu);
    char *p = xmalloc(a, 3 * g / 2, 0), *q = xmalloc(a, 3 * g / 2, 0);
    assert_ptr_equal(q, p + 3 * g / 2); /* tiled in one range */
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 3 * g);
    assert_int_equal(vr_device_memset(gpu, q, 7, 3 * g / 2), VR_OK);
    xfree(a, p);
    vr_alloc_empty_cache(a); /* granule 0 goes, granule 1 is shared with q */
    check_invariants(a);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 2 * g);
    live l = {(unsigned char *)q, 3 * g / 2, 7};
    expect_bytes(&l);
    xfree(a, q);
    vr_alloc_empty_cache(a);
    assert_int_equal(CUR(a, reserved_bytes, VR_POOL_ALL), 0);
    vr_alloc_destroy(a);
}


/* What the allocator says it reserved is what the GPU says this process uses
 * beyond what it used before (the CUDA context and anything else already
 * held): NVML's per-process figure, and cudaMemGetInfo's device-wide used
 * bytes, both move by exactly the reserved bytes, for every policy, while a
 * training-like mix of blocks (4 KiB .. 300 MiB) is live and after
 * empty_cache. */
static int64_t process_used(void)
{
    vr_cuda_info info;
    assert_int_equal(vr_cuda_device_info(vr_device_index(gpu), &info), VR_OK);
    return info.used_by_process;
}

static int64_t device_used(void)
{
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(gpu, &m), VR_OK);
    return (int64_t)(m.total - m.free);
}

static void reserved_is_device_used(const char *policy)
{
    vr_device_synchronize(gpu);
    int64_t proc0 = process_used(), dev0 = device_used();
    vr_alloc *a = make_alloc(gpu, policy, NULL);
    void *ptrs[96];
    uint64_t rng = 77;
    for (int i = 0; i < 96; i++) {
        size_t size = (i % 8 == 0) ? (size_t)(next_rand(&rng) % (300 * MiB)) + MiB
                                   : (size_t)(next_rand(&rng) % (3 * MiB)) + 4 * KiB;
        ptrs[i] = xmalloc(a, size, 0);
    }
    for (int i = 0; i < 96; i += 3) /* free a third: cached, still reserved */
        xfree(a, ptrs[i]);
    vr_device_synchronize(gpu);
    vr_alloc_stats s = stats_of(a);
    int64_t reserved = s.reserved_bytes[VR_POOL_ALL].current;
    int64_t proc = process_used(), dev = device_used();
    print_message("%s: reserved %lld B; NVML process used +%lld B; device used +%lld B\n", policy,
                  (long long)reserved, (long long)(proc - proc0), (long long)(dev - dev0));
    if (proc0 >= 0 && proc >= 0)
        assert_int_equal(proc - proc0, reserved);
    assert_int_equal(dev - dev0, reserved);
    for (int i = 0; i < 96; i++)
        if (i % 3)
            xfree(a, ptrs[i]);
    vr_alloc_empty_cache(a);
    vr_device_synchronize(gpu);
    assert_int_equal(stats_of(a).reserved_bytes[VR_POOL_ALL].current, 0);
    assert_int_equal(device_used() - dev0, 0);
    vr_alloc_destroy(a);
}

static void reserved_matches_gpu(void **state)
{
    (void)state;
    if (!gpu)
        skip();
    reserved_is_device_used("pytorch");
    reserved_is_device_used("expandable");
    reserved_is_device_used("stitch");
}

int main(void)
{
    if (vr_device_open("cuda", &gpu) != VR_OK) {
        printf("no GPU (%s): the CUDA allocator tests are skipped\n", vr_last_error());
        gpu = NULL;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_pytorch),
        cmocka_unit_test(random_expandable),
        cmocka_unit_test(expandable_tiles_and_unmaps),
        cmocka_unit_test(reserved_matches_gpu),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (gpu)
        vr_device_close(gpu);
    return rc;
}
