/* vram — element conversions between the floating-point dtypes (fp32, bf16, fp16): round to nearest
 * even, NaN kept NaN, overflow to infinity. Used wherever values change width on the host: files
 * (safetensors), parameters in and out of an executor, the host's offloaded optimizer. */
#ifndef VRAM_CONVERT_H
#define VRAM_CONVERT_H

#include <stddef.h>
#include "vram/graph.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

/* Converts n elements between VR_F32 / VR_BF16 / VR_F16; dst == src only when to == from. */
void vr_convert(vr_dtype to, void *dst, vr_dtype from, const void *src, size_t n);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
