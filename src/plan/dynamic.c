/* vram plan — dynamic mode: the step replayed through the caching allocator.
 *
 * What PyTorch's eager mode does with the same graph: the persistent tensors
 * are allocated once before the first step; then, node by node, every tensor
 * first used by the node is allocated (vr_alloc_malloc of its raw bytes) just
 * before it runs, and every tensor last used by it is freed right after. The
 * device is `meta` (address space only, nothing touched), capped at the
 * configured capacity (none: unlimited). Peaks are the allocator's own statistics, over all
 * replayed steps (the first step fills the cache; later ones reuse it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "vram/alloc.h"
#include "vram/device.h"

static void oom(vr_plan *p, int node)
{
    p->dynamic.status = VR_ERR_OOM;
    p->dynamic.oom_node = node;
    snprintf(p->dynamic.error, sizeof p->dynamic.error, "%s", vr_last_error());
}

vr_status vr__plan_dynamic(vr_plan *p)
{
    vr_plan_dynamic *d = &p->dynamic;
    int N = p->n_nodes, T = p->n_tensors;
    d->oom_node = -1;
    d->snapshot_node = -1;
    d->allocated = calloc((size_t)N + 1, sizeof(uint64_t));
    d->reserved = calloc((size_t)N + 1, sizeof(uint64_t));
    void **ptr = calloc((size_t)T + 1, sizeof(void *));
    vr__plan_buckets first = {0}, last = {0};
    vr_device *dev = NULL;
    vr_alloc *a = NULL;
    vr_status st = VR_OK;
    int *ulast = vr__plan_unit_last(p);
    if (!d->allocated || !d->reserved || !ptr || !ulast || !vr__plan_bucket(p, ulast, false, &first) ||
        !vr__plan_bucket(p, ulast, true, &last)) {
        st = vr_error(VR_ERR_OOM, "plan: out of host memory");
        goto out;
    }
    /* without a capacity: 2^55 bytes, i.e. no limit (meta's default would be 80 GiB) */
    char spec[64];
    snprintf(spec, sizeof spec, "meta:%llu",
             (unsigned long long)(p->config.capacity ? p->config.capacity : (uint64_t)1 << 55));
    if ((st = vr_device_open(spec, &dev)))
        goto out;
    vr_alloc_config ac = {.policy = p->config.alloc_policy};
    if ((st = vr_alloc_create(dev, &ac, &a)))
        goto out;
    for (int t = 0; t < T && d->status == VR_OK; t++) {
        const vr_plan_tensor *pt = &p->tensors[t];
        if (p->graph->tensors[t].view_of < 0 && pt->persistent && pt->first >= 0 && !pt->host &&
            vr_alloc_malloc(a, pt->bytes, 0, &ptr[t]) != VR_OK)
            oom(p, -1);
    }
    int steps = p->config.steps > 0 ? p->config.steps : 2;
    vr_device_calls c0, clast, c1;
    vr_device_get_calls(dev, &c0);
    clast = c0;
    for (int s = 0; s < steps && d->status == VR_OK; s++) {
        if (s == steps - 1)
            vr_device_get_calls(dev, &clast);
        /* every step allocates the same blocks in the same order: the previous step's peak
         * node is the last step's, where the report's snapshot is taken */
        int snap = -1;
        for (int i = 0; s > 0 && s == steps - 1 && i < N; i++)
            if (snap < 0 || d->allocated[i] > d->allocated[snap])
                snap = i;
        for (int i = 0; i < N && d->status == VR_OK; i++) {
            for (int k = first.start[i]; k < first.start[i + 1]; k++) {
                int t = first.ids[k];
                if (vr_alloc_malloc(a, p->tensors[t].bytes, 0, &ptr[t]) != VR_OK) {
                    oom(p, i);
                    break;
                }
            }
            vr_alloc_stats st_now;
            vr_alloc_get_stats(a, &st_now);
            d->allocated[i] = (uint64_t)st_now.allocated_bytes[VR_POOL_ALL].current;
            d->reserved[i] = (uint64_t)st_now.reserved_bytes[VR_POOL_ALL].current;
            if (i == snap) {
                d->snapshot = vr_alloc_snapshot_json(a);
                d->snapshot_node = i;
                d->largest_free = vr_alloc_largest_free_block(a);
            }
            for (int k = last.start[i]; k < last.start[i + 1]; k++) {
                int t = last.ids[k];
                vr_alloc_free(a, ptr[t]);
                ptr[t] = NULL;
            }
        }
    }
    vr_alloc_stats stats;
    vr_alloc_get_stats(a, &stats);
    d->peak_allocated = (uint64_t)stats.allocated_bytes[VR_POOL_ALL].peak;
    d->peak_reserved = (uint64_t)stats.reserved_bytes[VR_POOL_ALL].peak;
    d->peak_requested = (uint64_t)stats.requested_bytes[VR_POOL_ALL].peak;
    d->device_allocs = stats.num_device_alloc;
    vr_device_get_calls(dev, &c1);
    d->device_calls = vr_device_calls_vm_total(&c1) - vr_device_calls_vm_total(&c0);
    d->device_calls_last_step = vr_device_calls_vm_total(&c1) - vr_device_calls_vm_total(&clast);
    d->allocs = stats.allocation[VR_POOL_ALL].allocated;
    for (int t = 0; t < T; t++)
        if (ptr[t])
            vr_alloc_free(a, ptr[t]);
out:
    if (a)
        vr_alloc_destroy(a);
    if (dev)
        vr_device_close(dev);
    free(ptr);
    free(ulast);
    free(first.start);
    free(first.ids);
    free(last.start);
    free(last.ids);
    return st;
}
