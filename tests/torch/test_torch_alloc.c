/* libvram_torch's entry points (src/torch/vram_torch.h) on meta devices, as PyTorch and
 * python/vram_torch call them: configuration before first use, one allocator per device, PyTorch's
 * stream rules (reuse on the freeing stream, record_stream waits for the other stream's events), the
 * out-of-memory message, empty_cache, the memory fraction hook, statistics JSON equal to the
 * allocator's own, snapshots per device, and several threads at once. One process, one configuration:
 * the tests run in order. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torch/torch_internal.h"

#define MiB ((ssize_t)1 << 20)
#define S1 ((void *)(uintptr_t)0x1000)   /* fake stream handles (meta devices take any) */
#define S2 ((void *)(uintptr_t)0x2000)

static void *xmalloc(ssize_t size, int device, void *stream)
{
    void *p = vram_torch_try_malloc(size, device, stream);
    if (!p)
        fail_msg("vram_torch_try_malloc(%zd, %d): %s", size, device, vram_torch_last_error());
    if (vram_torch_check(device) != 0)
        fail_msg("%s", vram_torch_last_error());
    return p;
}

static void xfree(void *p, int device)
{
    vram_torch_free(p, 0, device, NULL);
    if (vram_torch_check(device) != 0)
        fail_msg("%s", vram_torch_last_error());
}

/* A statistic out of vram_torch_stats_json: name, pool (0 all, 1 small, 2 large), field. */
static int64_t stat_of(int device, const char *name, int pool, const char *field)
{
    char *text = vram_torch_stats_json(device);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    vram_torch_free_string(text);
    assert_non_null(root);
    cJSON *s = cJSON_GetObjectItem(root, name);
    assert_non_null(s);
    if (cJSON_IsArray(s))
        s = cJSON_GetArrayItem(s, pool);
    if (field)
        s = cJSON_GetObjectItem(s, field);
    assert_non_null(s);
    int64_t v = (int64_t)cJSON_GetNumberValue(s);
    cJSON_Delete(root);
    return v;
}

static void configure_checks_and_sets(void **state)
{
    (void)state;
    assert_int_equal(vram_torch_configure("nosuch", 0, 0, "meta:1GiB"), -1);
    assert_non_null(strstr(vram_torch_last_error(), "unknown policy 'nosuch'"));
    assert_int_equal(vram_torch_configure(NULL, 1.5, 0, "meta:1GiB"), -1);
    assert_non_null(strstr(vram_torch_last_error(), "not within [0, 1]"));
    assert_int_equal(vram_torch_configure(NULL, 0, 0, "meta:%s"), -1);
    assert_int_equal(vram_torch_configure(NULL, 0, 0, "meta:%d%d"), -1);
    const char *policy = getenv("VRAM_TORCH_TEST_POLICY");
    assert_int_equal(vram_torch_configure(policy ? policy : "stitch", 0, 1000, "meta:1GiB"), 0);
    assert_string_equal(vram_torch_policy(), policy ? policy : "stitch");
    assert_false(vram_torch_device_active(0));
    /* a device with no allocator: zeros, and no snapshot */
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "current"), 0);
    assert_null(vram_torch_snapshot_json(0));
}

