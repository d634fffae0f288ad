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

/* Sizes between 2^63 and 2^64 bytes are exact-ish, at or above 2^64 refused (no silent wrap). */
static void huge_sizes_fit_or_are_refused(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(vr_parse_size("9223372036854775808", "--capacity", &v), VR_OK); /* 2^63 */
    assert_true(v == (uint64_t)1 << 63);
    assert_int_equal(vr_parse_size("12000000000000000000", "--capacity", &v), VR_OK);
    assert_true(v == 12000000000000000000ull);
    assert_int_equal(vr_parse_size("18446744073709551616", "--capacity", &v), VR_ERR_INVALID); /* 2^64 */
    assert_non_null(strstr(vr_last_error(), "18446744073709551616"));
    assert_int_equal(vr_parse_size("16777216TiB", "--capacity", &v), VR_ERR_INVALID); /* 2^64 */
    assert_int_equal(vr_parse_size("1e30", "--capacity", &v), VR_ERR_INVALID);
}

static void checked_arithmetic(void **state)
{
    (void)state;
    int64_t r = 7;
    assert_true(vr_mul_i64(3, 5, &r) && r == 15);
    assert_false(vr_mul_i64(INT64_MAX / 2 + 1, 2, &r));
    assert_int_equal(r, 15);
    assert_false(vr_mul_i64(-1, 2, &r));
    assert_true(vr_add_i64(INT64_MAX - 1, 1, &r) && r == INT64_MAX);
    assert_false(vr_add_i64(INT64_MAX, 1, &r));
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
        cmocka_unit_test(huge_sizes_fit_or_are_refused),
        cmocka_unit_test(checked_arithmetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
