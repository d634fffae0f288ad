/* llm.c GPT-2 model files: sizes, bit-exact round trip, every corrupt-file and
 * shape-mismatch error, and failed saves that keep the previous file. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/atomic_file.h"
#include "vram/checkpoint.h"

static const char *dir;

static int setup(void **state) { (void)state; dir = tt_scratch_dir("ckpt"); return 0; }
static int teardown(void **state) { (void)state; tt_remove_dir(dir); return 0; }

#define ERR_HAS(s) assert_non_null(strstr(vr_last_error(), (s)))

static const vr_llmc_config tiny = {
    .max_seq_len = 16, .vocab_size = 50, .padded_vocab_size = 64, .num_layers = 2, .num_heads = 2, .channels = 8};

/* Parameters with awkward bit patterns: -0, denormals, inf, NaN payloads. */
static float *make_params(size_t n)
{
    float *p = malloc(n * sizeof *p);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        memcpy(&p[i], &x, 4);
    }
    p[0] = -0.0f;
    p[1] = 1e-45f;
    p[2] = INFINITY;
    return p;
}

static void sizes_match_llmc(void **state)
{
    (void)state;
    vr_llmc_config gpt2 = {1024, 50257, 50304, 12, 12, 768};
    assert_int_equal(vr_llmc_num_params(&gpt2), 124475904); /* llm.c prints this for gpt2_124M.bin */
    size_t s[VR_LLMC_NUM_TENSORS];
    vr_llmc_param_sizes(&tiny, s);
    assert_int_equal(s[0], 64 * 8);          /* wte (Vp,C) */
    assert_int_equal(s[4], 2 * 3 * 8 * 8);   /* qkvw (L,3C,C) */
    assert_int_equal(s[12], 2 * 8 * 4 * 8);  /* fcprojw (L,C,4C) */
    assert_string_equal(vr_llmc_tensor_name(6), "attprojw");
    assert_string_equal(vr_llmc_tensor_name(15), "lnfb");
}

static void round_trip_is_bit_exact(void **state)
{
    (void)state;
    size_t n = vr_llmc_num_params(&tiny);
    float *p = make_params(n), *q = calloc(n, sizeof *q);
    const char *path = tt_path(dir, "tiny.bin");
    assert_int_equal(vr_llmc_save(path, &tiny, p, n), VR_OK);

    size_t bytes;
    uint8_t *file = tt_read(path, &bytes);
    assert_int_equal(bytes, 1024 + 4 * n);
    int32_t h[8];
    memcpy(h, file, sizeof h);
    int32_t want[8] = {20240326, 3, 16, 50, 2, 2, 8, 64};
    assert_memory_equal(h, want, sizeof want);
    for (size_t i = 8; i < 256; i++) assert_int_equal(((int32_t *)file)[i], 0);
    free(file);

    vr_llmc_config got;
    assert_int_equal(vr_llmc_read_header(path, &got), VR_OK);
    assert_memory_equal(&got, &tiny, sizeof tiny);
    assert_int_equal(vr_llmc_load(path, &tiny, q, n), VR_OK);
    assert_memory_equal(p, q, n * sizeof *p);
    memset(q, 0, n * sizeof *q);
    assert_int_equal(vr_llmc_load(path, NULL, q, n), VR_OK); /* no model to match */
    assert_memory_equal(p, q, n * sizeof *p);
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
    free(p);
    free(q);
}

/* Writes the good file with one header int changed, or truncated to `keep` bytes. */
static const char *variant(const char *name, int index, int32_t value, size_t keep)
{
    size_t n = vr_llmc_num_params(&tiny), bytes;
    float *p = make_params(n);
    const char *good = tt_path(dir, "good.bin");
    assert_int_equal(vr_llmc_save(good, &tiny, p, n), VR_OK);
    free(p);
    uint8_t *b = tt_read(good, &bytes);
    if (index >= 0) memcpy(b + 4 * index, &value, 4);
    const char *path = tt_path(dir, name);
    tt_write(path, b, keep && keep < bytes ? keep : bytes);
    free(b);
    return path;
}

