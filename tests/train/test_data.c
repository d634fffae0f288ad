/* Data loader: token-file round trip, every corrupt-file error, deterministic
 * order from a seed, exact resume from a saved position, text files, splits. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/data.h"

static const char *dir;

static int setup(void **state) { (void)state; dir = tt_scratch_dir("data"); return 0; }
static int teardown(void **state) { (void)state; tt_remove_dir(dir); return 0; }

#define ERR_HAS(s) assert_non_null(strstr(vr_last_error(), (s)))

/* A token file whose token i is (i * 7 + 3) % mod. */
static const char *write_ramp(const char *name, uint64_t n, int mod)
{
    int32_t *t = malloc(n * sizeof *t);
    for (uint64_t i = 0; i < n; i++) t[i] = (int32_t)((i * 7 + 3) % (uint64_t)mod);
    const char *path = tt_path(dir, name);
    assert_int_equal(vr_tokens_write(path, t, n), VR_OK);
    free(t);
    return path;
}

static vr_data_config tokens_config(const char *path, int B, int T)
{
    vr_data_config c = vr_data_config_default(B, T);
    c.kind = VR_DATA_TOKENS;
    c.path = path;
    return c;
}

static void token_file_round_trip(void **state)
{
    (void)state;
    const uint64_t n = 1000;
    const char *path = write_ramp("ramp.bin", n, 50257);
    uint16_t *tok;
    uint64_t got;
    assert_int_equal(vr_tokens_read(path, 50257, &tok, &got), VR_OK);
    assert_int_equal(got, n);
    for (uint64_t i = 0; i < n; i++) assert_int_equal(tok[i], (i * 7 + 3) % 50257);
    free(tok);

    /* The loader: sequential chunks of B*T, targets shifted by one. */
    const int B = 4, T = 16;
    vr_data_config c = tokens_config(path, B, T);
    c.vocab = 50257;
    vr_data *d;
    assert_int_equal(vr_data_open(&c, &d), VR_OK);
    assert_int_equal(vr_data_num_tokens(d), n);
    assert_int_equal(vr_data_batches_per_epoch(d), (n - 1) / (B * T));
    int32_t x[4 * 16], y[4 * 16];
    for (uint64_t k = 0; k < vr_data_batches_per_epoch(d); k++) {
        assert_int_equal(vr_data_next(d, x, y), VR_OK);
        for (int i = 0; i < B * T; i++) {
            uint64_t at = k * B * T + (uint64_t)i;
            assert_int_equal(x[i], (at * 7 + 3) % 50257);
            assert_int_equal(y[i], ((at + 1) * 7 + 3) % 50257);
        }
    }
    vr_data_pos p = vr_data_tell(d);
    assert_int_equal(p.epoch, 1); /* wrapped */
    assert_int_equal(p.batch, 0);
    assert_int_equal(vr_data_next(d, x, y), VR_OK);
    assert_int_equal(x[0], 3);
    vr_data_close(d);
}

