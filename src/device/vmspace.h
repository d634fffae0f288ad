/* Inside the device layer: the reserved address ranges of the host backends
 * and which granules of each are mapped, so that vm calls can be checked. */
#ifndef VRAM_DEVICE_VMSPACE_H
#define VRAM_DEVICE_VMSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vram/status.h"

typedef struct vr_vm_range {
    uintptr_t base;
    size_t bytes;
    size_t mapped;      /* granules mapped now */
    uint64_t *bits;     /* one bit per granule, 1 = mapped */
} vr_vm_range;

typedef struct vr_vmspace {
    vr_vm_range *r;     /* sorted by base; ranges never overlap */
    size_t n, cap;
    size_t granule;
} vr_vmspace;

/* Records a new reservation; false when host memory runs out. */
bool vr__vm_add(vr_vmspace *vs, uintptr_t base, size_t bytes);
/* The reservation holding all of [addr, addr+bytes), or NULL. O(log n). */
vr_vm_range *vr__vm_find(vr_vmspace *vs, uintptr_t addr, size_t bytes);
/* True if every granule of [addr, addr+bytes) (inside r) is in state `mapped`. */
bool vr__vm_all(const vr_vmspace *vs, const vr_vm_range *r, uintptr_t addr, size_t bytes, bool mapped);
/* Sets every granule of [addr, addr+bytes) (inside r) to state `mapped`. */
void vr__vm_set(vr_vmspace *vs, vr_vm_range *r, uintptr_t addr, size_t bytes, bool mapped);
/* The reservation in *r where [addr, +bytes) is all unmapped, ready for `op`
 * ("vm map", "phys map") on device `dev_name`; VR_ERR_INVALID when it is
 * outside every reservation or overlaps mapped memory. */
vr_status vr__vm_check_map(vr_vmspace *vs, const char *dev_name, const char *op, void *addr, size_t bytes,
                           vr_vm_range **r);
/* Forgets reservation r (found with vr__vm_find). */
void vr__vm_remove(vr_vmspace *vs, vr_vm_range *r);
void vr__vm_free(vr_vmspace *vs);

#endif
