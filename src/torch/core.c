/* libvram_torch's core: one vr_alloc per device index, created on the device's first allocation, and
 * PyTorch's hooks on them (vram_torch.h says what each does). The hot path (malloc, free) takes no
 * lock of its own: a device's allocator, once created, is read through an atomic pointer and never
 * replaced; vr_alloc has its lock. Creation, configuration and the last out-of-memory message are
 * under g_lock. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "torch/torch_internal.h"
#include "vram/util.h"

vt_slot vt_slots[VRAM_TORCH_MAX_DEVICES];
pthread_mutex_t vt_lock = PTHREAD_MUTEX_INITIALIZER;

static char g_policy[32] = "stitch";
/* vr_alloc_config.stitch_lend_pct of allocators created from now: eager PyTorch asks many sizes once (BERT's
 * sequence length changes every step), and lending mappings up to twice the size took BERT from 440 to 214 ms
 * per step and GPT-2 from 64 to 53 (native 191 and 49) at reserved/allocated 1.009-1.011 (H100,
 * bench/torch_alloc/README.md); vram's own executor repeats its sizes and keeps 0 */
static unsigned g_lend = 100;
/* vr_alloc_config.stitch_granule: cuMemSetAccess and cuMemUnmap cost ~20-30 us per physical allocation in the
 * range (bench/alloc/vmm_cost.c on the H100), so BERT's new mappings of 2 MiB granules cost it +13% of native's
 * mean step time; 8 MiB granules: -1% at reserved/allocated 1.020 (native 1.287); GPT-2 1.011 -> 1.034
 * (bench/torch_alloc/README.md) */
static size_t g_granule = (size_t)8 << 20;
/* vram_torch_set_timing: the host time inside malloc and free (two clock reads a call, ~90 ns on the lent
 * machines, bench/torch_alloc/entry_cost.c) is measured only when asked for */
static atomic_bool g_timing;
static double g_fraction;
static size_t g_history;
static char g_spec[64] = "cuda:%d";
static int g_created;                 /* allocators created so far */
static char g_oom[4096];              /* the last out-of-memory message */
static _Thread_local char tl_err[4096];

int vt_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_err, sizeof tl_err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *vram_torch_last_error(void) { return tl_err; }

const char *vram_torch_last_oom(void)
{
    static _Thread_local char copy[sizeof g_oom];
    pthread_mutex_lock(&vt_lock);
    memcpy(copy, g_oom, sizeof copy);
    pthread_mutex_unlock(&vt_lock);
    return copy;
}

const char *vram_torch_policy(void) { return g_policy; }

vr_alloc *vt_get(int device)
{
    if (device < 0 || device >= VRAM_TORCH_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&vt_slots[device].alloc, memory_order_acquire);
}

int vram_torch_device_active(int device) { return vt_get(device) != NULL; }

/* "cuda:%d" with the index put in; a spec without %d is used as it is. */
void vram_torch_set_stitch_lend(unsigned pct)
{
    pthread_mutex_lock(&vt_lock);
    g_lend = pct;
    pthread_mutex_unlock(&vt_lock);
}

void vram_torch_set_timing(int on) { atomic_store(&g_timing, on != 0); }

void vram_torch_set_stitch_granule(size_t bytes)
{
    pthread_mutex_lock(&vt_lock);
    g_granule = bytes;
    pthread_mutex_unlock(&vt_lock);
}

static void format_spec(char *out, size_t cap, int device)
{
    const char *d = strstr(g_spec, "%d");
    if (!d) {
        snprintf(out, cap, "%s", g_spec);
        return;
    }
    snprintf(out, cap, "%.*s%d%s", (int)(d - g_spec), g_spec, device, d + 2);
}

