/* The communicator without other processes: the self engine (a world of one), the argument checks every
 * engine shares, and the queries about MPI and NCCL (which must answer, not crash, on any machine). The
 * MPI engine with real processes is tests/dist/mpi_collectives.c, run under mpirun (dist/mpi_np2, _np3). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram/dist.h"

static vr_comm *self_or_fail(void)
{
    vr_comm *c = NULL;
    if (vr_comm_self(&c) != VR_OK)
        fail_msg("vr_comm_self: %s", vr_last_error());
    return c;
}

static void self_is_a_world_of_one(void **state)
{
    (void)state;
    vr_comm *c = self_or_fail();
    assert_int_equal(vr_comm_rank(c), 0);
    assert_int_equal(vr_comm_size(c), 1);
    assert_int_equal(vr_comm_engine_of(c), VR_COMM_SELF);
    assert_string_equal(vr_comm_engine_name(c), "self");
    assert_true(vr_comm_own_bytes(c) == 0);
    vr_comm_free(c);
    vr_comm_free(NULL);
}

static void self_collectives_leave_buffers_as_they_are(void **state)
{
    (void)state;
    vr_comm *c = self_or_fail();
    float f[5] = {1.5f, -2, 3, 0.25f, 1e30f};
    uint16_t h[3] = {0x3f80, 0xc000, 0x7f80};  /* bf16 1, -2, inf */
    int32_t i[4] = {1, -7, 42, INT32_MAX};
    uint8_t u[3] = {0, 7, 255};
    float f0[5];
    memcpy(f0, f, sizeof f);
    assert_int_equal(vr_comm_allreduce(c, f, 5, VR_F32, VR_COMM_SUM, NULL), VR_OK);
    assert_int_equal(vr_comm_allreduce(c, f, 5, VR_F32, VR_COMM_AVG, NULL), VR_OK);
    assert_int_equal(vr_comm_reduce(c, f, 5, VR_F32, VR_COMM_SUM, 0, NULL), VR_OK);
    assert_memory_equal(f, f0, sizeof f);
    assert_int_equal(vr_comm_allreduce(c, h, 3, VR_BF16, VR_COMM_AVG, NULL), VR_OK);
    assert_int_equal(vr_comm_allreduce(c, h, 3, VR_F16, VR_COMM_SUM, NULL), VR_OK);
    assert_true(h[0] == 0x3f80 && h[1] == 0xc000 && h[2] == 0x7f80);
    assert_int_equal(vr_comm_broadcast(c, i, 4, VR_I32, 0, NULL), VR_OK);
    assert_int_equal(vr_comm_broadcast(c, u, 3, VR_U8, 0, NULL), VR_OK);
    assert_int_equal(vr_comm_broadcast(c, f, 5, VR_F32, 0, NULL), VR_OK);
    assert_true(i[1] == -7 && i[3] == INT32_MAX && u[2] == 255);
    assert_int_equal(vr_comm_group_begin(c), VR_OK);
    assert_int_equal(vr_comm_allreduce(c, f, 5, VR_F32, VR_COMM_SUM, NULL), VR_OK);
    assert_int_equal(vr_comm_group_end(c), VR_OK);
    double v[2] = {3.5, -1};
    assert_int_equal(vr_comm_sum_host(c, v, 2), VR_OK);
    assert_int_equal(vr_comm_min_host(c, v, 2), VR_OK);
    assert_true(v[0] == 3.5 && v[1] == -1);
    /* nothing to do: any buffer, even none */
    assert_int_equal(vr_comm_allreduce(c, NULL, 0, VR_F32, VR_COMM_SUM, NULL), VR_OK);
    assert_int_equal(vr_comm_broadcast(c, NULL, 0, VR_U8, 0, NULL), VR_OK);
    assert_int_equal(vr_comm_sum_host(c, NULL, 0), VR_OK);
    vr_comm_free(c);
}

/* Each bad call fails with VR_ERR_INVALID and a "dist: " message naming the collective. */
static void expect_invalid(vr_status st, const char *what)
{
    assert_int_equal(st, VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "dist: "));
    if (!strstr(vr_last_error(), what))
        fail_msg("'%s' does not name %s", vr_last_error(), what);
}

