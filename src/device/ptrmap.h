/* Inside the device layer: live allocations of the host backends, address ->
 * size, so that frees can be checked (right pointer, right size) in O(1). */
#ifndef VRAM_DEVICE_PTRMAP_H
#define VRAM_DEVICE_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vr_ptrmap {
    uintptr_t *keys;   /* 0 = empty slot (no allocation lives at address 0) */
    uint64_t *sizes;
    size_t cap;        /* slots, a power of two (0 before the first insert) */
    size_t count;      /* live entries */
} vr_ptrmap;

/* Adds key -> size; false when host memory for the table runs out. */
bool vr__ptrmap_put(vr_ptrmap *m, uintptr_t key, uint64_t size);
/* Removes key and stores its size in *size; false if key is not there. */
bool vr__ptrmap_take(vr_ptrmap *m, uintptr_t key, uint64_t *size);
void vr__ptrmap_free(vr_ptrmap *m);

#endif
