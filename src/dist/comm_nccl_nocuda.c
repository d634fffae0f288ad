/* The NCCL engine in a build without CUDA: never available, and every entry point says why. */
#include "dist/comm_impl.h"

static const char no_cuda[] = "dist: NCCL needs CUDA, and this vram was built without CUDA";

bool vr_comm_nccl_available(int *version)
{
    if (version)
        *version = 0;
    return false;
}

vr_status vr_comm_nccl_id(char hex[VR_COMM_ID_HEX])
{
    if (hex)
        hex[0] = '\0';
    return vr_error(VR_ERR_UNSUPPORTED, "%s", no_cuda);
}

vr_status vr_comm_nccl(const char *id_hex, int rank, int world, vr_comm **out)
{
    (void)id_hex, (void)rank, (void)world;
    if (out)
        *out = NULL;
    return vr_error(VR_ERR_UNSUPPORTED, "%s", no_cuda);
}
