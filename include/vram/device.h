/* vram — devices: where bytes live.
 *
 * One small interface over three backends:
 *   cpu   host memory, with an optional capacity so that out-of-memory paths
 *         are testable anywhere;
 *   meta  address space only: hands out addresses and never touches memory,
 *         so an 80 GiB GPU can be simulated on a laptop;
 *   cuda  an NVIDIA GPU through the CUDA runtime/driver API (streams, events,
 *         virtual memory), with NVML loaded at run time for device-wide figures.
 *
 * The caching allocator (vram/alloc.h) sits on top of any of them and asks
 * only for whole segments through vr_device_malloc / vr_device_free, or, for
 * expandable segments, for an address range it maps physical granules into.
 * Streams are opaque handles (vr_stream, 0 = the default stream); events mark
 * a point in a stream so that memory used there can be reused safely later. */
#ifndef VRAM_DEVICE_H
#define VRAM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vram/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vr_device_kind { VR_DEVICE_CPU, VR_DEVICE_META, VR_DEVICE_CUDA } vr_device_kind;

typedef struct vr_device vr_device;
typedef uintptr_t vr_stream;          /* 0 is the default stream */
typedef struct vr_event vr_event;

/* Memory figures of one device, in bytes. */
typedef struct vr_device_mem {
    uint64_t total;          /* capacity of the device (or the configured cap) */
    uint64_t free;           /* what the device could still hand out now */
    uint64_t used_by_us;     /* bytes this process has allocated through this vr_device */
} vr_device_mem;

/* Opens a device from a spec: "cpu", "cpu:1GiB" (capacity cap), "meta",
 * "meta:80GiB", "cuda", "cuda:1". Errors name the spec. */
vr_status vr_device_open(const char *spec, vr_device **out);

/* Releases the device; memory it still hands out must have been freed. */
void vr_device_close(vr_device *dev);

/* The backend kind, and a printable name such as "cuda:0 (NVIDIA H100 80GB HBM3)". */
vr_device_kind vr_device_kind_of(const vr_device *dev);
const char *vr_device_name(const vr_device *dev);

/* Total, free and our own used bytes. */
vr_status vr_device_mem_info(vr_device *dev, vr_device_mem *out);

/* One raw allocation from the device (a segment, in allocator terms).
 * Returns VR_ERR_OOM with a message when the device cannot provide it. */
vr_status vr_device_malloc(vr_device *dev, size_t bytes, void **ptr);

/* Returns a segment obtained from vr_device_malloc (bytes as asked). */
void vr_device_free(vr_device *dev, void *ptr, size_t bytes);

/* --- virtual memory (expandable segments); VR_ERR_UNSUPPORTED on cpu --- */

/* Granularity of physical mappings in bytes (2 MiB on current GPUs). */
size_t vr_device_vm_granularity(vr_device *dev);

/* Reserves `bytes` of address space with no memory behind it. */
vr_status vr_device_vm_reserve(vr_device *dev, size_t bytes, void **base);

/* Backs [addr, addr+bytes) of a reserved range with physical memory
 * (bytes a multiple of the granularity). VR_ERR_OOM when memory runs out. */
vr_status vr_device_vm_map(vr_device *dev, void *addr, size_t bytes);

/* Releases the physical memory behind [addr, addr+bytes). */
void vr_device_vm_unmap(vr_device *dev, void *addr, size_t bytes);

/* Returns a reserved range (all of it must be unmapped). */
void vr_device_vm_release(vr_device *dev, void *base, size_t bytes);

/* --- streams and events --- */

/* Creates a new stream (on cpu/meta a distinct id; work there is synchronous). */
vr_status vr_stream_create(vr_device *dev, vr_stream *out);
void vr_stream_destroy(vr_device *dev, vr_stream s);

/* Records an event at the current end of stream s. */
vr_status vr_event_record(vr_device *dev, vr_stream s, vr_event **out);

/* True once all work before the event has completed. */
bool vr_event_query(vr_device *dev, vr_event *ev);

/* Waits for the event, then frees it. vr_event_destroy frees without waiting. */
vr_status vr_event_sync(vr_device *dev, vr_event *ev);
void vr_event_destroy(vr_device *dev, vr_event *ev);

/* Waits until all work on the device has completed. */
vr_status vr_device_synchronize(vr_device *dev);

/* --- test hooks for cpu/meta --- */

/* On cpu/meta, events normally complete at once. With manual completion on,
 * recorded events stay pending until vr_device_complete_events() is called,
 * so deferred-free paths are testable without a GPU. No-op on cuda. */
void vr_device_set_manual_events(vr_device *dev, bool manual);
void vr_device_complete_events(vr_device *dev);

#ifdef __cplusplus
}
#endif
#endif
