/* The meta device: address space only. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "device_test.h"
#include "vram/util.h"

static void opens_with_default_capacity(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("meta");
    assert_int_equal(vr_device_kind_of(dev), VR_DEVICE_META);
    assert_int_equal(vr_device_index(dev), -1);
    assert_non_null(strstr(vr_device_name(dev), "meta"));
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.total == VR_META_DEFAULT_CAPACITY && m.total == 80 * VR_GiB);
    assert_true(m.free == m.total);
    assert_true(m.used_by_us == 0);
    vr_device_close(dev);

    dev = open_or_fail("meta:16GiB");
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.total == 16 * VR_GiB);
    vr_device_close(dev);
}

static void rejects_bad_specs_naming_them(void **state)
{
    (void)state;
    vr_device *dev = (vr_device *)1;
    assert_int_equal(vr_device_open("meta:lots", &dev), VR_ERR_INVALID);
    assert_null(dev);
    assert_non_null(strstr(vr_last_error(), "meta:lots"));
    assert_int_equal(vr_device_open("meta:0", &dev), VR_ERR_INVALID);
    assert_int_equal(vr_device_open("meta:", &dev), VR_ERR_INVALID);
    assert_int_equal(vr_device_open("tpu", &dev), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "tpu"));
    assert_int_equal(vr_device_open("", &dev), VR_ERR_INVALID);
    assert_int_equal(vr_device_open("metaverse", &dev), VR_ERR_INVALID);
    assert_int_equal(vr_device_open("cuda:x", &dev), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "cuda:x"));
}

typedef struct live { uintptr_t at; size_t bytes; } live;

static int by_address(const void *a, const void *b)
{
    uintptr_t x = ((const live *)a)->at, y = ((const live *)b)->at;
    return x < y ? -1 : x > y;
}

/* Sorts the live blocks and checks that no two overlap and that used_by_us
 * is the sum of their sizes rounded up to 512. */
static void check_live(vr_device *dev, live *l, size_t n)
{
    qsort(l, n, sizeof *l, by_address);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(l[i].at % 512 == 0);
        if (i)
            assert_true(l[i - 1].at + l[i - 1].bytes <= l[i].at);
        sum += (l[i].bytes + 511) / 512 * 512;
    }
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == sum);
    assert_true(vr_device_used_by_us(dev) == sum); /* the books alone, as mem_info */
    assert_true(m.free == m.total - sum);
}

static void random_allocations_never_overlap(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("meta");
    enum { MAX_LIVE = 4000, OPS = 1000000 };
    live *l = calloc(MAX_LIVE, sizeof *l);
    size_t n = 0;
    uint64_t rng = 42;
    for (int op = 0; op < OPS; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = rng >> 33;
        if (n < MAX_LIVE && (n == 0 || r % 2 == 0)) {
            size_t bytes = 1 + (size_t)(r >> 2) % (8u << 20);  /* 1 B .. 8 MiB */
            void *p;
            assert_int_equal(vr_device_malloc(dev, bytes, &p), VR_OK);
            l[n++] = (live){(uintptr_t)p, bytes};
        } else {
            size_t i = (size_t)(r >> 2) % n;
            vr_device_free(dev, (void *)l[i].at, l[i].bytes);
            l[i] = l[--n];
        }
        if (op % 100000 == 0)
            check_live(dev, l, n);
    }
    check_live(dev, l, n);
    for (size_t i = 0; i < n; i++)
        vr_device_free(dev, (void *)l[i].at, l[i].bytes);
    check_live(dev, l, 0);
    free(l);
    vr_device_close(dev);
}

static void out_of_memory_says_so(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("meta:1GiB");
    void *a, *b;
    assert_int_equal(vr_device_malloc(dev, VR_GiB - 1024, &a), VR_OK);
    assert_int_equal(vr_device_malloc(dev, 1024, &b), VR_OK);
    void *c = (void *)1;
    assert_int_equal(vr_device_malloc(dev, 1, &c), VR_ERR_OOM);
    assert_null(c);
    assert_non_null(strstr(vr_last_error(), "out of memory"));
    assert_non_null(strstr(vr_last_error(), "meta"));
    assert_non_null(strstr(vr_last_error(), "1.00 GiB"));
    vr_device_free(dev, b, 1024);
    assert_int_equal(vr_device_malloc(dev, 1000, &c), VR_OK);  /* rounds to 1024: fits again */
    vr_device_free(dev, c, 1000);
    vr_device_free(dev, a, VR_GiB - 1024);
    void *z = (void *)1;
    assert_int_equal(vr_device_malloc(dev, 0, &z), VR_OK);
    assert_null(z);
    vr_device_free(dev, NULL, 0);
    vr_device_close(dev);
}

