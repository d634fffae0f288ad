/* The caching allocator's public entry points: creation, the request path
 * shared by every policy (see policy.h), frees, cross-stream uses, the cache,
 * statistics, and the table of policies. Each entry point holds a->lock. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"
#include "alloc/policy.h"
#include "vram/util.h"

static const vr_policy *const policies[] = {
    &vra_policy_pytorch,
    &vra_policy_expandable,
    &vra_policy_stitch,
};
#define NPOLICIES (sizeof policies / sizeof policies[0])

const char *vr_alloc_policy_names(void)
{
    static char names[256];
    if (!names[0]) {
        size_t n = 0;
        for (size_t i = 0; i < NPOLICIES; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", policies[i]->name);
    }
    return names;
}

static void pool_init(vr_pool *p, bool small)
{
    p->is_small = small;
    p->stat = small ? VR_POOL_SMALL : VR_POOL_LARGE;
    vra_tree_init(&p->blocks, VRA_BY_SIZE);
    vra_tree_init(&p->unmapped, VRA_BY_ADDR);
}

/* ---------------------------------------------------------------- map of live blocks */

static size_t map_slot(const vr_alloc *a, uintptr_t addr)
{
    uint64_t h = ((uint64_t)addr >> 9) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (a->map_cap - 1);
}

static bool map_grow(vr_alloc *a)
{
    size_t ncap = a->map_cap ? a->map_cap * 2 : 1024;
    vr_block **nm = calloc(ncap, sizeof *nm);
    if (!nm)
        return false;
    vr_block **old = a->map;
    size_t ocap = a->map_cap;
    a->map = nm;
    a->map_cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        for (vr_block *b = old[i], *n; b; b = n) {
            n = b->hnext;
            size_t s = map_slot(a, b->addr);
            b->hnext = nm[s];
            nm[s] = b;
        }
    }
    free(old);
    return true;
}

static void map_insert(vr_alloc *a, vr_block *b)
{
    if (a->map_count >= a->map_cap)
        map_grow(a); /* on failure chains just get longer */
    size_t s = map_slot(a, b->addr);
    b->hnext = a->map[s];
    a->map[s] = b;
    a->map_count++;
}

static vr_block *map_find(vr_alloc *a, uintptr_t addr, bool remove)
{
    if (!a->map_cap)
        return NULL;
    vr_block **pp = &a->map[map_slot(a, addr)];
    for (; *pp; pp = &(*pp)->hnext) {
        vr_block *b = *pp;
        if (b->addr == addr) {
            if (remove) {
                *pp = b->hnext;
                b->hnext = NULL;
                a->map_count--;
            }
            return b;
        }
    }
    return NULL;
}

vr_block *vra_map_find(vr_alloc *a, uintptr_t addr) { return map_find(a, addr, false); }

/* ---------------------------------------------------------------- create / destroy */

static uint64_t compute_limit(const vr_alloc *a)
{
    uint64_t lim = UINT64_MAX;
    if (a->cfg.capacity)
        lim = a->cfg.capacity;
    if (a->cfg.memory_fraction > 0) {
        double f = a->cfg.memory_fraction * (double)a->device_total;
        uint64_t fl = f >= 1.8e19 ? UINT64_MAX : (uint64_t)f;
        if (fl < lim)
            lim = fl;
    }
    return lim;
}

vr_status vr_alloc_create(vr_device *dev, const vr_alloc_config *config, vr_alloc **out)
{
    *out = NULL;
    if (!dev)
        return vr_error(VR_ERR_INVALID, "allocator: no device");
    vr_alloc_config cfg = {0};
    if (config)
        cfg = *config;
    const char *pname = cfg.policy && *cfg.policy ? cfg.policy : "pytorch";
    const vr_policy *pol = NULL;
    for (size_t i = 0; i < NPOLICIES; i++)
        if (!strcmp(policies[i]->name, pname))
            pol = policies[i];
    if (!pol)
        return vr_error(VR_ERR_INVALID, "allocator: unknown policy '%s' (available: %s)", pname,
                        vr_alloc_policy_names());
    if (!(cfg.memory_fraction >= 0 && cfg.memory_fraction <= 1))
        return vr_error(VR_ERR_INVALID, "allocator: memory fraction %g is not within [0, 1]", cfg.memory_fraction);
    if (pol->needs_vm && vr_device_vm_granularity(dev) == 0)
        return vr_error(VR_ERR_UNSUPPORTED, "allocator: policy '%s' needs virtual memory, which %s does not have "
                        "(use it on meta or cuda, or vr_alloc_config.policy pytorch)", pol->name, vr_device_name(dev));

    vr_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return vr_error(VR_ERR_OOM, "allocator: out of host memory");
    vr_device_mem mem = {0};
    vr_status st = vr_device_mem_info(dev, &mem);
    if (st != VR_OK) {
        free(a);
        return st;
    }
    pthread_mutex_init(&a->lock, NULL);
    a->dev = dev;
    a->policy = pol;
    a->cfg = cfg;
    a->cfg.policy = pol->name;
    a->device_total = mem.total;
    a->max_split = cfg.max_split_size ? cfg.max_split_size : UINT64_MAX;
    a->max_non_split_rounding = cfg.max_non_split_rounding ? cfg.max_non_split_rounding : VRA_LARGE_BUF;
    a->limit = compute_limit(a);
    pool_init(&a->small, true);
    pool_init(&a->large, false);
    a->stats.max_split_size = a->max_split;
    vra_history_init(&a->hist, cfg.history);
    a->hist.t0 = vra_clock(a);
    if (pol->init && (st = pol->init(a)) != VR_OK) {
        vra_history_free(&a->hist);
        pthread_mutex_destroy(&a->lock);
        free(a);
        return st;
    }
    *out = a;
    return VR_OK;
}

