/* Data sources: the generated corpus, a text file as bytes, a token file (llm.c's uint16 or vram's uint32). */
#define _POSIX_C_SOURCE 200809L
#include "train/data_source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/file_io.h"

#define DEFAULT_GENERATED_BYTES (4u << 20)

vr_data_kind vr_data_kind_for(const char *spec)
{
    if (!spec || !*spec || strcmp(spec, "generated") == 0) return VR_DATA_GENERATED;
    size_t n = strlen(spec);
    if (n >= 4 && strcmp(spec + n - 4, ".bin") == 0) return VR_DATA_TOKENS;
    return VR_DATA_TEXT;
}

/* Widens bytes to tokens (uint32) in place from the back of a uint32 buffer. */
static void widen_bytes(uint32_t *tok, uint64_t n)
{
    const uint8_t *bytes = (const uint8_t *)tok;
    for (uint64_t i = n; i-- > 0;) tok[i] = bytes[i];
}

static vr_status check_bytes(const char *what, const uint32_t *tok, uint64_t n, int vocab)
{
    if (vocab >= 256) return VR_OK;
    for (uint64_t i = 0; i < n; i++)
        if (tok[i] >= (uint32_t)vocab)
            return vr_error(VR_ERR_FORMAT, "%s: byte %u at position %llu is out of range for vocab %d",
                            what, tok[i], (unsigned long long)i, vocab);
    return VR_OK;
}

static vr_status load_text(const char *path, uint32_t **out, uint64_t *n)
{
    FILE *f;
    uint64_t size;
    vr_status s = vr__file_open_read(path, &f, &size);
    if (s != VR_OK) return s;
    uint32_t *tok = malloc(size ? size * sizeof *tok : 1);
    if (!tok) {
        fclose(f);
        return vr_error(VR_ERR_OOM, "%s: out of host memory for %llu bytes", path,
                        (unsigned long long)size);
    }
    if (fread(tok, 1, size, f) != size) {
        free(tok);
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: short read", path);
    }
    fclose(f);
    widen_bytes(tok, size);
    *out = tok;
    *n = size;
    return VR_OK;
}

vr_status vr_data_load_source(const vr_data_config *cfg, uint32_t **tok, uint64_t *n, int *vocab)
{
    *tok = NULL;
    *n = 0;
    vr_status s;
    switch (cfg->kind) {
    case VR_DATA_GENERATED: {
        uint64_t bytes = cfg->generated_bytes ? cfg->generated_bytes : DEFAULT_GENERATED_BYTES;
        *vocab = cfg->vocab ? cfg->vocab : 256;
        uint32_t *t = malloc(bytes * sizeof *t);
        if (!t) return vr_error(VR_ERR_OOM, "generated corpus: out of host memory");
        vr_corpus_generate(cfg->seed, (uint8_t *)t, bytes);
        widen_bytes(t, bytes);
        if ((s = check_bytes("generated corpus", t, bytes, *vocab)) != VR_OK) {
            free(t);
            return s;
        }
        *tok = t;
        *n = bytes;
        return VR_OK;
    }
    case VR_DATA_TEXT:
        if (!cfg->path) return vr_error(VR_ERR_INVALID, "text data: no file given");
        *vocab = cfg->vocab ? cfg->vocab : 256;
        if ((s = load_text(cfg->path, tok, n)) != VR_OK) return s;
        if ((s = check_bytes(cfg->path, *tok, *n, *vocab)) != VR_OK) {
            free(*tok);
            *tok = NULL;
        }
        return s;
    case VR_DATA_TOKENS:
        if (!cfg->path) return vr_error(VR_ERR_INVALID, "token data: no file given");
        *vocab = cfg->vocab ? cfg->vocab : 65536;
        return vr_tokens_read32(cfg->path, cfg->vocab, tok, n);
    }
    return vr_error(VR_ERR_INVALID, "data: unknown source kind %d", (int)cfg->kind);
}
