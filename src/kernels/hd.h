/* vram kernels — VR_HD marks a function compiled for both the host and the device (CUDA), so that the CPU and
 * CUDA kernels share one definition of their arithmetic (optim_math.h, norm_math.h). */
#ifndef VRAM_KERNELS_HD_H
#define VRAM_KERNELS_HD_H

#ifdef __CUDACC__
#define VR_HD __host__ __device__ __forceinline__
#else
#define VR_HD static inline
#endif

#endif
