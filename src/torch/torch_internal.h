/* Inside libvram_torch: the per-device slots shared by core.c and info.c. */
#ifndef VRAM_TORCH_INTERNAL_H
#define VRAM_TORCH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "torch/guard.h"
#include "torch/vram_torch.h"
#include "vram/alloc.h"

typedef struct vt_slot {
    _Atomic(vr_alloc *) alloc;   /* set once, under vt_lock; never replaced */
    vr_device *dev;
    bool is_cuda;
    uint64_t total;              /* the device's memory, bytes */
    double fraction;             /* set by the memory fraction hook (fraction_set) */
    bool fraction_set;
    _Atomic uint64_t ns_malloc, ns_free;  /* host time inside vr_alloc_malloc / vr_alloc_free */
    _Atomic uint64_t n_malloc, n_free;
} vt_slot;

extern vt_slot vt_slots[VRAM_TORCH_MAX_DEVICES];
extern pthread_mutex_t vt_lock;

/* The allocator of device, or NULL (none yet, or out of range). */
vr_alloc *vt_get(int device);

/* Sets this thread's vram_torch_last_error(); returns -1. */
int vt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
