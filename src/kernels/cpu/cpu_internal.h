/* vram — helpers shared by the CPU kernels (private to src/kernels/cpu). */
#ifndef VRAM_KERNELS_CPU_INTERNAL_H
#define VRAM_KERNELS_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Loops over fewer elements than this run on one thread: the fork/join would cost more. */
#define VR_CPU_PAR_MIN ((size_t)32768)

/* Hot functions are compiled twice, for AVX2+FMA and for the baseline ISA, and the loader picks one
 * (GCC function multi-versioning); only where the target supports it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VR_CPU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VR_CPU_HOT
#endif

/* exp(x) for float, written so that the compiler vectorizes it inside `omp simd` loops (glibc's expf
 * is a call per element). Range reduction x = n ln2 + r (Cody-Waite, |r| <= ln2/2), a degree-6
 * polynomial for e^r, 2^n built in the exponent bits. Max error about 2 ulp on [-87, 88];
 * inputs below -87.3 (including -inf) return 2^-126 times a factor rather than 0, which is negligible
 * against the >= 1 sums it is used in; NaN propagates. */
static inline float vr_expf(float x0)
{
    float x = x0 == x0 ? x0 : 0.0f; /* NaN must not reach the float-to-int conversion below (UB) */
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    // n = round(x / ln2) by the 1.5 * 2^23 trick (|x / ln2| < 128): branch-free, so it vectorizes
    float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int n = (int)fn;
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = (int32_t)((uint32_t)(n + 127) << 23);
    float s;
    memcpy(&s, &bits, sizeof s);
    return x0 == x0 ? p * s : x0;
}

#endif
