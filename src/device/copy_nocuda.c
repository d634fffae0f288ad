/* Copies on cuda in a build without CUDA: no cuda device can exist. */
#include "device/device_impl.h"

vr_status vr__cuda_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind);
vr_status vr__cuda_memset(vr_device *dev, void *dst, int value, size_t bytes);

vr_status vr__cuda_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind)
{
    (void)dst, (void)src, (void)bytes, (void)kind;
    return vr_error(VR_ERR_UNSUPPORTED, "device %s: this vram was built without CUDA", dev->name);
}

vr_status vr__cuda_memset(vr_device *dev, void *dst, int value, size_t bytes)
{
    (void)dst, (void)value, (void)bytes;
    return vr_error(VR_ERR_UNSUPPORTED, "device %s: this vram was built without CUDA", dev->name);
}
