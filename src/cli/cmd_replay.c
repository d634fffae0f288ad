/* vram replay: run an allocator trace through a policy on a simulated device
 * and compare its peaks with what PyTorch recorded. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/replay.h"
#include "vram/util.h"

static double pct(uint64_t mine, uint64_t theirs)
{
    return theirs ? 100.0 * ((double)mine - (double)theirs) / (double)theirs : 0.0;
}

static void print_json(const char *path, const char *policy, const vr_replay_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "trace", path);
    cJSON_AddStringToObject(o, "workload", r->workload);
    cJSON_AddStringToObject(o, "policy", policy);
    cJSON_AddNumberToObject(o, "allocs", (double)r->allocs);
    cJSON_AddNumberToObject(o, "frees", (double)r->frees);
    cJSON_AddNumberToObject(o, "peak_requested", (double)r->peak_requested);
    cJSON_AddNumberToObject(o, "peak_allocated", (double)r->peak_allocated);
    cJSON_AddNumberToObject(o, "peak_reserved", (double)r->peak_reserved);
    cJSON_AddNumberToObject(o, "ratio", r->ratio);
    cJSON_AddNumberToObject(o, "alloc_retries", (double)r->alloc_retries);
    cJSON_AddNumberToObject(o, "ooms", (double)r->ooms);
    cJSON_AddNumberToObject(o, "device_allocs", (double)r->stats.num_device_alloc);
    cJSON_AddNumberToObject(o, "device_frees", (double)r->stats.num_device_free);
    const vr_device_calls *cs[2] = {&r->calls, &r->calls_last_pass};
    const char *cn[2] = {"device_calls", "device_calls_last_pass"};
    for (int i = 0; i < 2; i++) {
        const vr_device_calls *c = cs[i];
        cJSON *d = cJSON_AddObjectToObject(o, cn[i]);
        cJSON_AddNumberToObject(d, "total", (double)vr_device_calls_vm_total(c));
        cJSON_AddNumberToObject(d, "map", (double)c->map);
        cJSON_AddNumberToObject(d, "unmap", (double)c->unmap);
        cJSON_AddNumberToObject(d, "set_access", (double)c->set_access);
        cJSON_AddNumberToObject(d, "vm_reserve", (double)c->vm_reserve);
        cJSON_AddNumberToObject(d, "vm_release", (double)c->vm_release);
        cJSON_AddNumberToObject(d, "phys_create", (double)c->phys_create);
        cJSON_AddNumberToObject(d, "phys_release", (double)c->phys_release);
        cJSON_AddNumberToObject(d, "device_sync", (double)c->device_sync);
        cJSON_AddNumberToObject(d, "malloc", (double)c->malloc);
        cJSON_AddNumberToObject(d, "free", (double)c->free);
        cJSON_AddNumberToObject(d, "event_record", (double)c->event_record);
        cJSON_AddNumberToObject(d, "event_query", (double)c->event_query);
        cJSON_AddNumberToObject(d, "event_sync", (double)c->event_sync);
    }
    cJSON_AddNumberToObject(o, "ns_per_op", r->ns_per_op);
    cJSON_AddNumberToObject(o, "ns_per_op_last_pass", r->ns_per_op_last_pass);
    cJSON_AddNumberToObject(o, "device_ns_per_op", r->device_ns_per_op);
    if (r->have_torch) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "version", r->torch_version);
        cJSON_AddNumberToObject(t, "peak_allocated", (double)r->torch_peak_allocated);
        cJSON_AddNumberToObject(t, "peak_reserved", (double)r->torch_peak_reserved);
        cJSON_AddNumberToObject(t, "ratio", r->torch_peak_allocated
                                    ? (double)r->torch_peak_reserved / (double)r->torch_peak_allocated : 0);
        cJSON_AddNumberToObject(t, "alloc_retries", (double)r->torch_alloc_retries);
        cJSON_AddNumberToObject(t, "peak_allocated_diff_pct", pct(r->peak_allocated, r->torch_peak_allocated));
        cJSON_AddNumberToObject(t, "peak_reserved_diff_pct", pct(r->peak_reserved, r->torch_peak_reserved));
        cJSON_AddItemToObject(o, "pytorch", t);
    }
    if (r->first_oom_line) {
        cJSON_AddNumberToObject(o, "first_oom_line", (double)r->first_oom_line);
        cJSON_AddStringToObject(o, "first_oom", r->first_oom);
    }
    char *s = cJSON_Print(o);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(o);
}

static void print_row(const char *name, uint64_t mine, bool have, uint64_t theirs)
{
    char a[32], b[32];
    vr_format_size(mine, a, sizeof a);
    if (have) {
        vr_format_size(theirs, b, sizeof b);
        printf("%-20s %12s %15llu   %12s %15llu   %+8.3f%%\n", name, a, (unsigned long long)mine, b,
               (unsigned long long)theirs, pct(mine, theirs));
    } else {
        printf("%-20s %12s %15llu\n", name, a, (unsigned long long)mine);
    }
}

static void print_text(const char *path, const char *policy, const char *device, const vr_replay_result *r)
{
    bool t = r->have_torch;
    printf("trace      %s", path);
    if (r->workload[0])
        printf(" (workload %s%s%s)", r->workload, r->torch_version[0] ? ", torch " : "", r->torch_version);
    printf("\npolicy     %s on %s\n", policy, device);
    printf("replayed   %llu allocs, %llu frees in %.0f ns/op (%.1fx the %.0f ns/op of the same calls straight "
           "on the device, uncached)\n\n", (unsigned long long)r->allocs, (unsigned long long)r->frees, r->ns_per_op,
           r->device_ns_per_op > 0 ? r->ns_per_op / r->device_ns_per_op : 0, r->device_ns_per_op);
    printf("%-20s %28s   %28s   %9s\n", "", "replay (bytes)", t ? "pytorch recorded (bytes)" : "", t ? "diff" : "");
    printf("%-20s %12s %15llu\n", "peak requested", "", (unsigned long long)r->peak_requested);
    print_row("peak allocated", r->peak_allocated, t, r->torch_peak_allocated);
    print_row("peak reserved", r->peak_reserved, t, r->torch_peak_reserved);
    double tr = t && r->torch_peak_allocated ? (double)r->torch_peak_reserved / (double)r->torch_peak_allocated : 0;
    if (t)
        printf("%-20s %28.3f   %28.3f\n", "reserved/allocated", r->ratio, tr);
    else
        printf("%-20s %28.3f\n", "reserved/allocated", r->ratio);
    if (t)
        printf("%-20s %28lld   %28lld\n", "alloc retries", (long long)r->alloc_retries, (long long)r->torch_alloc_retries);
    else
        printf("%-20s %28lld\n", "alloc retries", (long long)r->alloc_retries);
    printf("%-20s %28lld\n", "OOMs", (long long)r->ooms);
    printf("%-20s %28llu   (%llu map, %llu unmap, %llu set access, %llu address reserve/free)\n", "device calls",
           (unsigned long long)vr_device_calls_vm_total(&r->calls), (unsigned long long)r->calls.map,
           (unsigned long long)r->calls.unmap, (unsigned long long)r->calls.set_access,
           (unsigned long long)(r->calls.vm_reserve + r->calls.vm_release));
    if (memcmp(&r->calls, &r->calls_last_pass, sizeof r->calls))
        printf("%-20s %28llu\n", "  in the last pass", (unsigned long long)vr_device_calls_vm_total(&r->calls_last_pass));
    printf("\nreserved/allocated = peak reserved / peak allocated\n");
    if (r->first_oom_line)
        printf("first OOM at line %llu: %s\n", (unsigned long long)r->first_oom_line, r->first_oom);
}

typedef struct opts {
    vr_replay_options r;
    long long repeat, passes;
    bool json;
    long long lend; /* --stitch-lend */
} opts;

