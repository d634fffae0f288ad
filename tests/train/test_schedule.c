/* Learning-rate schedules at their key steps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram/schedule.h"

#define NEAR(a, b) assert_true(fabs_((a) - (b)) < 1e-12)
static double fabs_(double x) { return x < 0 ? -x : x; }

static void cosine_key_steps(void **state)
{
    (void)state;
    vr_lr_schedule s = {VR_LR_COSINE, 6e-4, 10, 110, 0.1};
    assert_int_equal(vr_lr_check(&s), VR_OK);
    NEAR(vr_lr_at(&s, 0), 6e-5);      /* warmup: (0+1)/10 of the peak */
    NEAR(vr_lr_at(&s, 4), 3e-4);
    NEAR(vr_lr_at(&s, 9), 6e-4);      /* warmup ends at the peak */
    NEAR(vr_lr_at(&s, 10), 6e-4);     /* decay starts at the peak */
    NEAR(vr_lr_at(&s, 60), 0.5 * (6e-4 + 6e-5)); /* halfway: the midpoint */
    NEAR(vr_lr_at(&s, 110), 6e-5);    /* the floor: min_frac * peak */
    NEAR(vr_lr_at(&s, 100000), 6e-5); /* and it stays there */
    for (int64_t t = 10; t < 110; t++) assert_true(vr_lr_at(&s, t + 1) <= vr_lr_at(&s, t));

    vr_lr_schedule nowarm = {VR_LR_COSINE, 1.0, 0, 4, 0.0};
    NEAR(vr_lr_at(&nowarm, 0), 1.0);
    NEAR(vr_lr_at(&nowarm, 2), 0.5);
    NEAR(vr_lr_at(&nowarm, 4), 0.0);
}

static void constant_key_steps(void **state)
{
    (void)state;
    vr_lr_schedule s = {VR_LR_CONSTANT, 1e-3, 4, 0, 0};
    assert_int_equal(vr_lr_check(&s), VR_OK);
    NEAR(vr_lr_at(&s, 0), 2.5e-4);
    NEAR(vr_lr_at(&s, 3), 1e-3);
    NEAR(vr_lr_at(&s, 4), 1e-3);
    NEAR(vr_lr_at(&s, 1000000), 1e-3);
    s.warmup_steps = 0;
    NEAR(vr_lr_at(&s, 0), 1e-3);
}

static void checks_and_names(void **state)
{
    (void)state;
    vr_lr_schedule s = {VR_LR_COSINE, 1e-3, 200, 100, 0.1};
    assert_int_equal(vr_lr_check(&s), VR_ERR_INVALID); /* warmup > total */
    s = (vr_lr_schedule){VR_LR_COSINE, 0, 0, 100, 0.1};
    assert_int_equal(vr_lr_check(&s), VR_ERR_INVALID);
    s = (vr_lr_schedule){VR_LR_COSINE, 1e-3, 0, 100, 1.5};
    assert_int_equal(vr_lr_check(&s), VR_ERR_INVALID);
    vr_lr_kind k;
    assert_int_equal(vr_lr_parse_kind("cosine", "--lr-schedule", &k), VR_OK);
    assert_int_equal(k, VR_LR_COSINE);
    assert_int_equal(vr_lr_parse_kind("linear", "--lr-schedule", &k), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "--lr-schedule"));
    assert_string_equal(vr_lr_kind_name(VR_LR_CONSTANT), "constant");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cosine_key_steps),
        cmocka_unit_test(constant_key_steps),
        cmocka_unit_test(checks_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
