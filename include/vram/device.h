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
 * a point in a stream so that memory used there can be reused safely later.
 *
 * Conventions for every backend:
 *   - vr_device_malloc(dev, 0, &p) succeeds with p == NULL; freeing NULL is a no-op.
 *   - addresses are at least 512-byte aligned (vm ranges: granularity-aligned).
 *   - used_by_us counts malloc'd bytes rounded up to 512 plus vm-mapped bytes;
 *     a request fails with VR_ERR_OOM when used_by_us would exceed the capacity.
 *   - on cpu and meta, freeing/unmapping/releasing what was not handed out is a
 *     programming error: the device prints what happened and aborts (like a
 *     double free in libc), so allocator bugs surface at once in tests; cuda
 *     reports such a misuse on stderr and ignores it.
 *   - cpu and meta are thread-safe (one lock per device); cuda relies on the
 *     thread safety of the CUDA runtime. */
#ifndef VRAM_DEVICE_H
#define VRAM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

/* Capacity of "meta" when the spec names none: one 80 GiB H100/A100. */
#define VR_META_DEFAULT_CAPACITY ((uint64_t)80 << 30)

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

/* Opens a device from a spec: "cpu", "cpu:1GiB" (capacity cap), "meta"
 * (80 GiB), "meta:80GiB", "cuda" (= "cuda:0"), "cuda:1". Errors name the spec.
 * Opening cuda without a GPU or driver fails with VR_ERR_DEVICE (or
 * VR_ERR_UNSUPPORTED in a build without CUDA) and a one-line reason. */
vr_status vr_device_open(const char *spec, vr_device **out);

/* Releases the device; memory it still hands out must have been freed. */
void vr_device_close(vr_device *dev);

/* The backend kind, and a printable name such as "cuda:0 (NVIDIA H100 80GB HBM3)". */
vr_device_kind vr_device_kind_of(const vr_device *dev);
const char *vr_device_name(const vr_device *dev);

/* The CUDA device ordinal of a cuda device; -1 on cpu and meta. */
int vr_device_index(const vr_device *dev);

/* Total, free and our own used bytes. */
vr_status vr_device_mem_info(vr_device *dev, vr_device_mem *out);
/* Our own used bytes alone (mem_info's used_by_us), from the device's books: no call to the driver, so cheap
 * enough for every step and node. */
uint64_t vr_device_used_by_us(vr_device *dev);

/* One raw allocation from the device (a segment, in allocator terms).
 * Returns VR_ERR_OOM with a message when the device cannot provide it. */
vr_status vr_device_malloc(vr_device *dev, size_t bytes, void **ptr);

/* Returns a segment obtained from vr_device_malloc (bytes as asked). */
void vr_device_free(vr_device *dev, void *ptr, size_t bytes);

/* --- copies and fills (what an executor needs to move data in and out) ---
 * cpu: plain memcpy/memset; cuda: cudaMemcpy/cudaMemset on the default
 * stream, synchronous with respect to the host; meta has no bytes and
 * returns VR_ERR_UNSUPPORTED. Host pointers are ordinary process memory. */

typedef enum vr_copy_kind {
    VR_COPY_HOST_TO_DEVICE,
    VR_COPY_DEVICE_TO_HOST,
    VR_COPY_DEVICE_TO_DEVICE,
} vr_copy_kind;

/* Copies `bytes` from src to dst in the given direction (0 bytes is a no-op). */
vr_status vr_device_memcpy(vr_device *dev, void *dst, const void *src, size_t bytes, vr_copy_kind kind);

/* Sets `bytes` of device memory at dst to the byte `value`. */
vr_status vr_device_memset(vr_device *dev, void *dst, int value, size_t bytes);

/* Host memory that the device copies to and from asynchronously and at full speed: page-locked
 * (cudaHostAlloc) on cuda, 512-byte aligned ordinary memory on cpu and meta. Not counted in used_by_us
 * (it is not the device's). VR_ERR_OOM naming the bytes when the host cannot give it. */
vr_status vr_device_host_alloc(vr_device *dev, size_t bytes, void **ptr);
void vr_device_host_free(vr_device *dev, void *ptr);

