/* Token files version 2 (uint32 tokens): write, read back, llm.c's version 1
 * widened by vr_tokens_read32, and the uint16 reader refusing version 2. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "vram/data.h"

static void u32_round_trip(void **state)
{
    (void)state;
    char path[] = "/tmp/vram_tok32_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int32_t tok[5] = {0, 65535, 65536, 128255, 7};
    assert_int_equal(vr_tokens_write32(path, tok, 5), VR_OK);
    uint32_t *got;
    uint64_t n;
    assert_int_equal(vr_tokens_read32(path, 128256, &got, &n), VR_OK);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(got[i], (uint32_t)tok[i]);
    free(got);
    /* vocab bound */
    assert_int_equal(vr_tokens_read32(path, 100000, &got, &n), VR_ERR_FORMAT);
    assert_non_null(strstr(vr_last_error(), "128255"));
    /* the uint16 reader refuses version 2 by name */
    uint16_t *t16;
    assert_int_equal(vr_tokens_read(path, 0, &t16, &n), VR_ERR_FORMAT);
    assert_non_null(strstr(vr_last_error(), "version 2"));
    /* version 1 read through the wide reader */
    int32_t small[3] = {1, 2, 65535};
    assert_int_equal(vr_tokens_write(path, small, 3), VR_OK);
    assert_int_equal(vr_tokens_read32(path, 0, &got, &n), VR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(got[2], 65535);
    free(got);
    /* a truncated version-2 file */
    assert_int_equal(vr_tokens_write32(path, tok, 5), VR_OK);
    assert_int_equal(truncate(path, 1024 + 18), 0);
    assert_int_equal(vr_tokens_read32(path, 0, &got, &n), VR_ERR_FORMAT);
    assert_non_null(strstr(vr_last_error(), "truncated"));
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(u32_round_trip)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
