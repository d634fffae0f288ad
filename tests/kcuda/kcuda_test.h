/* Helpers of the CUDA kernel tests: a vr_status or CUDA call that must succeed (the test fails naming it);
 * device bytes compared; a split master against a full one. */
#ifndef VRAM_TESTS_KCUDA_TEST_H
#define VRAM_TESTS_KCUDA_TEST_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim_math.h"

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

/* n weights updated with a full fp32 master (master, bf16 param, device) and with a split one (bf16 param = high
 * halves, lo = low halves, device): adds to d[0] the masters whose joined split value differs from the full one, to
 * d[1] the bf16 weights that differ at an exact tie of the master (rounded away from zero, not to even), to d[2]
 * the weights that differ otherwise. */
static inline void kc_split_diff(const void *master, const void *param, const void *split_param, const void *lo,
                                 size_t n, long d[3])
{
    float *f = malloc(n * 4 + 4);
    uint16_t *h0 = malloc(n * 2 + 2), *h1 = malloc(n * 2 + 2), *l = malloc(n * 2 + 2);
    CU(cudaMemcpy(f, master, n * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(h0, param, n * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(h1, split_param, n * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(l, lo, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        uint32_t u = vr_f32_bits(f[i]);
        d[0] += vr_split_join(h1[i], l[i]) != u;
        if (h0[i] != h1[i])
            d[(u & 0xFFFFu) == 0x8000u && h1[i] == (uint16_t)((u >> 16) + 1) ? 1 : 2]++;
    }
    free(f), free(h0), free(h1), free(l);
}

#endif