/* The host's available memory (MemAvailable of /proc/meminfo), bytes; 0 when unknown. */
uint64_t vr_host_mem_available(void);

/* --- virtual memory (expandable segments) ---
 * All three backends support it. cpu reserves with mmap(PROT_NONE) and maps
 * with mprotect (unmap gives the pages back with madvise(MADV_DONTNEED));
 * meta only does the bookkeeping; cuda uses the driver's cuMemAddressReserve /
 * cuMemCreate / cuMemMap. Mapped bytes count against the capacity like
 * malloc'd ones. Any granule-aligned sub-range may be unmapped (cuda maps one
 * physical allocation per granule so that this holds there too). On cuda,
 * vm_unmap first waits for the whole device (cudaDeviceSynchronize), as
 * cudaFree does, since cuMemUnmap would not wait for kernels using the memory. */

/* Granularity of physical mappings in bytes (2 MiB on current GPUs and on
 * cpu/meta); 0 when the device cannot do virtual memory. */
size_t vr_device_vm_granularity(vr_device *dev);

/* Reserves `bytes` (a multiple of the granularity) of address space with no
 * memory behind it. */
vr_status vr_device_vm_reserve(vr_device *dev, size_t bytes, void **base);

/* Backs [addr, addr+bytes) of a reserved range with physical memory
 * (bytes a multiple of the granularity). VR_ERR_OOM when memory runs out. */
vr_status vr_device_vm_map(vr_device *dev, void *addr, size_t bytes);

/* Releases the physical memory behind [addr, addr+bytes). */
void vr_device_vm_unmap(vr_device *dev, void *addr, size_t bytes);

/* Returns a reserved range (all of it must be unmapped). */
void vr_device_vm_release(vr_device *dev, void *base, size_t bytes);

/* --- physical memory handles (what lets a policy map one physical page at
 * several addresses, like cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease) ---
 * A vr_phys is device memory with no address: created in bytes that are a
 * multiple of the granularity, counted against the capacity (and in
 * used_by_us) from create to release, and mapped into reserved ranges at any
 * number of granule-aligned addresses. Mapping a phys costs no capacity.
 * meta does the bookkeeping only; cuda uses cuMemCreate/cuMemMap/
 * cuMemSetAccess (unmap waits for the device first, as vm_unmap does); cpu
 * returns VR_ERR_UNSUPPORTED. A phys must be unmapped everywhere before it is
 * released. */
typedef struct vr_phys vr_phys;

/* Creates `bytes` (a positive multiple of the granularity) of physical memory.
 * VR_ERR_OOM when the capacity or the device refuses. */
vr_status vr_device_phys_create(vr_device *dev, size_t bytes, vr_phys **out);

/* Maps [offset, offset+bytes) of ph at addr, inside a reserved range whose
 * granules there are unmapped (addr, offset and bytes granule-aligned). */
vr_status vr_device_phys_map(vr_device *dev, void *addr, vr_phys *ph, size_t offset, size_t bytes);

/* Maps n phys handles of `each` bytes (a multiple of the granularity) side by side from addr (as n
 * vr_device_phys_map calls, all or none; cuda sets the access of the whole range once). */
vr_status vr_device_phys_map_granules(vr_device *dev, void *addr, vr_phys *const *phs, size_t n, size_t each);

/* Unmaps phys mappings covering [addr, addr+bytes) (granule-aligned; any number
 * of mappings, each entirely inside). */
void vr_device_phys_unmap(vr_device *dev, void *addr, size_t bytes);

/* vr_device_phys_unmap for a range no queued work can touch any more (an event recorded after its last
 * use has completed): cuda does not wait for the device first. */
void vr_device_phys_unmap_idle(vr_device *dev, void *addr, size_t bytes);

/* Gives the physical memory back (no mapping of it may remain). */
void vr_device_phys_release(vr_device *dev, vr_phys *ph);

