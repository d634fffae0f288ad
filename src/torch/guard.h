/* Inside libvram_torch: what the core needs from the CUDA runtime, with a no-CUDA stand-in
 * (guard_cuda.c, guard_nocuda.c). */
#ifndef VRAM_TORCH_GUARD_H
#define VRAM_TORCH_GUARD_H

#include <stdbool.h>

/* Around a call into vram: the device current on this thread at enter is current again after leave when the
 * device layer switched away from it in between (no runtime call otherwise). */
void vram_torch__guard_enter(void);
void vram_torch__guard_leave(void);
/* True when `stream` (a cudaStream_t) is capturing a CUDA graph. */
bool vram_torch__capturing(void *stream);

#endif
