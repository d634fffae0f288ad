/* Fuzz harness: llm.c token files (vr_tokens_read, src/train/data_tokens.c). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "vram/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".bin");
    /* Once without a vocabulary bound, once with GPT-2's. */
    int vocabs[2] = {0, 50257};
    for (int i = 0; i < 2; i++) {
        uint16_t *tok = NULL;
        uint64_t n = 0;
        if (vr_tokens_read(path, vocabs[i], &tok, &n) == VR_OK) {
            if (n > 0 && !tok)
                abort();
            /* Touch every token: ASan catches a buffer shorter than n. */
            uint64_t sum = 0;
            for (uint64_t j = 0; j < n; j++)
                sum += tok[j];
            if (sum > n * 65535u)
                abort();
            if (vocabs[i] > 0)
                for (uint64_t j = 0; j < n; j++)
                    if (tok[j] >= vocabs[i])
                        abort();
        }
        free(tok);
    }
    return 0;
}
