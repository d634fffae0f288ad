/* vram kernels — the arithmetic of compact optimizer state, shared by the CPU and CUDA kernels so that
 * both round the same way (one definition; VR_HD marks functions compiled for host and device).
 *
 * Stochastic rounding to bf16 (the state format "bf16", and bf16 weights without a master copy): x is
 * rounded down or up to a neighbouring bf16 with probabilities by distance, so the rounding is unbiased:
 * the fp32 bits get 16 random low bits added, then are truncated. The random bits are a counter-based
 * hash of (seed, element index): the same on every device and thread layout, different every step.
 *
 * 8-bit block-wise state (vram/optim_state.h): codes index a sorted 256-entry map (vr_qmap_dynamic in
 * kernels/cpu); a value x of a block with absmax a is stored as the code of the map entry nearest x / a. */
#ifndef VRAM_KERNELS_OPTIM_MATH_H
#define VRAM_KERNELS_OPTIM_MATH_H

#include <stdint.h>
#include <string.h>

#include "kernels/hd.h"

/* Streams of random bits of one step: momentum (M), Adam's m and v together (MV: m the low 16 bits, v the high
 * 16, vr_sr_mv), and the weights (W). */
enum { VR_SR_M = 1, VR_SR_MV = 2, VR_SR_W = 3 };

/* Wellons' lowbias32: a bijection of 32 bits with full avalanche. */
VR_HD uint32_t vr_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* 32 random bits from (seed, stream, index): the index's low half mixed under a key of the seed, the stream and
 * the index's high half. 32-bit arithmetic only (a GPU's 64-bit multiply is several instructions: the update
 * is near its instruction limit). */
VR_HD uint32_t vr_sr_bits(uint64_t seed, uint32_t stream, uint64_t index)
{
    uint32_t key = vr_mix32((uint32_t)seed * 0x9E3779B9u + (stream << 24) + (uint32_t)(index >> 32));
    return vr_mix32((uint32_t)index ^ key);
}

VR_HD uint32_t vr_f32_bits(float x)
{
    uint32_t u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(x);
#else
    memcpy(&u, &x, 4);
#endif
    return u;
}

VR_HD float vr_bits_f32(uint32_t u)
{
    float x;
#ifdef __CUDA_ARCH__
    x = __uint_as_float(u);
#else
    memcpy(&x, &u, 4);
#endif
    return x;
}

/* A split fp32 master (vr_step_config.split_master): the fp32 bits u kept as hi, the bf16 weight (u rounded to
 * the nearest bf16, ties away from zero, so that the rest always fits 16 signed bits), and lo = u - (hi << 16);
 * vr_split_join gives u back exactly. Round to nearest even would need 17 bits at its ties (1 in 65,536 values);
 * inf stays inf, NaN stays NaN (quiet, lo 0). */
VR_HD uint16_t vr_split_hi(uint32_t u)
{
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x8000u) >> 16);
}

VR_HD uint16_t vr_split_lo(uint32_t u)
{
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return 0;
    return (uint16_t)(u - ((uint32_t)vr_split_hi(u) << 16));
}

VR_HD uint32_t vr_split_join(uint16_t hi, uint16_t lo)
{
    return ((uint32_t)hi << 16) + (uint32_t)(int32_t)(int16_t)lo;
}

/* x as bf16 bits, stochastically rounded with the low 16 bits of rnd (inf and NaN round to nearest): Adam's m
 * takes rnd, its v rnd >> 16, rnd = vr_sr_bits(seed, VR_SR_MV, index). */
VR_HD uint16_t vr_bf16_sr(float x, uint32_t rnd)
{
    uint32_t u = vr_f32_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) /* inf / NaN: keep (NaN stays NaN) */
        return (uint16_t)((u >> 16) | ((u & 0xffffu) ? 0x40u : 0u));
    return (uint16_t)((u + (rnd & 0xffffu)) >> 16);
}

VR_HD float vr_bf16_to_f32(uint16_t h) { return vr_bits_f32((uint32_t)h << 16); }

/* The code of the entry of map (256 sorted floats) nearest x (the lower one on a tie). */
VR_HD uint8_t vr_q8_code(const float *map, float x)
{
    int lo = 0, hi = 255; /* the last entry <= x, by bisection */
    if (!(x > map[0]))
        return 0;
    if (x >= map[255])
        return 255;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (map[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return (uint8_t)(x - map[lo] <= map[hi] - x ? lo : hi);
}

#endif
