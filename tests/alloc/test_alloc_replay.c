/* vr_replay_file on small hand-written traces: exact peaks under both
 * policies, gzip and plain input, OOMs counted, output files written, and
 * every kind of bad input rejected with file:line and no crash. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/alloc_helpers.h"
#include "vram/replay.h"

static char dir[] = "/tmp/vram_replay_XXXXXX";

static const char good[] =
    "# {\"workload\": \"tiny\", \"peak_allocated\": 8388608, \"peak_reserved\": 23068672, "
    "\"torch\": \"2.11.0\", \"num_alloc_retries\": 0}\n"
    "action,addr,size,stream\n"
    "segment_alloc,1000000000,20971520,0\n"
    "alloc,1000000000,5242880,0\n"
    "alloc,1005242880,3145728,0\n"
    "free_requested,1000000000,5242880,0\n"
    "free_completed,1000000000,5242880,0\n"
    "alloc,2000000000,1000,0\n"
    "free_requested,1005242880,3145728,0\n"
    "free_completed,1005242880,3145728,0\n"
    "free_completed,2000000000,1000,0\n";

static char *path_of(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static const char *write_plain(const char *name, const char *text)
{
    const char *p = path_of(name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static const char *write_gz(const char *name, const char *text)
{
    const char *p = path_of(name);
    gzFile g = gzopen(p, "wb");
    assert_non_null(g);
    assert_int_equal(gzputs(g, text), (int)strlen(text));
    gzclose(g);
    return p;
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void replays_exact_peaks(void **state)
{
    (void)state;
    const char *files[2] = {write_plain("good.csv", good), write_gz("good.csv.gz", good)};
    for (int i = 0; i < 2; i++) {
        vr_replay_result r;
        vr_replay_options o = {.check = true};
        assert_int_equal(vr_replay_file(files[i], &o, &r), VR_OK);
        assert_string_equal(r.workload, "tiny");
        assert_string_equal(r.torch_version, "2.11.0");
        assert_true(r.have_torch);
        assert_int_equal(r.torch_peak_reserved, 23068672);
        assert_int_equal(r.allocs, 3);
        assert_int_equal(r.frees, 3);
        assert_int_equal(r.lines, 11);
        assert_int_equal(r.peak_allocated, 8 * MiB);
        assert_int_equal(r.peak_requested, 8 * MiB);
        assert_int_equal(r.peak_reserved, 22 * MiB); /* one 20 MiB and one 2 MiB segment */
        assert_true(r.ratio > 2.749 && r.ratio < 2.751);
        assert_int_equal(r.ooms, 0);
        assert_true(r.ns_per_op > 0);
    }
    vr_replay_result r;
    vr_replay_options o = {.policy = "expandable", .check = true};
    assert_int_equal(vr_replay_file(files[1], &o, &r), VR_OK);
    assert_int_equal(r.peak_reserved, 10 * MiB); /* 8 MiB of granules + one small granule */
}

static void counts_ooms_and_continues(void **state)
{
    (void)state;
    const char *f = write_plain("good.csv", good);
    vr_replay_result r;
    vr_replay_options o = {.capacity = 10 * MiB};
    assert_int_equal(vr_replay_file(f, &o, &r), VR_OK);
    assert_int_equal(r.ooms, 2); /* both large allocs need a 20 MiB segment */
    assert_int_equal(r.first_oom_line, 4);
    assert_non_null(strstr(r.first_oom, "out of memory"));
    assert_int_equal(r.peak_reserved, 2 * MiB);
}

static void writes_snapshot_and_chrome_trace(void **state)
{
    (void)state;
    const char *f = write_plain("good.csv", good);
    char snap[256], chrome[256];
    snprintf(snap, sizeof snap, "%s/snap.json", dir);
    snprintf(chrome, sizeof chrome, "%s/trace.json", dir);
    vr_replay_result r;
    vr_replay_options o = {.snapshot_path = snap, .chrome_trace_path = chrome};
    assert_int_equal(vr_replay_file(f, &o, &r), VR_OK);
    struct stat st;
    assert_int_equal(stat(snap, &st), 0);
    assert_true(st.st_size > 100);
    assert_int_equal(stat(chrome, &st), 0);
    assert_true(st.st_size > 100);
    vr_replay_options bad = {.snapshot_path = "/nonexistent-dir/s.json"};
    assert_int_equal(vr_replay_file(f, &bad, &r), VR_ERR_IO);
}

/* A snapshot of an allocator that holds no segment (every alloc failed): no qsort of a NULL list. */
static void snapshot_with_no_segments(void **state)
{
    (void)state;
    const char *f = write_plain("ooms.csv", "alloc,1,4194304,0\nalloc,2,4194304,0\n");
    char snap[256];
    snprintf(snap, sizeof snap, "%s/empty-snap.json", dir);
    vr_replay_result r;
    vr_replay_options o = {.capacity = 1 * MiB, .snapshot_path = snap};
    assert_int_equal(vr_replay_file(f, &o, &r), VR_OK);
    assert_int_equal(r.ooms, 2);
    struct stat st;
    assert_int_equal(stat(snap, &st), 0);
    assert_true(st.st_size > 2);
}

static void expect_error(const char *path, vr_status want, const char *fragment)
{
    vr_replay_result r;
    vr_status st = vr_replay_file(path, NULL, &r);
    if (st != want || !strstr(vr_last_error(), fragment))
        fail_msg("%s: got %d '%s', expected %d with '%s'", path, st, vr_last_error(), want, fragment);
}

