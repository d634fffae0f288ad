/* Do many live mappings make CUDA's other calls slower? With M granules each mapped by its own cuMemMap (stitch's
 * way; M = 1 .. 8192, at M ranges, at M ranges over M / 4 granules, or all side by side in one range), or M cuMemAlloc'd blocks (PyTorch's native
 * way), the per-call cost of what a training step calls between its allocations: an async copy of 4 KiB from
 * pinned host memory into one of them, an async memset of 4 KiB, cuPointerGetAttribute on an address in one, an
 * async copy device to device, and a launch of an empty kernel-less event record (cuEventRecord).
 *     gcc -O2 -I/usr/local/cuda/include bench/alloc/vmm_lookup.c -o /tmp/vmm_lookup -lcuda && /tmp/vmm_lookup [device]
 * Prints one line per (kind, M): mean microseconds per call over REPS calls (wall clock; the stream is drained
 * before timing and after, the drain not counted for the async calls' issue cost, then counted with it). */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu_check.h"

enum { REPS = 20000, MMAX = 8192 };

/* Mean microseconds per call of each kind, the targets spread over the n addresses in at[]. */
static void calls(const char *how, size_t m, CUdeviceptr *at, size_t n, void *host, CUstream st, CUevent ev)
{
    double t0, cp = 0, ms = 0, pa = 0, dd = 0, er = 0;
    unsigned int mt = 0;
    CK(cuStreamSynchronize(st));
    t0 = now_us();
    for (int r = 0; r < REPS; r++)
        CK(cuMemcpyHtoDAsync(at[(size_t)r * 7919 % n], host, 4096, st));
    CK(cuStreamSynchronize(st));
    cp = (now_us() - t0) / REPS;
    t0 = now_us();
    for (int r = 0; r < REPS; r++)
        CK(cuMemsetD8Async(at[(size_t)r * 7919 % n], 0, 4096, st));
    CK(cuStreamSynchronize(st));
    ms = (now_us() - t0) / REPS;
    t0 = now_us();
    for (int r = 0; r < REPS; r++)
        CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at[(size_t)r * 7919 % n] + 64));
    pa = (now_us() - t0) / REPS;
    t0 = now_us();
    for (int r = 0; r < REPS; r++)
        CK(cuMemcpyDtoDAsync(at[(size_t)r * 7919 % n], at[(size_t)(r + 1) * 7919 % n] + 4096, 4096, st));
    CK(cuStreamSynchronize(st));
    dd = (now_us() - t0) / REPS;
    t0 = now_us();
    for (int r = 0; r < REPS; r++)
        CK(cuEventRecord(ev, st));
    CK(cuStreamSynchronize(st));
    er = (now_us() - t0) / REPS;
    printf("%-22s M %5zu: HtoD 4KiB %6.2f  memset %6.2f  PointerGetAttribute %6.2f  DtoD %6.2f  EventRecord %6.2f us\n",
           how, m, cp, ms, pa, dd, er);
}

int main(int argc, char **argv)
{
    int dev_id = argc > 1 ? atoi(argv[1]) : 0;
    CUmemAllocationProp prop;
    size_t G;
    CUmemAccessDesc acc;
    cu_setup(dev_id, &prop, &G, &acc);
    CUstream st;
    CUevent ev;
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    void *host;
    CK(cuMemAllocHost(&host, 4096));
    static CUmemGenericAllocationHandle h[MMAX];
    static CUdeviceptr at[MMAX];
    for (int i = 0; i < MMAX; i++)
        CK(cuMemCreate(&h[i], G, &prop, 0));
    static const size_t ms[] = {1, 64, 1024, 4096, MMAX};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        size_t m = ms[k];
        /* m granules, each at a range of its own (stitch: a mapping per block, a cuMemMap per granule); then m
         * ranges over m / 4 granules, each granule mapped at 4 addresses (stitch's cached mappings alias) */
        for (size_t per = 1; per <= 4; per += 3) {
            for (size_t i = 0; i < m; i++) {
                CK(cuMemAddressReserve(&at[i], G, 0, 0, 0));
                CK(cuMemMap(at[i], G, 0, h[i / per], 0));
                CK(cuMemSetAccess(at[i], G, &acc, 1));
            }
            calls(per == 1 ? "VMM, a range each" : "VMM, 4 ranges a granule", m, at, m, host, st, ev);
            for (size_t i = 0; i < m; i++) {
                CK(cuMemUnmap(at[i], G));
                CK(cuMemAddressFree(at[i], G));
            }
        }
        /* the same granules side by side in one range */
        CUdeviceptr va;
        CK(cuMemAddressReserve(&va, m * G, 0, 0, 0));
        for (size_t i = 0; i < m; i++) {
            CK(cuMemMap(va + i * G, G, 0, h[i], 0));
            at[i] = va + i * G;
        }
        CK(cuMemSetAccess(va, m * G, &acc, 1));
        calls("VMM, one range", m, at, m, host, st, ev);
        CK(cuMemUnmap(va, m * G));
        CK(cuMemAddressFree(va, m * G));
        /* m blocks of cuMemAlloc */
        for (size_t i = 0; i < m; i++)
            CK(cuMemAlloc(&at[i], G));
        calls("cuMemAlloc", m, at, m, host, st, ev);
        for (size_t i = 0; i < m; i++)
            CK(cuMemFree(at[i]));
    }
    return 0;
}
