/* vram training state files: bit-exact round trip; truncation at every length
 * and a flip of every byte are caught; bad magic/version, crc and shape
 * mismatches give clear errors; a failed save keeps the previous file. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/atomic_file.h"
#include "vram/train_state.h"

static const char *dir;

static int setup(void **state) { (void)state; dir = tt_scratch_dir("state"); return 0; }
static int teardown(void **state) { (void)state; tt_remove_dir(dir); return 0; }

#define ERR_HAS(s) assert_non_null(strstr(vr_last_error(), (s)))
#define NP 300

static float params[NP], m[NP], v[NP];

/* A state as a training loop would build it, buffers pointing at p, mm, vv. */
static void build(vr_train_state *s, float *p, float *mm, float *vv, int64_t channels)
{
    memset(s, 0, sizeof *s);
    strcpy(s->model, "gpt2");
    strcpy(s->optimizer, "adamw");
    s->step = 1234;
    s->tokens_seen = 1234ull * 4096;
    s->rng[0] = 0xdeadbeefcafef00dull;
    s->rng[3] = 7;
    s->data_seed = 1337;
    s->data_pos = (vr_data_pos){3, 17};
    s->loss_scale = 65536.0f;
    assert_int_equal(vr_state_set_config(s, "num_layers", 4), VR_OK);
    assert_int_equal(vr_state_set_config(s, "channels", channels), VR_OK);
    assert_int_equal(vr_state_set_config(s, "vocab_size", 256), VR_OK);
    assert_int_equal(vr_state_add_buffer(s, "params", p, NP * sizeof(float)), VR_OK);
    assert_int_equal(vr_state_add_buffer(s, "adam.m", mm, NP * sizeof(float)), VR_OK);
    assert_int_equal(vr_state_add_buffer(s, "adam.v", vv, NP * sizeof(float)), VR_OK);
}

static const char *save_good(const char *name)
{
    for (int i = 0; i < NP; i++) {
        params[i] = (float)i * 0.37f - 20.0f;
        m[i] = 1e-30f * (float)i;
        v[i] = (float)(i % 7) + 0.5f;
    }
    vr_train_state s;
    build(&s, params, m, v, 64);
    const char *path = tt_path(dir, name);
    assert_int_equal(vr_state_save(path, &s), VR_OK);
    return path;
}

static void round_trip_is_bit_exact(void **state)
{
    (void)state;
    const char *path = save_good("rt.state");
    vr_train_state meta;
    assert_int_equal(vr_state_read_meta(path, &meta), VR_OK);
    assert_string_equal(meta.model, "gpt2");
    assert_string_equal(meta.optimizer, "adamw");
    assert_int_equal(meta.step, 1234);
    assert_int_equal(meta.nbuffers, 3);
    assert_string_equal(meta.buffers[1].name, "adam.m");
    assert_int_equal(meta.buffers[1].bytes, NP * sizeof(float));
    assert_null(meta.buffers[1].data);
    int64_t c;
    assert_int_equal(vr_state_get_config(&meta, "channels", &c), 1);
    assert_int_equal(c, 64);
    assert_int_equal(vr_state_get_config(&meta, "heads", &c), 0);

    float p2[NP], m2[NP], v2[NP];
    vr_train_state want, got;
    build(&want, params, m, v, 64);
    build(&got, p2, m2, v2, 0);
    got.step = 0;
    got.loss_scale = 0;
    assert_int_equal(vr_state_config_match(path, &meta, &want), VR_OK);
    assert_int_equal(vr_state_load(path, &got), VR_OK);
    assert_memory_equal(p2, params, sizeof params);
    assert_memory_equal(m2, m, sizeof m);
    assert_memory_equal(v2, v, sizeof v);
    assert_int_equal(got.step, 1234);
    assert_int_equal(got.tokens_seen, 1234ull * 4096);
    assert_memory_equal(got.rng, want.rng, sizeof want.rng);
    assert_int_equal(got.data_seed, 1337);
    assert_int_equal(got.data_pos.epoch, 3);
    assert_int_equal(got.data_pos.batch, 17);
    assert_true(got.loss_scale == 65536.0f);
    assert_int_equal(vr_state_get_config(&got, "channels", &c), 1);
    assert_int_equal(c, 64);
    assert_ptr_equal(got.buffers[0].data, p2); /* the caller's buffers are kept */

    /* Loading only some buffers is fine (e.g. params for evaluation). */
    vr_train_state only;
    memset(&only, 0, sizeof only);
    vr_state_add_buffer(&only, "params", p2, sizeof p2);
    assert_int_equal(vr_state_load(path, &only), VR_OK);
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
}