/* --- what the device was asked to do (for measuring allocation policies) ---
 * Driver-level calls made so far, counted as CUDA makes them (meta counts the calls its emulation stands
 * for; cpu counts its vm calls the same way): a phys map of n granules side by side is n cuMemMap and one
 * cuMemSetAccess; an unmap is one cuMemUnmap per mapping, after one device-wide wait unless idle; a vm map
 * (expandable segments) of n granules is n cuMemCreate + cuMemMap + cuMemRelease and one cuMemSetAccess. */
typedef struct vr_device_calls {
    uint64_t vm_reserve, vm_release;     /* cuMemAddressReserve / cuMemAddressFree */
    uint64_t phys_create, phys_release;  /* cuMemCreate / cuMemRelease */
    uint64_t map, unmap;                 /* cuMemMap / cuMemUnmap */
    uint64_t set_access;                 /* cuMemSetAccess */
    uint64_t device_sync;                /* device-wide waits before an unmap (cudaDeviceSynchronize) */
    uint64_t malloc, free;               /* cudaMalloc / cudaFree */
    uint64_t event_record, event_query, event_sync;
} vr_device_calls;

/* The counts so far (all zero at open). */
void vr_device_get_calls(vr_device *dev, vr_device_calls *out);

/* Their sum over the virtual-memory calls (vm_reserve through device_sync, malloc and free): what an
 * allocator costs the driver, as one number. */
uint64_t vr_device_calls_vm_total(const vr_device_calls *c);

/* --- streams and events --- */

/* Creates a new stream (on cpu/meta a distinct id; work there is synchronous;
 * on cuda a non-blocking cudaStream_t cast to vr_stream). */
vr_status vr_stream_create(vr_device *dev, vr_stream *out);
void vr_stream_destroy(vr_device *dev, vr_stream s);

/* Records an event at the current end of stream s. */
vr_status vr_event_record(vr_device *dev, vr_stream s, vr_event **out);

/* True once all work before the event has completed. */
bool vr_event_query(vr_device *dev, vr_event *ev);

/* Waits for the event, then frees it. vr_event_destroy frees without waiting. */
vr_status vr_event_sync(vr_device *dev, vr_event *ev);
void vr_event_destroy(vr_device *dev, vr_event *ev);

/* Waits until all work on the device has completed (on cpu/meta in manual
 * mode: completes every event recorded so far). vr_event_sync in manual mode
 * likewise completes its event and every event recorded before it. */
vr_status vr_device_synchronize(vr_device *dev);

/* Makes dev the calling thread's current device (cuda: cudaSetDevice when another is current; nothing on
 * cpu/meta). Whatever is queued on the CUDA runtime's current device (kernels, streams, cuBLAS handles) goes
 * there, so code that queues work on dev calls it first: a thread other than the one that opened dev, and
 * any caller in a process with two GPUs. The executor calls it when it creates its streams and handles and at
 * the start of every step (vr_exec_create, vr_exec_step); the device's own calls (copies, allocations) do. */
vr_status vr_device_use(vr_device *dev);

/* --- test hooks for cpu/meta --- */

/* On cpu/meta, events normally complete at once. With manual completion on,
 * recorded events stay pending until vr_device_complete_events() is called,
 * so deferred-free paths are testable without a GPU. No-op on cuda. */
void vr_device_set_manual_events(vr_device *dev, bool manual);
void vr_device_complete_events(vr_device *dev);

/* --- CUDA devices (without a GPU these fail with a one-line reason) --- */

/* What `vram info` shows about one GPU. Figures NVML cannot give are 0 / -1. */
typedef struct vr_cuda_info {
    int index;                  /* CUDA device ordinal */
    char name[256];             /* "NVIDIA H100 80GB HBM3" */
    char pci_bus_id[32];        /* "0000:65:00.0" */
    uint64_t total;             /* device memory, bytes */
    uint64_t free;              /* device-wide free bytes (NVML, else cudaMemGetInfo) */
    uint64_t used;              /* device-wide used bytes, all processes */
    uint64_t reserved;          /* held by driver/firmware, not in used (NVML v2; 0 = unknown) */
    int64_t used_by_process;    /* this process's bytes on the device (NVML), -1 unknown */
    bool have_nvml;             /* NVML figures were available */
    char driver_version[80];    /* NVML driver version, "550.54.15" ("" without NVML) */
    int driver_cuda_version;    /* cudaDriverGetVersion, 12040 = 12.4 */
    int runtime_version;        /* cudaRuntimeGetVersion, 13000 = 13.0 */
    int cc_major, cc_minor;     /* compute capability */
    int sm_count;               /* streaming multiprocessors */
    bool vm_supported;          /* virtual memory management (expandable segments) */
    size_t vm_granularity;      /* minimum physical mapping granularity, bytes */
} vr_cuda_info;

