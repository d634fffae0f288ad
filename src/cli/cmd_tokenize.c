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

static void usage(FILE *f)
{
    fprintf(f, "usage: vram tokenize --tokenizer FILE IN.txt OUT.bin\n\n"
               "Encodes a UTF-8 text file with a byte-level BPE tokenizer.json (GPT-2, Llama 3, Qwen2) into a\n"
               "token file: llm.c's uint16 form when the vocabulary has at most 65536 ids, else uint32\n"
               "(version 2).\n\n"
               "  --tokenizer FILE   tokenizer.json, or a directory holding one (required)\n");
}

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

int vr_cmd_tokenize(int argc, char **argv)
{
    const char *tok_path = NULL, *pos[2] = {NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) return vr_cli_fail("tokenize", 2, "--tokenizer needs a file");
            tok_path = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return vr_cli_fail("tokenize", 2, "unknown flag %s (see vram tokenize --help)", a);
        } else if (npos == 2) {
            return vr_cli_fail("tokenize", 2, "unexpected argument %s: give IN.txt OUT.bin", a);
        } else {
            pos[npos++] = a;
        }
    }
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
