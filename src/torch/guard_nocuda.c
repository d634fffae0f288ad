/* Without CUDA there is no current device to keep and no graph capture. */
#include "torch/guard.h"

int vram_torch__guard_enter(void) { return -1; }
void vram_torch__guard_leave(int prev) { (void)prev; }
bool vram_torch__capturing(void *stream)
{
    (void)stream;
    return false;
}
