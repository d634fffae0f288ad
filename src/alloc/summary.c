/* vr_alloc_summary: the statistics as a text table laid out like
 * torch.cuda.memory_summary(), so that PyTorch users read it at a glance:
 * one row per statistic and pool, columns current / peak / total allocated /
 * total freed, sizes in the unit that suits the row's peak. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/policy.h"
#include "vram/util.h"

#define RULE  "|---------------------------------------------------------------------------|\n"
#define DRULE "|===========================================================================|\n"

typedef struct buf {
    char *s;
    size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            return;
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t ncap = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
        char *ns = realloc(b->s, ncap);
        if (!ns)
            return;
        b->s = ns;
        b->cap = ncap;
    }
}

/* PyTorch's _format_size: a 6-digit integer in the unit the row's peak suits. */
static void fmt_size(char *out, size_t cap, int64_t sz, int64_t pref)
{
    static const char *units[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double p = (double)pref;
    while (u < 5 && p >= 768.0 * 1024) {
        u++;
        sz /= 1024;
        p /= 1024;
    }
    snprintf(out, cap, "%6lld %s", (long long)sz, units[u]);
}

/* PyTorch's _format_count. */
static void fmt_count(char *out, size_t cap, int64_t n, int64_t pref)
{
    static const char *units[] = {" ", "K", "M"};
    int u = 0;
    double p = (double)pref;
    while (u < 2 && p >= 750.0 * 1000) {
        u++;
        n /= 1000;
        p /= 1000;
    }
    snprintf(out, cap, "%7lld %s ", (long long)n, units[u]);
}

static void row(buf *b, const char *name, const vr_stat *s, bool bytes)
{
    char c[4][24];
    const int64_t v[4] = {s->current, s->peak, s->allocated, s->freed};
    for (int i = 0; i < 4; i++) {
        if (bytes)
            fmt_size(c[i], sizeof c[i], v[i], i < 2 ? s->peak : v[i]);
        else
            fmt_count(c[i], sizeof c[i], v[i], i < 2 ? s->peak : v[i]);
    }
    put(b, "| %-21s | %s | %s | %s | %s |\n", name, c[0], c[1], c[2], c[3]);
}

static void section(buf *b, const char *name, const vr_stat arr[VR_POOL_COUNT], bool bytes)
{
    row(b, name, &arr[VR_POOL_ALL], bytes);
    row(b, "      from large pool", &arr[VR_POOL_LARGE], bytes);
    row(b, "      from small pool", &arr[VR_POOL_SMALL], bytes);
    put(b, RULE);
}

char *vr_alloc_summary(vr_alloc *a)
{
    vr_alloc_stats st;
    vr_alloc_get_stats(a, &st);
    uint64_t largest = vr_alloc_largest_free_block(a), limit = vr_alloc_limit(a);
    buf b = {0};
    char title[160], line[160], s1[32], s2[32];
    snprintf(title, sizeof title, "vram memory summary, %s, policy %s", vr_device_name(a->dev), a->policy->name);
    put(&b, DRULE);
    put(&b, "|%*s%*s|\n", (int)(37 + strlen(title) / 2), title, (int)(38 - strlen(title) / 2 - strlen(title) % 2), "");
    put(&b, RULE);
    snprintf(line, sizeof line, "OOMs: %lld", (long long)st.num_ooms);
    snprintf(s1, sizeof s1, "alloc retries: %lld", (long long)st.num_alloc_retries);
    put(&b, "| %-35s| %-37s|\n", line, s1);
    snprintf(line, sizeof line, "device allocs: %lld, frees: %lld", (long long)st.num_device_alloc,
             (long long)st.num_device_free);
    if (limit == UINT64_MAX)
        snprintf(s1, sizeof s1, "cap: none");
    else
        snprintf(s1, sizeof s1, "cap: %s", vr_format_size(limit, s2, sizeof s2));
    put(&b, "| %-35s| %-37s|\n", line, s1);
    put(&b, DRULE);
    put(&b, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n");
    put(&b, RULE);
    section(&b, "Allocated memory", st.allocated_bytes, true);
    section(&b, "Active memory", st.active_bytes, true);
    section(&b, "Requested memory", st.requested_bytes, true);
    section(&b, "GPU reserved memory", st.reserved_bytes, true);
    section(&b, "Non-releasable memory", st.inactive_split_bytes, true);
    section(&b, "Allocations", st.allocation, false);
    section(&b, "Active allocs", st.active, false);
    section(&b, "GPU reserved segments", st.segment, false);
    section(&b, "Non-releasable allocs", st.inactive_split, false);
    row(&b, "Oversize allocations", &st.oversize_allocations, false);
    put(&b, RULE);
    row(&b, "Oversize GPU segments", &st.oversize_segments, false);
    put(&b, DRULE);
    int64_t pa = st.allocated_bytes[VR_POOL_ALL].peak, pr = st.reserved_bytes[VR_POOL_ALL].peak;
    int64_t ca = st.allocated_bytes[VR_POOL_ALL].current, cr = st.reserved_bytes[VR_POOL_ALL].current;
    snprintf(line, sizeof line, "reserved/allocated: now %.3f, peaks %.3f", ca ? (double)cr / (double)ca : 0.0,
             pa ? (double)pr / (double)pa : 0.0);
    snprintf(s1, sizeof s1, "largest free: %s", vr_format_size(largest, s2, sizeof s2));
    put(&b, "| %-44s| %-28s|\n", line, s1);
    put(&b, DRULE);
    return b.s;
}
