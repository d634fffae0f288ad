/* CK(x): a CUDA driver call that must succeed, else the call, its file:line and the driver's message on stderr and
 * exit 1 (the benchmarks here: vmm_cost.c, vmm_bw.cu). */
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

#endif
