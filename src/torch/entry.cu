// libvram_torch's alloc_fn, the one function PyTorch calls that must report a failure: a pluggable
// allocator's NULL would become a tensor at address 0 (CUDAPluggableAllocator does not check it), so
// the failure is thrown as std::runtime_error, which PyTorch turns into a Python RuntimeError carrying
// the message ("CUDA out of memory. ..." with vram's explanation; see vram_torch.h). Host code only.
#include <stdexcept>
#include <string>

#include "torch/vram_torch.h"

extern "C" VRAM_TORCH_API void *vram_torch_malloc(ssize_t size, int device, void *stream)
{
    void *p = vram_torch_try_malloc(size, device, stream);
    if (!p && size > 0)
        throw std::runtime_error(std::string(vram_torch_last_error()));
    return p;
}
