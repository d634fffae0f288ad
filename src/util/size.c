/* Byte sizes and integers as people write them on a command line. */
#define _POSIX_C_SOURCE 200809L
#include "vram/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int unit_scale(const char *u, double *scale)
{
    static const struct { const char *name; double scale; } units[] = {
        {"", 1}, {"b", 1},
        {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
        {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(u, units[i].name) == 0) { *scale = units[i].scale; return 1; }
    return 0;
}

vr_status vr_parse_size(const char *text, const char *what, uint64_t *out)
{
    if (!text || !*text)
        return vr_error(VR_ERR_INVALID, "%s: empty size", what);
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !isfinite(v) || v < 0)
        return vr_error(VR_ERR_INVALID, "%s: '%s' is not a size (examples: 4096, 512MiB, 80GiB)", what, text);
    while (*end == ' ') end++;
    double scale;
    if (!unit_scale(end, &scale))
        return vr_error(VR_ERR_INVALID, "%s: unknown unit in '%s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", what, text);
    double bytes = v * scale;
    /* 2^64 is exactly representable; anything at or above it does not fit in uint64 (llround would
     * also wrap above 2^63, so the conversion is done in unsigned arithmetic on the rounded value) */
    double r = floor(bytes + 0.5);
    if (!(r < 18446744073709551616.0))
        return vr_error(VR_ERR_INVALID, "%s: '%s' is too large (at most 2^64 - 1 bytes)", what, text);
    *out = (uint64_t)r;
    return VR_OK;
}

char *vr_format_size(uint64_t bytes, char *buf, size_t cap)
{
    static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, cap, "%.2f %s", v, names[u]);
    return buf;
}

vr_status vr_parse_int(const char *text, const char *what, long long lo, long long hi, long long *out)
{
    if (!text || !*text)
        return vr_error(VR_ERR_INVALID, "%s: missing value", what);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*end || errno)
        return vr_error(VR_ERR_INVALID, "%s: '%s' is not an integer", what, text);
    if (v < lo || v > hi)
        return vr_error(VR_ERR_INVALID, "%s: %lld is out of range [%lld, %lld]", what, v, lo, hi);
    *out = v;
    return VR_OK;
}

uint64_t vr_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
