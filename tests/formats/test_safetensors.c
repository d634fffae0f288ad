/* safetensors: write then read back with conversions, the file checked by an
 * independent Python parser, sharded directories, and headers that lie (each
 * refused with one line naming the file and the tensor). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "vram/safetensors.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/vram_st_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const uint16_t B_BF16[4] = {0x3f80, 0xc000, 0x3f00, 0x4050};   /* 1, -2, 0.5, 3.25 */
static const uint16_t C_F16[4] = {0x3e00, 0xb400, 0x7bff, 0x0400};    /* 1.5, -0.25, 65504, 2^-14 */

static void write_sample(const char *path)
{
    float a[6], s = 7;
    for (int i = 0; i < 6; i++) a[i] = i * 0.5f - 1;
    vr_st_write_tensor t[4] = {
        {"a", VR_F32, 2, {2, 3}, a},
        {"b", VR_BF16, 1, {4}, B_BF16},
        {"c", VR_F16, 2, {2, 2}, C_F16},
        {"s", VR_F32, 0, {0}, &s},
    };
    const char *k[2] = {"format", "producer"}, *v[2] = {"pt", "vram"};
    assert_int_equal(vr_st_write(path, t, 4, k, v, 2), VR_OK);
}

static void round_trip(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    write_sample(path);
    vr_safetensors *st;
    assert_int_equal(vr_st_open(path, &st), VR_OK);
    assert_int_equal(vr_st_count(st), 4);
    assert_string_equal(vr_st_metadata(st, "format"), "pt");
    const vr_st_tensor *a = vr_st_find(st, "a");
    assert_non_null(a);
    assert_int_equal(a->ndim, 2);
    assert_int_equal(a->shape[1], 3);
    assert_int_equal(a->nbytes, 24);
    float f[6];
    assert_int_equal(vr_st_read(st, "a", VR_F32, f, sizeof f), VR_OK);
    for (int i = 0; i < 6; i++) assert_true(f[i] == i * 0.5f - 1);
    /* bf16 -> f32 and f16, f16 -> f32 and bf16 */
    assert_int_equal(vr_st_read(st, "b", VR_F32, f, sizeof f), VR_OK);
    assert_true(f[0] == 1 && f[1] == -2 && f[2] == 0.5f && f[3] == 3.25f);
    uint16_t h[4];
    assert_int_equal(vr_st_read(st, "b", VR_F16, h, sizeof h), VR_OK);
    assert_int_equal(h[0], 0x3c00);
    assert_int_equal(h[1], 0xc000);
    assert_int_equal(vr_st_read(st, "c", VR_F32, f, sizeof f), VR_OK);
    assert_true(f[0] == 1.5f && f[1] == -0.25f && f[2] == 65504.0f && f[3] == 1.0f / 16384);
    assert_int_equal(vr_st_read(st, "c", VR_BF16, h, sizeof h), VR_OK);
    assert_int_equal(h[0], 0x3fc0);
    assert_int_equal(h[2], 0x4780); /* 65504 rounds to 65536 in bf16 */
    assert_int_equal(vr_st_read(st, "s", VR_F32, f, 4), VR_OK);
    assert_true(f[0] == 7);
    /* a destination too small, a missing tensor */
    assert_int_equal(vr_st_read(st, "a", VR_F32, f, 20), VR_ERR_INVALID);
    assert_non_null(strstr(vr_last_error(), "\"a\""));
    assert_int_equal(vr_st_read(st, "zz", VR_F32, f, sizeof f), VR_ERR_INVALID);
    vr_st_close(st);
}

static void python_reads_it(void **state)
{
    (void)state;
    char path[300], cmd[1200];
    snprintf(path, sizeof path, "%s/py.safetensors", dir);
    write_sample(path);
    const char *src = getenv("VRAM_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/formats/st_check.py' '%s'", src ? src : ".", path);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
}

