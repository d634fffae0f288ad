/* llm.c token files: header of 256 int32 (magic 20240520, version, number of
 * tokens), then the tokens, little-endian: uint16 for version 1 (llm.c), uint32
 * for version 2 (vram's form for vocabularies over 65536). Every field is
 * checked against the file size before anything is trusted. */
#define _POSIX_C_SOURCE 200809L
#include "vram/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/atomic_file.h"
#include "train/file_io.h"

#define HEADER_BYTES (VR_TOKENS_HEADER_INTS * sizeof(int32_t))

/* Reads a token file of either version; *width gets its token size (2 or 4)
 * and *out the raw tokens (caller frees). Tokens are checked against vocab. */
static vr_status read_any(const char *path, int vocab, int wide_ok, void **out, uint64_t *n, int *width)
{
    *out = NULL;
    *n = 0;
    FILE *f;
    uint64_t size;
    vr_status s = vr__file_open_read(path, &f, &size);
    if (s != VR_OK) return s;
    int32_t h[VR_TOKENS_HEADER_INTS];
    if (size < HEADER_BYTES || fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: %llu bytes is too small for the %zu-byte llm.c token header",
                        path, (unsigned long long)size, (size_t)HEADER_BYTES);
    }
    if (h[0] != VR_TOKENS_MAGIC) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: wrong magic %d (an llm.c token file starts with %d)", path,
                        h[0], VR_TOKENS_MAGIC);
    }
    if (h[1] == VR_TOKENS_VERSION_U32 && !wide_ok) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: token file version 2 holds uint32 tokens; this reader takes "
                        "llm.c's uint16 tokens (version %d) only", path, VR_TOKENS_VERSION);
    }
    if (h[1] != VR_TOKENS_VERSION && h[1] != VR_TOKENS_VERSION_U32) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: unsupported token file version %d (expected %d or %d)", path,
                        h[1], VR_TOKENS_VERSION, VR_TOKENS_VERSION_U32);
    }
    int w = h[1] == VR_TOKENS_VERSION ? 2 : 4;
    uint64_t payload = size - HEADER_BYTES;
    if (h[2] < 0 || (uint64_t)h[2] * (uint64_t)w != payload) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT,
                        "%s: header says %d tokens (%llu bytes) but the file holds %llu bytes of "
                        "tokens (truncated or corrupt)",
                        path, h[2], (unsigned long long)((uint64_t)(h[2] < 0 ? 0 : h[2]) * (uint64_t)w),
                        (unsigned long long)payload);
    }
    uint64_t count = (uint64_t)h[2];
    void *tok = malloc(count ? count * (uint64_t)w : 1);
    if (!tok) {
        fclose(f);
        return vr_error(VR_ERR_OOM, "%s: out of host memory for %llu tokens", path,
                        (unsigned long long)count);
    }
    if (fread(tok, (size_t)w, count, f) != count) {
        int e = errno;
        free(tok);
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: read failed: %s", path, e ? strerror(e) : "short read");
    }
    fclose(f);
    if (vocab > 0) {
        for (uint64_t i = 0; i < count; i++) {
            uint32_t t = w == 2 ? ((const uint16_t *)tok)[i] : ((const uint32_t *)tok)[i];
            if (t >= (uint32_t)vocab) {
                s = vr_error(VR_ERR_FORMAT, "%s: token %u at position %llu is out of range for vocab %d",
                             path, t, (unsigned long long)i, vocab);
                free(tok);
                return s;
            }
        }
    }
    *out = tok;
    *n = count;
    *width = w;
    return VR_OK;
}

vr_status vr_tokens_read(const char *path, int vocab, uint16_t **out, uint64_t *n)
{
    void *tok;
    int w;
    *out = NULL;
    *n = 0;
    vr_status s = read_any(path, vocab, 0, &tok, n, &w);
    if (s != VR_OK) return s;
    *out = tok;
    return VR_OK;
}

vr_status vr_tokens_read32(const char *path, int vocab, uint32_t **out, uint64_t *n)
{
    void *tok;
    int w;
    *out = NULL;
    *n = 0;
    vr_status s = read_any(path, vocab, 1, &tok, n, &w);
    if (s != VR_OK) return s;
    if (w == 2) { /* widen in place, from the end */
        uint32_t *wide = realloc(tok, *n ? *n * 4 : 1);
        if (!wide) {
            free(tok);
            *n = 0;
            return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
        }
        for (uint64_t i = *n; i-- > 0;) wide[i] = ((const uint16_t *)wide)[i];
        tok = wide;
    }
    *out = tok;
    return VR_OK;
}

vr_status vr_tokens_write(const char *path, const int32_t *tokens, uint64_t n)
{
    if (n > INT32_MAX)
        return vr_error(VR_ERR_INVALID, "%s: %llu tokens do not fit the llm.c header (max %d)", path,
                        (unsigned long long)n, INT32_MAX);
    for (uint64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > UINT16_MAX)
            return vr_error(VR_ERR_INVALID, "%s: token %d at position %llu does not fit uint16", path,
                            tokens[i], (unsigned long long)i);
    int32_t h[VR_TOKENS_HEADER_INTS] = {VR_TOKENS_MAGIC, VR_TOKENS_VERSION, (int32_t)n};
    vr_atomic_file af;
    vr_status s = vr_atomic_open(&af, path);
    if (s != VR_OK) return s;
    vr_atomic_write(&af, h, sizeof h);
    uint16_t chunk[4096];
    for (uint64_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? (size_t)(n - i) : 4096;
        for (size_t j = 0; j < k; j++) chunk[j] = (uint16_t)tokens[i + j];
        if (vr_atomic_write(&af, chunk, k * sizeof chunk[0]) != VR_OK) break;
    }
    return vr_atomic_commit(&af);
}

vr_status vr_tokens_write32(const char *path, const int32_t *tokens, uint64_t n)
{
    if (n > INT32_MAX)
        return vr_error(VR_ERR_INVALID, "%s: %llu tokens do not fit the llm.c header (max %d)", path,
                        (unsigned long long)n, INT32_MAX);
    for (uint64_t i = 0; i < n; i++)
        if (tokens[i] < 0)
            return vr_error(VR_ERR_INVALID, "%s: negative token %d at position %llu", path, tokens[i],
                            (unsigned long long)i);
    int32_t h[VR_TOKENS_HEADER_INTS] = {VR_TOKENS_MAGIC, VR_TOKENS_VERSION_U32, (int32_t)n};
    vr_atomic_file af;
    vr_status s = vr_atomic_open(&af, path);
    if (s != VR_OK) return s;
    if (vr_atomic_write(&af, h, sizeof h) == VR_OK) vr_atomic_write(&af, tokens, (size_t)n * sizeof *tokens);
    return vr_atomic_commit(&af);
}