static void corrupt_files_are_refused(void **state)
{
    (void)state;
    size_t n = vr_llmc_num_params(&tiny);
    float *q = malloc(n * sizeof *q);
    vr_llmc_config cfg;
    const char *p;

    p = tt_path(dir, "nope.bin");
    assert_int_equal(vr_llmc_load(p, &tiny, q, n), VR_ERR_IO);
    ERR_HAS(p);

    p = variant("magic.bin", 0, 20240520, 0); /* a token file's magic */
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("wrong magic 20240520");
    assert_int_equal(vr_llmc_load(p, &tiny, q, n), VR_ERR_FORMAT);

    p = variant("version.bin", 1, 1, 0); /* the old unpadded format */
    assert_int_equal(vr_llmc_load(p, &tiny, q, n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("version 1");

    p = variant("truncated.bin", -1, 0, 1024 + 4 * n - 10);
    assert_int_equal(vr_llmc_load(p, &tiny, q, n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("truncated");

    p = variant("header-only.bin", -1, 0, 500);
    assert_int_equal(vr_llmc_load(p, &tiny, q, n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("too small");

    p = variant("heads.bin", 5, 3, 0); /* 3 does not divide 8 */
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_ERR_FORMAT);
    ERR_HAS("num_heads 3 does not divide channels 8");

    p = variant("zero.bin", 4, 0, 0);
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_ERR_FORMAT);
    ERR_HAS("num_layers is 0");

    p = variant("huge.bin", 6, 0x7fffffff, 0); /* must not overflow or allocate */
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_ERR_FORMAT);
    ERR_HAS("channels");

    p = variant("pad.bin", 7, 40, 0); /* Vp < V */
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_ERR_FORMAT);
    ERR_HAS("padded_vocab_size 40");

    /* A consistent file of another shape: the error names the field. */
    vr_llmc_config wide = tiny;
    wide.channels = 16;
    size_t wn = vr_llmc_num_params(&wide);
    float *w = make_params(wn);
    p = tt_path(dir, "wide.bin");
    assert_int_equal(vr_llmc_save(p, &wide, w, wn), VR_OK);
    assert_int_equal(vr_llmc_load(p, &tiny, q, n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("channels is 16 in the checkpoint but 8 in the model");
    vr_llmc_config deeper = wide;
    deeper.num_layers = 3;
    assert_int_equal(vr_llmc_config_match(p, &wide, &deeper), VR_ERR_FORMAT);
    ERR_HAS("num_layers is 2 in the checkpoint but 3 in the model");
    /* Buffer of the wrong size. */
    assert_int_equal(vr_llmc_load(p, NULL, q, n), VR_ERR_INVALID);
    ERR_HAS("buffer");
    free(w);
    free(q);
}

/* A header whose parameter bytes wrap 2^64 to exactly 0: a 1024-byte file used to pass the size check. */
static void wrapping_header_is_refused(void **state)
{
    (void)state;
    int32_t h[256] = {VR_LLMC_MAGIC, VR_LLMC_VERSION_FP32, 1, 4844204, 4789589, 1, 16777216, 4844204};
    const char *p = tt_path(dir, "wrap.bin");
    tt_write(p, h, sizeof h);
    vr_llmc_config cfg;
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("overflow");
    /* a directory is named as one (was: "4096 bytes is too small for the header") */
    assert_int_not_equal(vr_llmc_read_header(dir, &cfg), VR_OK);
    ERR_HAS(dir); ERR_HAS("is a directory");
}

/* llm.c's bf16 checkpoints (version 5: the same header and order, 2-byte parameters) load widened to
 * fp32 exactly; one short is named as truncated. */
static void bf16_version5_loads(void **state)
{
    (void)state;
    size_t n = vr_llmc_num_params(&tiny);
    int32_t h[256] = {VR_LLMC_MAGIC, VR_LLMC_VERSION_BF16, tiny.max_seq_len, tiny.vocab_size, tiny.num_layers,
                      tiny.num_heads, tiny.channels, tiny.padded_vocab_size};
    uint8_t *b = malloc(sizeof h + 2 * n);
    memcpy(b, h, sizeof h);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)(0x3c00u + (i * 37u) % 0x0800u) ^ (uint16_t)(i & 1 ? 0x8000u : 0u); /* bf16 bits */
        memcpy(b + sizeof h + 2 * i, &v, 2);
        uint32_t bits = (uint32_t)v << 16;
        memcpy(&want[i], &bits, 4);
    }
    const char *p = tt_path(dir, "bf16.bin");
    tt_write(p, b, sizeof h + 2 * n);
    vr_llmc_config cfg;
    assert_int_equal(vr_llmc_read_header(p, &cfg), VR_OK);
    assert_int_equal(cfg.channels, tiny.channels);
    assert_int_equal(vr_llmc_load(p, &tiny, got, n), VR_OK);
    assert_memory_equal(got, want, n * sizeof *got);
    const char *t = tt_path(dir, "bf16-short.bin");
    tt_write(t, b, sizeof h + 2 * n - 2);
    assert_int_equal(vr_llmc_load(t, &tiny, got, n), VR_ERR_FORMAT);
    ERR_HAS(t); ERR_HAS("truncated");
    free(b);
    free(want);
    free(got);
}

static void failed_save_keeps_previous_file(void **state)
{
    (void)state;
    size_t n = vr_llmc_num_params(&tiny), before_n, after_n;
    float *p = make_params(n), *other = make_params(n);
    for (size_t i = 0; i < n; i++) other[i] = 1.0f;
    const char *path = tt_path(dir, "keep.bin");
    assert_int_equal(vr_llmc_save(path, &tiny, p, n), VR_OK);
    uint8_t *before = tt_read(path, &before_n);

    /* The disk fills up halfway through the parameters. */
    vr_atomic_fail_after(2000);
    assert_int_equal(vr_llmc_save(path, &tiny, other, n), VR_ERR_IO);
    vr_atomic_fail_after(-1);
    ERR_HAS(path);
    uint8_t *after = tt_read(path, &after_n);
    assert_int_equal(after_n, before_n);
    assert_memory_equal(before, after, before_n);
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
    free(after);

    /* The parent directory is missing. */
    const char *lost = tt_path(dir, "no/such/dir/x.bin");
    assert_int_equal(vr_llmc_save(lost, &tiny, p, n), VR_ERR_IO);
    ERR_HAS(lost);

    /* A wrong-sized buffer is refused before anything is touched. */
    assert_int_equal(vr_llmc_save(path, &tiny, other, n - 1), VR_ERR_INVALID);
    after = tt_read(path, &after_n);
    assert_memory_equal(before, after, before_n);
    free(after);
    free(before);
    free(p);
    free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_match_llmc),
        cmocka_unit_test(round_trip_is_bit_exact),
        cmocka_unit_test(corrupt_files_are_refused),
        cmocka_unit_test(failed_save_keeps_previous_file),
        cmocka_unit_test(wrapping_header_is_refused),
        cmocka_unit_test(bf16_version5_loads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
