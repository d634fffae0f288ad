/* Standalone driver for the fuzz harnesses in a normal (non-libFuzzer) build:
 * runs LLVMFuzzerTestOneInput over every regular file of the directories (or
 * files) given as arguments, so ctest replays the seed corpus and the inputs
 * of crashes found before. Exits non-zero if an argument cannot be read. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the harness on one file; returns 0 on success, 1 if it cannot be read. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                fclose(f);
                free(buf);
                fprintf(stderr, "%s: out of memory\n", path);
                return 1;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        fprintf(stderr, "%s: read error\n", path);
        return 1;
    }
    /* Exactly n bytes, so ASan sees reads past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    if (n)
        memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    int bad = 0, runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            continue; /* an absent regress dir is fine */
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "%s: cannot open directory\n", argv[i]);
            bad = 1;
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                bad |= run_file(path);
                runs++;
            }
        }
        closedir(d);
    }
    printf("%d inputs replayed\n", runs);
    if (runs == 0) {
        fprintf(stderr, "no inputs found in the given directories\n");
        return 1;
    }
    return bad;
}