static void conversions_round(void **state)
{
    (void)state;
    float in[6] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 70000.0f, 1e-8f, -3.0e-5f, 0.1f};
    uint16_t bf[6], hf[6];
    vr_convert(VR_BF16, bf, VR_F32, in, 6);
    assert_int_equal(bf[0], 0x3f80); /* halfway, to even */
    assert_int_equal(bf[1], 0x3f82);
    vr_convert(VR_F16, hf, VR_F32, in, 6);
    assert_int_equal(hf[2], 0x7c00); /* overflow -> inf */
    assert_int_equal(hf[3], 0x0000); /* underflow -> 0 */
    assert_int_equal(hf[5], 0x2e66); /* 0.1 */
    float back[6];
    vr_convert(VR_F32, back, VR_F16, hf, 6);
    assert_true(back[4] < -2.9e-5f && back[4] > -3.1e-5f); /* subnormal f16 */
}

/* A file of one header (padded to 8) and nbytes of data. */
static void raw_file(const char *path, const char *json, size_t nbytes, uint64_t fake_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = fake_len ? fake_len : strlen(json);
    fwrite(&n, 8, 1, f);
    fwrite(json, 1, strlen(json), f);
    for (size_t i = 0; i < nbytes; i++) fputc(0, f);
    fclose(f);
}

static void expect_bad(const char *json, size_t nbytes, uint64_t fake_len, const char *want)
{
    char path[300];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    raw_file(path, json, nbytes, fake_len);
    vr_safetensors *st = (vr_safetensors *)1;
    vr_status s = vr_st_open(path, &st);
    assert_int_not_equal(s, VR_OK);
    assert_null(st);
    const char *e = vr_last_error();
    if (!strstr(e, want) || !strstr(e, "bad.safetensors") || strchr(e, '\n'))
        fail_msg("message \"%s\" lacks \"%s\" or the file", e, want);
    /* the same bytes from memory */
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_not_equal(vr_st_open_memory("bad.safetensors", buf, n, &st), VR_OK);
    assert_non_null(strstr(vr_last_error(), want));
}

static void lying_headers(void **state)
{
    (void)state;
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, 0, "\"w\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 16, 0, "needs 16");
    expect_bad("{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, 0, "dtype \"I64\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0, "\"shape\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
               0, "overflows");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, 0, "overlap");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, 0, "data_offsets");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1000000, "header length");
    expect_bad("{\"w\": [1, 2]", 8, 0, "not a JSON object");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, 0, "__metadata__");
}

static void sharded_directory(void **state)
{
    (void)state;
    char sub[300], p[400];
    snprintf(sub, sizeof sub, "%s/sharded", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    float x[2] = {1, 2}, y[3] = {3, 4, 5};
    vr_st_write_tensor t1 = {"x", VR_F32, 1, {2}, x}, t2 = {"y", VR_F32, 1, {3}, y};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", sub);
    assert_int_equal(vr_st_write(p, &t1, 1, NULL, NULL, 0), VR_OK);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", sub);
    assert_int_equal(vr_st_write(p, &t2, 1, NULL, NULL, 0), VR_OK);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sub);
    FILE *f = fopen(p, "w");
    fputs("{\"metadata\":{\"total_size\":20},\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
          "\"y\":\"model-00002-of-00002.safetensors\"}}",
          f);
    fclose(f);
    vr_safetensors *st;
    assert_int_equal(vr_st_open(sub, &st), VR_OK);
    assert_int_equal(vr_st_count(st), 2);
    float got[3];
    assert_int_equal(vr_st_read(st, "y", VR_F32, got, sizeof got), VR_OK);
    assert_true(got[0] == 3 && got[2] == 5);
    assert_non_null(strstr(vr_st_find(st, "x")->file, "00001"));
    vr_st_close(st);
    /* an index that puts y in the wrong shard */
    f = fopen(p, "w");
    fputs("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00001-of-00002.safetensors\"}}",
          f);
    fclose(f);
    assert_int_equal(vr_st_open(sub, &st), VR_ERR_FORMAT);
    assert_non_null(strstr(vr_last_error(), "\"y\""));
    assert_non_null(strstr(vr_last_error(), "index.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),        cmocka_unit_test(python_reads_it),
        cmocka_unit_test(conversions_round), cmocka_unit_test(lying_headers),
        cmocka_unit_test(sharded_directory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