static void sizes_devices_and_stats(void **state)
{
    (void)state;
    assert_null(vram_torch_try_malloc(0, 0, S1));          /* size 0: NULL, no error */
    assert_string_equal(vram_torch_last_error(), "");
    assert_null(vram_torch_try_malloc(-5, 0, S1));
    assert_non_null(strstr(vram_torch_last_error(), "negative"));
    assert_null(vram_torch_try_malloc(100, VRAM_TORCH_MAX_DEVICES, S1));
    assert_non_null(strstr(vram_torch_last_error(), "out of range"));

    void *a = xmalloc(1000, 0, S1), *b = xmalloc(3 * MiB + 7, 0, S1), *c = xmalloc(5 * MiB, 1, S1);
    assert_true(vram_torch_device_active(0));
    assert_true(vram_torch_device_active(1));
    assert_false(vram_torch_device_active(2));
    /* allocated = the sizes rounded to 512 bytes, per device */
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "current"), 1024 + 3 * MiB + 512);
    assert_int_equal(stat_of(0, "allocated_bytes", 1, "current"), 1024);
    assert_int_equal(stat_of(1, "allocated_bytes", 0, "current"), 5 * MiB);
    assert_int_equal(stat_of(0, "requested_bytes", 0, "current"), 1000 + 3 * MiB + 7);
    assert_int_equal(stat_of(0, "allocation", 0, "current"), 2);
    assert_true(stat_of(0, "reserved_bytes", 0, "current") >= stat_of(0, "allocated_bytes", 0, "current"));
    assert_int_equal(stat_of(0, "max_split_size", 0, NULL), -1);
    /* the JSON is the allocator's own statistics */
    vr_alloc_stats st;
    vr_alloc_get_stats(vt_get(0), &st);
    assert_int_equal(stat_of(0, "reserved_bytes", 2, "peak"), st.reserved_bytes[VR_POOL_LARGE].peak);
    assert_int_equal(stat_of(0, "segment", 0, "current"), st.segment[VR_POOL_ALL].current);
    assert_int_equal(stat_of(0, "num_device_alloc", 0, NULL), st.num_device_alloc);
    /* base allocation: the block itself */
    size_t sz = 0;
    assert_ptr_equal(vram_torch_base_alloc(b, &sz), b);
    assert_int_equal(sz, 3 * MiB + 512);
    xfree(a, 0);
    xfree(b, 0);
    xfree(c, 1);
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "current"), 0);
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "peak"), 1024 + 3 * MiB + 512);
    vram_torch_reset_peak(-1);
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "peak"), 0);
    vram_torch_reset_accumulated(0);
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "allocated"), 0);
    vram_torch_free(NULL, 0, 0, NULL);                     /* nothing */
}

static void streams_as_pytorch(void **state)
{
    (void)state;
    /* a block freed on S1 serves the next request of that size on S1, not one on S2 */
    void *p = xmalloc(6 * MiB, 0, S1);
    xfree(p, 0);
    void *q = xmalloc(6 * MiB, 0, S2);
    assert_ptr_not_equal(q, p);
    void *r = xmalloc(6 * MiB, 0, S1);
    if (!strcmp(vram_torch_policy(), "pytorch"))
        assert_ptr_equal(r, p);  /* (stitch evicts p's cached mapping for q before growing) */
    xfree(q, 0);
    xfree(r, 0);

    /* record_stream: the free waits for an event on the other stream */
    vr_device_set_manual_events(vt_slots[0].dev, true);
    void *x = xmalloc(8 * MiB, 0, S1);
    vram_torch_record_stream(x, S2);
    xfree(x, 0);
    assert_int_equal(stat_of(0, "allocated_bytes", 0, "current"), 0);
    assert_int_equal(stat_of(0, "active_bytes", 0, "current"), 8 * MiB);   /* pending the event */
    void *y = xmalloc(8 * MiB, 0, S1);
    assert_ptr_not_equal(y, x);                                 /* not reused before the event */
    vr_device_complete_events(vt_slots[0].dev);
    xfree(y, 0);
    void *z = xmalloc(8 * MiB, 0, S1);                          /* the events have completed */
    assert_int_equal(stat_of(0, "active_bytes", 0, "current"), 8 * MiB);
    xfree(z, 0);
    vr_device_set_manual_events(vt_slots[0].dev, false);
    vram_torch_record_stream((void *)(uintptr_t)0xdead000, S2); /* unknown: reported, ignored */
}

static void out_of_memory_and_fraction(void **state)
{
    (void)state;
    vram_torch_memory_fraction(0.05, 2);                        /* before device 2's first use */
    void *p = xmalloc(20 * MiB, 2, S1);
    assert_null(vram_torch_try_malloc(60 * MiB, 2, S1));        /* 20 + 60 MiB > 5% of 1 GiB */
    const char *e = vram_torch_last_error();
    assert_true(strncmp(e, "CUDA out of memory. vram_torch (policy ", 39) == 0);
    assert_non_null(strstr(e, "on GPU 2"));
    assert_non_null(strstr(e, "tried to allocate 60.00 MiB"));
    assert_string_equal(vram_torch_last_oom(), e);
    assert_int_equal(stat_of(2, "num_ooms", 0, NULL), 1);
    assert_null(vram_torch_try_malloc((ssize_t)2 << 30, 2, S1)); /* more than the device: at once */
    assert_non_null(strstr(vram_torch_last_error(), "more than the device's total memory (1.00 GiB)"));
    assert_string_equal(vram_torch_last_oom(), vram_torch_last_error());
    vram_torch_memory_fraction(0.5, 2);                         /* after: the cap moves */
    void *q = xmalloc(60 * MiB, 2, S1);
    xfree(q, 2);
    xfree(p, 2);
    vram_torch_memory_fraction(2.0, 2);                         /* invalid: reported, ignored */
}

