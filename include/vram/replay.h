/* vram — replaying allocator traces.
 *
 * A trace is the event stream of a real training run's allocator (see
 * shared/traces/README.md): gzip-compressed (or plain) CSV
 *
 *     # {"workload": "...", "peak_allocated": N, "peak_reserved": N, ...}
 *     action,addr,size,stream
 *     alloc,140204778192896,154533888,0
 *     free_completed,140204778192896,154533888,0
 *
 * A replay runs the trace's alloc and free_completed events (matched by
 * address) through a fresh allocator on a `meta` device and measures what
 * that allocator's policy would reserve; the other actions (segment_*,
 * free_requested, ...) are checked for form and otherwise ignored. */
#ifndef VRAM_REPLAY_H
#define VRAM_REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include "vram/alloc.h"
#include "vram/device.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_replay_options {
    const char *policy;            /* allocator policy (NULL = "pytorch") */
    uint64_t capacity;             /* meta device capacity (0 = 80 GiB) */
    uint64_t max_split_size;       /* allocator setting (0 = unlimited) */
    unsigned stitch_lend_pct;      /* allocator setting (vr_alloc_config.stitch_lend_pct) */
    uint64_t stitch_granule;       /* allocator setting (vr_alloc_config.stitch_granule) */
    const char *snapshot_path;     /* write the allocator snapshot at the end (NULL = none) */
    const char *chrome_trace_path; /* write a Chrome/Perfetto trace (NULL = none) */
    size_t history;                /* history ring size when a file is written (0 = every event) */
    bool check;                    /* run vr_alloc_check after every operation (slow) */
    int repeat;                    /* replay this many times, report the fastest (0 = once) */
    int passes;                    /* run the trace this many times on the same allocator, freeing what
                                    * is still live after each pass (0 = once): later passes find a warm
                                    * cache, like later training steps */
    uint64_t evict;                /* touch this many bytes of other memory between operations, as a
                                    * caller's own work does (its time is not counted; 0 = none) */
} vr_replay_options;

typedef struct vr_replay_result {
    char workload[128];            /* from the header line ("" without one) */
    char torch_version[64];
    bool have_torch;               /* the header carried PyTorch's peaks */
    uint64_t torch_peak_allocated, torch_peak_reserved;
    int64_t torch_alloc_retries;
    uint64_t lines;                /* lines read */
    uint64_t allocs, frees;        /* operations replayed */
    uint64_t peak_requested, peak_allocated, peak_reserved; /* the replay's peaks, bytes */
    double ratio;                  /* peak reserved / peak allocated (0 when nothing allocated) */
    int64_t alloc_retries, ooms;
    uint64_t first_oom_line;       /* line of the first failed alloc (0 = none) */
    char first_oom[1024];          /* its out-of-memory message */
    double ns_per_op;              /* allocator time per alloc/free, nanoseconds (best run) */
    double ns_per_op_last_pass;    /* the same, of the last pass alone (the allocator warm; best run) */
    double device_ns_per_op;       /* peer: the same allocs/frees straight on the meta device
                                    * (vr_device_malloc/free, no cache), nanoseconds (best run) */
    vr_alloc_stats stats;          /* the allocator's statistics at the end */
    vr_device_calls calls;         /* driver calls the allocator made, all passes (last run; the peer's
                                    * calls and the allocator's teardown excluded) */
    vr_device_calls calls_last_pass; /* those of the last pass alone (== calls with one pass) */
} vr_replay_result;

/* Reads and replays the trace at path (gzip or plain). A file that cannot be
 * read, corrupt or truncated gzip data, a malformed line, an unknown action,
 * a free of an address no alloc handed out or a bad number is an error whose
 * message names the file and line. Out-of-memory during the replay is not an
 * error: it is counted in ooms. */
vr_status vr_replay_file(const char *path, const vr_replay_options *opt, vr_replay_result *out);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
