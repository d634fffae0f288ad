/* Inside the device layer: the bookkeeping of the host backends (cpu.c,
 * meta.c): bytes charged against a capacity, live allocations (ptrmap.c) and
 * reservations (vmspace.c), with the checks that their frees and vm calls
 * share. Call every function but vr__book_init/vr__book_free with the
 * device's lock held. */
#ifndef VRAM_DEVICE_HOST_BOOK_H
#define VRAM_DEVICE_HOST_BOOK_H

#include "device/device_impl.h"
#include "device/ptrmap.h"
#include "device/vmspace.h"

typedef struct vr_host_book {
    uint64_t capacity;  /* 0 = no cap */
    uint64_t used;      /* malloc'd (rounded) + mapped bytes (meta: + phys handles) */
    vr_ptrmap live;     /* address -> rounded size */
    vr_vmspace vm;      /* reservations, in granules of VR_DEVICE_GRANULE */
} vr_host_book;

/* An empty book with this capacity (0 = no cap). */
void vr__book_init(vr_host_book *b, uint64_t capacity);
/* Frees the tables (what is still live is the backend's to report). */
void vr__book_free(vr_host_book *b);

/* Counts `bytes` as used; VR_ERR_OOM ("<op> of <bytes>") when over the capacity. */
vr_status vr__book_charge(vr_device *dev, vr_host_book *b, const char *op, uint64_t bytes);
/* Forgets the live allocation ptr of `bytes` and uncharges its rounded size;
 * aborts (vr__device_misuse) when ptr is not live or was allocated with another size. */
void vr__book_untrack(vr_device *dev, vr_host_book *b, void *ptr, size_t bytes);

/* Marks the mapped, granule-aligned [addr, +bytes) unmapped and uncharges it; aborts when it is not. */
void vr__book_unmap(vr_device *dev, vr_host_book *b, void *addr, size_t bytes);
/* Forgets reservation [base, +bytes); aborts unless it is one with nothing mapped. */
void vr__book_release(vr_device *dev, vr_host_book *b, void *base, size_t bytes);

/* The vm_granularity op of the host backends: VR_DEVICE_GRANULE. */
size_t vr__host_vm_granularity(vr_device *dev);

#endif
