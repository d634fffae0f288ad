/* Reading allocator traces (format: include/vram/replay.h) into a list of
 * operations, with every address already resolved to an allocation id, so
 * that the replay loop itself does nothing but allocate and free. */
#ifndef VRAM_ALLOC_TRACE_H
#define VRAM_ALLOC_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "vram/device.h"
#include "vram/status.h"

typedef struct vra_op {
    uint32_t id;          /* allocation id: the n-th alloc of the trace */
    bool is_free;         /* free_completed (else alloc) */
    uint64_t size;        /* alloc: bytes requested */
    vr_stream stream;
    uint64_t line;
} vra_op;

typedef struct vra_trace {
    vra_op *ops;
    size_t nops, cap;
    uint32_t nallocs;
    uint64_t lines;
    char workload[128];
    char torch_version[64];
    bool have_torch;
    uint64_t peak_allocated, peak_reserved;
    int64_t alloc_retries;
    uint64_t warmup_ops;  /* the first ops rebuild what the process held before the recording began: the replay
                           * resets its peaks after them (header field warmup_ops; 0 none) */
} vra_trace;

/* Reads path (gzip or plain); errors name the file and line. */
vr_status vra_trace_read(const char *path, vra_trace *t);
void vra_trace_free(vra_trace *t);

#endif
