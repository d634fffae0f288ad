/* Fuzz harness: vram's resumable training state (vr_state_read_meta and
 * vr_state_load, src/train/checkpoint_state.c). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "vram/train_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".state");
    vr_train_state s;
    memset(&s, 0, sizeof s);
    if (vr_state_read_meta(path, &s) != VR_OK)
        return 0;
    if (s.nbuffers < 0 || s.nbuffers > VR_STATE_MAX_BUFFERS || s.nconfig < 0 || s.nconfig > VR_STATE_MAX_CONFIG)
        abort();
    /* Load every listed buffer whose size the file could hold (bigger ones must fail the load). */
    int ok = 1;
    for (int i = 0; i < s.nbuffers; i++) {
        uint64_t b = s.buffers[i].bytes;
        if (b > size) {
            ok = 0;
            break;
        }
        s.buffers[i].data = malloc(b ? b : 1);
        if (!s.buffers[i].data)
            ok = 0;
    }
    if (ok)
        (void)vr_state_load(path, &s);
    for (int i = 0; i < s.nbuffers; i++)
        free(s.buffers[i].data);
    return 0;
}
