/* Inside the formats layer: the loaded tokenizer, shared by tokenizer_load.c
 * (building it from JSON) and tokenizer_encode.c (using it). */
#ifndef VRAM_FORMATS_TOKENIZER_IMPL_H
#define VRAM_FORMATS_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "formats/hashmap.h"
#include "vram/tokenizer.h"

#define VR_TOK_MAX_STEPS 8

typedef enum { VR_TOK_SPLIT, VR_TOK_BYTELEVEL } vr_tok_step_kind;
typedef enum { VR_SPLIT_ISOLATED, VR_SPLIT_REMOVED } vr_split_behavior;

/* One pre-tokenizer step: split every current piece further. */
typedef struct vr_tok_step {
    vr_tok_step_kind kind;
    pcre2_code *re;              /* SPLIT, or BYTELEVEL with use_regex (GPT-2 pattern); else NULL */
    vr_split_behavior behavior;  /* SPLIT */
    int add_prefix_space;        /* BYTELEVEL */
} vr_tok_step;

typedef struct vr_tok_added {
    char *content;
    size_t len;
    int32_t id;
} vr_tok_added;

struct vr_tokenizer {
    char *label;                 /* the file, for errors */
    vr__strmap vocab;            /* token string (byte-level alphabet) -> id */
    vr__pairmap merges;          /* (left id << 32 | right id) -> (rank, merged id) */
    vr_tok_added *added;         /* matched before pre-tokenization, longest first */
    int n_added;
    vr_tok_step steps[VR_TOK_MAX_STEPS];
    int n_steps;
    int byte_level;              /* pieces are mapped through bytes_to_unicode */
    int ignore_merges;           /* a piece that is a vocab token is one id */
    int32_t unk_id;              /* -1 when none */
    int vocab_size;              /* max id + 1 */
    char byte_char[256][3];      /* bytes_to_unicode as UTF-8 (1 or 2 bytes, NUL-terminated) */
};

#endif
