/* Atomic writes: the old file survives every kind of failed save, and no
 * temporary file is left behind. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "train/train_test_util.h"
#include "vram/atomic_file.h"

static const char *dir;

static int setup(void **state) { (void)state; dir = tt_scratch_dir("atomic"); return 0; }
static int teardown(void **state) { (void)state; tt_remove_dir(dir); return 0; }

#define ERR_HAS(s) assert_non_null(strstr(vr_last_error(), (s)))

static void assert_file_is(const char *path, const char *text)
{
    size_t n;
    uint8_t *b = tt_read(path, &n);
    assert_non_null(b);
    assert_int_equal(n, strlen(text));
    assert_memory_equal(b, text, n);
    free(b);
}

static void writes_and_replaces(void **state)
{
    (void)state;
    const char *p = tt_path(dir, "a.txt");
    assert_int_equal(vr_atomic_write_file(p, "first", 5), VR_OK);
    assert_file_is(p, "first");
    assert_int_equal(vr_atomic_write_file(p, "second!", 7), VR_OK);
    assert_file_is(p, "second!");
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
}

static void failures_keep_the_old_file(void **state)
{
    (void)state;
    const char *p = tt_path(dir, "keep.txt");
    assert_int_equal(vr_atomic_write_file(p, "precious", 8), VR_OK);

    /* Disk full mid-write: commit reports it and removes the temp file. */
    vr_atomic_file af;
    assert_int_equal(vr_atomic_open(&af, p), VR_OK);
    assert_int_equal(tt_count_entries(dir, ".tmp."), 1);
    vr_atomic_fail_after(3);
    assert_int_equal(vr_atomic_write(&af, "ab", 2), VR_OK);
    assert_int_equal(vr_atomic_write(&af, "cd", 2), VR_ERR_IO);
    assert_int_equal(vr_atomic_write(&af, "ef", 2), VR_ERR_IO); /* sticky */
    vr_atomic_fail_after(-1);
    assert_int_equal(vr_atomic_commit(&af), VR_ERR_IO);
    ERR_HAS(p);
    assert_file_is(p, "precious");
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);

    /* Abandoned save (e.g. the loop was interrupted before commit). */
    assert_int_equal(vr_atomic_open(&af, p), VR_OK);
    assert_int_equal(vr_atomic_write(&af, "partial", 7), VR_OK);
    vr_atomic_abort(&af);
    assert_file_is(p, "precious");
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);

    /* Parent directory missing: nothing can be created. */
    const char *lost = tt_path(dir, "missing/x.txt");
    assert_int_equal(vr_atomic_write_file(lost, "x", 1), VR_ERR_IO);
    ERR_HAS(lost);

    /* The target is a directory: the rename fails, the temp file goes away. */
    const char *d = tt_path(dir, "adir");
    assert_int_equal(mkdir(d, 0755), 0);
    assert_int_equal(vr_atomic_write_file(d, "x", 1), VR_ERR_IO);
    ERR_HAS(d); ERR_HAS("rename");
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
}

static void read_only_directory(void **state)
{
    (void)state;
    if (geteuid() == 0) skip(); /* root ignores directory permissions */
    const char *ro = tt_path(dir, "ro");
    assert_int_equal(mkdir(ro, 0755), 0);
    const char *p = tt_path(ro, "f.txt");
    assert_int_equal(vr_atomic_write_file(p, "old", 3), VR_OK);
    assert_int_equal(chmod(ro, 0555), 0);
    assert_int_equal(vr_atomic_write_file(p, "new", 3), VR_ERR_IO);
    ERR_HAS(p);
    assert_file_is(p, "old");
    assert_int_equal(chmod(ro, 0755), 0);
}

/* Outputs are checked before a run: a directory or a missing parent is named; a good path leaves nothing. */
static void writability_is_checked_first(void **state)
{
    (void)state;
    assert_int_equal(vr_atomic_check_writable(dir), VR_ERR_IO);
    assert_non_null(strstr(vr_last_error(), "is a directory"));
    const char *lost = tt_path(dir, "nowhere/m.bin");
    assert_int_equal(vr_atomic_check_writable(lost), VR_ERR_IO);
    assert_non_null(strstr(vr_last_error(), lost));
    const char *ok = tt_path(dir, "fine.bin");
    assert_int_equal(vr_atomic_check_writable(ok), VR_OK);
    assert_int_equal(access(ok, F_OK), -1); /* no partial output */
    assert_int_equal(tt_count_entries(dir, ".tmp."), 0);
}

/* A kill while saving leaves path.tmp.PID; the next save removes those of dead processes only. */
static void stale_temps_are_removed(void **state)
{
    (void)state;
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    assert_true(child > 0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    const char *p = tt_path(dir, "m.bin");
    char dead[512], alive[512];
    snprintf(dead, sizeof dead, "%s.tmp.%ld", p, (long)child);
    snprintf(alive, sizeof alive, "%s.tmp.%ld", p, (long)getppid()); /* a live process */
    tt_write(dead, "x", 1);
    tt_write(alive, "y", 1);
    assert_int_equal(vr_atomic_write_file(p, "data", 4), VR_OK);
    assert_int_equal(access(dead, F_OK), -1);
    assert_int_equal(access(alive, F_OK), 0);
    unlink(alive);
    unlink(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(writes_and_replaces),
        cmocka_unit_test(failures_keep_the_old_file),
        cmocka_unit_test(read_only_directory),
        cmocka_unit_test(writability_is_checked_first),
        cmocka_unit_test(stale_temps_are_removed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
