/* The allocator's history and its exports.
 *
 * History: a bounded ring of events (alloc, free_requested, free_completed,
 * segment_alloc/free, segment_map/unmap, oom), each with address, size,
 * stream, time and the allocated/reserved totals after it.
 *
 * Snapshot (vr_alloc_write_snapshot): JSON with PyTorch's field names, as
 * torch.cuda.memory._snapshot() writes them, so existing viewers read it:
 *   {"segments": [{"device", "address", "total_size", "stream", "segment_type",
 *                  "allocated_size", "active_size", "requested_size",
 *                  "is_expandable", "blocks": [{"address", "size",
 *                  "requested_size", "state"}]}],
 *    "device_traces": [[{"action", "addr", "size", "stream", "time_us"}]],
 *    "allocator_settings": {...}}
 * Block states: "active_allocated", "active_pending_free", "inactive".
 * An expandable range is reported as one segment per mapped run.
 *
 * Chrome/Perfetto trace (vr_alloc_write_chrome_trace): "ph":"C" counter
 * tracks "allocated" and "reserved" (bytes), and instant events for segment
 * operations and out-of-memory errors, timestamps in microseconds.
 *
 * Files are written to PATH.tmp.<pid> and renamed over PATH. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/internal.h"

static const char *const action_names[VRA_ACTION_COUNT] = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "oom",
};

const char *vra_action_name(int action)
{
    return action >= 0 && action < VRA_ACTION_COUNT ? action_names[action] : "unknown";
}

void vra_history_init(vra_history *h, size_t cap)
{
    h->ring = cap ? calloc(cap, sizeof *h->ring) : NULL;
    h->cap = h->ring ? cap : 0;
    h->next = h->count = 0;
}

void vra_history_free(vra_history *h)
{
    free(h->ring);
    h->ring = NULL;
    h->cap = h->next = h->count = 0;
}

void vra_record(vr_alloc *a, int action, uint64_t addr, uint64_t size, vr_stream stream)
{
    vra_history *h = &a->hist;
    if (!h->cap)
        return;
    vra_event *e = &h->ring[h->next];
    e->action = (uint8_t)action;
    e->addr = addr;
    e->size = size;
    e->stream = stream;
    e->time_ns = vra_clock(a);
    e->allocated = a->stats.allocated_bytes[VR_POOL_ALL].current;
    e->reserved = a->stats.reserved_bytes[VR_POOL_ALL].current;
    h->next = (h->next + 1) % h->cap;
    if (h->count < h->cap)
        h->count++;
}

/* The i-th oldest event kept. */
static const vra_event *hist_at(const vra_history *h, size_t i)
{
    size_t first = h->count < h->cap ? 0 : h->next;
    return &h->ring[(first + i) % h->cap];
}

static double time_us(const vr_alloc *a, const vra_event *e)
{
    return (double)(e->time_ns - a->hist.t0) / 1000.0;
}

vr_status vra_write_atomic(const char *path, const char *text, const char *what)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return vr_error(VR_ERR_OOM, "%s: out of host memory", what);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        vr_status st = vr_error(VR_ERR_IO, "%s: cannot write %s: %s", what, tmp, strerror(errno));
        free(tmp);
        return st;
    }
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len;
    ok &= fputc('\n', f) != EOF;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        vr_status st = vr_error(VR_ERR_IO, "%s: cannot write %s: %s", what, path, strerror(errno));
        remove(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    return VR_OK;
}

/* ---------------------------------------------------------------- snapshot */

static const char *block_state(const vr_block *b)
{
    if (b->allocated)
        return "active_allocated";
    if (b->event_count > 0 || b->nuses > 0)
        return "active_pending_free";
    return "inactive";
}

