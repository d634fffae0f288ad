/* vram exec — builds without CUDA have no CUDA backend (--device cuda fails
 * cleanly in vr_exec_create; opening a cuda device already fails there). */
#include "exec/exec_internal.h"

const vr_exec_backend *vr__exec_backend_cuda(void) { return NULL; }

int vr_exec_cudnn_version(const char **why)
{
    if (why)
        *why = "vram was built without CUDA";
    return 0;
}