static void replay_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    const vr_flag t[] = {
        VR_FLAG_HEADING_TEXT("options:"),
        {"--policy", VR_FLAG_STRING, &o->r.policy, "NAME",
         .help = vr_flags_text(fs, "allocator policy: %s (default pytorch)", vr_alloc_policy_names())},
        {"--capacity", VR_FLAG_SIZE, &o->r.capacity, "SIZE", .help = "device capacity (default 80GiB)", .lo = 1},
        {"--max-split-size", VR_FLAG_SIZE, &o->r.max_split_size, "SIZE",
         .help = "blocks this large are never split (default unlimited)"},
        {"--stitch-lend", VR_FLAG_INT, &o->lend, "P", .lo = 0, .hi = 1000,
         .help = "policy stitch: lend a new size a mapping up to P% larger (default 0: never)"},
        {"--stitch-granule", VR_FLAG_SIZE, &o->r.stitch_granule, "SIZE",
         .help = "policy stitch: bytes of each physical allocation (rounded up to a multiple of\n"
                 "the device's granularity; default the granularity, 2 MiB)"},
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "print the result as JSON"},
        {"--snapshot", VR_FLAG_STRING, &o->r.snapshot_path, "FILE",
         .help = "write the allocator snapshot at the end of the trace"},
        {"--chrome-trace", VR_FLAG_STRING, &o->r.chrome_trace_path, "FILE",
         .help = "write a Chrome/Perfetto trace (allocated/reserved counters)"},
        {"--check", VR_FLAG_SWITCH, &o->r.check, NULL,
         .help = "verify every allocator invariant after each operation (slow)"},
        {"--repeat", VR_FLAG_INT, &o->repeat, "N", .lo = 1, .hi = 1000000,
         .help = "replay N times on fresh allocators, report the fastest ns/op"},
        {"--passes", VR_FLAG_INT, &o->passes, "N", .lo = 1, .hi = 1000,
         .help = "run the trace N times on one allocator (what is live is freed after each pass): later\n"
                 "passes find a warm cache; device calls of the last pass are reported apart"},
        {"--evict", VR_FLAG_SIZE, &o->r.evict, "SIZE",
         .help = "write SIZE bytes of other memory between operations, as a program's own work\n"
                 "does to the caches (not counted in ns/op; default 0)"},
        VR_FLAG_HEADING_TEXT("\nratio = peak reserved / peak allocated (1.000 = no bytes cached at the peak)."),
    };
    VR_FLAGS_ADD(fs, t);
}

