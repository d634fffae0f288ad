/* Open-addressing hash map (linear probing, backward-shift deletion) from an
 * address to its allocation size. Grows at half load, so every operation is
 * O(1) on average. */
#include "device/ptrmap.h"

#include <stdlib.h>

static size_t slot_of(uintptr_t key, size_t cap)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;  /* Fibonacci hashing */
    return (size_t)(h >> 20) & (cap - 1);
}

static bool grow(vr_ptrmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    uintptr_t *keys = calloc(ncap, sizeof *keys);
    uint64_t *sizes = malloc(ncap * sizeof *sizes);
    if (!keys || !sizes) {
        free(keys);
        free(sizes);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = slot_of(m->keys[i], ncap);
        while (keys[j])
            j = (j + 1) & (ncap - 1);
        keys[j] = m->keys[i];
        sizes[j] = m->sizes[i];
    }
    free(m->keys);
    free(m->sizes);
    m->keys = keys;
    m->sizes = sizes;
    m->cap = ncap;
    return true;
}

bool vr__ptrmap_put(vr_ptrmap *m, uintptr_t key, uint64_t size)
{
    if ((m->count + 1) * 2 > m->cap && !grow(m))
        return false;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->count++;
    m->keys[i] = key;
    m->sizes[i] = size;
    return true;
}

bool vr__ptrmap_take(vr_ptrmap *m, uintptr_t key, uint64_t *size)
{
    if (!m->cap || !key)
        return false;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    while (m->keys[i] != key) {
        if (!m->keys[i])
            return false;
        i = (i + 1) & mask;
    }
    *size = m->sizes[i];
    /* Backward shift: move later entries of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        /* Entry j may move to the hole if its home is not in (hole, j]. */
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            m->keys[hole] = m->keys[j];
            m->sizes[hole] = m->sizes[j];
            hole = j;
        }
    }
    m->keys[hole] = 0;
    m->count--;
    return true;
}

void vr__ptrmap_free(vr_ptrmap *m)
{
    free(m->keys);
    free(m->sizes);
    *m = (vr_ptrmap){0};
}
