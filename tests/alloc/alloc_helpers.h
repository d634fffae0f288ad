/* Shared helpers of the allocator tests (included after cmocka.h). */
#ifndef VRAM_TESTS_ALLOC_HELPERS_H
#define VRAM_TESTS_ALLOC_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/alloc.h"
#include "vram/util.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

/* Fails the test with the allocator's own explanation when an invariant breaks. */
static inline void check_invariants(vr_alloc *a)
{
    if (vr_alloc_check(a) != VR_OK)
        fail_msg("invariant broken: %s", vr_last_error());
}

static inline vr_device *open_dev(const char *spec)
{
    vr_device *d = NULL;
    if (vr_device_open(spec, &d) != VR_OK)
        fail_msg("cannot open %s: %s", spec, vr_last_error());
    return d;
}

static inline vr_alloc *make_alloc(vr_device *d, const char *policy, const vr_alloc_config *base)
{
    vr_alloc_config c = {0};
    if (base)
        c = *base;
    c.policy = policy;
    vr_alloc *a = NULL;
    if (vr_alloc_create(d, &c, &a) != VR_OK)
        fail_msg("cannot create allocator: %s", vr_last_error());
    return a;
}

static inline void *xmalloc(vr_alloc *a, size_t size, vr_stream s)
{
    void *p = NULL;
    if (vr_alloc_malloc(a, size, s, &p) != VR_OK)
        fail_msg("malloc(%zu) failed: %s", size, vr_last_error());
    check_invariants(a);
    return p;
}

static inline void xfree(vr_alloc *a, void *p)
{
    if (vr_alloc_free(a, p) != VR_OK)
        fail_msg("free failed: %s", vr_last_error());
    check_invariants(a);
}

static inline vr_alloc_stats stats_of(vr_alloc *a)
{
    vr_alloc_stats s;
    vr_alloc_get_stats(a, &s);
    return s;
}

#define CUR(a, field, pool) (stats_of(a).field[pool].current)

#endif
