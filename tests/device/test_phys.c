/* Physical memory handles (vr_device_phys_*): meta counts them against the
 * capacity, maps one handle at several addresses, refuses overlaps and bad
 * alignment; cpu says unsupported. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram/device.h"
#include "vram/status.h"

#define MiB ((size_t)1 << 20)

static uint64_t used(vr_device *d)
{
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(d, &m), VR_OK);
    return m.used_by_us;
}

static void meta_maps_one_handle_twice(void **state)
{
    (void)state;
    vr_device *d = NULL;
    assert_int_equal(vr_device_open("meta:8MiB", &d), VR_OK);
    size_t g = vr_device_vm_granularity(d);
    vr_phys *ph = NULL, *big = NULL;
    assert_int_equal(vr_device_phys_create(d, 2 * g, &ph), VR_OK);
    assert_int_equal(used(d), 2 * g);
    void *r1 = NULL, *r2 = NULL;
    assert_int_equal(vr_device_vm_reserve(d, 2 * g, &r1), VR_OK);
    assert_int_equal(vr_device_vm_reserve(d, g, &r2), VR_OK);
    assert_int_equal(vr_device_phys_map(d, r1, ph, 0, 2 * g), VR_OK);
    assert_int_equal(vr_device_phys_map(d, r2, ph, g, g), VR_OK); /* the second granule again */
    assert_int_equal(used(d), 2 * g); /* mapping costs nothing */
    assert_int_equal(vr_device_phys_map(d, r2, ph, 0, g), VR_ERR_INVALID); /* already mapped there */
    assert_int_equal(vr_device_phys_map(d, (char *)r1 + 1, ph, 0, g), VR_ERR_INVALID); /* unaligned */
    assert_int_equal(vr_device_phys_map(d, r2, ph, 2 * g, g), VR_ERR_INVALID); /* past the handle */
    assert_int_equal(vr_device_phys_create(d, 3 * g, &big), VR_ERR_OOM); /* 4 + 6 > 8 MiB */
    assert_non_null(strstr(vr_last_error(), "out of memory"));
    assert_int_equal(vr_device_phys_create(d, g + 1, &big), VR_ERR_INVALID);
    vr_device_phys_unmap(d, r1, 2 * g);
    vr_device_phys_unmap(d, r2, g);
    vr_device_vm_release(d, r1, 2 * g);
    vr_device_vm_release(d, r2, g);
    vr_device_phys_release(d, ph);
    assert_int_equal(used(d), 0);
    vr_device_close(d);
}

static void meta_unmaps_several_mappings_at_once(void **state)
{
    (void)state;
    vr_device *d = NULL;
    assert_int_equal(vr_device_open("meta", &d), VR_OK);
    size_t g = vr_device_vm_granularity(d);
    vr_phys *a = NULL, *b = NULL;
    assert_int_equal(vr_device_phys_create(d, g, &a), VR_OK);
    assert_int_equal(vr_device_phys_create(d, g, &b), VR_OK);
    void *r = NULL;
    assert_int_equal(vr_device_vm_reserve(d, 3 * g, &r), VR_OK);
    assert_int_equal(vr_device_phys_map(d, r, a, 0, g), VR_OK);
    assert_int_equal(vr_device_phys_map(d, (char *)r + g, b, 0, g), VR_OK);
    assert_int_equal(vr_device_phys_map(d, (char *)r + 2 * g, a, 0, g), VR_OK);
    vr_device_phys_unmap(d, r, 3 * g);
    vr_device_vm_release(d, r, 3 * g); /* aborts if anything were still mapped */
    vr_device_phys_release(d, a);
    vr_device_phys_release(d, b);
    assert_int_equal(used(d), 0);
    vr_device_close(d);
}

static void cpu_is_unsupported(void **state)
{
    (void)state;
    vr_device *d = NULL;
    assert_int_equal(vr_device_open("cpu", &d), VR_OK);
    vr_phys *ph = NULL;
    assert_int_equal(vr_device_phys_create(d, 2 * MiB, &ph), VR_ERR_UNSUPPORTED);
    assert_null(ph);
    vr_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(meta_maps_one_handle_twice),
        cmocka_unit_test(meta_unmaps_several_mappings_at_once),
        cmocka_unit_test(cpu_is_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
