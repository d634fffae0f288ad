/* The cuda backend in a build without CUDA: every entry point says so. */
#include "device/device_impl.h"

static const char no_cuda[] = "this vram was built without CUDA (rebuild with nvcc installed, -DVRAM_CUDA=ON)";

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

int vr_cuda_runtime_version(void) { return 0; }

uint64_t vr_cuda_stack_growth(int index, size_t *stack)
{
    (void)index;
    *stack = 0;
    return 0;
}
