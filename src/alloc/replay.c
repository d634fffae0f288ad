/* vr_replay_file: read a trace (trace.c), then run its allocs and frees
 * through a fresh allocator on a meta device, timing only the allocator
 * calls (the fastest of `repeat` runs). As a peer measured in the same run,
 * the same operations also go straight to the device (no cache), so that
 * timings are read as a ratio. History timestamps use a logical clock (one
 * microsecond per operation) so that the trace files it writes are readable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/trace.h"
#include "vram/replay.h"
#include "vram/util.h"

typedef struct logical_clock {
    uint64_t op;
} logical_clock;

static uint64_t tick(void *ctx) { return ((logical_clock *)ctx)->op * 1000; }

static void calls_sub(vr_device_calls *d, const vr_device_calls *a, const vr_device_calls *b)
{
    const uint64_t *pa = (const uint64_t *)a, *pb = (const uint64_t *)b;
    uint64_t *pd = (uint64_t *)d;
    for (size_t i = 0; i < sizeof *d / sizeof(uint64_t); i++)
        pd[i] = pa[i] - pb[i];
}

static vr_status run(const vra_trace *t, vr_alloc *a, const vr_replay_options *o, logical_clock *clk,
                     vr_replay_result *r, const char *path)
{
    void **ptrs = calloc(t->nallocs ? t->nallocs : 1, sizeof *ptrs);
    volatile unsigned char *ev = o->evict ? malloc(o->evict) : NULL;
    if (!ptrs || (o->evict && !ev)) {
        free(ptrs);
        free((void *)ev);
        return vr_error(VR_ERR_OOM, "%s: out of host memory for the replay", path);
    }
    vr_status st = VR_OK;
    int passes = o->passes > 1 ? o->passes : 1;
    vr_device *dev = vr_alloc_device(a);
    vr_device_calls c0, cpass, c1;
    vr_device_get_calls(dev, &c0);
    cpass = c0;
    uint64_t ns = 0, t0 = vr_now_ns(), tlast = t0, checked = 0, checked_last = 0;
    for (int pass = 0; pass < passes && st == VR_OK; pass++) {
        if (pass == passes - 1) {
            vr_device_get_calls(dev, &cpass);
            tlast = vr_now_ns();
            checked_last = checked;
        }
        for (size_t i = 0; i < t->nops && st == VR_OK; i++) {
            const vra_op *op = &t->ops[i];
            clk->op = (uint64_t)pass * t->nops + i;
            if (op->is_free) {
                st = vr_alloc_free(a, ptrs[op->id]);
                ptrs[op->id] = NULL;
                r->frees++;
            } else {
                vr_status s = vr_alloc_malloc(a, (size_t)op->size, op->stream, &ptrs[op->id]);
                r->allocs++;
                if (s == VR_ERR_OOM) {
                    if (!r->first_oom_line) {
                        r->first_oom_line = op->line;
                        snprintf(r->first_oom, sizeof r->first_oom, "%s", vr_last_error());
                    }
                } else {
                    st = s;
                }
            }
            if (pass == 0 && i + 1 == t->warmup_ops) /* what the process held before the recording */
                vr_alloc_reset_peak(a);
            if (o->check && st == VR_OK) {
                uint64_t c0ns = vr_now_ns();
                st = vr_alloc_check(a);
                if (st != VR_OK)
                    st = vr_error(st, "%s:%llu: after this operation: %s", path, (unsigned long long)op->line,
                                  vr_last_error());
                checked += vr_now_ns() - c0ns; /* checking is not the allocator's time */
            }
            if (ev) { /* the caller's work between two calls: not the allocator's time either */
                uint64_t e0 = vr_now_ns();
                for (uint64_t b = 0; b < o->evict; b += 64)
                    ev[b]++;
                checked += vr_now_ns() - e0;
            }
        }
        if (pass + 1 < passes)
            for (uint32_t i = 0; i < t->nallocs; i++)
                if (ptrs[i]) {
                    vr_alloc_free(a, ptrs[i]);
                    ptrs[i] = NULL;
                }
    }
    uint64_t t1 = vr_now_ns();
    ns = t1 - t0 - checked;
    r->ns_per_op = r->allocs + r->frees ? (double)ns / (double)(r->allocs + r->frees) : 0;
    r->ns_per_op_last_pass = t->nops ? (double)(t1 - tlast - (checked - checked_last)) / (double)t->nops : 0;
    vr_device_get_calls(dev, &c1);
    calls_sub(&r->calls, &c1, &c0);
    calls_sub(&r->calls_last_pass, &c1, &cpass);
    if (st == VR_OK && o->snapshot_path)
        st = vr_alloc_write_snapshot(a, o->snapshot_path);
    if (st == VR_OK && o->chrome_trace_path)
        st = vr_alloc_write_chrome_trace(a, o->chrome_trace_path);
    for (uint32_t i = 0; i < t->nallocs; i++)
        if (ptrs[i])
            vr_alloc_free(a, ptrs[i]);
    free(ptrs);
    free((void *)ev);
    return st;
}

