/* vr_expf: NaN in -> NaN out with no float-to-int conversion of NaN (run under UBSan); the range ends. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/kernels_cpu.h"

static void nan_in_nan_out(void **state)
{
    (void)state;
    volatile float nan = NAN;
    assert_true(isnan(vr_expf(nan)));
    assert_true(isnan(vr_expf(-nan)));
    assert_true(fabsf(vr_expf(1.0f) - 2.7182817f) < 1e-6f);
    assert_true(vr_expf(-INFINITY) < 1e-37f);
    assert_true(vr_expf(INFINITY) > 1e38f);
    /* through a kernel: gelu of NaN is NaN, its neighbours are untouched */
    float in[3] = {1.0f, NAN, -1.0f}, out[3];
    vr_cpu_gelu_fwd(out, in, 3);
    assert_true(isnan(out[1]));
    assert_true(fabsf(out[0] - 0.8411920f) < 1e-5f);
    assert_true(fabsf(out[2] + 0.1588080f) < 1e-5f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nan_in_nan_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
