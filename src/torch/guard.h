/* Inside libvram_torch: what the core needs from the CUDA runtime, with a no-CUDA stand-in
 * (guard_cuda.c, guard_nocuda.c). */
#ifndef VRAM_TORCH_GUARD_H
#define VRAM_TORCH_GUARD_H

#include <stdbool.h>

/* The calling thread's current CUDA device (-1 when unknown), to hand back to vram_torch__guard_leave. */
int vram_torch__guard_enter(void);
/* Makes prev current again if the device layer switched away from it. */
void vram_torch__guard_leave(int prev);
/* True when `stream` (a cudaStream_t) is capturing a CUDA graph. */
bool vram_torch__capturing(void *stream);

#endif
