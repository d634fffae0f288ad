/* Fuzz harness: allocator traces, CSV with a JSON header line, plain or gzip
 * (vra_trace_read, src/alloc/trace.c; vr_replay_file reads through it). */
#include <stdint.h>
#include <stdlib.h>

#include "alloc/trace.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".csv");
    vra_trace t;
    memset(&t, 0, sizeof t);
    if (vra_trace_read(path, &t) == VR_OK) {
        /* Every free names an allocation that the trace made before it. */
        for (size_t i = 0; i < t.nops; i++)
            if (t.ops[i].id >= t.nallocs)
                abort();
    }
    vra_trace_free(&t);
    return 0;
}
