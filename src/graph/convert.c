/* Element conversions between fp32, bf16 and fp16 (IEEE binary16), round to
 * nearest even, NaN kept NaN, overflow to infinity. */
#include "vram/convert.h"

#include <stdint.h>
#include <string.h>

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

static uint16_t f32_to_f16(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;              /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;             /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: subnormal */
        if (a < 0x33000000u) return sign;                    /* below 2^-25: zero */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                            /* 14..24 */
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

static float load(vr_dtype dt, const void *src, size_t i)
{
    if (dt == VR_F32) {
        float f;
        memcpy(&f, (const char *)src + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)src + 2 * i, 2);
    return dt == VR_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* Element by element through memcpy: for addresses not aligned to their dtype (a file's bytes). */
static void convert_unaligned(vr_dtype to, void *dst, vr_dtype from, const void *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = load(from, src, i);
        if (to == VR_F32) {
            memcpy((char *)dst + 4 * i, &f, 4);
        } else {
            uint16_t h = to == VR_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
    }
}

/* One loop per pair of dtypes, so that each vectorises (the host optimizer converts every gradient). */
void vr_convert(vr_dtype to, void *dst, vr_dtype from, const void *src, size_t n)
{
    if (to == from) {
        memmove(dst, src, n * vr_dtype_size(to));
        return;
    }
    if ((uintptr_t)src % vr_dtype_size(from) || (uintptr_t)dst % vr_dtype_size(to)) {
        convert_unaligned(to, dst, from, src, n);
        return;
    }
    const uint16_t *h = src;
    uint16_t *o = dst;
    const float *f = src;
    float *d = dst;
    if (to == VR_F32 && from == VR_BF16)
        for (size_t i = 0; i < n; i++)
            d[i] = bf16_to_f32(h[i]);
    else if (to == VR_F32)
        for (size_t i = 0; i < n; i++)
            d[i] = f16_to_f32(h[i]);
    else if (from == VR_F32 && to == VR_BF16)
        for (size_t i = 0; i < n; i++)
            o[i] = f32_to_bf16(f[i]);
    else if (from == VR_F32)
        for (size_t i = 0; i < n; i++)
            o[i] = f32_to_f16(f[i]);
    else /* bf16 <-> f16: through f32 (exact to f32) */
        for (size_t i = 0; i < n; i++)
            o[i] = to == VR_BF16 ? f32_to_bf16(f16_to_f32(h[i])) : f32_to_f16(bf16_to_f32(h[i]));
}
