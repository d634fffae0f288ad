/* libvram_torch's read-outs for python/vram_torch: statistics as JSON with vr_alloc_stats' field names
 * (PyTorch's), the snapshot with each segment's device, the summary table, peak and accumulated
 * resets, the invariant check. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch/torch_internal.h"

static cJSON *stat_json(const vr_stat *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "current", (double)s->current);
    cJSON_AddNumberToObject(o, "peak", (double)s->peak);
    cJSON_AddNumberToObject(o, "allocated", (double)s->allocated);
    cJSON_AddNumberToObject(o, "freed", (double)s->freed);
    return o;
}

static void add_pools(cJSON *root, const char *name, const vr_stat *s)
{
    cJSON *arr = cJSON_CreateArray();
    for (int p = 0; p < VR_POOL_COUNT; p++)   /* VR_POOL_ALL, SMALL, LARGE */
        cJSON_AddItemToArray(arr, stat_json(&s[p]));
    cJSON_AddItemToObject(root, name, arr);
}

char *vram_torch_stats_json(int device)
{
    vr_alloc_stats st = {0};
    vr_alloc *a = vt_get(device);
    if (a)
        vr_alloc_get_stats(a, &st);
    else
        st.max_split_size = UINT64_MAX;
    cJSON *root = cJSON_CreateObject();
    add_pools(root, "allocation", st.allocation);
    add_pools(root, "segment", st.segment);
    add_pools(root, "active", st.active);
    add_pools(root, "inactive_split", st.inactive_split);
    add_pools(root, "allocated_bytes", st.allocated_bytes);
    add_pools(root, "reserved_bytes", st.reserved_bytes);
    add_pools(root, "active_bytes", st.active_bytes);
    add_pools(root, "inactive_split_bytes", st.inactive_split_bytes);
    add_pools(root, "requested_bytes", st.requested_bytes);
    cJSON_AddItemToObject(root, "oversize_allocations", stat_json(&st.oversize_allocations));
    cJSON_AddItemToObject(root, "oversize_segments", stat_json(&st.oversize_segments));
    cJSON_AddNumberToObject(root, "num_alloc_retries", (double)st.num_alloc_retries);
    cJSON_AddNumberToObject(root, "num_ooms", (double)st.num_ooms);
    cJSON_AddNumberToObject(root, "num_device_alloc", (double)st.num_device_alloc);
    cJSON_AddNumberToObject(root, "num_device_free", (double)st.num_device_free);
    cJSON_AddNumberToObject(root, "num_sync_all_streams", (double)st.num_sync_all_streams);
    /* PyTorch reports an unlimited max_split_size as SIZE_MAX; -1 here, python maps it */
    cJSON_AddNumberToObject(root, "max_split_size",
                            st.max_split_size == UINT64_MAX ? -1.0 : (double)st.max_split_size);
    cJSON_AddStringToObject(root, "policy", a ? vr_alloc_policy(a) : vram_torch_policy());
    cJSON_AddBoolToObject(root, "active_device", a != NULL);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

char *vram_torch_costs_json(int device)
{
    vr_alloc *a = vt_get(device);
    if (!a) {
        vt_fail("vram_torch: GPU %d has no vram allocator (nothing allocated there)", device);
        return NULL;
    }
    const vt_slot *s = &vt_slots[device];
    vr_device_calls c;
    vr_device_get_calls(s->dev, &c);
    cJSON *root = cJSON_CreateObject();
    const struct { const char *name; uint64_t v; } f[] = {
        {"malloc_calls", atomic_load(&s->n_malloc)}, {"free_calls", atomic_load(&s->n_free)},
        {"malloc_ns", atomic_load(&s->ns_malloc)}, {"free_ns", atomic_load(&s->ns_free)},
        {"vm_reserve", c.vm_reserve}, {"vm_release", c.vm_release}, {"phys_create", c.phys_create},
        {"phys_release", c.phys_release}, {"map", c.map}, {"unmap", c.unmap}, {"set_access", c.set_access},
        {"device_sync", c.device_sync}, {"cuda_malloc", c.malloc}, {"cuda_free", c.free},
        {"event_record", c.event_record}, {"event_query", c.event_query}, {"event_sync", c.event_sync}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        cJSON_AddNumberToObject(root, f[i].name, (double)f[i].v);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        vt_fail("vram_torch: costs of GPU %d: out of host memory", device);
    return text;
}

char *vram_torch_snapshot_json(int device)
{
    vr_alloc *a = vt_get(device);
    if (!a) {
        vt_fail("vram_torch: GPU %d has no vram allocator (nothing allocated there)", device);
        return NULL;
    }
    char *text = vr_alloc_snapshot_json(a);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) {
        vt_fail("vram_torch: snapshot of GPU %d: out of host memory", device);
        return NULL;
    }
    cJSON *seg;
    cJSON_ArrayForEach(seg, cJSON_GetObjectItem(root, "segments"))
        cJSON_ReplaceItemInObject(seg, "device", cJSON_CreateNumber(device));
    text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        vt_fail("vram_torch: snapshot of GPU %d: out of host memory", device);
    return text;
}

int vram_torch_write_snapshot(int device, const char *path)
{
    char *text = vram_torch_snapshot_json(device);
    if (!text)
        return -1;
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.vram_torch", path);
    FILE *f = n > 0 && (size_t)n < sizeof tmp ? fopen(tmp, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = f && fclose(f) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    free(text);
    if (!ok) {
        if (f)
            remove(tmp);
        return vt_fail("vram_torch: cannot write the snapshot to %s", path);
    }
    return 0;
}

char *vram_torch_summary(int device)
{
    vr_alloc *a = vt_get(device);
    if (!a) {
        vt_fail("vram_torch: GPU %d has no vram allocator (nothing allocated there)", device);
        return NULL;
    }
    return vr_alloc_summary(a);
}

void vram_torch_free_string(char *s) { free(s); }

void vram_torch_reset_peak(int device)
{
    for (int d = 0; d < VRAM_TORCH_MAX_DEVICES; d++) {
        vr_alloc *a = vt_get(d);
        if (a && (device < 0 || d == device))
            vr_alloc_reset_peak(a);
    }
}

void vram_torch_reset_accumulated(int device)
{
    for (int d = 0; d < VRAM_TORCH_MAX_DEVICES; d++) {
        vr_alloc *a = vt_get(d);
        if (a && (device < 0 || d == device))
            vr_alloc_reset_accumulated(a);
    }
}

int vram_torch_check(int device)
{
    vr_alloc *a = vt_get(device);
    if (!a)
        return vt_fail("vram_torch: GPU %d has no vram allocator", device);
    if (vr_alloc_check(a) != VR_OK)
        return vt_fail("vram_torch: GPU %d: %s", device, vr_last_error());
    return 0;
}
