#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram/util.h"

static void parses_units(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(vr_parse_size("4096", "x", &v), VR_OK); assert_int_equal(v, 4096);
    assert_int_equal(vr_parse_size("2MiB", "x", &v), VR_OK); assert_int_equal(v, 2 * VR_MiB);
    assert_int_equal(vr_parse_size("80GiB", "x", &v), VR_OK); assert_true(v == 80 * VR_GiB);
    assert_int_equal(vr_parse_size("16G", "x", &v), VR_OK); assert_true(v == 16 * VR_GiB);
    assert_int_equal(vr_parse_size("1.5GB", "x", &v), VR_OK); assert_true(v == 1500000000ull);
}

static void rejects_garbage_naming_the_flag(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(vr_parse_size("lots", "--capacity", &v), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "--capacity"));
    assert_int_equal(vr_parse_size("3 parsecs", "--capacity", &v), VR_ERR_INVALID);
    assert_int_equal(vr_parse_size("-1", "--capacity", &v), VR_ERR_INVALID);
    long long i;
    assert_int_equal(vr_parse_int("12x", "--batch", 1, 100, &i), VR_ERR_INVALID);
    assert_int_equal(vr_parse_int("101", "--batch", 1, 100, &i), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "--batch"));
}

static void formats_sizes(void **state)
{
    (void)state;
    char b[32];
    assert_string_equal(vr_format_size(512, b, sizeof b), "512 B");
    assert_string_equal(vr_format_size(3 * VR_MiB / 2, b, sizeof b), "1.50 MiB");
    assert_string_equal(vr_format_size(22 * VR_GiB + VR_GiB / 2, b, sizeof b), "22.50 GiB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_units),
        cmocka_unit_test(rejects_garbage_naming_the_flag),
        cmocka_unit_test(formats_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