static void write_header(const char *path, int32_t magic, int32_t version, int32_t count, size_t ntok,
                         uint16_t fill)
{
    size_t bytes = 1024 + ntok * 2;
    uint8_t *b = calloc(1, bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(b, h, sizeof h);
    for (size_t i = 0; i < ntok; i++) memcpy(b + 1024 + 2 * i, &fill, 2);
    tt_write(path, b, bytes);
    free(b);
}

static void token_file_errors(void **state)
{
    (void)state;
    uint16_t *tok;
    uint64_t n;
    const char *p;

    p = tt_path(dir, "missing.bin");
    assert_int_equal(vr_tokens_read(p, 0, &tok, &n), VR_ERR_IO);
    ERR_HAS(p);

    p = tt_path(dir, "magic.bin");
    write_header(p, 12345, 1, 10, 10, 1);
    assert_int_equal(vr_tokens_read(p, 0, &tok, &n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("wrong magic 12345");

    p = tt_path(dir, "version.bin");
    write_header(p, VR_TOKENS_MAGIC, 2, 10, 10, 1);
    assert_int_equal(vr_tokens_read(p, 0, &tok, &n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("version 2");

    p = tt_path(dir, "truncated.bin"); /* header says 100 tokens, file holds 60 */
    write_header(p, VR_TOKENS_MAGIC, 1, 100, 60, 1);
    assert_int_equal(vr_tokens_read(p, 0, &tok, &n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("header says 100 tokens"); ERR_HAS("truncated");

    p = tt_path(dir, "negative.bin");
    write_header(p, VR_TOKENS_MAGIC, 1, -5, 0, 1);
    assert_int_equal(vr_tokens_read(p, 0, &tok, &n), VR_ERR_FORMAT);
    ERR_HAS(p);

    p = tt_path(dir, "short.bin"); /* not even a header */
    tt_write(p, "abc", 3);
    assert_int_equal(vr_tokens_read(p, 0, &tok, &n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("too small");

    p = tt_path(dir, "range.bin");
    write_header(p, VR_TOKENS_MAGIC, 1, 40, 40, 300);
    assert_int_equal(vr_tokens_read(p, 256, &tok, &n), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("token 300 at position 0"); ERR_HAS("vocab 256");
    assert_int_equal(vr_tokens_read(p, 301, &tok, &n), VR_OK); /* in range for a larger vocab */
    free(tok);

    /* Through the loader, the same errors come back, plus "too small for one batch". */
    vr_data *d = NULL;
    vr_data_config c = tokens_config(tt_path(dir, "range.bin"), 1, 8);
    c.vocab = 256;
    assert_int_equal(vr_data_open(&c, &d), VR_ERR_FORMAT);
    assert_null(d);
    ERR_HAS("out of range");

    c = tokens_config(write_ramp("tiny.bin", 32, 100), 4, 8); /* needs 33 */
    assert_int_equal(vr_data_open(&c, &d), VR_ERR_FORMAT);
    ERR_HAS("tiny.bin"); ERR_HAS("too small for one batch"); ERR_HAS("33");
    c.B = 1; /* 8+1 tokens fit */
    assert_int_equal(vr_data_open(&c, &d), VR_OK);
    vr_data_close(d);

    c.B = 0;
    assert_int_equal(vr_data_open(&c, &d), VR_ERR_INVALID);
}

static void writer_rejects_bad_tokens(void **state)
{
    (void)state;
    int32_t t[3] = {1, 70000, 2};
    const char *p = tt_path(dir, "bad-writer.bin");
    assert_int_equal(vr_tokens_write(p, t, 3), VR_ERR_INVALID);
    ERR_HAS("70000");
    t[1] = -1;
    assert_int_equal(vr_tokens_write(p, t, 3), VR_ERR_INVALID);
    assert_int_equal(access(p, F_OK), -1); /* nothing written */
}

/* Draws `count` batches of (B,T) into x (count*B*T) and y. */
static void draw(vr_data *d, int count, int BT, int32_t *x, int32_t *y)
{
    for (int k = 0; k < count; k++) assert_int_equal(vr_data_next(d, x + k * BT, y + k * BT), VR_OK);
}

static void shuffled_order_is_deterministic(void **state)
{
    (void)state;
    const int B = 3, T = 10, BT = 30;
    vr_data_config c = tokens_config(write_ramp("shuffle.bin", 20001, 60000), B, T);
    c.order = VR_DATA_SHUFFLED;
    c.seed = 42;
    vr_data *a, *b, *other;
    assert_int_equal(vr_data_open(&c, &a), VR_OK);
    assert_int_equal(vr_data_open(&c, &b), VR_OK);
    c.seed = 43;
    assert_int_equal(vr_data_open(&c, &other), VR_OK);

    const int per = (int)vr_data_batches_per_epoch(a); /* 2000 windows / 3 = 666 */
    assert_int_equal(per, 666);
    const int n = 2 * per + 5; /* across two epoch boundaries */
    int32_t *xa = malloc(sizeof(int32_t) * n * BT), *ya = malloc(sizeof(int32_t) * n * BT);
    int32_t *xb = malloc(sizeof(int32_t) * n * BT), *yb = malloc(sizeof(int32_t) * n * BT);
    draw(a, n, BT, xa, ya);
    draw(b, n, BT, xb, yb);
    assert_memory_equal(xa, xb, sizeof(int32_t) * n * BT);
    assert_memory_equal(ya, yb, sizeof(int32_t) * n * BT);
    draw(other, n, BT, xb, yb);
    assert_memory_not_equal(xa, xb, sizeof(int32_t) * n * BT);

    /* Within an epoch no window repeats; each row is a stride-T window with shifted targets. */
    uint8_t *seen = calloc(2000, 1);
    for (int r = 0; r < per * B; r++) {
        int32_t first = xa[r * T]; /* token at window start w*T is (w*T*7+3) % 60000 */
        int w = -1;
        for (int cand = 0; cand < 2000; cand++)
            if ((cand * T * 7 + 3) % 60000 == first) { w = cand; break; }
        assert_true(w >= 0);
        assert_int_equal(seen[w], 0);
        seen[w] = 1;
        for (int t = 0; t < T; t++) {
            assert_int_equal(xa[r * T + t], ((uint64_t)(w * T + t) * 7 + 3) % 60000);
            assert_int_equal(ya[r * T + t], ((uint64_t)(w * T + t + 1) * 7 + 3) % 60000);
        }
    }
    /* Epoch 2 uses a different permutation than epoch 1. */
    assert_memory_not_equal(xa, xa + per * BT, sizeof(int32_t) * BT * 4);
    free(seen);
    free(xa); free(ya); free(xb); free(yb);
    vr_data_close(a);
    vr_data_close(b);
    vr_data_close(other);
}

static void resume_is_exact(void **state)
{
    (void)state;
    const int B = 2, T = 8, BT = 16;
    for (int order = 0; order < 2; order++) {
        vr_data_config c = vr_data_config_default(B, T);
        c.generated_bytes = 4000; /* 249 batches sequential, 249 shuffled */
        c.order = order ? VR_DATA_SHUFFLED : VR_DATA_SEQUENTIAL;
        c.seed = 7;
        vr_data *a, *b;
        assert_int_equal(vr_data_open(&c, &a), VR_OK);
        int per = (int)vr_data_batches_per_epoch(a);
        int before = per - 3, after = 10; /* the resumed run crosses an epoch boundary */
        int32_t *x = malloc(sizeof(int32_t) * (before + after) * BT);
        int32_t *y = malloc(sizeof(int32_t) * (before + after) * BT);
        draw(a, before, BT, x, y);
        vr_data_pos saved = vr_data_tell(a);
        draw(a, after, BT, x + before * BT, y + before * BT);

        /* A fresh loader (as after a restart) seeks to the saved position. */
        assert_int_equal(vr_data_open(&c, &b), VR_OK);
        assert_int_equal(vr_data_seek(b, saved), VR_OK);
        int32_t *x2 = malloc(sizeof(int32_t) * after * BT), *y2 = malloc(sizeof(int32_t) * after * BT);
        draw(b, after, BT, x2, y2);
        assert_memory_equal(x + before * BT, x2, sizeof(int32_t) * after * BT);
        assert_memory_equal(y + before * BT, y2, sizeof(int32_t) * after * BT);
        assert_int_equal(vr_data_tell(a).epoch, vr_data_tell(b).epoch);
        assert_int_equal(vr_data_tell(a).batch, vr_data_tell(b).batch);

        /* Seeking back to the start replays the first batches. */
        assert_int_equal(vr_data_seek(b, (vr_data_pos){0, 0}), VR_OK);
        draw(b, 2, BT, x2, y2);
        assert_memory_equal(x, x2, sizeof(int32_t) * 2 * BT);

        vr_data_pos bad = {0, (uint64_t)per};
        assert_int_equal(vr_data_seek(b, bad), VR_ERR_INVALID);
        ERR_HAS("batch");
        free(x); free(y); free(x2); free(y2);
        vr_data_close(a);
        vr_data_close(b);
    }
}

static void text_file_as_bytes(void **state)
{
    (void)state;
    const char *text = "hello, world\nthe quick brown fox";
    const char *p = tt_path(dir, "hello.txt");
    tt_write(p, text, strlen(text));
    vr_data_config c = vr_data_config_default(2, 4);
    c.kind = vr_data_kind_for(p);
    c.path = p;
    assert_int_equal(c.kind, VR_DATA_TEXT);
    vr_data *d;
    assert_int_equal(vr_data_open(&c, &d), VR_OK);
    assert_int_equal(vr_data_vocab(d), 256);
    int32_t x[8], y[8];
    assert_int_equal(vr_data_next(d, x, y), VR_OK);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(x[i], (uint8_t)text[i]);
        assert_int_equal(y[i], (uint8_t)text[i + 1]);
    }
    vr_data_close(d);

    uint8_t high[20];
    memset(high, 'a', sizeof high);
    high[11] = 200;
    p = tt_path(dir, "high.txt");
    tt_write(p, high, sizeof high);
    c.path = p;
    c.vocab = 128;
    assert_int_equal(vr_data_open(&c, &d), VR_ERR_FORMAT);
    ERR_HAS(p); ERR_HAS("200 at position 11");

    assert_int_equal(vr_data_kind_for(NULL), VR_DATA_GENERATED);
    assert_int_equal(vr_data_kind_for("generated"), VR_DATA_GENERATED);
    assert_int_equal(vr_data_kind_for("x/fineweb_train_000001.bin"), VR_DATA_TOKENS);
}

static void generated_splits(void **state)
{
    (void)state;
    vr_data_config c = vr_data_config_default(4, 32);
    c.generated_bytes = 100000;
    c.val_fraction = 0.1;
    vr_data *all, *train, *val;
    assert_int_equal(vr_data_open(&c, &all), VR_OK);
    c.split = VR_SPLIT_TRAIN;
    assert_int_equal(vr_data_open(&c, &train), VR_OK);
    c.split = VR_SPLIT_VAL;
    assert_int_equal(vr_data_open(&c, &val), VR_OK);
    assert_int_equal(vr_data_num_tokens(all), 100000);
    assert_int_equal(vr_data_num_tokens(train), 90000);
    assert_int_equal(vr_data_num_tokens(val), 10000);
    /* The val split starts where train ends: its first batch is the stream at 90000. */
    uint8_t *bytes = malloc(100000);
    vr_corpus_generate(c.seed, bytes, 100000);
    int32_t x[128], y[128];
    assert_int_equal(vr_data_next(val, x, y), VR_OK);
    for (int i = 0; i < 128; i++) assert_int_equal(x[i], bytes[90000 + i]);
    free(bytes);
    vr_data_close(all);
    vr_data_close(train);
    vr_data_close(val);

    c.generated_bytes = 1000; /* val = 100 tokens < 4*32+1 */
    assert_int_equal(vr_data_open(&c, &val), VR_ERR_FORMAT);
    ERR_HAS("val split");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(token_file_round_trip),
        cmocka_unit_test(token_file_errors),
        cmocka_unit_test(writer_rejects_bad_tokens),
        cmocka_unit_test(shuffled_order_is_deterministic),
        cmocka_unit_test(resume_is_exact),
        cmocka_unit_test(text_file_as_bytes),
        cmocka_unit_test(generated_splits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