int vram_torch_configure(const char *policy, double fraction, size_t history, const char *device_spec)
{
    pthread_mutex_lock(&vt_lock);
    int rc = 0;
    if (g_created) {
        rc = vt_fail("vram_torch: configure after the first allocation (policy %s is in use); "
                     "call vram_torch.enable() before anything is allocated on the GPU", g_policy);
    } else if (!(fraction >= 0 && fraction <= 1)) {
        rc = vt_fail("vram_torch: memory fraction %g is not within [0, 1]", fraction);
    } else if (policy && *policy && !strstr(vr_alloc_policy_names(), policy)) {
        rc = vt_fail("vram_torch: unknown policy '%s' (available: %s)", policy, vr_alloc_policy_names());
    } else if (policy && strlen(policy) >= sizeof g_policy) {
        rc = vt_fail("vram_torch: policy name too long");
    } else if (device_spec && *device_spec &&
               (strlen(device_spec) >= sizeof g_spec ||
                (strchr(device_spec, '%') && (!strstr(device_spec, "%d") ||
                                              strchr(strstr(device_spec, "%d") + 1, '%'))))) {
        rc = vt_fail("vram_torch: device spec '%s' must be a vram device spec with at most one %%d", device_spec);
    } else {
        if (policy && *policy)
            snprintf(g_policy, sizeof g_policy, "%s", policy);
        g_fraction = fraction;
        g_history = history;
        snprintf(g_spec, sizeof g_spec, "%s", device_spec && *device_spec ? device_spec : "cuda:%d");
    }
    pthread_mutex_unlock(&vt_lock);
    return rc;
}

/* The device's allocator, created on first use. NULL with tl_err set when that fails. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static vr_alloc *get_or_create(int device)
{
    vr_alloc *a = vt_get(device);
    if (a)
        return a;
    if (device < 0 || device >= VRAM_TORCH_MAX_DEVICES) {
        vt_fail("vram_torch: device index %d is out of range [0, %d)", device, VRAM_TORCH_MAX_DEVICES);
        return NULL;
    }
    pthread_mutex_lock(&vt_lock);
    vt_slot *s = &vt_slots[device];
    a = atomic_load_explicit(&s->alloc, memory_order_relaxed);
    if (!a) {
        char spec[96];
        format_spec(spec, sizeof spec, device);
        vr_device *dev = NULL;
        vr_alloc_config cfg = {.policy = g_policy,
                               .memory_fraction = s->fraction_set ? s->fraction : g_fraction,
                               .history = g_history,
                               .stitch_lend_pct = g_lend,
                               .stitch_granule = g_granule};
        vr_status st = vr_device_open(spec, &dev);
        if (st == VR_OK && (st = vr_alloc_create(dev, &cfg, &a)) != VR_OK) {
            vr_device_close(dev);
            dev = NULL;
        }
        if (st != VR_OK) {
            vt_fail("vram_torch: cannot create the %s allocator on %s: %s", g_policy, spec, vr_last_error());
            a = NULL;
        } else {
            vr_device_mem mem = {0};
            vr_device_mem_info(dev, &mem);
            s->dev = dev;
            s->total = mem.total;
            s->is_cuda = vr_device_kind_of(dev) == VR_DEVICE_CUDA;
            g_created++;
            atomic_store_explicit(&s->alloc, a, memory_order_release);
        }
    }
    pthread_mutex_unlock(&vt_lock);
    return a;
}

void *vram_torch_try_malloc(ssize_t size, int device, void *stream)
{
    if (size <= 0) {
        if (size < 0)
            vt_fail("vram_torch: allocation of a negative size (%lld bytes)", (long long)size);
        else
            tl_err[0] = 0;
        return NULL;
    }
    vram_torch__guard_enter();
    void *p = NULL;
    vr_alloc *a = get_or_create(device);
    if (!a)
        goto out;
    /* the legacy default stream (NULL) cannot capture, so the common case asks the runtime nothing (~115 ns a
     * call; its use during another stream's global capture is an error CUDA reports itself) */
    if (stream && vt_slots[device].is_cuda && vram_torch__capturing(stream)) {
        vt_fail("vram_torch: allocation of %lld bytes on GPU %d during CUDA graph capture: vram_torch does not "
                "support CUDA graphs (PyTorch keeps a graph's memory in a private pool that a pluggable allocator "
                "cannot provide); capture graphs with PyTorch's own allocator (run without vram_torch)",
                (long long)size, device);
        goto out;
    }
    if (vt_slots[device].total && (uint64_t)size > vt_slots[device].total) {
        /* at once: stitch would otherwise create granules until the device refuses */
        char ask[32], tot[32];
        vt_fail("CUDA out of memory. vram_torch (policy %s) on GPU %d: tried to allocate %s, more than the "
                "device's total memory (%s)", vr_alloc_policy(a), device,
                vr_format_size((uint64_t)size, ask, sizeof ask), vr_format_size(vt_slots[device].total, tot, sizeof tot));
        pthread_mutex_lock(&vt_lock);
        snprintf(g_oom, sizeof g_oom, "%s", tl_err);
        pthread_mutex_unlock(&vt_lock);
        goto out;
    }
    bool timed = atomic_load_explicit(&g_timing, memory_order_relaxed);
    uint64_t t0 = timed ? now_ns() : 0;
    vr_status st = vr_alloc_malloc(a, (size_t)size, (vr_stream)(uintptr_t)stream, &p);
    if (timed)
        atomic_fetch_add_explicit(&vt_slots[device].ns_malloc, now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&vt_slots[device].n_malloc, 1, memory_order_relaxed);
    if (st == VR_ERR_OOM) {
        vt_fail("CUDA out of memory. vram_torch (policy %s) on GPU %d: %s", vr_alloc_policy(a), device,
                vr_last_error());
        pthread_mutex_lock(&vt_lock);
        snprintf(g_oom, sizeof g_oom, "%s", tl_err);
        pthread_mutex_unlock(&vt_lock);
    } else if (st != VR_OK) {
        vt_fail("vram_torch: allocation of %lld bytes on GPU %d failed: %s", (long long)size, device,
                vr_last_error());
    }
