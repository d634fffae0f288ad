/* Helpers shared by the train tests: a scratch directory and whole-file I/O. */
#ifndef VRAM_TESTS_TRAIN_UTIL_H
#define VRAM_TESTS_TRAIN_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Creates a fresh directory under $TMPDIR (or /tmp); returns its path (static). */
static inline const char *tt_scratch_dir(const char *tag)
{
    static char dir[512];
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/vram-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    return dir;
}

/* dir/name, valid until the test program exits (kept reachable for LeakSanitizer). */
static inline const char *tt_path(const char *dir, const char *name)
{
    static char *kept[1024];
    static int next;
    size_t n = strlen(dir) + strlen(name) + 2;
    char *b = malloc(n);
    if (!b || next == 1024) abort();
    snprintf(b, n, "%s/%s", dir, name);
    return kept[next++] = b;
}

static inline void tt_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

/* Reads a whole file (malloc'd, caller frees); NULL if it cannot be opened. */
static inline uint8_t *tt_read(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(size > 0 ? (size_t)size : 1);
    if (!b || fread(b, 1, (size_t)size, f) != (size_t)size) abort();
    fclose(f);
    *n = (size_t)size;
    return b;
}

/* Number of directory entries (other than . and ..) whose name contains `part`. */
static inline int tt_count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

/* Removes the scratch directory and everything in it. */
static inline void tt_remove_dir(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif
