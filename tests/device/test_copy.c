/* vr_device_memcpy / vr_device_memset: cpu moves bytes, meta refuses. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "device_test.h"

static void cpu_copies_and_fills(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("cpu:1MiB");
    void *a = NULL, *b = NULL;
    assert_int_equal(vr_device_malloc(dev, 4096, &a), VR_OK);
    assert_int_equal(vr_device_malloc(dev, 4096, &b), VR_OK);
    uint8_t host[4096], back[4096];
    for (int i = 0; i < 4096; i++)
        host[i] = (uint8_t)(i * 7);
    assert_int_equal(vr_device_memcpy(dev, a, host, sizeof host, VR_COPY_HOST_TO_DEVICE), VR_OK);
    assert_int_equal(vr_device_memcpy(dev, b, a, sizeof host, VR_COPY_DEVICE_TO_DEVICE), VR_OK);
    assert_int_equal(vr_device_memcpy(dev, back, b, sizeof back, VR_COPY_DEVICE_TO_HOST), VR_OK);
    assert_memory_equal(host, back, sizeof host);
    assert_int_equal(vr_device_memset(dev, b, 0xAB, 100), VR_OK);
    assert_int_equal(vr_device_memcpy(dev, back, b, 101, VR_COPY_DEVICE_TO_HOST), VR_OK);
    assert_int_equal(back[0], 0xAB);
    assert_int_equal(back[99], 0xAB);
    assert_int_equal(back[100], host[100]);
    assert_int_equal(vr_device_memcpy(dev, NULL, a, 0, VR_COPY_DEVICE_TO_HOST), VR_OK); /* 0 bytes: no-op */
    assert_int_equal(vr_device_memcpy(dev, NULL, a, 8, VR_COPY_DEVICE_TO_HOST), VR_ERR_INVALID);
    vr_device_free(dev, a, 4096);
    vr_device_free(dev, b, 4096);
    vr_device_close(dev);
}

static void meta_has_no_bytes(void **state)
{
    (void)state;
    vr_device *dev = open_or_fail("meta");
    void *a = NULL;
    uint8_t host[64] = {0};
    assert_int_equal(vr_device_malloc(dev, 64, &a), VR_OK);
    assert_int_equal(vr_device_memcpy(dev, a, host, 64, VR_COPY_HOST_TO_DEVICE), VR_ERR_UNSUPPORTED);
    assert_non_null(strstr(vr_last_error(), "meta"));
    assert_int_equal(vr_device_memset(dev, a, 0, 64), VR_ERR_UNSUPPORTED);
    vr_device_free(dev, a, 64);
    vr_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_copies_and_fills),
        cmocka_unit_test(meta_has_no_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
