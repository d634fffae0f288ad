/* Fuzz harness: tokenizer.json parsing; an accepted tokenizer then encodes a
 * fixed text with ASCII, Unicode, emoji, CJK and whitespace runs, and the
 * input bytes themselves (which may be invalid UTF-8). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vram/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vr_tokenizer *tk;
    if (vr_tokenizer_parse("fuzz/tokenizer.json", (const char *)data, size, &tk) != VR_OK) return 0;
    static const char text[] = "Hello  world! It's 12345 caf\xc3\xa9 \xf0\x9f\x99\x82 \xe6\x97\xa5\xe6\x9c\xac\n\n\t x";
    int32_t *ids;
    size_t n;
    if (vr_tokenizer_encode(tk, text, strlen(text), &ids, &n) == VR_OK) free(ids);
    if (size < 4096 && vr_tokenizer_encode(tk, (const char *)data, size, &ids, &n) == VR_OK) free(ids);
    vr_tokenizer_free(tk);
    return 0;
}