static int run(int argc, char **argv)
{
    opts op = {0};
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    int rc = vr_flags_parse(&vr_cli_replay, &op, argc, argv, pos, 2, &npos);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (npos > 1)
        return vr_cli_fail("replay", 2, "one trace at a time ('%s' and '%s')", pos[0], pos[1]);
    if (!npos)
        return vr_cli_fail("replay", 2, "give a TRACE file (vram replay --help)");
    const char *trace = pos[0];
    vr_replay_options o = op.r;
    o.repeat = (int)op.repeat;
    o.passes = (int)op.passes;
    o.stitch_lend_pct = (unsigned)op.lend;
    bool json = op.json;
    vr_replay_result r;
    vr_status st = vr_replay_file(trace, &o, &r);
    if (st != VR_OK && o.policy && strstr(vr_last_error(), "unknown policy"))
        return vr_cli_fail("replay", 2, "--policy: %s", vr_last_error());
    if (st != VR_OK)
        return vr_cli_fail("replay", st == VR_ERR_INVALID || st == VR_ERR_UNSUPPORTED ? 2 : 1, "%s", vr_last_error());
    const char *policy = o.policy ? o.policy : "pytorch";
    char dev[64], cap[32];
    snprintf(dev, sizeof dev, "meta (%s)", vr_format_size(o.capacity ? o.capacity : VR_META_DEFAULT_CAPACITY, cap, sizeof cap));
    if (json)
        print_json(trace, policy, &r);
    else
        print_text(trace, policy, dev, &r);
    return 0;
}

const vr_cli_command vr_cli_replay = {
    "replay", "replay an allocator trace through a policy and compare with PyTorch", run, "TRACE [options]",
    "Replays an allocator trace (CSV, gzip or plain: action,addr,size,stream; the\n"
    "format is in docs/trace-format.md, samples in tests/data/traces/) through a\n"
    "fresh caching allocator on a simulated\n"
    "`meta` device and prints its peaks beside those PyTorch recorded.",
    replay_flags, sizeof(opts)};
