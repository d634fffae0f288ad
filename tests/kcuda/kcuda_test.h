/* Helpers of the CUDA kernel tests: a vr_status or CUDA call that must succeed (the test fails naming it);
 * device bytes compared. */
#ifndef VRAM_TESTS_KCUDA_TEST_H
#define VRAM_TESTS_KCUDA_TEST_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define OK(expr)                                                                                                 \
    do {                                                                                                         \
        vr_status s_ = (expr);                                                                                   \
        if (s_ != VR_OK)                                                                                         \
            fail_msg("%s -> %s: %s", #expr, vr_status_name(s_), vr_last_error());                               \
    } while (0)

#define CU(expr)                                                                                                 \
    do {                                                                                                         \
        cudaError_t e_ = (expr);                                                                                 \
        if (e_ != cudaSuccess)                                                                                   \
            fail_msg("%s -> %s", #expr, cudaGetErrorString(e_));                                                 \
    } while (0)

/* The bytes at device addresses a and b equal (bit for bit)? */
static inline bool kc_same_bytes(const void *a, const void *b, size_t bytes)
{
    void *x = malloc(bytes ? bytes : 1), *y = malloc(bytes ? bytes : 1);
    CU(cudaMemcpy(x, a, bytes, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(y, b, bytes, cudaMemcpyDeviceToHost));
    bool eq = !memcmp(x, y, bytes);
    free(x);
    free(y);
    return eq;
}

#endif
