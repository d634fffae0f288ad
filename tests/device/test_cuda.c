/* The cuda device. Without a GPU (or in a build without CUDA) opening it must
 * fail cleanly with a one-line reason; with one, allocations, virtual memory
 * and events are checked against the GPU's own figures. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "device_test.h"
#include "vram/util.h"

#ifdef VRAM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static uint64_t vr__round_up_test(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

static int have_gpu(void)
{
    int n = 0;
    return vr_cuda_device_count(&n) == VR_OK && n > 0;
}

static void one_line_error(void)
{
    const char *msg = vr_last_error();
    assert_true(strlen(msg) > 10);
    assert_null(strchr(msg, '\n'));
    print_message("    (%s)\n", msg);
}

static void fails_cleanly_without_a_gpu(void **state)
{
    (void)state;
    if (have_gpu())
        skip();
    vr_device *dev = (vr_device *)1;
    vr_status st = vr_device_open("cuda", &dev);
    assert_true(st == VR_ERR_DEVICE || st == VR_ERR_UNSUPPORTED);
    assert_null(dev);
    one_line_error();
    assert_non_null(strstr(vr_last_error(), "cuda"));
    assert_int_not_equal(vr_device_open("cuda:1", &dev), VR_OK);
    one_line_error();

    int n = 7;
    assert_int_not_equal(vr_cuda_device_count(&n), VR_OK);
    assert_int_equal(n, 0);
    one_line_error();
    vr_cuda_info info;
    assert_int_not_equal(vr_cuda_device_info(0, &info), VR_OK);
    uint64_t cost = 1;
    assert_int_not_equal(vr_cuda_context_cost(0, &cost), VR_OK);
    assert_true(cost == 0);
    size_t stack = 1;
    assert_true(vr_cuda_stack_growth(0, &stack) == 0 && stack == 0);
}

static void index_out_of_range_is_an_error(void **state)
{
    (void)state;
    if (!have_gpu())
        skip();
    vr_device *dev;
    assert_int_not_equal(vr_device_open("cuda:1023", &dev), VR_OK);
    one_line_error();
    assert_non_null(strstr(vr_last_error(), "cuda:1023"));
}

static void allocates_and_counts_bytes(void **state)
{
    (void)state;
    if (!have_gpu())
        skip();
    uint64_t cost = 0;
    if (vr_cuda_context_cost(0, &cost) == VR_OK)
        print_message("    context cost %.1f MiB\n", (double)cost / (1 << 20));
    else
        print_message("    context cost unknown: %s\n", vr_last_error());
    vr_device *dev = open_or_fail("cuda:0");
    assert_int_equal(vr_device_kind_of(dev), VR_DEVICE_CUDA);
    assert_int_equal(vr_device_index(dev), 0);
    assert_non_null(strstr(vr_device_name(dev), "cuda:0"));

    vr_cuda_info before, after;
    assert_int_equal(vr_cuda_device_info(0, &before), VR_OK);
    vr_device_mem m0, m1;
    assert_int_equal(vr_device_mem_info(dev, &m0), VR_OK);
    assert_true(m0.total > VR_GiB && m0.free <= m0.total);
    assert_true(m0.used_by_us == 0);

    void *p;
    assert_int_equal(vr_device_malloc(dev, 256 * VR_MiB, &p), VR_OK);
    assert_true((uintptr_t)p % 512 == 0);
#ifdef VRAM_HAVE_CUDA
    assert_int_equal(cudaMemset(p, 0, 256 * VR_MiB), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
#endif
    assert_int_equal(vr_device_mem_info(dev, &m1), VR_OK);
    assert_true(m1.used_by_us == 256 * VR_MiB);
    assert_true(vr_device_used_by_us(dev) == 256 * VR_MiB); /* the books alone, as mem_info */
    assert_true(m1.free <= m0.free - 256 * VR_MiB);
    assert_int_equal(vr_cuda_device_info(0, &after), VR_OK);
    if (before.have_nvml && after.used_by_process >= 0) {
        print_message("    NVML: this process uses %.1f MiB\n", (double)after.used_by_process / (1 << 20));
        assert_true(after.used_by_process >= before.used_by_process + (int64_t)(256 * VR_MiB));
    }
    vr_device_free(dev, p, 256 * VR_MiB);
    assert_int_equal(vr_device_mem_info(dev, &m1), VR_OK);
    assert_true(m1.used_by_us == 0);
    assert_true(vr_device_used_by_us(dev) == 0);

    void *q = (void *)1;
    assert_int_equal(vr_device_malloc(dev, (size_t)(m0.total + VR_GiB), &q), VR_ERR_OOM);
    assert_null(q);
    assert_non_null(strstr(vr_last_error(), "out of memory"));
#ifdef VRAM_HAVE_CUDA
    assert_int_equal(cudaGetLastError(), cudaSuccess);  /* the failed cudaMalloc was cleared */
#endif
    assert_int_equal(vr_device_malloc(dev, VR_MiB, &q), VR_OK);
    vr_device_free(dev, q, VR_MiB);
    vr_device_close(dev);
}

/* A context vram creates gets a per-thread stack of VR_CUDA_STACK_BYTES (the driver's default, 1 KiB a thread,
 * holds 264 MiB on an H100); a kernel needing more grows it, and vr_cuda_stack_growth says by exactly the bytes the
 * driver added (cudaMemGetInfo's used). */
