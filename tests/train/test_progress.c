/* Progress output: JSON lines parse and carry the figures; plain lines and the
 * bar show step/total, loss, tokens/s, ETA and memory. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cjson/cJSON.h>
#include <cmocka.h>

#include "vram/progress.h"

/* Runs `steps` steps in `mode` and returns everything printed (caller frees). */
static char *run(vr_progress_mode mode, int steps, double loss_at_3)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    vr_progress_opts o = {mode, steps, 1};
    vr_progress *p;
    assert_int_equal(vr_progress_open(f, &o, &p), VR_OK);
    const vr_progress_mem mem[2] = {{"allocated", 3ull << 30}, {"peak", 5ull << 29}};
    for (int i = 1; i <= steps; i++) {
        vr_step_report r = {.step = i, .loss = i == 3 ? loss_at_3 : 5.0 / i, .lr = 1e-3, .ms = 50.0,
                            .tokens = 4096, .grad_norm = i == 2 ? NAN : 0.75, .nmem = 2, .mem = mem};
        vr_progress_step(p, &r);
        if (i == 2) vr_progress_eval(p, 2, 1.25);
        if (i == 3) vr_progress_note(p, "saved \"ckpt.bin\"");
    }
    vr_progress_close(p);
    fclose(f);
    return buf;
}

static void json_lines_parse(void **state)
{
    (void)state;
    char *out = run(VR_PROGRESS_JSON, 4, NAN);
    int steps = 0, evals = 0, notes = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        if (!o) fail_msg("not JSON: %s", line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(o, "event"));
        assert_non_null(ev);
        if (strcmp(ev, "step") == 0) {
            steps++;
            double step = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "step"));
            assert_true(step == steps);
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "total_steps")) == 4);
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "lr")) == 1e-3);
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "ms")) == 50.0);
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tokens_per_s")) == 4096 * 20.0);
            cJSON *loss = cJSON_GetObjectItem(o, "loss");
            if (steps == 3) assert_true(cJSON_IsNull(loss)); /* NaN loss stays valid JSON */
            else assert_true(fabs(cJSON_GetNumberValue(loss) - 5.0 / steps) < 1e-12);
            assert_int_equal(cJSON_HasObjectItem(o, "grad_norm"), steps != 2);
            cJSON *mem = cJSON_GetObjectItem(o, "memory");
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(mem, "allocated")) == (double)(3ull << 30));
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(mem, "peak")) == (double)(5ull << 29));
        } else if (strcmp(ev, "eval") == 0) {
            evals++;
            assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "val_loss")) == 1.25);
        } else if (strcmp(ev, "note") == 0) {
            notes++;
            assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "message")), "saved \"ckpt.bin\"");
        }
        cJSON_Delete(o);
    }
    assert_int_equal(steps, 4);
    assert_int_equal(evals, 1);
    assert_int_equal(notes, 1);
    free(out);
}

/* Memory names are the caller's: written as JSON strings whatever they hold. */
static void json_escapes_names(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    vr_progress_opts o = {VR_PROGRESS_JSON, 1, 1};
    vr_progress *p;
    assert_int_equal(vr_progress_open(f, &o, &p), VR_OK);
    const char *name = "a \"quoted\" \\ name\nwith a tab\t";
    const vr_progress_mem mem[1] = {{name, 12345678901ull}};
    vr_step_report r = {.step = 1, .loss = INFINITY, .lr = 1e-3, .ms = 0, .tokens = 8, .grad_norm = 2.5, .nmem = 1,
                        .mem = mem};
    vr_progress_step(p, &r);
    vr_progress_close(p);
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    if (!j) fail_msg("not JSON: %s", buf);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "loss")));
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "tokens_per_s")) == 0.0);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "grad_norm")) == 2.5);
    cJSON *m = cJSON_GetObjectItem(j, "memory");
    assert_non_null(m);
    assert_non_null(m->child);
    assert_string_equal(m->child->string, name);
    assert_true(cJSON_GetNumberValue(m->child) == 12345678901.0);
    cJSON_Delete(j);
    free(buf);
}

static void plain_lines(void **state)
{
    (void)state;
    char *out = run(VR_PROGRESS_LINES, 3, 1.0);
    assert_non_null(strstr(out, "step 1/3 | loss 5.000000 | lr 1.00e-03 | 50.0 ms | 81.9k tok/s"));
    assert_non_null(strstr(out, "allocated 3.00 GiB | peak 2.50 GiB"));
    assert_non_null(strstr(out, "step 2: val loss 1.250000\n"));
    assert_non_null(strstr(out, "saved \"ckpt.bin\"\n"));
    assert_null(strchr(out, '\r'));
    free(out);

    /* AUTO on a non-terminal stream means lines. */
    FILE *f = tmpfile();
    vr_progress_opts o = {VR_PROGRESS_AUTO, 0, 0};
    vr_progress *p;
    assert_int_equal(vr_progress_open(f, &o, &p), VR_OK);
    assert_int_equal(vr_progress_get_mode(p), VR_PROGRESS_LINES);
    vr_progress_close(p);
    fclose(f);
}

static void bar(void **state)
{
    (void)state;
    setenv("COLUMNS", "200", 1); /* the bar is cut to the terminal width */
    char *out = run(VR_PROGRESS_BAR, 3, 1.0);
    assert_non_null(strstr(out, "\r1/3 [######..............] loss 5.0000  81.9k tok/s  eta 0s  allocated 3.00 GiB"));
    assert_non_null(strstr(out, "\r3/3 [####################]")); /* the last step is always drawn */
    assert_non_null(strstr(out, "step 2: val loss 1.250000\n")); /* printed above the bar */
    assert_int_equal(out[strlen(out) - 1], '\n');                /* close ends the line */
    free(out);

    out = run(VR_PROGRESS_QUIET, 3, 1.0);
    assert_true(out == NULL || out[0] == '\0');
    free(out);
}

static void durations(void **state)
{
    (void)state;
    char b[32];
    assert_string_equal(vr_format_duration(45.2, b, sizeof b), "45s");
    assert_string_equal(vr_format_duration(723, b, sizeof b), "12m03s");
    assert_string_equal(vr_format_duration(3 * 3600 + 7 * 60 + 5, b, sizeof b), "3h07m");
    assert_string_equal(vr_format_duration(NAN, b, sizeof b), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_lines_parse),
        cmocka_unit_test(json_escapes_names),
        cmocka_unit_test(plain_lines),
        cmocka_unit_test(bar),
        cmocka_unit_test(durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
