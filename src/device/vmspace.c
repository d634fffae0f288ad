/* Reserved ranges kept in an array sorted by base: reserve and release are
 * O(n) (they are rare: one per expandable segment), lookups O(log n), and a
 * map or unmap touches one bit per granule it covers. */
#include "device/vmspace.h"

#include <stdlib.h>
#include <string.h>

bool vr__vm_add(vr_vmspace *vs, uintptr_t base, size_t bytes)
{
    if (vs->n == vs->cap) {
        size_t ncap = vs->cap ? vs->cap * 2 : 16;
        vr_vm_range *r = realloc(vs->r, ncap * sizeof *r);
        if (!r)
            return false;
        vs->r = r;
        vs->cap = ncap;
    }
    size_t granules = bytes / vs->granule;
    uint64_t *bits = calloc((granules + 63) / 64, sizeof *bits);
    if (!bits)
        return false;
    size_t i = vs->n;
    while (i > 0 && vs->r[i - 1].base > base)
        i--;
    memmove(&vs->r[i + 1], &vs->r[i], (vs->n - i) * sizeof *vs->r);
    vs->r[i] = (vr_vm_range){.base = base, .bytes = bytes, .mapped = 0, .bits = bits};
    vs->n++;
    return true;
}

vr_vm_range *vr__vm_find(vr_vmspace *vs, uintptr_t addr, size_t bytes)
{
    size_t lo = 0, hi = vs->n;  /* first range with base > addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (vs->r[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    vr_vm_range *r = &vs->r[lo - 1];
    if (addr - r->base > r->bytes || bytes > r->bytes - (addr - r->base))
        return NULL;
    return r;
}

static bool get_bit(const uint64_t *bits, size_t i) { return bits[i / 64] >> (i % 64) & 1; }

bool vr__vm_all(const vr_vmspace *vs, const vr_vm_range *r, uintptr_t addr, size_t bytes, bool mapped)
{
    size_t first = (addr - r->base) / vs->granule, count = bytes / vs->granule;
    for (size_t i = first; i < first + count; i++)
        if (get_bit(r->bits, i) != mapped)
            return false;
    return true;
}

void vr__vm_set(vr_vmspace *vs, vr_vm_range *r, uintptr_t addr, size_t bytes, bool mapped)
{
    size_t first = (addr - r->base) / vs->granule, count = bytes / vs->granule;
    for (size_t i = first; i < first + count; i++) {
        uint64_t bit = (uint64_t)1 << (i % 64);
        if (mapped && !(r->bits[i / 64] & bit)) {
            r->bits[i / 64] |= bit;
            r->mapped++;
        } else if (!mapped && (r->bits[i / 64] & bit)) {
            r->bits[i / 64] &= ~bit;
            r->mapped--;
        }
    }
}

vr_status vr__vm_check_map(vr_vmspace *vs, const char *dev_name, const char *op, void *addr, size_t bytes,
                           vr_vm_range **r)
{
    *r = vr__vm_find(vs, (uintptr_t)addr, bytes);
    if (!*r)
        return vr_error(VR_ERR_INVALID, "device %s: %s of [%p, +%zu) is outside every reservation", dev_name, op,
                        addr, bytes);
    if (!vr__vm_all(vs, *r, (uintptr_t)addr, bytes, false))
        return vr_error(VR_ERR_INVALID, "device %s: %s of [%p, +%zu) overlaps mapped memory", dev_name, op, addr,
                        bytes);
    return VR_OK;
}

void vr__vm_remove(vr_vmspace *vs, vr_vm_range *r)
{
    size_t i = (size_t)(r - vs->r);
    free(r->bits);
    memmove(&vs->r[i], &vs->r[i + 1], (vs->n - i - 1) * sizeof *vs->r);
    vs->n--;
}

void vr__vm_free(vr_vmspace *vs)
{
    for (size_t i = 0; i < vs->n; i++)
        free(vs->r[i].bits);
    free(vs->r);
    vs->r = NULL;
    vs->n = vs->cap = 0;
}