/* ns per operation of the trace's allocs and frees made directly on the device. */
static double device_direct_ns(const vra_trace *t, vr_device *dev)
{
    void **ptrs = calloc(t->nallocs ? t->nallocs : 1, sizeof *ptrs);
    size_t *sizes = calloc(t->nallocs ? t->nallocs : 1, sizeof *sizes);
    if (!ptrs || !sizes) {
        free(ptrs);
        free(sizes);
        return 0;
    }
    uint64_t t0 = vr_now_ns();
    for (size_t i = 0; i < t->nops; i++) {
        const vra_op *op = &t->ops[i];
        if (op->is_free) {
            vr_device_free(dev, ptrs[op->id], sizes[op->id]);
            ptrs[op->id] = NULL;
        } else {
            sizes[op->id] = (size_t)op->size;
            if (vr_device_malloc(dev, (size_t)op->size, &ptrs[op->id]) != VR_OK)
                ptrs[op->id] = NULL;
        }
    }
    uint64_t ns = vr_now_ns() - t0;
    for (uint32_t i = 0; i < t->nallocs; i++)
        if (ptrs[i])
            vr_device_free(dev, ptrs[i], sizes[i]);
    free(ptrs);
    free(sizes);
    return t->nops ? (double)ns / (double)t->nops : 0;
}

vr_status vr_replay_file(const char *path, const vr_replay_options *opt, vr_replay_result *out)
{
    vr_replay_options o = {0};
    if (opt)
        o = *opt;
    memset(out, 0, sizeof *out);
    vra_trace t;
    vr_status st = vra_trace_read(path, &t);
    if (st != VR_OK)
        return st;
    snprintf(out->workload, sizeof out->workload, "%s", t.workload);
    snprintf(out->torch_version, sizeof out->torch_version, "%s", t.torch_version);
    out->have_torch = t.have_torch;
    out->torch_peak_allocated = t.peak_allocated;
    out->torch_peak_reserved = t.peak_reserved;
    out->torch_alloc_retries = t.alloc_retries;
    out->lines = t.lines;

    char spec[64];
    snprintf(spec, sizeof spec, "meta:%llu", (unsigned long long)(o.capacity ? o.capacity : VR_META_DEFAULT_CAPACITY));
    vr_device *dev = NULL;
    if ((st = vr_device_open(spec, &dev)) != VR_OK) {
        vra_trace_free(&t);
        return st;
    }
    logical_clock clk = {0};
    bool files = o.snapshot_path || o.chrome_trace_path;
    vr_alloc_config cfg = {
        .policy = o.policy,
        .max_split_size = o.max_split_size,
        .stitch_lend_pct = o.stitch_lend_pct,
        .stitch_granule = o.stitch_granule,
        .history = files ? (o.history ? o.history : t.nops * (size_t)(o.passes > 1 ? o.passes : 1) + 64) : 0,
        .clock_ns = tick,
        .clock_ctx = &clk,
    };
    int reps = o.repeat > 1 ? o.repeat : 1;
    double best = 0, best_last = 0;
    for (int rep = 0; rep < reps && st == VR_OK; rep++) {
        vr_replay_options ro = o; /* files only from the last run */
        if (rep + 1 < reps)
            ro.snapshot_path = ro.chrome_trace_path = NULL;
        out->allocs = out->frees = out->first_oom_line = 0;
        vr_alloc *a = NULL;
        if ((st = vr_alloc_create(dev, &cfg, &a)) != VR_OK)
            break;
        st = run(&t, a, &ro, &clk, out, path);
        vr_alloc_get_stats(a, &out->stats);
        vr_alloc_destroy(a);
        if (rep == 0 || out->ns_per_op < best)
            best = out->ns_per_op;
        if (rep == 0 || out->ns_per_op_last_pass < best_last)
            best_last = out->ns_per_op_last_pass;
        double peer = st == VR_OK ? device_direct_ns(&t, dev) : 0;
        if (rep == 0 || peer < out->device_ns_per_op)
            out->device_ns_per_op = peer;
    }
    out->ns_per_op = best;
    out->ns_per_op_last_pass = best_last;
    vr_device_close(dev);
    vra_trace_free(&t);
    const vr_alloc_stats *s = &out->stats;
    out->peak_requested = (uint64_t)s->requested_bytes[VR_POOL_ALL].peak;
    out->peak_allocated = (uint64_t)s->allocated_bytes[VR_POOL_ALL].peak;
    out->peak_reserved = (uint64_t)s->reserved_bytes[VR_POOL_ALL].peak;
    out->ratio = out->peak_allocated ? (double)out->peak_reserved / (double)out->peak_allocated : 0;
    out->alloc_retries = s->num_alloc_retries;
    out->ooms = s->num_ooms;
    return st;
}
