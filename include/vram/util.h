/* vram — small shared helpers: byte sizes as people write them. */
#ifndef VRAM_UTIL_H
#define VRAM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_KiB ((uint64_t)1 << 10)
#define VR_MiB ((uint64_t)1 << 20)
#define VR_GiB ((uint64_t)1 << 30)
/* A macro's value as a string literal: VR_XSTR(VR_CUDA_CONTEXT_ESTIMATE_MIB) is "286". */
#define VR_STR_(x) #x
#define VR_XSTR(x) VR_STR_(x)

/* Parses a byte size: "4096", "512B", "2MiB", "80GiB", "1.5GB", "16G" (K/M/G/T
 * alone mean binary units; KB/MB/GB/TB decimal). Errors name `what`. */
vr_status vr_parse_size(const char *text, const char *what, uint64_t *out);

/* Formats bytes for people: "512 B", "1.50 KiB", "22.50 GiB". Returns buf. */
char *vr_format_size(uint64_t bytes, char *buf, size_t cap);

/* Formats a version in cuDNN's and NCCL's scheme, major * 10000 + minor * 100 + patch: 91900 -> "9.19.0".
 * Returns buf. */
char *vr_format_version3(int v, char *buf, size_t cap);

/* Parses a non-negative integer flag value, naming `what` in the error. */
vr_status vr_parse_int(const char *text, const char *what, long long lo, long long hi, long long *out);

/* a * b into *out; false (*out untouched) when either is negative or the product exceeds INT64_MAX. */
bool vr_mul_i64(int64_t a, int64_t b, int64_t *out);

/* a + b into *out; false (*out untouched) when either is negative or the sum exceeds INT64_MAX. */
bool vr_add_i64(int64_t a, int64_t b, int64_t *out);

/* Monotonic wall clock in nanoseconds. */
uint64_t vr_now_ns(void);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
