/* vr_device_memcpy / vr_device_memset: host memory on cpu, nothing on meta,
 * the CUDA runtime on cuda (copy_cuda.c; copy_nocuda.c in builds without it). */
#include <string.h>

#include "device/device_impl.h"

/* Implemented in copy_cuda.c (or copy_nocuda.c). */
vr_status vr__cuda_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind);
vr_status vr__cuda_memset(vr_device *dev, void *dst, int value, size_t bytes);

vr_status vr_device_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind)
{
    if (bytes == 0)
        return VR_OK;
    if (!dst || !src)
        return vr_error(VR_ERR_INVALID, "device %s: memcpy of %zu bytes with a NULL pointer", dev->name, bytes);
    switch (dev->kind) {
    case VR_DEVICE_CPU:
        memmove(dst, src, bytes);
        return VR_OK;
    case VR_DEVICE_CUDA:
        return vr__cuda_memcpy(dev, dst, src, bytes, kind);
    default:
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: has no bytes to copy (meta is address space only)",
                        dev->name);
    }
}

vr_status vr_device_memset(vr_device *dev, void *dst, int value, size_t bytes)
{
    if (bytes == 0)
        return VR_OK;
    if (!dst)
        return vr_error(VR_ERR_INVALID, "device %s: memset of %zu bytes at NULL", dev->name, bytes);
    switch (dev->kind) {
    case VR_DEVICE_CPU:
        memset(dst, value, bytes);
        return VR_OK;
    case VR_DEVICE_CUDA:
        return vr__cuda_memset(dev, dst, value, bytes);
    default:
        return vr_error(VR_ERR_UNSUPPORTED, "device %s: has no bytes to fill (meta is address space only)",
                        dev->name);
    }
}
