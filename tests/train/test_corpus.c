/* The built-in corpus: deterministic, printable, and learnable — a byte bigram
 * model fit on the train split scores far below ln(256) on the val split. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "vram/data.h"

static void deterministic_and_printable(void **state)
{
    (void)state;
    const size_t n = 1 << 16;
    uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
    vr_corpus_generate(5, a, n);
    vr_corpus_generate(5, b, n);
    vr_corpus_generate(6, c, n);
    assert_memory_equal(a, b, n);
    assert_memory_not_equal(a, c, n);
    size_t newlines = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(a[i] == '\n' || (a[i] >= 32 && a[i] < 127));
        newlines += a[i] == '\n';
    }
    assert_true(newlines > n / 1000); /* paragraphs */
    /* A prefix of a longer corpus is the shorter corpus. */
    vr_corpus_generate(5, c, n / 2);
    assert_memory_equal(a, c, n / 2);
    free(a); free(b); free(c);
}

/* Mean -ln p(next | prev) over the val split, add-one smoothed bigram fit on train. */
static double bigram_val_loss(vr_data *train, vr_data *val, int B, int T)
{
    double *counts = calloc(256 * 256, sizeof *counts);
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
    for (uint64_t k = 0; k < vr_data_batches_per_epoch(train); k++) {
        assert_int_equal(vr_data_next(train, x, y), VR_OK);
        for (int i = 0; i < B * T; i++) counts[x[i] * 256 + y[i]] += 1;
    }
    double loss = 0;
    uint64_t n = 0;
    for (uint64_t k = 0; k < vr_data_batches_per_epoch(val); k++) {
        assert_int_equal(vr_data_next(val, x, y), VR_OK);
        for (int i = 0; i < B * T; i++) {
            double row = 0;
            for (int j = 0; j < 256; j++) row += counts[x[i] * 256 + j] + 1;
            loss -= log((counts[x[i] * 256 + y[i]] + 1) / row);
            n++;
        }
    }
    free(counts); free(x); free(y);
    return loss / (double)n;
}

static void bigram_model_learns_it(void **state)
{
    (void)state;
    const int B = 8, T = 64;
    vr_data_config c = vr_data_config_default(B, T);
    c.generated_bytes = 1 << 20;
    c.split = VR_SPLIT_TRAIN;
    c.order = VR_DATA_SHUFFLED;
    vr_data *train, *val;
    assert_int_equal(vr_data_open(&c, &train), VR_OK);
    c.split = VR_SPLIT_VAL;
    c.order = VR_DATA_SEQUENTIAL;
    assert_int_equal(vr_data_open(&c, &val), VR_OK);
    double loss = bigram_val_loss(train, val, B, T);
    printf("bigram val loss %.3f nats (uniform ln 256 = %.3f)\n", loss, log(256.0));
    assert_true(loss < 0.5 * log(256.0));
    vr_data_close(train);
    vr_data_close(val);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(deterministic_and_printable),
        cmocka_unit_test(bigram_model_learns_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
