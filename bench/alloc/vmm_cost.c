/* What CUDA's virtual memory calls cost on this GPU, per call: cuMemCreate of a granule, cuMemMap of one granule,
 * cuMemSetAccess over a range of n granules (n = 1, 8, 64), cuMemUnmap of such a range, cuMemRelease. The stitch
 * policy maps a granule per cuMemMap and a range per cuMemSetAccess, so these say where its host time goes.
 *     gcc -O2 -I/usr/local/cuda/include bench/alloc/vmm_cost.c -o /tmp/vmm_cost -lcuda && /tmp/vmm_cost [device]
 * Prints one line per call kind: mean microseconds over REPS repetitions (wall clock, CLOCK_MONOTONIC). */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu_check.h"

enum { N = 64, REPS = 20 };

int main(int argc, char **argv)
{
    int dev_id = argc > 1 ? atoi(argv[1]) : 0;
    CUmemAllocationProp prop;
    size_t G;
    CUmemAccessDesc acc;
    cu_setup(dev_id, &prop, &G, &acc);
    CUmemGenericAllocationHandle h[N];
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, N * G, 0, 0, 0));
    double t0 = now_us();
    for (int i = 0; i < N; i++)
        CK(cuMemCreate(&h[i], G, &prop, 0));
    double create = (now_us() - t0) / N;
    double map = 0, unmap[3] = {0}, access[3] = {0}, map_big = 0;
    static const int ns[3] = {1, 8, 64};
    for (int r = 0; r < REPS; r++)
        for (int k = 0; k < 3; k++) {
            int n = ns[k];
            t0 = now_us();
            for (int i = 0; i < n; i++)
                CK(cuMemMap(va + (size_t)i * G, G, 0, h[i], 0));
            map += now_us() - t0;
            t0 = now_us();
            CK(cuMemSetAccess(va, (size_t)n * G, &acc, 1));
            access[k] += now_us() - t0;
            t0 = now_us();
            CK(cuMemUnmap(va, (size_t)n * G));
            unmap[k] += now_us() - t0;
        }
    int maps = REPS * (1 + 8 + 64);
    /* one handle of N granules mapped with one call, for comparison */
    CUmemGenericAllocationHandle big;
    CK(cuMemCreate(&big, N * G, &prop, 0));
    double access_big = 0;
    for (int r = 0; r < REPS; r++) {
        t0 = now_us();
        CK(cuMemMap(va, N * G, 0, big, 0));
        map_big += now_us() - t0;
        t0 = now_us();
        CK(cuMemSetAccess(va, N * G, &acc, 1));
        access_big += now_us() - t0;
        CK(cuMemUnmap(va, N * G));
    }

    printf("granule %zu KiB\n", G >> 10);
    printf("cuMemCreate (1 granule)        %8.1f us\n", create);
    printf("cuMemMap (1 granule)           %8.1f us\n", map / maps);
    printf("cuMemMap (%d granules, 1 handle) %8.1f us\n", N, map_big / REPS);
    printf("cuMemSetAccess (%d granules, 1 handle) %8.1f us\n", N, access_big / REPS);
    for (int k = 0; k < 3; k++)
        printf("cuMemSetAccess (%2d granules)   %8.1f us\ncuMemUnmap (%2d granules)       %8.1f us\n", ns[k],
               access[k] / REPS, ns[k], unmap[k] / REPS);
    /* with the GPU busy (~100 ms of memsets queued): does a map + cuMemSetAccess + unmap wait for it? */
    CUdeviceptr busy;
    CUstream st;
    size_t bb = (size_t)4 << 30;
    CK(cuMemAlloc(&busy, bb));
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 60; i++)
        CK(cuMemsetD8Async(busy, (unsigned char)i, bb, st));
    t0 = now_us();
    double t1 = now_us();
    for (int i = 0; i < 8; i++)
        CK(cuMemMap(va + (size_t)i * G, G, 0, h[i], 0));
    CK(cuMemSetAccess(va, 8 * G, &acc, 1));
    double t2 = now_us();
    CK(cuMemUnmap(va, 8 * G));
    double t3 = now_us();
    CUresult q = cuStreamQuery(st);
    CK(cuStreamSynchronize(st));
    double t4 = now_us();
    printf("GPU busy: 8 maps + cuMemSetAccess (8 granules) %.1f us, cuMemUnmap %.1f us, the queued work %s then, "
           "done %.1f ms after the first call\n", t2 - t1, t3 - t2, q == CUDA_SUCCESS ? "had finished" : "still ran",
           (t4 - t0) / 1e3);
    CK(cuMemFree(busy));
    /* does access survive an unmap and a new map of the same range? (a memset then faults if it does not) */
    CK(cuMemMap(va, G, 0, h[0], 0));
    CK(cuMemSetAccess(va, G, &acc, 1));
    CK(cuMemUnmap(va, G));
    CK(cuMemMap(va, G, 0, h[1], 0));
    CUresult kept = cuMemsetD8(va, 1, G);
    if (kept == CUDA_SUCCESS)
        kept = cuCtxSynchronize();
    const char *ks = NULL;
    cuGetErrorString(kept, &ks);
    printf("access after unmap + map of the same range, no cuMemSetAccess: memset %s\n", ks ? ks : "?");
    if (kept != CUDA_SUCCESS)
        return 0; /* the context is unusable after a fault */
    CK(cuMemUnmap(va, G));
    t0 = now_us();
    for (int i = 0; i < N; i++)
        CK(cuMemRelease(h[i]));
    double release = (now_us() - t0) / N;
    CK(cuMemRelease(big));
    CK(cuMemAddressFree(va, N * G));
    printf("cuMemRelease (1 granule)       %8.1f us\n", release);
    return 0;
}