/* The CUDA runtime version vram was built with (13000 = 13.0); 0 without CUDA. */
int vr_cuda_runtime_version(void);

/* Number of CUDA devices; with none (no driver, no GPU, CUDA-less build)
 * returns an error whose message says why, and *count = 0. */
vr_status vr_cuda_device_count(int *count);

/* Fills *out for device `index`. free/used come from NVML; without NVML from
 * cudaMemGetInfo, which creates the CUDA context (so call
 * vr_cuda_context_cost first if you want both). */
vr_status vr_cuda_device_info(int index, vr_cuda_info *out);

/* Device memory the CUDA context of device `index` costs this process, bytes:
 * NVML's used memory (this process's, else the device's) right before and
 * right after the primary context is created (cudaSetDevice + cudaFree(0)).
 * Measured once, when this process first creates that context (here, or in
 * vr_device_open), and cached; VR_ERR_UNSUPPORTED without NVML or when the
 * context already existed unmeasured. Kernels loaded lazily later cost more. */
vr_status vr_cuda_context_cost(int index, uint64_t *bytes);

/* The per-thread stack vram gives a CUDA context it creates (cudaLimitStackSize), bytes. The driver reserves
 * local memory for that stack on every thread the GPU can hold at once: 1 KiB a thread by default, 264 MiB on
 * an H100. vram's kernels use at most 32 bytes, cuDNN's attention 48 and cuBLAS's fp32 products 128; a kernel
 * that needs more makes the driver grow the reservation at its launch and keep it (vr_cuda_stack_growth). */
#define VR_CUDA_STACK_BYTES 128

/* The CUDA context set aside where no GPU can be measured (MiB): vram's own on an H100 80GB HBM3 with
 * VR_CUDA_STACK_BYTES (driver 580, CUDA 13.0: 299,892,736 bytes by NVML). */
#define VR_CUDA_CONTEXT_ESTIMATE_MIB 286
#define VR_CUDA_CONTEXT_ESTIMATE ((uint64_t)VR_CUDA_CONTEXT_ESTIMATE_MIB << 20)

/* Device memory the driver added to the context of device `index` after vram measured it, bytes: a kernel
 * that needed a stack above VR_CUDA_STACK_BYTES (*stack: the stack a thread now has). 0, and *stack 0, where
 * vram did not create that context (or without CUDA). */
uint64_t vr_cuda_stack_growth(int index, size_t *stack);

/* ------------------------------------------------------------ vram watch
 * Device-wide figures of every NVIDIA GPU through NVML (loaded at run time), as
 * nvidia-smi shows them. VR_ERR_UNSUPPORTED with NVML's reason where there is none. */
#define VR_GPU_MAX_PROCS 64
typedef struct vr_gpu_sample {
    int index;
    char name[96];
    uint64_t total, used;          /* bytes, device-wide */
    int util_gpu, util_memory;     /* % of the last sample period; -1 unknown */
    int temperature_c;             /* -1 unknown */
    double power_w;                /* -1 unknown */
    int n_procs;                   /* compute processes listed */
    unsigned pids[VR_GPU_MAX_PROCS];
    int64_t proc_used[VR_GPU_MAX_PROCS]; /* bytes; -1 not reported */
} vr_gpu_sample;

/* The number of GPUs NVML sees. */
vr_status vr_gpu_count(int *n);

/* One sample of GPU index. */
vr_status vr_gpu_sample_get(int index, vr_gpu_sample *out);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
