/* vram_torch — vram's caching allocator inside PyTorch (libvram_torch.so).
 *
 * PyTorch loads an allocator from a shared library with
 *   torch.cuda.memory.CUDAPluggableAllocator(path, "vram_torch_malloc", "vram_torch_free")
 * and, on the object it returns (`._allocator`), takes optional hooks as function addresses:
 * set_reset_fn (empty_cache), set_memory_fraction_fn, set_record_stream_fn, set_base_alloc_fn,
 * set_init_fn. python/vram_torch does all of that (python/vram_torch/README.md: use, what is not
 * supported). This header is the whole interface of the library: every function it exports is here
 * and starts with vram_torch_ (src/torch/vram_torch.map; test torch/exports).
 *
 * One vr_alloc per device index, created on the device's first allocation with the policy, memory
 * fraction and history set by vram_torch_configure (default: "stitch", no fraction, no history).
 * Streams are PyTorch's cudaStream_t handles, used as vr_stream: a block freed on stream S is reused on
 * S; record_stream makes its free wait for events recorded on the other streams (vr_alloc). Every
 * function is thread-safe; the calling thread's current CUDA device is the same after each call as
 * before (the device layer switches devices as it needs; src/torch/guard_cuda.c puts it back).
 *
 * Errors: vram_torch_try_malloc returns NULL and vram_torch_last_error() says why (thread-local);
 * vram_torch_malloc, the function PyTorch calls, throws that message as a C++ std::runtime_error,
 * which is how a pluggable allocator reports a failure to PyTorch (it does not check for NULL).
 * An out-of-memory message starts with "CUDA out of memory." and holds vram's explanation; the last
 * one of the process is kept for vram_torch_last_oom(). Allocation during CUDA graph capture is
 * refused (vram_torch_try_malloc fails naming it): vram has no private graph pools. */
#ifndef VRAM_TORCH_H
#define VRAM_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define VRAM_TORCH_API __attribute__((visibility("default")))
#else
#define VRAM_TORCH_API
#endif

/* Device indices served (a PyTorch process sees at most this many GPUs). */
#define VRAM_TORCH_MAX_DEVICES 64

/* ---------------------------------------------------------------- PyTorch's hooks */

/* alloc_fn: `size` bytes on `device` for use on `stream` (a cudaStream_t). Throws std::runtime_error
 * on failure (defined in entry.cu, CUDA builds only). */
VRAM_TORCH_API void *vram_torch_malloc(ssize_t size, int device, void *stream);
/* free_fn: returns ptr to its device's cache (size and stream are PyTorch's record of the allocation;
 * the block's own stream is vram's). An unknown pointer is reported on stderr. */
VRAM_TORCH_API void vram_torch_free(void *ptr, ssize_t size, int device, void *stream);
/* init_fn (PyTorch calls it before Python can set it; kept for completeness). */
VRAM_TORCH_API void vram_torch_init(int device_count);
/* reset_fn = torch.cuda.empty_cache(): every device's cached segments go back to the device. */
VRAM_TORCH_API void vram_torch_empty_cache(void);
/* memory_fraction_fn = torch.cuda.set_per_process_memory_fraction(fraction, device). */
VRAM_TORCH_API void vram_torch_memory_fraction(double fraction, int device);
/* record_stream_fn = Tensor.record_stream(stream): the block's free waits for stream's work. */
VRAM_TORCH_API void vram_torch_record_stream(void *ptr, void *stream);
/* base_alloc_fn: every vram block is its own allocation to PyTorch: returns ptr, *size = its size. */
VRAM_TORCH_API void *vram_torch_base_alloc(void *ptr, size_t *size);

/* ---------------------------------------------------------------- the rest, for python/vram_torch */

/* Sets what allocators created from now on use: policy ("pytorch", "expandable", "stitch"; NULL or ""
 * keeps the current one), memory fraction (0 = none), history ring entries (0 = off), and the device
 * spec with one %d for the index (NULL or "" = "cuda:%d"; tests use "meta:8GiB" and fake streams).
 * 0, or -1 with vram_torch_last_error() when an allocator exists already or a value is invalid. */
VRAM_TORCH_API int vram_torch_configure(const char *policy, double fraction, size_t history,
                                        const char *device_spec);
/* vram_torch_malloc without the throw: NULL on failure (and for size 0). */
VRAM_TORCH_API void *vram_torch_try_malloc(ssize_t size, int device, void *stream);
/* This thread's last error; the process's last out-of-memory message ("" when none). */
VRAM_TORCH_API const char *vram_torch_last_error(void);
VRAM_TORCH_API const char *vram_torch_last_oom(void);
/* The policy configured, and whether device has an allocator yet. */
VRAM_TORCH_API const char *vram_torch_policy(void);
VRAM_TORCH_API int vram_torch_device_active(int device);

/* Policy stitch, allocators created from now on: lend a request of a new size an idle or cached mapping up
 * to pct percent larger (vr_alloc_config.stitch_lend_pct; 0: never; libvram_torch's default 100). */
VRAM_TORCH_API void vram_torch_set_stitch_lend(unsigned pct);

/* Policy stitch, allocators created from now on: physical allocations of this many bytes (rounded up to a
 * multiple of the GPU's granularity; 0: the granularity, 2 MiB; libvram_torch's default 8 MiB;
 * vr_alloc_config.stitch_granule). */
VRAM_TORCH_API void vram_torch_set_stitch_granule(size_t bytes);

/* Whether malloc and free measure the host time inside them (vram_torch_costs_json's malloc_ns, free_ns;
 * off by default: two clock reads a call). */
VRAM_TORCH_API void vram_torch_set_timing(int on);

/* Statistics of a device as JSON, vr_alloc_stats' field names (= PyTorch's: "allocation",
 * "allocated_bytes", ... each [all, small, large] of {current, peak, allocated, freed}; the counters);
 * a device without an allocator gives zeros. Free with vram_torch_free_string. */
VRAM_TORCH_API char *vram_torch_stats_json(int device);
/* What the allocator of device has cost so far, as JSON: malloc/free calls and the host nanoseconds spent
 * inside them, and the driver calls the device layer made (vr_device_calls' fields). NULL: no allocator. */
VRAM_TORCH_API char *vram_torch_costs_json(int device);
/* vr_alloc_snapshot_json of a device ("device" fields set to it); NULL without an allocator. */
VRAM_TORCH_API char *vram_torch_snapshot_json(int device);
/* vr_alloc_summary of a device; NULL without an allocator. */
VRAM_TORCH_API char *vram_torch_summary(int device);
VRAM_TORCH_API void vram_torch_free_string(char *s);
/* Writes the snapshot JSON of a device (crash-safe). 0, or -1 with vram_torch_last_error(). */
VRAM_TORCH_API int vram_torch_write_snapshot(int device, const char *path);
/* device < 0: every device. */
VRAM_TORCH_API void vram_torch_reset_peak(int device);
VRAM_TORCH_API void vram_torch_reset_accumulated(int device);
/* Starts (entries > 0) or stops the history ring on every device, now and for devices to come. */
VRAM_TORCH_API void vram_torch_record_history(size_t entries);
/* vr_alloc_check on a device's allocator: 0, or -1 with the violation. For tests. */
VRAM_TORCH_API int vram_torch_check(int device);

#ifdef __cplusplus
}
#endif
#endif
