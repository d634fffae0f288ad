/* tools/llmc_ckpt.py: an llm.c file written by vram goes to PyTorch (nanoGPT
 * and HF layouts) and back bit-exactly, and the tool's own selftest passes.
 * Needs Debian's /usr/bin/python3 with python3-torch; skipped without it. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/checkpoint.h"

#define PY "/usr/bin/python3"

static const char *dir;
static char tool[600];

static int setup(void **state)
{
    (void)state;
    const char *src = getenv("VRAM_SOURCE_DIR");
    snprintf(tool, sizeof tool, "%s/tools/llmc_ckpt.py", src ? src : ".");
    dir = tt_scratch_dir("llmcpy");
    return 0;
}
static int teardown(void **state) { (void)state; tt_remove_dir(dir); return 0; }

static int have_torch(void)
{
    return access(PY, X_OK) == 0 && access(tool, R_OK) == 0 &&
           system(PY " -c 'import torch, numpy' >/dev/null 2>&1") == 0;
}

/* Runs the tool with printf-style arguments; returns its exit status. */
static int tool_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int tool_run(const char *fmt, ...)
{
    char args[2000], cmd[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, PY " '%s' %s >/dev/null 2>&1", tool, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void round_trip_through_pytorch(void **state)
{
    (void)state;
    if (!have_torch()) skip();
    const vr_llmc_config cfg = {.max_seq_len = 16, .vocab_size = 50, .padded_vocab_size = 64,
                                .num_layers = 2, .num_heads = 2, .channels = 8};
    size_t n = vr_llmc_num_params(&cfg);
    float *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
    uint32_t x = 99;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float)((int32_t)x) * (1.0f / 1073741824.0f); /* [-2, 2) */
    }
    p[64 * 8] = -0.0f;
    p[64 * 8 + 1] = 1e-45f;
    /* llm.c pads wte rows V..Vp with zeros; PyTorch keeps only V rows. */
    memset(p + 50 * 8, 0, 14 * 8 * sizeof *p);
    const char *a = tt_path(dir, "a.bin");
    assert_int_equal(vr_llmc_save(a, &cfg, p, n), VR_OK);

    const char *layouts[] = {"nanogpt", "hf"};
    for (int i = 0; i < 2; i++) {
        const char *pt = tt_path(dir, "m.pt"), *b = tt_path(dir, "b.bin");
        assert_int_equal(tool_run("from-llmc '%s' '%s' --layout %s", a, pt, layouts[i]), 0);
        assert_int_equal(tool_run("to-llmc '%s' '%s' --padded-vocab 64", pt, b), 0);
        memset(q, 0xff, n * sizeof *q);
        assert_int_equal(vr_llmc_load(b, &cfg, q, n), VR_OK);
        assert_memory_equal(p, q, n * sizeof *p);
        size_t na, nb;
        uint8_t *fa = tt_read(a, &na), *fb = tt_read(b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(fa, fb, na);
        free(fa);
        free(fb);
    }
    /* The default padding rounds the vocabulary up to 128, as llm.c does. */
    const char *c = tt_path(dir, "c.bin");
    assert_int_equal(tool_run("to-llmc '%s' '%s'", tt_path(dir, "m.pt"), c), 0);
    vr_llmc_config got;
    assert_int_equal(vr_llmc_read_header(c, &got), VR_OK);
    assert_int_equal(got.padded_vocab_size, 128);
    assert_int_equal(got.num_heads, 2); /* carried in nanoGPT's model_args */

    /* Bad input: a clear failure, not a traceback-and-garbage file. */
    const char *junk = tt_path(dir, "junk.bin");
    tt_write(junk, "not a model", 11);
    assert_int_equal(tool_run("from-llmc '%s' '%s'", junk, tt_path(dir, "j.pt")), 1);
    free(p);
    free(q);
}

static void tool_selftest(void **state)
{
    (void)state;
    if (!have_torch()) skip();
    assert_int_equal(tool_run("selftest"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_through_pytorch),
        cmocka_unit_test(tool_selftest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
