/* Fuzz harness: the safetensors reader on arbitrary bytes (header parse and
 * validation, then every tensor read back converted to f32). */
#include <stdint.h>
#include <stdlib.h>

#include "vram/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vr_safetensors *st;
    if (vr_st_open_memory("fuzz.safetensors", data, size, &st) != VR_OK) return 0;
    for (int i = 0; i < vr_st_count(st); i++) {
        const vr_st_tensor *t = vr_st_tensor_at(st, i);
        if (t->numel > (1u << 20)) continue;
        float *buf = malloc(t->numel ? t->numel * sizeof *buf : 1);
        if (buf) vr_st_read(st, t->name, VR_F32, buf, t->numel * sizeof *buf);
        free(buf);
    }
    vr_st_metadata(st, "format");
    vr_st_close(st);
    return 0;
}