static void empty_cache_gives_back(void **state)
{
    (void)state;
    void *live = xmalloc(3 * MiB, 0, S1), *gone = xmalloc(30 * MiB, 0, S1);
    xfree(gone, 0);
    assert_true(stat_of(0, "reserved_bytes", 0, "current") >= 33 * MiB);
    vram_torch_empty_cache();
    int64_t res = stat_of(0, "reserved_bytes", 0, "current");
    assert_true(res >= 3 * MiB && res <= 20 * MiB);   /* the live block's segment (pytorch: 20 MiB) */
    vr_device_mem m;
    vr_device_mem_info(vt_slots[0].dev, &m);
    assert_int_equal(m.used_by_us, (uint64_t)res);              /* the device got it back */
    xfree(live, 0);
    vram_torch_empty_cache();
    assert_int_equal(stat_of(0, "reserved_bytes", 0, "current"), 0);
}

static void snapshot_summary_history(void **state)
{
    (void)state;
    void *p = xmalloc(4 * MiB, 1, S1);
    char *text = vram_torch_snapshot_json(1);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    vram_torch_free_string(text);
    assert_non_null(root);
    cJSON *segs = cJSON_GetObjectItem(root, "segments");
    assert_true(cJSON_GetArraySize(segs) >= 1);
    cJSON *seg;
    int found = 0;
    cJSON_ArrayForEach(seg, segs) {
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(seg, "device")), 1);
        cJSON *blk;
        cJSON_ArrayForEach(blk, cJSON_GetObjectItem(seg, "blocks"))
            found += (uintptr_t)cJSON_GetNumberValue(cJSON_GetObjectItem(blk, "address")) == (uintptr_t)p &&
                     !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(blk, "state")), "active_allocated");
    }
    assert_int_equal(found, 1);
    cJSON *trace = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "device_traces"), 0);
    assert_true(cJSON_GetArraySize(trace) > 0);                 /* history was configured on */
    cJSON_Delete(root);
    char *sum = vram_torch_summary(1);
    assert_non_null(sum);
    assert_non_null(strstr(sum, "Allocated memory"));
    vram_torch_free_string(sum);
    char path[] = "/tmp/vram_torch_snapXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(vram_torch_write_snapshot(1, path), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char head[16] = {0};
    assert_true(fread(head, 1, 13, f) == 13);
    fclose(f);
    remove(path);
    assert_string_equal(head, "{\"segments\":[");
    assert_int_equal(vram_torch_write_snapshot(1, "/nonexistent/dir/x.json"), -1);
    vram_torch_record_history(0);
    text = vram_torch_snapshot_json(1);
    root = cJSON_Parse(text);
    vram_torch_free_string(text);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "device_traces"), 0)), 0);
    cJSON_Delete(root);
    xfree(p, 1);
    /* configuration is for before the first allocation */
    assert_int_equal(vram_torch_configure("pytorch", 0, 0, NULL), -1);
    assert_non_null(strstr(vram_torch_last_error(), "after the first allocation"));
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    void *stream = (void *)(uintptr_t)(0x10000 * (id + 1));
    void *held[16] = {0};
    unsigned x = 12345u + (unsigned)id;
    for (int i = 0; i < 4000; i++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 8) % 16), dev = id % 2;
        if (held[k]) {
            vram_torch_free(held[k], 0, dev, stream);
            held[k] = NULL;
        } else {
            ssize_t size = (ssize_t)((x >> 12) % (6 * MiB)) + 1;
            held[k] = vram_torch_try_malloc(size, dev, stream);
            if (!held[k])
                return (void *)1;
        }
    }
    for (int k = 0; k < 16; k++)
        vram_torch_free(held[k], 0, id % 2, stream);
    return NULL;
}

static void threads_at_once(void **state)
{
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    for (int d = 0; d < 2; d++) {
        assert_int_equal(vram_torch_check(d), 0);
        assert_int_equal(stat_of(d, "allocated_bytes", 0, "current"), 0);
    }
    vram_torch_empty_cache();
    assert_int_equal(stat_of(0, "reserved_bytes", 0, "current"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(configure_checks_and_sets),
        cmocka_unit_test(sizes_devices_and_stats),
        cmocka_unit_test(streams_as_pytorch),
        cmocka_unit_test(out_of_memory_and_fraction),
        cmocka_unit_test(empty_cache_gives_back),
        cmocka_unit_test(snapshot_summary_history),
        cmocka_unit_test(threads_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
