/* vram tokenize: a text file to a token file with a Hugging Face tokenizer.
 *
 *   vram tokenize --tokenizer tokenizer.json IN.txt OUT.bin
 *
 * OUT is an llm.c token file (uint16, version 1) when every id of the
 * vocabulary fits 16 bits, else the version-2 form (uint32); written atomically. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/data.h"
#include "vram/tokenizer.h"

static int read_text(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return vr_cli_fail("tokenize", 1, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return vr_cli_fail("tokenize", 1, "%s: out of host memory", path);
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = realloc(buf, cap * 2);
        if (!b) free(buf);
        buf = b;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return vr_cli_fail("tokenize", 1, "%s: read failed", path);
    }
    *out = buf;
    *len = n;
    return 0;
}

typedef struct opts {
    const char *tokenizer;
} opts;

static void tokenize_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    const vr_flag t[] = {
        {"--tokenizer", VR_FLAG_STRING, &o->tokenizer, "FILE", .nonempty = true,
         .help = "tokenizer.json, or a directory holding one (required)"},
    };
    VR_FLAGS_ADD(fs, t);
}

static int run(int argc, char **argv)
{
    opts o = {0};
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    int rc = vr_flags_parse(&vr_cli_tokenize, &o, argc, argv, pos, 2, &npos);
    if (rc)
        return rc == 1 ? 0 : rc;
    const char *tok_path = o.tokenizer;
    if (!tok_path) return vr_cli_fail("tokenize", 2, "--tokenizer FILE is required");
    if (npos != 2) return vr_cli_fail("tokenize", 2, "give the input text and the output token file: IN.txt OUT.bin");
    vr_tokenizer *tk;
    if (vr_tokenizer_load(tok_path, &tk) != VR_OK) return vr_cli_fail("tokenize", 1, "%s", vr_last_error());
    char *text = NULL;
    size_t len = 0;
    if (read_text(pos[0], &text, &len) != 0) {
        vr_tokenizer_free(tk);
        return 1;
    }
    int32_t *ids;
    size_t n;
    vr_status s = vr_tokenizer_encode(tk, text, len, &ids, &n);
    free(text);
    int vocab = vr_tokenizer_vocab_size(tk);
    vr_tokenizer_free(tk);
    if (s != VR_OK) return vr_cli_fail("tokenize", 1, "%s", vr_last_error());
    int wide = vocab > 65536;
    s = wide ? vr_tokens_write32(pos[1], ids, n) : vr_tokens_write(pos[1], ids, n);
    free(ids);
    if (s != VR_OK) return vr_cli_fail("tokenize", 1, "%s", vr_last_error());
    printf("%s: %zu tokens (vocabulary %d, %s) from %zu bytes\n", pos[1], n, vocab, wide ? "uint32" : "uint16", len);
    return 0;
}

const vr_cli_command vr_cli_tokenize = {
    "tokenize", "encode a text file into a token file with a Hugging Face tokenizer.json", run,
    "--tokenizer FILE IN.txt OUT.bin",
    "Encodes a UTF-8 text file with a byte-level BPE tokenizer.json (GPT-2, Llama 3, Qwen2) into a\n"
    "token file: llm.c's uint16 form when the vocabulary has at most 65536 ids, else uint32\n"
    "(version 2).",
    tokenize_flags, sizeof(opts)};
