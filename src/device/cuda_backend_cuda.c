/* TEMPORARY placeholder until the CUDA backend lands. */
#include "device/device_impl.h"

static const char no_cuda[] = "the CUDA backend is not implemented yet";

vr_status vr__cuda_open(int index, const char *spec, vr_device **out)
{
    (void)index;
    *out = NULL;
    return vr_error(VR_ERR_UNSUPPORTED, "device '%s': %s", spec, no_cuda);
}

vr_status vr_cuda_device_count(int *count)
{
    *count = 0;
    return vr_error(VR_ERR_UNSUPPORTED, "%s", no_cuda);
}

vr_status vr_cuda_device_info(int index, vr_cuda_info *out)
{
    (void)index;
    (void)out;
    return vr_error(VR_ERR_UNSUPPORTED, "%s", no_cuda);
}

vr_status vr_cuda_context_cost(int index, uint64_t *bytes)
{
    (void)index;
    *bytes = 0;
    return vr_error(VR_ERR_UNSUPPORTED, "%s", no_cuda);
}
