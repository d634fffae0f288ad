/* vram exec — a graph dtype as the CUDA kernels name it (the CUDA backend's nodes and collectives). */
#ifndef VRAM_EXEC_CUDA_DTYPE_H
#define VRAM_EXEC_CUDA_DTYPE_H

#include <stdbool.h>

#include "kernels/cuda/kernels_cuda.h"
#include "vram/graph.h"

/* fp32, bf16, fp16 -> *out and true; any other dtype (not a float): false, *out untouched. */
static inline bool vr__cuda_dtype(vr_dtype d, vr_cuda_dtype *out)
{
    switch (d) {
    case VR_F32: *out = VR_CUDA_F32; return true;
    case VR_BF16: *out = VR_CUDA_BF16; return true;
    case VR_F16: *out = VR_CUDA_F16; return true;
    default: return false;
    }
}

#endif