static void rejects_bad_input_with_file_and_line(void **state)
{
    (void)state;
    static const struct { const char *name, *text, *fragment; } cases[] = {
        {"fields.csv", "action,addr,size,stream\nalloc,1,512,0\nalloc,2,512\n", "fields.csv:3: expected 4 fields"},
        {"extra.csv", "alloc,1,512,0,7\n", "extra.csv:1: expected 4 fields"},
        {"action.csv", "alloc,1,512,0\nallocate,2,512,0\n", "action.csv:2: unknown action 'allocate'"},
        {"unknown.csv", "alloc,1,512,0\nfree_completed,2,512,0\n", "unknown.csv:2: free_completed of address 2"},
        {"twice.csv", "alloc,1,512,0\nalloc,1,512,0\n", "twice.csv:2: alloc at 1, which is still allocated (line 1)"},
        {"garbage.csv", "alloc,1,12x,0\n", "garbage.csv:1: size '12x' is not a non-negative integer"},
        {"negative.csv", "alloc,1,-5,0\n", "negative.csv:1: size '-5'"},
        {"overflow.csv", "alloc,1,99999999999999999999999,0\n", "overflow.csv:1: size"},
        {"addr.csv", "alloc,0x10,512,0\n", "addr.csv:1: address '0x10'"},
        {"stream.csv", "alloc,1,512,\n", "stream.csv:1: stream ''"},
        {"header.csv", "# {\"workload\": \n", "header.csv:1: header line is not valid JSON"},
        {"columns.csv", "action,address,bytes\n", "columns.csv:1: column header"},
        {"hugehdr.csv", "# {\"peak_allocated\": 1e30, \"peak_reserved\": 1}\nalloc,1,512,0\n",
         "hugehdr.csv:1: header field peak_allocated"},
        {"neghdr.csv", "# {\"peak_allocated\": 1, \"peak_reserved\": -4}\nalloc,1,512,0\n",
         "neghdr.csv:1: header field peak_reserved"},
        {"rethdr.csv", "# {\"num_alloc_retries\": 2.5}\nalloc,1,512,0\n", "rethdr.csv:1: header field num_alloc_retries"},
        {"warmhdr.csv", "# {\"warmup_ops\": -1}\nalloc,1,512,0\n", "warmhdr.csv:1: header field warmup_ops"},
        {"warmlong.csv", "# {\"warmup_ops\": 3}\nalloc,1,512,0\nfree_completed,1,512,0\n",
         "warmlong.csv: header field warmup_ops is 3, more than the trace's 2 allocs and frees"},
        {"empty.csv", "", "empty.csv: no trace events"},
        {"comments.csv", "# just a comment\n\n", "no trace events"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error(write_plain(cases[i].name, cases[i].text), VR_ERR_FORMAT, cases[i].fragment);
    /* the same problems inside gzip */
    expect_error(write_gz("action.csv.gz", "alloc,1,512,0\nallocate,2,512,0\n"), VR_ERR_FORMAT,
                 "action.csv.gz:2: unknown action");

    char *longline = malloc(10000);
    memset(longline, '1', 9999);
    longline[9999] = '\0';
    memcpy(longline, "alloc,", 6);
    expect_error(write_plain("long.csv", longline), VR_ERR_FORMAT, "long.csv:1: line longer than");
    free(longline);

    expect_error(path_of("missing.csv.gz"), VR_ERR_IO, "missing.csv.gz: cannot open");
}

static void rejects_corrupt_and_truncated_gzip(void **state)
{
    (void)state;
    /* a trace big enough that truncation cuts the compressed stream */
    size_t cap = 4 << 20, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "action,addr,size,stream\n");
    for (int i = 0; i < 20000; i++)
        n += (size_t)snprintf(text + n, cap - n, "alloc,%d,%d,0\nfree_completed,%d,%d,0\n", i * 4096 + 4096,
                              (i * 7919) % 100000 + 1, i * 4096 + 4096, (i * 7919) % 100000 + 1);
    const char *gz = write_gz("full.csv.gz", text);
    free(text);
    vr_replay_result r;
    assert_int_equal(vr_replay_file(gz, NULL, &r), VR_OK);
    assert_int_equal(r.allocs, 20000);

    FILE *f = fopen(gz, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    unsigned char *bytes = malloc((size_t)size);
    assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);

    const char *trunc = path_of("trunc.csv.gz");
    f = fopen(trunc, "wb");
    fwrite(bytes, 1, (size_t)size / 2, f);
    fclose(f);
    expect_error(trunc, VR_ERR_FORMAT, "trunc.csv.gz:");
    expect_error(trunc, VR_ERR_FORMAT, "truncated gzip");

    const char *bad = path_of("corrupt.csv.gz");
    for (long i = size / 3; i < size / 3 + 64; i++)
        bytes[i] ^= 0x5a;
    f = fopen(bad, "wb");
    fwrite(bytes, 1, (size_t)size, f);
    fclose(f);
    vr_status st = vr_replay_file(bad, NULL, &r);
    assert_int_equal(st, VR_ERR_FORMAT);
    assert_non_null(strstr(vr_last_error(), "corrupt.csv.gz:"));
    free(bytes);

    /* binary garbage that is not gzip at all */
    const char *bin = path_of("binary.csv.gz");
    f = fopen(bin, "wb");
    for (int i = 0; i < 5000; i++)
        fputc((i * 131 + 7) & 0xff, f);
    fclose(f);
    st = vr_replay_file(bin, NULL, &r);
    assert_int_equal(st, VR_ERR_FORMAT);
    assert_non_null(strstr(vr_last_error(), "binary.csv.gz:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replays_exact_peaks),
        cmocka_unit_test(counts_ooms_and_continues),
        cmocka_unit_test(writes_snapshot_and_chrome_trace),
        cmocka_unit_test(rejects_bad_input_with_file_and_line),
        cmocka_unit_test(rejects_corrupt_and_truncated_gzip),
        cmocka_unit_test(snapshot_with_no_segments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
