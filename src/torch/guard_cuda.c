/* The CUDA runtime's current device kept across vram's calls, and the graph-capture query. PyTorch
 * relies on the current device it set; vram's device layer makes its own device current (cudaSetDevice)
 * and leaves it so. Failures (no driver, as in CI) read as "unknown" and "not capturing". */
#include <cuda_runtime_api.h>

#include "torch/guard.h"

int vram_torch__guard_enter(void)
{
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return d;
}

void vram_torch__guard_leave(int prev)
{
    int d = -1;
    if (prev < 0)
        return;
    if (cudaGetDevice(&d) == cudaSuccess && d == prev)
        return;
    if (cudaSetDevice(prev) != cudaSuccess)
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
