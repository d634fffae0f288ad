/* The cpu device: host memory with an optional capacity. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "device_test.h"
#include "vram/util.h"

static void uncapped_reports_host_ram(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("cpu");
    assert_int_equal(vr_device_kind_of(dev), VR_DEVICE_CPU);
    assert_string_equal(vr_device_name(dev), "cpu");
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.total > 64 * VR_MiB);
    assert_true(m.free > 0 && m.free <= m.total);
    assert_true(m.used_by_us == 0);
    vr_device_close(dev);
}

static void allocates_aligned_writable_memory(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("cpu:64MiB");
    void *p[16];
    for (int i = 0; i < 16; i++) {
        size_t bytes = (size_t)(i + 1) * 1000;
        assert_int_equal(vr_device_malloc(dev, bytes, &p[i]), VR_OK);
        assert_true((uintptr_t)p[i] % 512 == 0);
        memset(p[i], i, bytes);
    }
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    uint64_t want = 0;
    for (int i = 0; i < 16; i++)
        want += ((uint64_t)(i + 1) * 1000 + 511) / 512 * 512;
    assert_true(m.used_by_us == want);
    assert_true(vr_device_used_by_us(dev) == want); /* the books alone, as mem_info */
    for (int i = 0; i < 16; i++)
        vr_device_free(dev, p[i], (size_t)(i + 1) * 1000);
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 0);
    assert_true(vr_device_used_by_us(dev) == 0);
    vr_device_close(dev);
}

static void capacity_gives_out_of_memory(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("cpu:1MiB");
    assert_non_null(strstr(vr_device_name(dev), "1.00 MiB"));
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.total == VR_MiB);
    void *a, *b = (void *)1;
    assert_int_equal(vr_device_malloc(dev, 512 * VR_KiB, &a), VR_OK);
    assert_int_equal(vr_device_malloc(dev, 600 * VR_KiB, &b), VR_ERR_OOM);
    assert_null(b);
    const char *msg = vr_last_error();
    assert_non_null(strstr(msg, "cpu"));
    assert_non_null(strstr(msg, "out of memory"));
    assert_non_null(strstr(msg, "600.00 KiB"));
    assert_non_null(strstr(msg, "512.00 KiB in use"));
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 512 * VR_KiB && m.free <= 512 * VR_KiB);
    assert_int_equal(vr_device_malloc(dev, 512 * VR_KiB, &b), VR_OK);  /* exactly full */
    vr_device_free(dev, a, 512 * VR_KiB);
    vr_device_free(dev, b, 512 * VR_KiB);
    assert_int_equal(vr_device_malloc(dev, VR_MiB, &a), VR_OK);
    vr_device_free(dev, a, VR_MiB);
    vr_device_close(dev);

    assert_int_equal(vr_device_open("cpu:-5", &dev), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "cpu:-5"));
}

static void vm_maps_real_pages(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("cpu:8MiB");
    size_t g = vr_device_vm_granularity(dev);
    assert_true(g == 2 * VR_MiB);
    void *base;
    assert_int_equal(vr_device_vm_reserve(dev, 64 * g, &base), VR_OK);  /* more than the cap: fine */
    assert_true((uintptr_t)base % g == 0);
    char *p = base;
    assert_int_equal(vr_device_vm_map(dev, p, 2 * g), VR_OK);
    memset(p, 0xab, 2 * g);
    assert_int_equal(vr_device_vm_map(dev, p + 10 * g, 2 * g), VR_OK);
    p[10 * g] = 1;
    assert_int_equal(vr_device_vm_map(dev, p + 20 * g, g), VR_ERR_OOM);
    assert_non_null(strstr(vr_last_error(), "out of memory"));
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 8 * VR_MiB);
    vr_device_vm_unmap(dev, p + g, g);  /* half of the first map call */
    assert_int_equal(vr_device_vm_map(dev, p + 20 * g, g), VR_OK);
    p[20 * g] = 2;
    assert_true((unsigned char)p[0] == 0xab);
    vr_device_vm_unmap(dev, p + 20 * g, g);
    assert_int_equal(vr_device_vm_map(dev, p + g, g), VR_OK);
    assert_true(p[g] == 0);  /* given back and mapped afresh: zero pages */
    vr_device_vm_unmap(dev, p, 2 * g);
    vr_device_vm_unmap(dev, p + 10 * g, 2 * g);
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 0);
    vr_device_vm_release(dev, base, 64 * g);
    vr_device_close(dev);
}

static void free_unknown(vr_device *dev)
{
    static char buf[1024];
    vr_device_free(dev, buf, sizeof buf);
}

static void misuse_aborts(void **state)
{
    (void)state;
    assert_true(aborts("cpu", free_unknown));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(uncapped_reports_host_ram),
        cmocka_unit_test(allocates_aligned_writable_memory),
        cmocka_unit_test(capacity_gives_out_of_memory),
        cmocka_unit_test(vm_maps_real_pages),
        cmocka_unit_test(misuse_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
