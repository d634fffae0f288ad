/* The host cost of libvram_torch's entry points on a real GPU, without PyTorch: a shared trace's alloc / free calls
 * (the gz read through zcat) replayed through vram_torch_try_malloc / vram_torch_free on the legacy stream, the
 * passes after the first timed (the fastest printed); then the CUDA runtime calls an entry could make per call
 * (cudaGetDevice, cudaStreamIsCapturing) and clock_gettime alone. ENTRY_COST_DEVICE=meta:80GiB: the same calls on
 * vram's simulated device (no driver call costs anything there). From the repository root, with libvram_torch.so
 * in build-carry/ (LD_LIBRARY_PATH=DIR picks another copy):
 *     gcc -O2 -std=c11 -Isrc -Iinclude -I/usr/local/cuda/include bench/torch_alloc/entry_cost.c \
 *         -o build-carry/entry_cost -Lbuild-carry -lvram_torch -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,'$ORIGIN'
 *     build-carry/entry_cost TRACE.csv.gz [PASSES] */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "torch/vram_torch.h"

typedef struct { int alloc; uint64_t addr, size; size_t of; } ev; /* of: a free's alloc event */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Trace address -> index of its live alloc event: open addressing, deleted slots kept as tombstones. */
#define TOMB UINT64_MAX
typedef struct { uint64_t addr; size_t at; } slot;
static slot *tab;
static size_t cap;
static slot *probe(uint64_t a, int insert)
{
    slot *tomb = NULL;
    for (size_t h = (a >> 9) * 0x9E3779B97F4A7C15ull;; h++) {
        slot *s = &tab[h & (cap - 1)];
        if (s->addr == a) return s;
        if (s->addr == TOMB && !tomb) tomb = s;
        if (!s->addr) return insert && tomb ? tomb : s;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: entry_cost TRACE.csv.gz [PASSES]\n"); return 2; }
    int passes = argc > 2 ? atoi(argv[2]) : 5;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "zcat '%s'", argv[1]);
    FILE *f = popen(cmd, "r");
    if (!f) { perror("zcat"); return 1; }
    ev *e = NULL;
    size_t n = 0, ncap = 0;
    char line[256], act[32];
    unsigned long long addr, size;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%31[^,],%llu,%llu", act, &addr, &size) != 3) continue;
        int is_alloc = !strcmp(act, "alloc");
        if (!is_alloc && strcmp(act, "free_completed")) continue;
        if (n == ncap) { ncap = ncap ? 2 * ncap : 4096; e = realloc(e, ncap * sizeof *e); }
        e[n++] = (ev){is_alloc, addr, size, (size_t)-1};
    }
    pclose(f);
    if (!n) { fprintf(stderr, "entry_cost: %s: no alloc or free_completed events\n", argv[1]); return 1; }
    for (cap = 1024; cap < 4 * n; cap *= 2) {}
    tab = calloc(cap, sizeof *tab);
    for (size_t i = 0; i < n; i++) { /* each free to its alloc */
        slot *s = probe(e[i].addr, e[i].alloc);
        if (e[i].alloc) {
            *s = (slot){e[i].addr, i};
        } else if (s->addr == e[i].addr) {
            e[i].of = s->at;
            s->addr = TOMB;
        }
    }
    void **ptr = calloc(n, sizeof *ptr);
    const char *spec = getenv("ENTRY_COST_DEVICE"); /* e.g. meta:80GiB: the same calls on vram's simulated device */
    if (spec && vram_torch_configure("stitch", 0.0, 0, spec) != 0) {
        fprintf(stderr, "%s\n", vram_torch_last_error());
        return 1;
    }
    cudaFree(0);
    double best = 1e30;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        for (size_t i = 0; i < n; i++) {
            if (e[i].alloc) {
                ptr[i] = vram_torch_try_malloc((ssize_t)e[i].size, 0, NULL);
                if (!ptr[i]) { fprintf(stderr, "%s\n", vram_torch_last_error()); return 1; }
            } else if (e[i].of != (size_t)-1 && ptr[e[i].of]) {
                vram_torch_free(ptr[e[i].of], (ssize_t)e[i].size, 0, NULL);
                ptr[e[i].of] = NULL;
            }
        }
        double dt = now() - t0;
        for (size_t i = 0; i < n; i++) /* what the pass left live */
            if (ptr[i]) { vram_torch_free(ptr[i], 0, 0, NULL); ptr[i] = NULL; }
        if (p && dt < best) best = dt;
    }
    printf("entry (malloc or free, trace order): %.1f ns a call (%zu calls, fastest of %d warm passes)\n",
           best / n * 1e9, n, passes - 1);
    enum { R = 1000000 };
    int d;
    double t0 = now();
    for (int i = 0; i < R; i++) cudaGetDevice(&d);
    printf("cudaGetDevice: %.1f ns\n", (now() - t0) / R * 1e9);
    enum cudaStreamCaptureStatus cs;
    t0 = now();
    for (int i = 0; i < R; i++) cudaStreamIsCapturing(0, &cs);
    printf("cudaStreamIsCapturing: %.1f ns\n", (now() - t0) / R * 1e9);
    t0 = now();
    double x = 0;
    for (int i = 0; i < R; i++) x += now();
    printf("clock_gettime: %.1f ns (%g)\n", (now() - t0) / R * 1e9, x > 0 ? 0.0 : 1.0);
    return 0;
}
