/* Crash-safe writes: temp file in the same directory, fsync, rename, fsync dir.
 *
 * rename(2) within one filesystem replaces the target atomically, so a reader
 * (or a crash) sees either the old file or the complete new one, never a mix.
 * The temp file lives beside the target so the rename never crosses devices. */
#define _POSIX_C_SOURCE 200809L
#include "vram/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local int64_t fail_after = -1; /* testing hook, bytes */

void vr_atomic_fail_after(int64_t bytes) { fail_after = bytes; }

static void release(vr_atomic_file *af)
{
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
}

/* The directory part of path ("." when none), into buf. */
static void dir_of(const char *path, char *buf, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, cap, ".");
    else if (slash == path)
        snprintf(buf, cap, "/");
    else
        snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

/* Removes path.tmp.<pid> files beside path whose process is gone (a kill while saving leaves them). */
static void remove_stale_temps(const char *path)
{
    char dir[4096], full[4096 + 256];
    dir_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, base, bl) != 0 || strncmp(e->d_name + bl, ".tmp.", 5) != 0)
            continue;
        const char *digits = e->d_name + bl + 5;
        char *end = NULL;
        long pid = strtol(digits, &end, 10);
        if (end == digits || *end || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        unlink(full);
    }
    closedir(d);
}

vr_status vr_atomic_check_writable(const char *path)
{
    if (!path || !*path)
        return vr_error(VR_ERR_INVALID, "output file: empty path");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return vr_error(VR_ERR_IO, "%s: is a directory, not a file", path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return vr_error(VR_ERR_IO, "%s: is not a regular file", path);
    size_t cap = strlen(path) + 40;
    char *probe = malloc(cap);
    if (!probe)
        return vr_error(VR_ERR_OOM, "%s: out of host memory for the path", path);
    snprintf(probe, cap, "%s.tmp.%ld.probe", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        int e = errno;
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        free(probe);
        return vr_error(VR_ERR_IO, "%s: cannot write in %s: %s", path, dir, strerror(e));
    }
    close(fd);
    unlink(probe);
    free(probe);
    return VR_OK;
}

vr_status vr_atomic_open(vr_atomic_file *af, const char *path)
{
    memset(af, 0, sizeof *af);
    if (!path || !*path) return vr_error(VR_ERR_INVALID, "atomic write: empty path");
    size_t cap = strlen(path) + 32;
    af->path = strdup(path);
    af->tmp_path = malloc(cap);
    if (!af->path || !af->tmp_path) {
        release(af);
        return vr_error(VR_ERR_OOM, "%s: out of host memory for the path", path);
    }
    remove_stale_temps(path);
    snprintf(af->tmp_path, cap, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        int e = errno;
        vr_status s = vr_error(VR_ERR_IO, "%s: cannot create temporary file %s: %s", path,
                               af->tmp_path, strerror(e));
        release(af);
        return s;
    }
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        int e = errno;
        close(fd);
        unlink(af->tmp_path);
        vr_status s = vr_error(VR_ERR_IO, "%s: cannot open temporary file: %s", path, strerror(e));
        release(af);
        return s;
    }
    return VR_OK;
}

vr_status vr_atomic_write(vr_atomic_file *af, const void *buf, size_t n)
{
    if (af->status != VR_OK) return af->status;
    if (!af->f) return af->status = vr_error(VR_ERR_IO, "atomic write: file is not open");
    if (fail_after >= 0 && af->written + n > (uint64_t)fail_after) {
        af->status = vr_error(VR_ERR_IO, "%s: write failed after %llu bytes: %s", af->path,
                              (unsigned long long)af->written, strerror(ENOSPC));
        return af->status;
    }
    if (n && fwrite(buf, 1, n, af->f) != n) {
        af->status = vr_error(VR_ERR_IO, "%s: write failed after %llu bytes: %s", af->path,
                              (unsigned long long)af->written, strerror(errno));
        return af->status;
    }
    af->written += n;
    return VR_OK;
}

/* fsyncs the directory holding path so the rename itself is durable. */
static vr_status sync_dir(const char *path)
{
    char *dir = strdup(path);
    if (!dir) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    vr_status s = VR_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        /* Some filesystems refuse fsync on directories (EINVAL); that is not a failure. */
        if (errno != EINVAL && errno != EROFS && errno != EBADF)
            s = vr_error(VR_ERR_IO, "%s: cannot sync directory %s: %s", path, dir, strerror(errno));
    }
    if (fd >= 0) close(fd);
    free(dir);
    return s;
}

vr_status vr_atomic_commit(vr_atomic_file *af)
{
    if (!af->path) return vr_error(VR_ERR_IO, "atomic write: file is not open");
    vr_status s = af->status;
    if (s == VR_OK && (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0))
        s = vr_error(VR_ERR_IO, "%s: cannot flush %s: %s", af->path, af->tmp_path, strerror(errno));
    int close_rc = fclose(af->f);
    af->f = NULL;
    if (s == VR_OK && close_rc != 0)
        s = vr_error(VR_ERR_IO, "%s: cannot close %s: %s", af->path, af->tmp_path, strerror(errno));
    if (s == VR_OK && rename(af->tmp_path, af->path) != 0)
        s = vr_error(VR_ERR_IO, "%s: cannot rename %s over it: %s", af->path, af->tmp_path,
                     strerror(errno));
    if (s != VR_OK) {
        unlink(af->tmp_path);
    } else {
        s = sync_dir(af->path);
    }
    release(af);
    return s;
}

void vr_atomic_abort(vr_atomic_file *af)
{
    if (af->f) {
        fclose(af->f);
        af->f = NULL;
    }
    if (af->tmp_path) unlink(af->tmp_path);
    release(af);
}

vr_status vr_atomic_write_file(const char *path, const void *buf, size_t n)
{
    vr_atomic_file af;
    vr_status s = vr_atomic_open(&af, path);
    if (s != VR_OK) return s;
    vr_atomic_write(&af, buf, n);
    return vr_atomic_commit(&af);
}