/* Adds one segment entry for the mapped run starting at b; returns the block after it. */
static const vr_block *add_segment(cJSON *segs, const vr_segment *s, const vr_block *b)
{
    cJSON *o = cJSON_CreateObject(), *blocks = cJSON_CreateArray();
    uint64_t total = 0, allocated = 0, active = 0, requested = 0;
    uintptr_t start = b->addr;
    for (; b && b->mapped; b = b->next) {
        cJSON *bo = cJSON_CreateObject();
        bool is_active = b->allocated || b->event_count > 0 || b->nuses > 0;
        cJSON_AddNumberToObject(bo, "address", (double)b->addr);
        cJSON_AddNumberToObject(bo, "size", (double)b->size);
        cJSON_AddNumberToObject(bo, "requested_size", (double)(is_active ? b->requested : 0));
        cJSON_AddStringToObject(bo, "state", block_state(b));
        cJSON_AddItemToArray(blocks, bo);
        total += b->size;
        if (b->allocated)
            allocated += b->size;
        if (is_active) {
            active += b->size;
            requested += b->requested;
        }
    }
    cJSON_AddNumberToObject(o, "device", 0);
    cJSON_AddNumberToObject(o, "address", (double)start);
    cJSON_AddNumberToObject(o, "total_size", (double)total);
    cJSON_AddNumberToObject(o, "stream", (double)s->stream);
    cJSON_AddStringToObject(o, "segment_type", s->pool->is_small ? "small" : "large");
    cJSON_AddNumberToObject(o, "allocated_size", (double)allocated);
    cJSON_AddNumberToObject(o, "active_size", (double)active);
    cJSON_AddNumberToObject(o, "requested_size", (double)requested);
    cJSON_AddBoolToObject(o, "is_expandable", s->expandable);
    cJSON_AddItemToObject(o, "blocks", blocks);
    cJSON_AddItemToArray(segs, o);
    return b;
}

static int cmp_seg(const void *x, const void *y)
{
    const vr_segment *a = *(const vr_segment *const *)x, *b = *(const vr_segment *const *)y;
    return a->base < b->base ? -1 : a->base > b->base;
}

static cJSON *snapshot_json(vr_alloc *a)
{
    cJSON *root = cJSON_CreateObject(), *segs = cJSON_CreateArray();
    const vr_segment **list = a->nsegs ? malloc(a->nsegs * sizeof *list) : NULL;
    size_t n = 0;
    if (list)
        for (const vr_segment *s = a->segs; s; s = s->lnext)
            list[n++] = s;
    if (n > 1) /* list is NULL with no segments: qsort(NULL, ...) is UB */
        qsort(list, n, sizeof *list, cmp_seg);
    for (size_t i = 0; i < n; i++) {
        const vr_block *b = list[i]->head;
        while (b) {
            while (b && !b->mapped)
                b = b->next;
            if (b)
                b = add_segment(segs, list[i], b);
        }
    }
    free(list);
    cJSON_AddItemToObject(root, "segments", segs);

    cJSON *traces = cJSON_CreateArray(), *dev0 = cJSON_CreateArray();
    for (size_t i = 0; i < a->hist.count; i++) {
        const vra_event *e = hist_at(&a->hist, i);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "action", vra_action_name(e->action));
        cJSON_AddNumberToObject(o, "addr", (double)e->addr);
        cJSON_AddNumberToObject(o, "size", (double)e->size);
        cJSON_AddNumberToObject(o, "stream", (double)e->stream);
        cJSON_AddNumberToObject(o, "time_us", time_us(a, e));
        cJSON_AddItemToArray(dev0, o);
    }
    cJSON_AddItemToArray(traces, dev0);
    cJSON_AddItemToObject(root, "device_traces", traces);

    cJSON *set = cJSON_CreateObject();
    cJSON_AddStringToObject(set, "policy", a->policy ? vr_alloc_policy(a) : "");
    cJSON_AddStringToObject(set, "device", vr_device_name(a->dev));
    cJSON_AddNumberToObject(set, "max_split_size", a->max_split == UINT64_MAX ? -1.0 : (double)a->max_split);
    cJSON_AddNumberToObject(set, "limit", a->limit == UINT64_MAX ? -1.0 : (double)a->limit);
    cJSON_AddBoolToObject(set, "expandable_segments", !strcmp(vr_alloc_policy(a), "expandable"));
    cJSON_AddItemToObject(root, "allocator_settings", set);
    return root;
}

