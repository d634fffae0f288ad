/* Reports: the summary table, the history ring, the JSON snapshot (parsed
 * back with cJSON) and the Chrome/Perfetto trace. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <unistd.h>

#include "alloc/alloc_helpers.h"

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(s);
    free(s);
    if (!j)
        fail_msg("%s is not valid JSON", path);
    return j;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v))
        fail_msg("field %s missing or not a number", k);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v))
        fail_msg("field %s missing or not a string", k);
    return v->valuestring;
}

static void summary_reads_like_pytorch(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc *a = make_alloc(d, "pytorch", NULL);
    void *p = xmalloc(a, 5 * MiB, 0), *q = xmalloc(a, 1000, 0), *r = NULL;
    assert_int_equal(vr_alloc_malloc(a, 2 * (size_t)VR_GiB, 0, &r), VR_ERR_OOM);
    char *s = vr_alloc_summary(a);
    assert_non_null(s);
    static const char *want[] = {
        "vram memory summary", "policy pytorch", "OOMs: 1", "alloc retries: 1",
        "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
        "| Allocated memory      |   5121 KiB |   5121 KiB |   5121 KiB |      0 B   |",
        "|       from large pool |   5120 KiB |",
        "|       from small pool |   1024 B   |",
        "| GPU reserved memory   |  22528 KiB |",
        "| Requested memory      |", "| Non-releasable memory |", "| Allocations           |       2    |",
        "| GPU reserved segments |       2    |", "| Oversize allocations  |", "largest free:",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(s, want[i])) {
            printf("%s", s);
            fail_msg("summary lacks \"%s\"", want[i]);
        }
    /* every line of the table is as wide as the rules */
    for (char *line = s, *nl; (nl = strchr(line, '\n')); line = nl + 1)
        if (nl - line != 77)
            fail_msg("summary line of width %d:\n%.*s", (int)(nl - line), (int)(nl - line), line);
    free(s);
    xfree(a, p);
    xfree(a, q);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void snapshot_parses_back(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc_config c = {.history = 100};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    vr_device_set_manual_events(d, true);
    char *p = xmalloc(a, 5 * MiB, 0), *q = xmalloc(a, 3 * MiB, 0), *t = xmalloc(a, 1000, 0);
    assert_int_equal(vr_alloc_record_stream(a, q, 9), VR_OK);
    xfree(a, q); /* pending: active but not allocated */
    char path[] = "/tmp/vram_snapshot_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(vr_alloc_write_snapshot(a, path), VR_OK);
    cJSON *j = read_json(path);
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(j, "segments");
    assert_int_equal(cJSON_GetArraySize(segs), 2);
    double allocated = 0, total = 0;
    int seen_pending = 0, seen_large = 0;
    const cJSON *seg;
    cJSON_ArrayForEach(seg, segs) {
        double sum = 0;
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(seg, "blocks")) {
            sum += num(b, "size");
            num(b, "requested_size");
            num(b, "address");
            seen_pending += !strcmp(str(b, "state"), "active_pending_free");
        }
        assert_true(sum == num(seg, "total_size"));
        allocated += num(seg, "allocated_size");
        total += num(seg, "total_size");
        num(seg, "active_size");
        num(seg, "stream");
        num(seg, "address");
        if (!strcmp(str(seg, "segment_type"), "large")) {
            seen_large++;
            assert_true(num(seg, "active_size") == 8.0 * MiB);
            assert_true(num(seg, "requested_size") == 8.0 * MiB);
            const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(seg, "blocks"), 0);
            assert_true(num(first, "address") == (double)(uintptr_t)p);
            assert_string_equal(str(first, "state"), "active_allocated");
        }
    }
    assert_int_equal(seen_pending, 1);
    assert_int_equal(seen_large, 1);
    vr_alloc_stats s = stats_of(a);
    assert_true(allocated == (double)s.allocated_bytes[VR_POOL_ALL].current);
    assert_true(total == (double)s.reserved_bytes[VR_POOL_ALL].current);

    const cJSON *traces = cJSON_GetObjectItemCaseSensitive(j, "device_traces");
    assert_int_equal(cJSON_GetArraySize(traces), 1);
    const cJSON *tr = cJSON_GetArrayItem(traces, 0);
    static const char *actions[] = {"segment_alloc", "alloc", "alloc", "segment_alloc", "alloc", "free_requested"};
    assert_int_equal(cJSON_GetArraySize(tr), 6);
    for (int i = 0; i < 6; i++) {
        const cJSON *e = cJSON_GetArrayItem(tr, i);
        assert_string_equal(str(e, "action"), actions[i]);
        num(e, "addr");
        num(e, "size");
        num(e, "stream");
        assert_true(num(e, "time_us") >= 0);
    }
    assert_true(num(cJSON_GetArrayItem(tr, 1), "size") == 5.0 * MiB);
    cJSON_Delete(j);
    vr_device_set_manual_events(d, false);
    vr_alloc_empty_cache(a);
    xfree(a, p);
    xfree(a, t);
    unlink(path);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void history_ring_keeps_the_latest(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc_config c = {.history = 4};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    for (int i = 0; i < 10; i++)
        xfree(a, xmalloc(a, 1000, 0));
    void *p = xmalloc(a, 2000, 0);
    char *text = vr_alloc_snapshot_json(a);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *tr = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "device_traces"), 0);
    assert_int_equal(cJSON_GetArraySize(tr), 4);
    assert_string_equal(str(cJSON_GetArrayItem(tr, 3), "action"), "alloc");
    assert_true(num(cJSON_GetArrayItem(tr, 3), "size") == 2000);
    assert_string_equal(str(cJSON_GetArrayItem(tr, 2), "action"), "free_completed");
    cJSON_Delete(j);
    vr_alloc_record_history(a, 0); /* off: no traces */
    text = vr_alloc_snapshot_json(a);
    j = cJSON_Parse(text);
    free(text);
    tr = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "device_traces"), 0);
    assert_int_equal(cJSON_GetArraySize(tr), 0);
    cJSON_Delete(j);
    xfree(a, p);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void expandable_snapshot_reports_mapped_runs(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:1GiB");
    vr_alloc_config c = {.history = 64};
    vr_alloc *a = make_alloc(d, "expandable", &c);
    void *p = xmalloc(a, 4 * MiB, 0), *q = xmalloc(a, 4 * MiB, 0), *r = xmalloc(a, 4 * MiB, 0);
    xfree(a, q);
    vr_alloc_empty_cache(a); /* a hole: two mapped runs in one range */
    char *text = vr_alloc_snapshot_json(a);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(j, "segments");
    assert_int_equal(cJSON_GetArraySize(segs), 2);
    const cJSON *seg;
    cJSON_ArrayForEach(seg, segs) {
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(seg, "is_expandable")));
        assert_true(num(seg, "total_size") == 4.0 * MiB);
    }
    const cJSON *tr = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "device_traces"), 0), *e;
    int maps = 0, unmaps = 0;
    cJSON_ArrayForEach(e, tr) {
        maps += !strcmp(str(e, "action"), "segment_map");
        unmaps += !strcmp(str(e, "action"), "segment_unmap");
    }
    assert_int_equal(maps, 3);
    assert_int_equal(unmaps, 1);
    cJSON_Delete(j);
    xfree(a, p);
    xfree(a, r);
    vr_alloc_destroy(a);
    vr_device_close(d);
}

