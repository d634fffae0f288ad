/* For harnesses of readers that take a path: writes the fuzzer's bytes to one
 * temporary file per process (rewritten on every input) and returns its path. */
#ifndef VRAM_FUZZ_FILE_H
#define VRAM_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path_buf[64];

static void fuzz_remove_file(void)
{
    if (fuzz_path_buf[0])
        unlink(fuzz_path_buf);
}

/* The temp file's path, holding exactly data[0..size); aborts if it cannot be written. */
static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    if (!fuzz_path_buf[0]) {
        const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(fuzz_path_buf, sizeof fuzz_path_buf, "%.30s/vram_fuzz_%ld%s", dir, (long)getpid(), suffix);
        atexit(fuzz_remove_file);
    }
    FILE *f = fopen(fuzz_path_buf, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(fuzz_path_buf);
        abort();
    }
    return fuzz_path_buf;
}

#endif
