/* Copies and fills on a cuda device: cudaMemcpy / cudaMemset (default stream,
 * synchronous with respect to the host for pageable host memory). */
#include "device/cuda_impl.h"

vr_status vr__cuda_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind);
vr_status vr__cuda_memset(vr_device *dev, void *dst, int value, size_t bytes);

vr_status vr__cuda_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind)
{
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    enum cudaMemcpyKind k = kind == VR_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                            : kind == VR_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpy(dst, src, bytes, k);
    if (e != cudaSuccess) {
        char b[200];
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "device %s: cudaMemcpy of %zu bytes: %s", dev->name, bytes,
                        vr__cuda_err(e, b, sizeof b));
    }
    return VR_OK;
}

vr_status vr__cuda_memset(vr_device *dev, void *dst, int value, size_t bytes)
{
    vr_status st = vr__cuda_use(dev->index);
    if (st != VR_OK)
        return st;
    cudaError_t e = cudaMemset(dst, value, bytes);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        char b[200];
        cudaGetLastError();
        return vr_error(VR_ERR_DEVICE, "device %s: cudaMemset of %zu bytes: %s", dev->name, bytes,
                        vr__cuda_err(e, b, sizeof b));
    }
    return VR_OK;
}
