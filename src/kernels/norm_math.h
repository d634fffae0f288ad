/* vram kernels — the norms' backward from their output (vr_step_config.norm_from_out): LayerNorm's x-hat is
 * (y - b) / w and RMSNorm's y / w, so the norm's input (the residual stream) need not be kept for the backward.
 * One definition for the CPU and CUDA kernels.
 *
 * A weight of magnitude under VR_NORM_W_MIN is taken as +-VR_NORM_W_MIN: a weight of exactly 0 gives x-hat 0
 * (its output is b whatever the input, so the input cannot be recovered) and no NaN; near 0 the recovered x-hat
 * carries the output's rounding divided by |w| (in 16-bit activations, ~2^-9 |y| / |w|). */
#ifndef VRAM_KERNELS_NORM_MATH_H
#define VRAM_KERNELS_NORM_MATH_H

#include "kernels/hd.h"

#define VR_NORM_W_MIN 1e-6f

/* 1 / w with |w| floored at VR_NORM_W_MIN (the sign kept; 0 counts as positive): on the host rounded to nearest,
 * on the device the fast reciprocal (within 2 ulp; LayerNorm's backward is bound by its instruction rate, and an
 * IEEE reciprocal per element cost it 9% more on GPT-2 medium's rows). */
VR_HD float vr_norm_inv_w(float w)
{
    float a = w < 0.0f ? -w : w;
    a = a > VR_NORM_W_MIN ? a : VR_NORM_W_MIN;
#ifdef __CUDA_ARCH__
    float r = __fdividef(1.0f, a);
#else
    float r = 1.0f / a;
#endif
    return w < 0.0f ? -r : r;
}

#endif
