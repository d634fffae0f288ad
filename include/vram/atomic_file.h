/* vram — crash-safe file writes.
 *
 * A vr_atomic_file writes to `path.tmp.<pid>` in the target's directory; commit
 * flushes, fsyncs, renames it over the target and fsyncs the directory. Until
 * commit succeeds the previous file at `path` is untouched, and on any failure
 * the temporary file is removed. Errors are VR_ERR_IO and name the path. */
#ifndef VRAM_ATOMIC_FILE_H
#define VRAM_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_atomic_file {
    FILE *f;          /* the temporary file, NULL once closed */
    char *path;       /* target path (owned) */
    char *tmp_path;   /* path.tmp.<pid> (owned) */
    uint64_t written; /* bytes written so far */
    vr_status status; /* first failure, VR_OK while healthy */
} vr_atomic_file;

/* Creates path.tmp.<pid> for writing. On failure nothing is left behind. */
vr_status vr_atomic_open(vr_atomic_file *af, const char *path);

/* Appends n bytes. After a failure further writes are ignored and the first
 * error is returned again (so callers may check only at commit). */
vr_status vr_atomic_write(vr_atomic_file *af, const void *buf, size_t n);

/* Flushes, fsyncs and renames over the target, then fsyncs the directory.
 * On failure (or after an earlier write failure) removes the temp file. */
vr_status vr_atomic_commit(vr_atomic_file *af);

/* Gives up: closes and removes the temporary file. Safe after commit. */
void vr_atomic_abort(vr_atomic_file *af);

/* Checks, before a long run, that path can be written later: not a directory or special file, and a
 * temporary file can be created (and is removed) beside it. Errors name the path. vr_atomic_open also
 * removes path.tmp.<pid> files left by processes that no longer exist. */
vr_status vr_atomic_check_writable(const char *path);

/* Writes a whole buffer to path atomically (open + write + commit). */
vr_status vr_atomic_write_file(const char *path, const void *buf, size_t n);

/* Testing hook: make writes on this thread fail (ENOSPC) once more than
 * `bytes` bytes have been written to one file; negative turns it off. */
void vr_atomic_fail_after(int64_t bytes);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