char *vr_alloc_snapshot_json(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    cJSON *root = snapshot_json(a);
    pthread_mutex_unlock(&a->lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

vr_status vr_alloc_write_snapshot(vr_alloc *a, const char *path)
{
    char *text = vr_alloc_snapshot_json(a);
    if (!text)
        return vr_error(VR_ERR_OOM, "snapshot: out of host memory");
    vr_status st = vra_write_atomic(path, text, "snapshot");
    free(text);
    return st;
}

/* ---------------------------------------------------------------- chrome trace */

static void add_counter(cJSON *evs, const char *name, double ts, int64_t bytes)
{
    cJSON *o = cJSON_CreateObject(), *args = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "ph", "C");
    cJSON_AddNumberToObject(o, "ts", ts);
    cJSON_AddNumberToObject(o, "pid", 0);
    cJSON_AddNumberToObject(o, "tid", 0);
    cJSON_AddNumberToObject(args, "bytes", (double)bytes);
    cJSON_AddItemToObject(o, "args", args);
    cJSON_AddItemToArray(evs, o);
}

static void add_instant(cJSON *evs, const vr_alloc *a, const vra_event *e)
{
    cJSON *o = cJSON_CreateObject(), *args = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", vra_action_name(e->action));
    cJSON_AddStringToObject(o, "cat", "segment");
    cJSON_AddStringToObject(o, "ph", "i");
    cJSON_AddStringToObject(o, "s", e->action == VRA_OOM ? "g" : "t");
    cJSON_AddNumberToObject(o, "ts", time_us(a, e));
    cJSON_AddNumberToObject(o, "pid", 0);
    cJSON_AddNumberToObject(o, "tid", 1);
    cJSON_AddNumberToObject(args, e->action == VRA_OOM ? "device_free" : "addr", (double)e->addr);
    cJSON_AddNumberToObject(args, "size", (double)e->size);
    cJSON_AddNumberToObject(args, "stream", (double)e->stream);
    cJSON_AddItemToObject(o, "args", args);
    cJSON_AddItemToArray(evs, o);
}

static void add_name(cJSON *evs, const char *what, int tid, const char *name)
{
    cJSON *o = cJSON_CreateObject(), *args = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", what);
    cJSON_AddStringToObject(o, "ph", "M");
    cJSON_AddNumberToObject(o, "pid", 0);
    cJSON_AddNumberToObject(o, "tid", tid);
    cJSON_AddStringToObject(args, "name", name);
    cJSON_AddItemToObject(o, "args", args);
    cJSON_AddItemToArray(evs, o);
}

vr_status vr_alloc_write_chrome_trace(vr_alloc *a, const char *path)
{
    cJSON *root = cJSON_CreateObject(), *evs = cJSON_CreateArray();
    char title[256];
    pthread_mutex_lock(&a->lock);
    snprintf(title, sizeof title, "vram allocator (%s) on %s", vr_alloc_policy(a), vr_device_name(a->dev));
    add_name(evs, "process_name", 0, title);
    add_name(evs, "thread_name", 0, "memory");
    add_name(evs, "thread_name", 1, "segments");
    int64_t last_alloc = -1, last_res = -1;
    for (size_t i = 0; i < a->hist.count; i++) {
        const vra_event *e = hist_at(&a->hist, i);
        double ts = time_us(a, e);
        if (e->allocated != last_alloc)
            add_counter(evs, "allocated", ts, last_alloc = e->allocated);
        if (e->reserved != last_res)
            add_counter(evs, "reserved", ts, last_res = e->reserved);
        if (e->action >= VRA_SEGMENT_ALLOC)
            add_instant(evs, a, e);
    }
    pthread_mutex_unlock(&a->lock);
    cJSON_AddItemToObject(root, "traceEvents", evs);
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        return vr_error(VR_ERR_OOM, "chrome trace: out of host memory");
    vr_status st = vra_write_atomic(path, text, "chrome trace");
    free(text);
    return st;
}