static void trims_the_stack_and_counts_its_growth(void **state)
{
    (void)state;
    if (!have_gpu())
        skip();
#ifdef VRAM_HAVE_CUDA
    uint64_t cost = 0;
    vr_cuda_context_cost(0, &cost);
    size_t stack = 0, limit = 0;
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
    assert_int_equal(cudaDeviceGetLimit(&limit, cudaLimitStackSize), cudaSuccess);
    assert_int_equal(limit, VR_CUDA_STACK_BYTES);
    assert_true(vr_cuda_stack_growth(0, &stack) == 0);
    assert_int_equal(stack, VR_CUDA_STACK_BYTES);
    size_t f0, f1, t;
    assert_int_equal(cudaMemGetInfo(&f0, &t), cudaSuccess);
    assert_int_equal(cudaDeviceSetLimit(cudaLimitStackSize, 1024), cudaSuccess); /* as a kernel needing 1 KiB */
    assert_int_equal(cudaMemGetInfo(&f1, &t), cudaSuccess);
    uint64_t grown = vr_cuda_stack_growth(0, &stack);
    print_message("    stack 1024 bytes a thread: +%.1f MiB (driver), %.1f MiB (vr_cuda_stack_growth)\n",
                  (double)(f0 - f1) / (1 << 20), (double)grown / (1 << 20));
    assert_int_equal(stack, 1024);
    assert_true(grown == (uint64_t)(f0 - f1) && grown > 100 * VR_MiB);
    assert_int_equal(cudaDeviceSetLimit(cudaLimitStackSize, VR_CUDA_STACK_BYTES), cudaSuccess);
    assert_int_equal(cudaMemGetInfo(&f1, &t), cudaSuccess);
    assert_true(f1 == f0 && vr_cuda_stack_growth(0, &stack) == 0);
#endif
}

static void maps_virtual_memory(void **state)
{
    (void)state;
    if (!have_gpu())
        skip();
    vr_device *dev = open_or_fail("cuda:0");
    size_t g = vr_device_vm_granularity(dev);
    if (g == 0) {
        vr_device_close(dev);
        skip();
    }
    void *base;
    assert_int_equal(vr_device_vm_reserve(dev, 64 * g, &base), VR_OK);
    assert_true((uintptr_t)base % g == 0);
    char *p = base;
    assert_int_equal(vr_device_vm_map(dev, p, 8 * g), VR_OK);
#ifdef VRAM_HAVE_CUDA
    assert_int_equal(cudaMemset(p, 1, 8 * g), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
#endif
    vr_device_mem m;
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 8 * g);
    vr_device_vm_unmap(dev, p + 2 * g, 3 * g);  /* the middle of one map call */
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 5 * g);
    assert_int_equal(vr_device_vm_map(dev, p + 2 * g, 3 * g), VR_OK);
    assert_int_equal(vr_device_vm_map(dev, p + 3 * g, g), VR_ERR_INVALID);
#ifdef VRAM_HAVE_CUDA
    assert_int_equal(cudaMemset(p, 2, 8 * g), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
#endif
    vr_device_vm_unmap(dev, p, 8 * g);
    vr_device_vm_release(dev, base, 64 * g);
    assert_int_equal(vr_device_mem_info(dev, &m), VR_OK);
    assert_true(m.used_by_us == 0);

    /* Mapping more than the GPU has fails with VR_ERR_OOM and gives back
     * every granule it had mapped on the way. */
    size_t big = (size_t)vr__round_up_test(m.total + 2 * VR_GiB, g);
    assert_int_equal(vr_device_vm_reserve(dev, big, &base), VR_OK);
    assert_int_equal(vr_device_vm_map(dev, base, big), VR_ERR_OOM);
    print_message("    (%s)\n", vr_last_error());
    assert_non_null(strstr(vr_last_error(), "out of memory"));
    vr_device_mem m2;
    assert_int_equal(vr_device_mem_info(dev, &m2), VR_OK);
    assert_true(m2.used_by_us == 0);
    assert_true(m2.free + 64 * VR_MiB >= m.free);
    assert_int_equal(vr_device_vm_map(dev, base, g), VR_OK);  /* the range is usable still */
    vr_device_vm_unmap(dev, base, g);
    vr_device_vm_release(dev, base, big);
#ifdef VRAM_HAVE_CUDA
    assert_int_equal(cudaGetLastError(), cudaSuccess);
#endif
    vr_device_close(dev);
}

static void streams_and_events(void **state)
{
    (void)state;
    if (!have_gpu())
        skip();
    vr_device *dev = open_or_fail("cuda:0");
    vr_stream s;
    assert_int_equal(vr_stream_create(dev, &s), VR_OK);
    assert_true(s != 0);
    vr_event *ev;
    for (int i = 0; i < 3; i++) {  /* the second and third come from the pool */
        assert_int_equal(vr_event_record(dev, s, &ev), VR_OK);
        assert_int_equal(vr_event_sync(dev, ev), VR_OK);
    }
    assert_int_equal(vr_event_record(dev, 0, &ev), VR_OK);
    assert_int_equal(vr_device_synchronize(dev), VR_OK);
    assert_true(vr_event_query(dev, ev));
    vr_event_destroy(dev, ev);
    vr_stream_destroy(dev, s);
    vr_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fails_cleanly_without_a_gpu),
        cmocka_unit_test(index_out_of_range_is_an_error),
        cmocka_unit_test(allocates_and_counts_bytes),
        cmocka_unit_test(trims_the_stack_and_counts_its_growth),
        cmocka_unit_test(maps_virtual_memory),
        cmocka_unit_test(streams_and_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