void vr_alloc_destroy(vr_alloc *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    vra_sync_and_free_events(a);
    a->policy->release_cached(a);
    if (a->policy->fini)
        a->policy->fini(a);
    /* What remains holds live blocks: leaked to the device, bookkeeping freed. */
    while (a->segs) {
        vr_segment *s = a->segs;
        for (vr_block *b = s->head, *n; b; b = n) {
            n = b->next;
            free(b->uses);
            free(b);
        }
        vra_segment_delete(a, s);
    }
    for (vr_block *b = a->spare, *n; b; b = n) {
        n = b->hnext;
        free(b);
    }
    free(a->map);
    free(a->pending);
    vra_history_free(&a->hist);
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* ---------------------------------------------------------------- malloc / free */

vr_status vr_alloc_malloc(vr_alloc *a, size_t size, vr_stream stream, void **ptr)
{
    *ptr = NULL;
    if (size == 0)
        return VR_OK;
    pthread_mutex_lock(&a->lock);
    vra_process_events(a);
    vra_request req = {.orig = size, .stream = stream};
    vr_status st = VR_OK;
    if (size >= ((size_t)1 << 60)) {
        req.size = req.alloc_size = size;
        req.pool = &a->large;
        st = VR_ERR_OOM;
    } else {
        req.size = a->policy->round_size(a, size);
        req.pool = vra_pool_for(a, req.size);
        req.block = a->policy->find_free(a, &req);
        if (!req.block) {
            st = a->policy->grow(a, &req);
            if (st == VR_ERR_OOM && a->policy->release_some && a->policy->release_some(a, &req))
                st = a->policy->grow(a, &req);
            if (st == VR_ERR_OOM) {
                vra_sync_and_free_events(a);
                a->policy->release_cached(a);
                a->stats.num_alloc_retries++;
                st = a->policy->grow(a, &req);
            }
        }
    }
    if (st != VR_OK) {
        if (st == VR_ERR_OOM)
            st = vra_oom_error(a, &req);
        pthread_mutex_unlock(&a->lock);
        return st;
    }
    vr_block *b = req.block;
    b = vra_alloc_found(a, &req, b, a->policy->should_split(a, b, req.size));
    map_insert(a, b);
    *ptr = (void *)b->addr;
    pthread_mutex_unlock(&a->lock);
    return VR_OK;
}

/* Records an event on every stream the block was used on; the block goes
 * back to its pool when the last one completes (vra_process_events). */
static void insert_events(vr_alloc *a, vr_block *b)
{
    for (uint32_t i = 0; i < b->nuses; i++) {
        vr_event *ev = NULL;
        if (a->npending == a->cappending) {
            size_t ncap = a->cappending ? a->cappending * 2 : 64;
            vra_pending *np = realloc(a->pending, ncap * sizeof *np);
            if (np) {
                a->pending = np;
                a->cappending = ncap;
            }
        }
        if (a->npending == a->cappending || vr_event_record(a->dev, b->uses[i], &ev) != VR_OK) {
            vr_device_synchronize(a->dev); /* cannot track it: wait instead */
            continue;
        }
        a->pending[a->npending++] = (vra_pending){ev, b};
        b->event_count++;
    }
    free(b->uses);
    b->uses = NULL;
    b->nuses = b->capuses = 0;
}

vr_status vr_alloc_free(vr_alloc *a, void *ptr)
{
    if (!ptr)
        return VR_OK;
    pthread_mutex_lock(&a->lock);
    vr_block *b = map_find(a, (uintptr_t)ptr, true);
    if (!b) {
        pthread_mutex_unlock(&a->lock);
        return vr_error(VR_ERR_INVALID, "allocator: free of %p, which is not a live block of this allocator", ptr);
    }
    b->allocated = false;
    vra_pool_dec(a->stats.allocation, b->pool, 1);
    vra_pool_dec(a->stats.allocated_bytes, b->pool, (int64_t)b->size);
    vra_record(a, VRA_FREE_REQUESTED, b->addr, b->requested, b->stream);
    if (b->size >= a->max_split)
        vra_stat_dec(&a->stats.oversize_allocations, 1);
    if (b->nuses)
        insert_events(a, b);
    if (b->event_count == 0)
        vra_free_block(a, b);
    pthread_mutex_unlock(&a->lock);
    return VR_OK;
}

vr_status vr_alloc_record_stream(vr_alloc *a, void *ptr, vr_stream stream)
{
    pthread_mutex_lock(&a->lock);
    vr_block *b = map_find(a, (uintptr_t)ptr, false);
    vr_status st = VR_OK;
    if (!b) {
        st = vr_error(VR_ERR_INVALID, "allocator: record_stream on %p, which is not a live block", ptr);
    } else if (stream != b->stream) {
        bool seen = false;
        for (uint32_t i = 0; i < b->nuses; i++)
            seen |= b->uses[i] == stream;
        if (!seen) {
            if (b->nuses == b->capuses) {
                uint32_t ncap = b->capuses ? b->capuses * 2 : 2;
                vr_stream *nu = realloc(b->uses, ncap * sizeof *nu);
                if (!nu) {
                    pthread_mutex_unlock(&a->lock);
                    return vr_error(VR_ERR_OOM, "allocator: out of host memory in record_stream");
                }
                b->uses = nu;
                b->capuses = ncap;
            }
            b->uses[b->nuses++] = stream;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}

void vr_alloc_empty_cache(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    vra_sync_and_free_events(a);
    a->policy->release_cached(a);
    pthread_mutex_unlock(&a->lock);
}

/* ---------------------------------------------------------------- stats and queries */

void vr_alloc_get_stats(vr_alloc *a, vr_alloc_stats *out)
{
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
}

static void reset_peak(vr_stat *s, int n)
{
    for (int i = 0; i < n; i++)
        s[i].peak = s[i].current;
}

static void reset_accum(vr_stat *s, int n)
{
    for (int i = 0; i < n; i++)
        s[i].allocated = s[i].freed = 0;
}

/* Applies fn to every vr_stat array of the statistics. */
static void each_stat(vr_alloc_stats *st, void (*fn)(vr_stat *s, int n))
{
    vr_stat *arrays[] = {st->allocation, st->segment, st->active, st->inactive_split, st->allocated_bytes,
                         st->reserved_bytes, st->active_bytes, st->inactive_split_bytes, st->requested_bytes};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        fn(arrays[i], VR_POOL_COUNT);
    fn(&st->oversize_allocations, 1);
    fn(&st->oversize_segments, 1);
}

void vr_alloc_reset_peak(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    each_stat(&a->stats, reset_peak);
    pthread_mutex_unlock(&a->lock);
}

void vr_alloc_reset_accumulated(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    each_stat(&a->stats, reset_accum);
    a->stats.num_alloc_retries = a->stats.num_ooms = 0;
    a->stats.num_device_alloc = a->stats.num_device_free = 0;
    a->stats.num_sync_all_streams = 0;
    pthread_mutex_unlock(&a->lock);
}

vr_status vr_alloc_set_memory_fraction(vr_alloc *a, double fraction)
{
    if (!(fraction >= 0 && fraction <= 1))
        return vr_error(VR_ERR_INVALID, "allocator: memory fraction %g is not within [0, 1]", fraction);
    pthread_mutex_lock(&a->lock);
    a->cfg.memory_fraction = fraction;
    a->limit = compute_limit(a);
    pthread_mutex_unlock(&a->lock);
    return VR_OK;
}

uint64_t vr_alloc_limit(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t l = a->limit;
    pthread_mutex_unlock(&a->lock);
    return l;
}

uint64_t vr_alloc_largest_free_block(vr_alloc *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t l = vra_largest_free(a);
    pthread_mutex_unlock(&a->lock);
    return l;
}

size_t vr_alloc_block_size(vr_alloc *a, const void *ptr)
{
    pthread_mutex_lock(&a->lock);
    vr_block *b = map_find(a, (uintptr_t)ptr, false);
    size_t s = b ? b->size : 0;
    pthread_mutex_unlock(&a->lock);
    return s;
}

size_t vr_alloc_round_size(const vr_alloc *a, size_t size)
{
    return a->policy->round_size(a, size);
}

const char *vr_alloc_policy(const vr_alloc *a) { return a->policy->name; }
vr_device *vr_alloc_device(const vr_alloc *a) { return a->dev; }

void vr_alloc_record_history(vr_alloc *a, size_t entries)
{
    pthread_mutex_lock(&a->lock);
    vra_history_free(&a->hist);
    vra_history_init(&a->hist, entries);
    a->cfg.history = entries;
    pthread_mutex_unlock(&a->lock);
}
