/* Without CUDA there is no current device to keep and no graph capture. */
#include "torch/guard.h"

void vram_torch__guard_enter(void) {}
void vram_torch__guard_leave(void) {}
bool vram_torch__capturing(void *stream)
{
    (void)stream;
    return false;
}