out:
    vram_torch__guard_leave();
    return p;
}

void vram_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    (void)stream;
    if (!ptr)
        return;
    vr_alloc *a = vt_get(device);
    if (!a) {
        fprintf(stderr, "vram_torch: free of %p on GPU %d, which has no vram allocator; ignored\n", ptr, device);
        return;
    }
    vram_torch__guard_enter();
    bool timed = atomic_load_explicit(&g_timing, memory_order_relaxed);
    uint64_t t0 = timed ? now_ns() : 0;
    if (vr_alloc_free(a, ptr) != VR_OK)
        fprintf(stderr, "vram_torch: %s\n", vr_last_error());
    if (timed)
        atomic_fetch_add_explicit(&vt_slots[device].ns_free, now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&vt_slots[device].n_free, 1, memory_order_relaxed);
    vram_torch__guard_leave();
}

void vram_torch_init(int device_count) { (void)device_count; }

/* The device whose allocator holds the live block ptr, or -1. */
static int owner(const void *ptr)
{
    for (int d = 0; d < VRAM_TORCH_MAX_DEVICES; d++) {
        vr_alloc *a = vt_get(d);
        if (a && vr_alloc_block_size(a, ptr))
            return d;
    }
    return -1;
}

void vram_torch_record_stream(void *ptr, void *stream)
{
    int d = owner(ptr);
    if (d < 0) {
        fprintf(stderr, "vram_torch: record_stream on %p, which is not a live vram block; ignored\n", ptr);
        return;
    }
    if (vr_alloc_record_stream(vt_get(d), ptr, (vr_stream)(uintptr_t)stream) != VR_OK)
        fprintf(stderr, "vram_torch: %s\n", vr_last_error());
}

void *vram_torch_base_alloc(void *ptr, size_t *size)
{
    int d = owner(ptr);
    if (d >= 0 && size)
        *size = vr_alloc_block_size(vt_get(d), ptr);
    return ptr;
}

void vram_torch_empty_cache(void)
{
    vram_torch__guard_enter();
    for (int d = 0; d < VRAM_TORCH_MAX_DEVICES; d++) {
        vr_alloc *a = vt_get(d);
        if (a)
            vr_alloc_empty_cache(a);
    }
    vram_torch__guard_leave();
}

void vram_torch_memory_fraction(double fraction, int device)
{
    if (device < 0 || device >= VRAM_TORCH_MAX_DEVICES || !(fraction >= 0 && fraction <= 1)) {
        fprintf(stderr, "vram_torch: memory fraction %g for GPU %d ignored (a fraction in [0, 1] and a device "
                "in [0, %d) are needed)\n", fraction, device, VRAM_TORCH_MAX_DEVICES);
        return;
    }
    pthread_mutex_lock(&vt_lock);
    vt_slots[device].fraction = fraction;
    vt_slots[device].fraction_set = true;
    vr_alloc *a = vt_get(device);
    pthread_mutex_unlock(&vt_lock);
    if (a)
        vr_alloc_set_memory_fraction(a, fraction);
}

void vram_torch_record_history(size_t entries)
{
    pthread_mutex_lock(&vt_lock);
    g_history = entries;
    pthread_mutex_unlock(&vt_lock);
    for (int d = 0; d < VRAM_TORCH_MAX_DEVICES; d++) {
        vr_alloc *a = vt_get(d);
        if (a)
            vr_alloc_record_history(a, entries);
    }
}
