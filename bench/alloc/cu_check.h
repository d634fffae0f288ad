/* CK(x): a CUDA driver call that must succeed, else the call, its file:line and the driver's message on stderr and
 * exit 1 (the benchmarks here: vmm_cost.c, vmm_lookup.c, vmm_bw.cu); for the host programs, the clock and the
 * device's primary context with its physical-allocation properties. */
#ifndef VRAM_BENCH_ALLOC_CU_CHECK_H
#define VRAM_BENCH_ALLOC_CU_CHECK_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        CUresult r_ = (x);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                               \
            const char *s_ = NULL;                                                              \
            cuGetErrorString(r_, &s_);                                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?");           \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

#ifndef __CUDACC__
#include <time.h>

static inline double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Device dev_id's primary context made current; *prop: pinned device memory there, *G its granularity, *acc
 * read-write access for it. */
static inline void cu_setup(int dev_id, CUmemAllocationProp *prop, size_t *G, CUmemAccessDesc *acc)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, dev_id));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    *prop = (CUmemAllocationProp){0};
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev_id;
    *G = 0;
    CK(cuMemGetAllocationGranularity(G, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    *acc = (CUmemAccessDesc){.location = prop->location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
}
#endif

#endif