static void chrome_trace_has_counter_tracks(void **state)
{
    (void)state;
    vr_device *d = open_dev("meta:64MiB");
    vr_alloc_config c = {.history = 100};
    vr_alloc *a = make_alloc(d, "pytorch", &c);
    void *p = xmalloc(a, 30 * MiB, 0), *q = NULL;
    assert_int_equal(vr_alloc_malloc(a, 40 * MiB, 0, &q), VR_ERR_OOM);
    xfree(a, p);
    vr_alloc_empty_cache(a);
    char path[] = "/tmp/vram_chrome_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(vr_alloc_write_chrome_trace(a, path), VR_OK);
    cJSON *j = read_json(path);
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(j, "traceEvents"), *e;
    assert_true(cJSON_IsArray(evs));
    int counters_alloc = 0, counters_res = 0, seg_alloc = 0, seg_free = 0, oom = 0;
    double max_res = 0;
    cJSON_ArrayForEach(e, evs) {
        const char *ph = str(e, "ph"), *name = str(e, "name");
        if (!strcmp(ph, "C")) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
            num(e, "ts");
            if (!strcmp(name, "allocated"))
                counters_alloc++;
            if (!strcmp(name, "reserved")) {
                counters_res++;
                if (num(args, "bytes") > max_res)
                    max_res = num(args, "bytes");
            }
        } else if (!strcmp(ph, "i")) {
            seg_alloc += !strcmp(name, "segment_alloc");
            seg_free += !strcmp(name, "segment_free");
            oom += !strcmp(name, "oom");
        }
    }
    assert_true(counters_alloc >= 2);
    assert_true(counters_res >= 2);
    assert_true(max_res == 30.0 * MiB);
    assert_int_equal(seg_alloc, 1);
    assert_int_equal(seg_free, 1);
    assert_int_equal(oom, 1);
    cJSON_Delete(j);
    unlink(path);
    /* writing into a missing directory is a clean error */
    assert_int_equal(vr_alloc_write_chrome_trace(a, "/nonexistent-dir/x.json"), VR_ERR_IO);
    assert_non_null(strstr(vr_last_error(), "/nonexistent-dir/x.json"));
    vr_alloc_destroy(a);
    vr_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(summary_reads_like_pytorch),
        cmocka_unit_test(snapshot_parses_back),
        cmocka_unit_test(history_ring_keeps_the_latest),
        cmocka_unit_test(expandable_snapshot_reports_mapped_runs),
        cmocka_unit_test(chrome_trace_has_counter_tracks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
