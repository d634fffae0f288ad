/* vram — training data: batches of int32 tokens (B,T) and their targets (B,T).
 *
 * Sources: a generated English-like byte corpus (vocab 256, deterministic from
 * a seed), a text file read as bytes (vocab 256), or an llm.c token file
 * (a 256 x int32 header: magic 20240520, version 1, token count; then uint16
 * tokens). Targets are the next token: targets[b][t] = tokens[b][t+1] of the
 * same window. A source can be split into train (head) and val (tail) parts.
 *
 * Order: sequential (consecutive B*T chunks, as llm.c) or shuffled windows
 * (windows of T+1 tokens at stride T, permuted per epoch from the seed). The
 * position (epoch, batch) fully determines the next batch, so saving it and
 * seeking back to it resumes bit-exactly. */
#ifndef VRAM_DATA_H
#define VRAM_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_TOKENS_MAGIC 20240520
#define VR_TOKENS_VERSION 1      /* uint16 tokens (llm.c) */
#define VR_TOKENS_VERSION_U32 2  /* uint32 tokens (vocabularies over 65536) */
#define VR_TOKENS_HEADER_INTS 256

typedef enum vr_data_kind {
    VR_DATA_GENERATED, /* built-in corpus, see vr_corpus_generate */
    VR_DATA_TEXT,      /* any file, one token per byte */
    VR_DATA_TOKENS,    /* llm.c token file */
} vr_data_kind;

typedef enum vr_data_order {
    VR_DATA_SEQUENTIAL, /* batch k = tokens [k*B*T, (k+1)*B*T + 1) */
    VR_DATA_SHUFFLED,   /* B windows of T+1 tokens, permuted each epoch */
} vr_data_order;

typedef enum vr_data_split {
    VR_SPLIT_ALL,   /* every token */
    VR_SPLIT_TRAIN, /* the head: all but the last val_fraction */
    VR_SPLIT_VAL,   /* the tail: the last val_fraction */
} vr_data_split;

typedef struct vr_data_config {
    vr_data_kind kind;
    const char *path;          /* file for TEXT / TOKENS; ignored for GENERATED */
    int B, T;                  /* batch size and sequence length (tokens) */
    int vocab;                 /* every token must be < vocab; 0 = 256 (bytes) or 65536 */
    vr_data_order order;
    uint64_t seed;             /* shuffling seed, and the corpus seed for GENERATED */
    vr_data_split split;
    double val_fraction;       /* tail share held out for VAL, in (0,1); 0 = 0.1 */
    uint64_t generated_bytes;  /* size of the generated corpus; 0 = 4 MiB */
} vr_data_config;

/* Where the loader is: the next batch is batch `batch` of epoch `epoch`. */
typedef struct vr_data_pos {
    uint64_t epoch;
    uint64_t batch;
} vr_data_pos;

typedef struct vr_data vr_data;

/* A config with defaults: generated corpus, sequential, seed 1337, whole split. */
vr_data_config vr_data_config_default(int B, int T);

/* Picks the kind for a --data value: NULL, "" or "generated" -> GENERATED,
 * a path ending in ".bin" -> TOKENS, any other path -> TEXT. */
vr_data_kind vr_data_kind_for(const char *spec);

/* Loads and validates the source and positions at (0,0). Errors name the file
 * and what is wrong (bad header, out-of-range token, too small for a batch). */
vr_status vr_data_open(const vr_data_config *cfg, vr_data **out);

/* Frees the loader (NULL is fine). */
void vr_data_close(vr_data *d);

/* Fills tokens (B,T) and targets (B,T) with the batch at the position, then
 * advances (wrapping to the next epoch after the last batch). */
vr_status vr_data_next(vr_data *d, int32_t *tokens, int32_t *targets);

/* The position of the next batch (save it with the training state). */
vr_data_pos vr_data_tell(const vr_data *d);

/* Moves to a position from vr_data_tell; errors if batch >= batches per epoch. */
vr_status vr_data_seek(vr_data *d, vr_data_pos pos);

/* Full batches in one pass over the split (>= 1). */
uint64_t vr_data_batches_per_epoch(const vr_data *d);

/* Tokens in the split this loader reads. */
uint64_t vr_data_num_tokens(const vr_data *d);

/* The vocabulary bound the tokens were checked against. */
int vr_data_vocab(const vr_data *d);

/* crc32 of the split's tokens: identifies the data a resumable state was saved with. */
uint32_t vr_data_fingerprint(const vr_data *d);

/* --- llm.c token files ------------------------------------------------- */

/* Reads and validates an llm.c token file: magic, version, count against the
 * file size, every token < vocab (0 = no bound beyond uint16). Caller frees *out. */
vr_status vr_tokens_read(const char *path, int vocab, uint16_t **out, uint64_t *n);

/* Writes tokens (each in [0, 65535]) as an llm.c token file, atomically. */
vr_status vr_tokens_write(const char *path, const int32_t *tokens, uint64_t n);

/* Reads a token file of either version (uint16 widened, or uint32), each token
 * < vocab (0 = no bound). Caller frees *out. */
vr_status vr_tokens_read32(const char *path, int vocab, uint32_t **out, uint64_t *n);

/* Writes tokens (each >= 0) as a version-2 token file (uint32), atomically. */
vr_status vr_tokens_write32(const char *path, const int32_t *tokens, uint64_t n);

/* --- the built-in corpus ------------------------------------------------ */

/* Fills out[0..n) with English-like sentences from a small grammar (subject-verb
 * agreement, prepositional phrases, counting lines), deterministic from seed;
 * printable ASCII and '\n' only. */
void vr_corpus_generate(uint64_t seed, uint8_t *out, size_t n);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
