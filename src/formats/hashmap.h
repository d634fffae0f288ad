/* Inside the formats layer: open-addressing hash maps used by the tokenizer:
 * byte strings -> int32, and uint64 keys -> two int32 values. */
#ifndef VRAM_FORMATS_HASHMAP_H
#define VRAM_FORMATS_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct vr__strmap {
    char **keys;       /* owned copies, NULL = empty slot */
    size_t *lens;
    int32_t *vals;
    size_t cap, n;     /* cap is a power of two */
} vr__strmap;

/* Inserts or replaces key (len bytes) -> val; 0 on success, -1 out of memory. */
int vr__strmap_put(vr__strmap *m, const char *key, size_t len, int32_t val);
/* The value of key, or -1 when absent. */
int32_t vr__strmap_get(const vr__strmap *m, const char *key, size_t len);
void vr__strmap_free(vr__strmap *m);

typedef struct vr__pairmap {
    uint64_t *keys;    /* UINT64_MAX = empty slot */
    int32_t *a, *b;
    size_t cap, n;
} vr__pairmap;

/* Inserts key -> (a, b) unless key is present (the first insert wins); 0 or -1. */
int vr__pairmap_put(vr__pairmap *m, uint64_t key, int32_t a, int32_t b);
/* 1 and the values when key is present, else 0. */
int vr__pairmap_get(const vr__pairmap *m, uint64_t key, int32_t *a, int32_t *b);
void vr__pairmap_free(vr__pairmap *m);

#endif
