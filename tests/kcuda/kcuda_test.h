/* Helpers of the CUDA kernel tests: a vr_status or CUDA call that must succeed (the test fails naming it). */
#ifndef VRAM_TESTS_KCUDA_TEST_H
#define VRAM_TESTS_KCUDA_TEST_H

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

#endif
