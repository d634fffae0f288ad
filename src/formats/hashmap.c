/* Open addressing with linear probing, grown at 1/2 load; FNV-1a for strings,
 * a 64-bit mix for integer keys. */
#include "formats/hashmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int strmap_grow(vr__strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    vr__strmap g = {calloc(cap, sizeof(char *)), calloc(cap, sizeof(size_t)), calloc(cap, sizeof(int32_t)), cap, 0};
    if (!g.keys || !g.lens || !g.vals) {
        free(g.keys);
        free(g.lens);
        free(g.vals);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = hash_bytes(m->keys[i], m->lens[i]) & (cap - 1);
        while (g.keys[j]) j = (j + 1) & (cap - 1);
        g.keys[j] = m->keys[i];
        g.lens[j] = m->lens[i];
        g.vals[j] = m->vals[i];
        g.n++;
    }
    free(m->keys);
    free(m->lens);
    free(m->vals);
    *m = g;
    return 0;
}

int vr__strmap_put(vr__strmap *m, const char *key, size_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m) != 0) return -1;
    size_t j = hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[j]) {
        if (m->lens[j] == len && !memcmp(m->keys[j], key, len)) {
            m->vals[j] = val;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    char *k = malloc(len + 1);
    if (!k) return -1;
    memcpy(k, key, len);
    k[len] = 0;
    m->keys[j] = k;
    m->lens[j] = len;
    m->vals[j] = val;
    m->n++;
    return 0;
}

int32_t vr__strmap_get(const vr__strmap *m, const char *key, size_t len)
{
    if (!m->cap) return -1;
    size_t j = hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[j]) {
        if (m->lens[j] == len && !memcmp(m->keys[j], key, len)) return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void vr__strmap_free(vr__strmap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int pairmap_grow(vr__pairmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    vr__pairmap g = {malloc(cap * sizeof(uint64_t)), malloc(cap * sizeof(int32_t)), malloc(cap * sizeof(int32_t)),
                     cap, 0};
    if (!g.keys || !g.a || !g.b) {
        free(g.keys);
        free(g.a);
        free(g.b);
        return -1;
    }
    memset(g.keys, 0xff, cap * sizeof(uint64_t));
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == UINT64_MAX) continue;
        size_t j = hash_u64(m->keys[i]) & (cap - 1);
        while (g.keys[j] != UINT64_MAX) j = (j + 1) & (cap - 1);
        g.keys[j] = m->keys[i];
        g.a[j] = m->a[i];
        g.b[j] = m->b[i];
        g.n++;
    }
    free(m->keys);
    free(m->a);
    free(m->b);
    *m = g;
    return 0;
}

int vr__pairmap_put(vr__pairmap *m, uint64_t key, int32_t a, int32_t b)
{
    if ((m->n + 1) * 2 > m->cap && pairmap_grow(m) != 0) return -1;
    size_t j = hash_u64(key) & (m->cap - 1);
    while (m->keys[j] != UINT64_MAX) {
        if (m->keys[j] == key) return 0;
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->a[j] = a;
    m->b[j] = b;
    m->n++;
    return 0;
}

int vr__pairmap_get(const vr__pairmap *m, uint64_t key, int32_t *a, int32_t *b)
{
    if (!m->cap) return 0;
    size_t j = hash_u64(key) & (m->cap - 1);
    while (m->keys[j] != UINT64_MAX) {
        if (m->keys[j] == key) {
            *a = m->a[j];
            *b = m->b[j];
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void vr__pairmap_free(vr__pairmap *m)
{
    free(m->keys);
    free(m->a);
    free(m->b);
    memset(m, 0, sizeof *m);
}
