/* Fuzz harness: llm.c GPT-2 checkpoints (vr_llmc_read_header and vr_llmc_load,
 * src/train/checkpoint_llmc.c). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "vram/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".bin");
    vr_llmc_config cfg;
    if (vr_llmc_read_header(path, &cfg) != VR_OK)
        return 0;
    if (vr_llmc_config_check(&cfg, path) != VR_OK)
        abort(); /* read_header promises a valid config */
    size_t n = vr_llmc_num_params(&cfg);
    /* read_header checked the file size is header + n parameters of 4 (fp32, version 3) or 2 bytes (bf16,
     * version 5), so n is small here. */
    if (n > size / 2 + 1)
        abort();
    float *params = malloc((n ? n : 1) * sizeof(float));
    if (!params)
        return 0;
    (void)vr_llmc_load(path, &cfg, params, n);
    (void)vr_llmc_load(path, NULL, params, n);
    free(params);
    return 0;
}