static void bad_arguments_are_refused(void **state)
{
    (void)state;
    vr_comm *c = self_or_fail();
    float f[2] = {1, 2};
    int32_t i[2] = {1, 2};
    double v[1] = {0};
    expect_invalid(vr_comm_allreduce(c, f, -1, VR_F32, VR_COMM_SUM, NULL), "allreduce");
    expect_invalid(vr_comm_allreduce(c, NULL, 2, VR_F32, VR_COMM_SUM, NULL), "allreduce");
    expect_invalid(vr_comm_allreduce(c, i, 2, VR_I32, VR_COMM_SUM, NULL), "allreduce");
    expect_invalid(vr_comm_allreduce(c, i, 2, VR_U8, VR_COMM_SUM, NULL), "allreduce");
    expect_invalid(vr_comm_allreduce(c, f, 2, VR_DTYPE_COUNT, VR_COMM_SUM, NULL), "allreduce");
    expect_invalid(vr_comm_allreduce(c, f, 2, VR_F32, (vr_comm_op)7, NULL), "allreduce");
    expect_invalid(vr_comm_reduce(c, f, 2, VR_F32, VR_COMM_SUM, 1, NULL), "reduce");
    expect_invalid(vr_comm_reduce(c, f, 2, VR_F32, VR_COMM_SUM, -1, NULL), "reduce");
    expect_invalid(vr_comm_reduce(c, i, 2, VR_I32, VR_COMM_AVG, 0, NULL), "reduce");
    expect_invalid(vr_comm_reduce(c, NULL, 1, VR_BF16, VR_COMM_AVG, 0, NULL), "reduce");
    expect_invalid(vr_comm_broadcast(c, i, 2, VR_I32, 1, NULL), "broadcast");
    expect_invalid(vr_comm_broadcast(c, i, -3, VR_I32, 0, NULL), "broadcast");
    expect_invalid(vr_comm_broadcast(c, NULL, 2, VR_U8, 0, NULL), "broadcast");
    expect_invalid(vr_comm_broadcast(c, i, 2, VR_DTYPE_COUNT, 0, NULL), "broadcast");
    expect_invalid(vr_comm_sum_host(c, NULL, 1), "sum_host");
    expect_invalid(vr_comm_min_host(c, v, -1), "min_host");
    expect_invalid(vr_comm_allreduce(NULL, f, 2, VR_F32, VR_COMM_SUM, NULL), "allreduce");
    expect_invalid(vr_comm_group_begin(NULL), "group_begin");
    assert_true(f[0] == 1 && f[1] == 2 && i[0] == 1 && i[1] == 2);
    vr_comm_free(c);
}

static void mpi_launch_is_read_from_the_environment(void **state)
{
    (void)state;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    assert_false(vr_comm_mpi_launched());
    setenv("PMI_SIZE", "4", 1);
    assert_true(vr_comm_mpi_launched());
    unsetenv("PMI_SIZE");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    assert_true(vr_comm_mpi_launched());
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_false(vr_comm_mpi_launched());
    /* without MPI in the build, vr_comm_mpi says how to get it (not called with MPI: that would start a
     * singleton MPI world, which dist/mpi_np* cover with a launcher) */
    if (!vr_comm_mpi_built()) {
        vr_comm *c = (vr_comm *)1;
        assert_int_equal(vr_comm_mpi(&c), VR_ERR_UNSUPPORTED);
        assert_null(c);
        assert_non_null(strstr(vr_last_error(), "libopenmpi-dev"));
    }
}

static void nccl_queries_answer_anywhere(void **state)
{
    (void)state;
    int version = -1;
    bool ok = vr_comm_nccl_available(&version);
    assert_true(ok ? version >= 21000 : version == 0);
    assert_true(vr_comm_nccl_available(NULL) == ok);
    vr_comm *c = (vr_comm *)1;
    /* bad arguments fail before anything is loaded or joined */
    assert_int_not_equal(vr_comm_nccl("00", 0, 1, &c), VR_OK);
    assert_null(c);
    assert_int_not_equal(vr_comm_nccl(NULL, 2, 2, &c), VR_OK);
    if (!ok) {
        char hex[VR_COMM_ID_HEX] = "x";
        assert_int_equal(vr_comm_nccl_id(hex), VR_ERR_UNSUPPORTED);
        assert_string_equal(hex, "");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(self_is_a_world_of_one),
        cmocka_unit_test(self_collectives_leave_buffers_as_they_are),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(mpi_launch_is_read_from_the_environment),
        cmocka_unit_test(nccl_queries_answer_anywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
