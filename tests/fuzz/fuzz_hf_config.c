/* Fuzz harness: config.json parsing, then the expected tensor list of any
 * config accepted (bounded in size). */
#include <stdint.h>
#include <stdlib.h>

#include "vram/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vr_hf_config c;
    if (vr_hf_config_parse("fuzz/config.json", (const char *)data, size, &c) != VR_OK) return 0;
    if (c.num_hidden_layers > 1000) return 0;
    int n = vr_hf_tensor_count(&c);
    vr_hf_tensor *t = malloc((size_t)n * sizeof *t);
    if (t) vr_hf_tensors(&c, t);
    free(t);
    return 0;
}