static void every_truncation_and_flip_is_caught(void **state)
{
    (void)state;
    const char *path = save_good("fuzz.state");
    size_t n;
    uint8_t *good = tt_read(path, &n);
    const char *bad = tt_path(dir, "fuzz-bad.state");
    float p2[NP], m2[NP], v2[NP];
    vr_train_state s;
    for (size_t keep = 0; keep < n; keep++) {
        tt_write(bad, good, keep);
        build(&s, p2, m2, v2, 64);
        assert_int_not_equal(vr_state_load(bad, &s), VR_OK);
        assert_non_null(strstr(vr_last_error(), bad));
        if (keep >= 32) ERR_HAS("truncated");
    }
    for (size_t i = 0; i < n; i++) {
        good[i] ^= 0x10;
        tt_write(bad, good, n);
        good[i] ^= 0x10;
        build(&s, p2, m2, v2, 64);
        vr_status st = vr_state_load(bad, &s);
        if (st == VR_OK) fail_msg("a flip of byte %zu went unnoticed", i);
    }
    free(good);
}

/* Rewrites the saved file with bytes [at, at+len) replaced. */
static const char *patched(const char *name, size_t at, const void *bytes, size_t len)
{
    const char *src = save_good("patch-src.state");
    size_t n;
    uint8_t *b = tt_read(src, &n);
    memcpy(b + at, bytes, len);
    const char *path = tt_path(dir, name);
    tt_write(path, b, n);
    free(b);
    return path;
}

static void corrupt_files_give_clear_errors(void **state)
{
    (void)state;
    float p2[NP], m2[NP], v2[NP];
    vr_train_state s, meta;
    const char *p;

    p = tt_path(dir, "missing.state");
    assert_int_equal(vr_state_read_meta(p, &meta), VR_ERR_IO);
    ERR_HAS(p);

    p = patched("magic.state", 0, "NOTSTATE", 8);
    assert_int_equal(vr_state_read_meta(p, &meta), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("wrong magic");

    uint32_t version = 9;
    p = patched("version.state", 8, &version, 4);
    build(&s, p2, m2, v2, 64);
    assert_int_equal(vr_state_load(p, &s), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("version 9");

    /* A flipped byte inside the adam.v payload (the last section, at the end). */
    const char *src = save_good("flip-src.state");
    size_t n;
    uint8_t *b = tt_read(src, &n);
    b[n - 5] ^= 1;
    p = tt_path(dir, "crc.state");
    tt_write(p, b, n);
    assert_int_equal(vr_state_read_meta(p, &meta), VR_OK); /* the meta is fine */
    build(&s, p2, m2, v2, 64);
    assert_int_equal(vr_state_load(p, &s), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("'adam.v' crc32 mismatch");

    /* A flipped byte in the section table. */
    b[n - 5] ^= 1;
    b[40] ^= 1;
    tt_write(p, b, n);
    assert_int_equal(vr_state_read_meta(p, &meta), VR_ERR_FORMAT);
    ERR_HAS("header crc32 mismatch");
    free(b);

    /* Shape mismatches name the field or buffer. */
    p = save_good("shape.state");
    assert_int_equal(vr_state_read_meta(p, &meta), VR_OK);
    vr_train_state model;
    build(&model, p2, m2, v2, 128);
    assert_int_equal(vr_state_config_match(p, &meta, &model), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("channels is 64 in the checkpoint but 128 in the model");
    vr_state_set_config(&model, "channels", 64);
    vr_state_set_config(&model, "num_heads", 4);
    assert_int_equal(vr_state_config_match(p, &meta, &model), VR_ERR_FORMAT);
    ERR_HAS("has no num_heads");

    build(&s, p2, m2, v2, 64);
    s.buffers[2].bytes -= 4;
    assert_int_equal(vr_state_load(p, &s), VR_ERR_FORMAT);
    ERR_HAS("buffer 'adam.v' is 1200 bytes in the checkpoint but 1196 in the model");

    build(&s, p2, m2, v2, 64);
    vr_state_add_buffer(&s, "sgd.momentum", m2, sizeof m2);
    assert_int_equal(vr_state_load(p, &s), VR_ERR_FORMAT);
    ERR_HAS("no buffer 'sgd.momentum'");
}

static void failed_save_keeps_previous_file(void **state)
{
    (void)state;
    const char *path = save_good("keep.state");
    size_t n0, n1;
    uint8_t *before = tt_read(path, &n0);
    float other[NP] = {0};
    vr_train_state s;
    build(&s, other, other, other, 64);
    s.step = 9999;
    for (int64_t cut = 0; cut < (int64_t)n0; cut += 401) {
        vr_atomic_fail_after(cut);
        assert_int_equal(vr_state_save(path, &s), VR_ERR_IO);
        vr_atomic_fail_after(-1);
        ERR_HAS(path);
        uint8_t *after = tt_read(path, &n1);
        assert_int_equal(n1, n0);
        assert_memory_equal(before, after, n0);
        free(after);
    }
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
    vr_train_state meta;
    assert_int_equal(vr_state_read_meta(path, &meta), VR_OK);
    assert_int_equal(meta.step, 1234);
    free(before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_is_bit_exact),
        cmocka_unit_test(every_truncation_and_flip_is_caught),
        cmocka_unit_test(corrupt_files_give_clear_errors),
        cmocka_unit_test(failed_save_keeps_previous_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
