// Timing of cuBLASLt's candidate algorithms for one product, shared by bench/gpu/lt_algos.cu and lt_dgelu.cu:
// for each candidate i of `got`, 3 warm-up calls of call(i), then 20 timed between events on st (a candidate that
// fails is skipped, its error cleared), then after(i) (the caller's checks). *first: candidate 0's ms a call;
// *best and *bi: the fastest's.
#pragma once
#include <cuda_runtime.h>

template <class Call, class After>
static void lt_time_candidates(int got, cudaStream_t st, Call call, After after, float *first, float *best, int *bi)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    *first = 0, *best = 1e9f, *bi = -1;
    for (int i = 0; i < got; i++) {
        for (int w = 0; w < 3; w++) call(i);
        cudaEventRecord(e0, st);
        for (int r = 0; r < 20; r++) call(i);
        cudaEventRecord(e1, st);
        if (cudaEventSynchronize(e1) != cudaSuccess) { cudaGetLastError(); continue; }
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= 20;
        if (i == 0) *first = ms;
        if (ms < *best) *best = ms, *bi = i;
        after(i);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}
