/* The CUDA runtime's current device kept across vram's calls, and the graph-capture query. PyTorch
 * relies on the current device it set; vram's device layer makes its own device current (cudaSetDevice)
 * and leaves it so, remembering the one it switched away from (vr__cuda_take_switched_from): asking the
 * runtime for the current device on every call cost ~60 ns (bench/torch_alloc/entry_cost.c). A failed
 * capture query (no driver, as in CI) reads as "not capturing". */
#include <cuda_runtime_api.h>

#include "device/cuda_impl.h"
#include "torch/guard.h"

void vram_torch__guard_enter(void) { (void)vr__cuda_take_switched_from(); }

void vram_torch__guard_leave(void)
{
    int prev = vr__cuda_take_switched_from();
    if (prev >= 0 && cudaSetDevice(prev) != cudaSuccess)
        cudaGetLastError();
}

bool vram_torch__capturing(void *stream)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &st) != cudaSuccess) {
        /* cudaErrorStreamCaptureImplicit: the legacy stream while another stream captures
         * globally; anything that cannot be asked about during a capture is treated as one */
        cudaError_t e = cudaGetLastError();
        return e == cudaErrorStreamCaptureImplicit || e == cudaErrorStreamCaptureUnsupported;
    }
    return st != cudaStreamCaptureStatusNone;
}
