/* vram — byte-level BPE tokenizers from Hugging Face tokenizer.json (GPT-2,
 * Llama 3, Qwen2): model type "BPE" (vocab + merges in "a b" or [a, b] form,
 * ignore_merges), pre_tokenizer ByteLevel / Split (PCRE2 regex) / Sequence,
 * added tokens matched first. Normalizer: none, or NFC taken as the identity
 * (the input must already be NFC, as plain text usually is). */
#ifndef VRAM_TOKENIZER_H
#define VRAM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_tokenizer vr_tokenizer;

/* Loads tokenizer.json at path (or path/tokenizer.json for a directory). */
vr_status vr_tokenizer_load(const char *path, vr_tokenizer **out);

/* Parses tokenizer.json text of len bytes; label names it in errors. */
vr_status vr_tokenizer_parse(const char *label, const char *json, size_t len, vr_tokenizer **out);

/* Frees a tokenizer (NULL is fine). */
void vr_tokenizer_free(vr_tokenizer *tk);

/* One more than the largest token id (vocab and added tokens). */
int vr_tokenizer_vocab_size(const vr_tokenizer *tk);

/* The id of an exact token string (vocab or added token), or -1. */
int vr_tokenizer_token_id(const vr_tokenizer *tk, const char *token);

/* Encodes len bytes of UTF-8 text; *ids (malloc'd, caller frees) gets *n ids.
 * Fails naming the tokenizer file when a piece has no token (no byte fallback). */
vr_status vr_tokenizer_encode(const vr_tokenizer *tk, const char *text, size_t len, int32_t **ids, size_t *n);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