static void vm_accounts_mapped_granules(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("meta:64MiB");
    size_t g = vr_device_vm_granularity(dev);
    assert_true(g == 2 * VR_MiB);
    void *base;
    assert_int_equal(vr_device_vm_reserve(dev, 3 * g + 1, &base), VR_ERR_INVALID);
    assert_int_equal(vr_device_vm_reserve(dev, 512 * g, &base), VR_OK);  /* 1 GiB of address space */
    assert_true((uintptr_t)base % g == 0);
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 0);  /* reserving costs nothing */

    char *p = base;
    assert_int_equal(vr_device_vm_map(dev, p, 16 * g), VR_OK);
    assert_int_equal(vr_device_vm_map(dev, p + 16 * g, 16 * g), VR_OK);
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 64 * VR_MiB && m.free == 0);
    assert_int_equal(vr_device_vm_map(dev, p + 32 * g, g), VR_ERR_OOM);
    assert_non_null(strstr(vr_last_error(), "out of memory"));
    assert_int_equal(vr_device_vm_map(dev, p + 8 * g, g), VR_ERR_INVALID);       /* already mapped */
    assert_int_equal(vr_device_vm_map(dev, p + 512 * g, g), VR_ERR_INVALID);     /* past the end */
    assert_int_equal(vr_device_vm_map(dev, p + g / 2, g), VR_ERR_INVALID);       /* unaligned */

    vr_device_vm_unmap(dev, p + 4 * g, 2 * g);  /* a hole in the middle of one map call */
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 60 * VR_MiB);
    assert_int_equal(vr_device_vm_map(dev, p + 100 * g, 2 * g), VR_OK);  /* anywhere in the range */
    vr_device_vm_unmap(dev, p + 100 * g, 2 * g);
    assert_int_equal(vr_device_vm_map(dev, p + 4 * g, 2 * g), VR_OK);
    vr_device_vm_unmap(dev, p, 32 * g);
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 0);
    vr_device_vm_release(dev, base, 512 * g);

    /* malloc and vm share the capacity. */
    void *a;
    assert_int_equal(vr_device_vm_reserve(dev, 32 * g, &base), VR_OK);
    assert_int_equal(vr_device_malloc(dev, 61 * VR_MiB, &a), VR_OK);
    assert_int_equal(vr_device_vm_map(dev, base, 2 * g), VR_ERR_OOM);
    assert_int_equal(vr_device_vm_map(dev, base, g), VR_OK);
    vr_device_vm_unmap(dev, base, g);
    vr_device_vm_release(dev, base, 32 * g);
    vr_device_free(dev, a, 61 * VR_MiB);
    vr_device_close(dev);
}

static void double_free(vr_device *dev)
{
    void *p;
    vr_device_malloc(dev, 4096, &p);
    vr_device_free(dev, p, 4096);
    vr_device_free(dev, p, 4096);
}

static void wrong_size_free(vr_device *dev)
{
    void *p;
    vr_device_malloc(dev, 4096, &p);
    vr_device_free(dev, p, 8192);
}

static void release_while_mapped(vr_device *dev)
{
    void *base;
    vr_device_vm_reserve(dev, 4 << 20, &base);
    vr_device_vm_map(dev, base, 2 << 20);
    vr_device_vm_release(dev, base, 4 << 20);
}

static void unmap_unmapped(vr_device *dev)
{
    void *base;
    vr_device_vm_reserve(dev, 4 << 20, &base);
    vr_device_vm_unmap(dev, base, 2 << 20);
}

static void misuse_aborts(void **state)
{
    (void)state;
    assert_true(aborts("meta", double_free));
    assert_true(aborts("meta", wrong_size_free));
    assert_true(aborts("meta", release_while_mapped));
    assert_true(aborts("meta", unmap_unmapped));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(opens_with_default_capacity),
        cmocka_unit_test(rejects_bad_specs_naming_them),
        cmocka_unit_test(random_allocations_never_overlap),
        cmocka_unit_test(out_of_memory_says_so),
        cmocka_unit_test(vm_accounts_mapped_granules),
        cmocka_unit_test(misuse_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
