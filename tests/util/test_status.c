/* vr_error: a message may quote the previous one (vr_last_error() as an argument). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram/status.h"

static void error_may_quote_the_last_error(void **state)
{
    (void)state;
    vr_error(VR_ERR_INVALID, "warmup 5 exceeds steps 3");
    assert_int_equal(vr_error(VR_ERR_INVALID, "vr_train_config.warmup: %s", vr_last_error()), VR_ERR_INVALID);
    assert_string_equal(vr_last_error(), "vr_train_config.warmup: warmup 5 exceeds steps 3");
    vr_clear_error();
    assert_string_equal(vr_last_error(), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_may_quote_the_last_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
