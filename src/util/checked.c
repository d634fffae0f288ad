/* Overflow-checked size arithmetic for shapes and byte counts that come from flags or files. */
#include "vram/util.h"

bool vr_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

bool vr_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}
