/* Inside the device layer: NVML, loaded with dlopen at run time so that vram
 * starts on machines without an NVIDIA driver. Device-wide memory figures and
 * this process's share of a GPU, which the CUDA runtime cannot give. */
#ifndef VRAM_DEVICE_NVML_H
#define VRAM_DEVICE_NVML_H

#include <stddef.h>
#include <stdint.h>

#include "vram/device.h"
#include "vram/status.h"

typedef struct vr_nvml_mem {
    uint64_t total, free, used;   /* device-wide */
    uint64_t reserved;            /* by the driver and firmware, not in used (0 when unknown:
                                     then used includes it) */
} vr_nvml_mem;

/* Loads libnvidia-ml.so.1 and initialises it, once per process; afterwards
 * returns the same result. On failure the message says why. */
vr_status vr__nvml_init(void);

/* The NVML handle of the GPU at a PCI bus id ("0000:65:00.0"). */
vr_status vr__nvml_device(const char *pci_bus_id, void **handle);

vr_status vr__nvml_memory(void *handle, vr_nvml_mem *out);

/* Device memory used by process `pid` on the GPU; *bytes = -1 when NVML does
 * not list the process (no context there yet, or another pid namespace). */
vr_status vr__nvml_process_used(void *handle, unsigned pid, int64_t *bytes);

/* Up to cap compute processes on the GPU (pid, bytes; -1 when not reported). */
vr_status vr__nvml_processes(void *handle, unsigned *pids, int64_t *bytes, int cap, int *n);

/* GPUs NVML sees, and one sample of GPU index (vram watch; vram/device.h). */
vr_status vr__nvml_count(int *n);
vr_status vr__nvml_sample(int index, vr_gpu_sample *out);

/* The driver version string, "550.54.15". */
vr_status vr__nvml_driver_version(char *buf, size_t cap);

#endif
