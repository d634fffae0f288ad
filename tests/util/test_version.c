/* The version: the generated macros, vr_version(), project(VERSION) in CMakeLists.txt and `vram --version`
 * all say the same. */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram/version.h"

static void macros_and_function_agree(void **state)
{
    (void)state;
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", VR_VERSION_MAJOR, VR_VERSION_MINOR, VR_VERSION_PATCH);
    assert_string_equal(v, VR_VERSION_STRING);
    assert_string_equal(vr_version(), VR_VERSION_STRING);
}

/* project(vram VERSION x.y.z ...) in the top CMakeLists.txt is where the version comes from. */
static void comes_from_the_cmake_project(void **state)
{
    (void)state;
    const char *src = getenv("VRAM_SOURCE_DIR");
    if (!src)
        skip();
    char path[4096], line[512], want[128];
    snprintf(path, sizeof path, "%s/CMakeLists.txt", src);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    snprintf(want, sizeof want, "project(vram VERSION %s ", VR_VERSION_STRING);
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = !strncmp(line, want, strlen(want));
    fclose(f);
    if (!found)
        fail_msg("%s has no line starting '%s'", path, want);
}

static void the_command_prints_it(void **state)
{
    (void)state;
    const char *bin = getenv("VRAM_BINARY");
    if (!bin)
        skip();
    char cmd[4200], out[256] = "", want[128];
    snprintf(cmd, sizeof cmd, "'%s' --version", bin);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    assert_int_equal(pclose(p), 0);
    snprintf(want, sizeof want, "vram %s\n", VR_VERSION_STRING);
    assert_string_equal(out, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(macros_and_function_agree),
        cmocka_unit_test(comes_from_the_cmake_project),
        cmocka_unit_test(the_command_prints_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
