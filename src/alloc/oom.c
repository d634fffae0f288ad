/* The out-of-memory error: one paragraph that says what was asked, what the
 * device has, what the allocator holds (allocated vs reserved vs reserved but
 * unused, and the largest free block), and what to try. Stored as the
 * thread's last error, as vr_alloc_malloc returns VR_ERR_OOM. */
#include <stdio.h>
#include <string.h>

#include "alloc/policy.h"
#include "vram/util.h"

static void largest_in(vr_block *b, void *ctx)
{
    uint64_t *m = ctx;
    if (b->size > *m)
        *m = b->size;
}

uint64_t vra_largest_free(vr_alloc *a)
{
    uint64_t m = 0;
    vra_tree_walk(&a->small.blocks, largest_in, &m);
    if (!a->large.untreed) {
        vra_tree_walk(&a->large.blocks, largest_in, &m);
        return m;
    }
    for (const vr_segment *s = a->segs; s; s = s->lnext) /* the free large blocks are in no tree */
        if (s->pool == &a->large)
            for (vr_block *b = s->head; b; b = b->next)
                if (b->mapped && vra_block_available(b))
                    largest_in(b, &m);
    return m;
}

vr_status vra_oom_error(vr_alloc *a, const vra_request *req)
{
    vr_device_mem mem = {0};
    vr_device_mem_info(a->dev, &mem);
    a->stats.num_ooms++;
    vra_record(a, VRA_OOM, mem.free, req->size, req->stream);

    uint64_t reserved = (uint64_t)a->stats.reserved_bytes[VR_POOL_ALL].current;
    uint64_t allocated = (uint64_t)a->stats.allocated_bytes[VR_POOL_ALL].current;
    uint64_t unused = reserved - allocated, largest = vra_largest_free(a);
    char ask[32], seg[32], total[32], fr[32], lim[32], res[32], al[32], un[32], big[32];
    vr_format_size(req->size, ask, sizeof ask);
    vr_format_size(req->alloc_size, seg, sizeof seg);
    vr_format_size(mem.total, total, sizeof total);
    vr_format_size(mem.free, fr, sizeof fr);
    vr_format_size(a->limit, lim, sizeof lim);
    vr_format_size(reserved, res, sizeof res);
    vr_format_size(allocated, al, sizeof al);
    vr_format_size(unused, un, sizeof un);
    vr_format_size(largest, big, sizeof big);

    char what[96] = "";
    if (req->alloc_size && req->alloc_size != req->size)
        snprintf(what, sizeof what, " (as a new %s segment)", seg);
    char cap[128] = "";
    bool capped = a->limit != UINT64_MAX;
    if (capped)
        snprintf(cap, sizeof cap, ", of which this allocator may reserve %s (capacity / memory fraction)", lim);

    /* What to try, most useful first. */
    char tips[400] = "";
    size_t n = 0;
    bool fragmented = unused >= req->size || (reserved && unused * 10 >= reserved);
    if (fragmented && !strcmp(a->policy->name, "pytorch"))
        n += (size_t)snprintf(tips + n, sizeof tips - n, "vr_alloc_config.policy expandable to reduce fragmentation, ");
    if (capped)
        n += (size_t)snprintf(tips + n, sizeof tips - n, "a larger vr_alloc_config.capacity or memory fraction, ");
    snprintf(tips + n, sizeof tips - n,
             "a smaller batch (gradient accumulation keeps the effective batch), activation checkpointing, "
             "or `vram plan` to see where memory goes.");

    return vr_error(VR_ERR_OOM,
                    "out of memory: tried to allocate %s%s on %s (stream %llu); device capacity %s, %s free%s; "
                    "vram holds %s reserved, of which %s allocated and %s reserved but unused "
                    "(largest free block %s). Try: %s",
                    ask, what, vr_device_name(a->dev), (unsigned long long)req->stream, total, fr, cap,
                    res, al, un, big, tips);
}
