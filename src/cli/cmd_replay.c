/* vram replay: run an allocator trace through a policy on a simulated device
 * and compare its peaks with what PyTorch recorded. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/replay.h"
#include "vram/util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vram replay TRACE [options]\n"
            "\n"
            "Replays an allocator trace (CSV, gzip or plain: action,addr,size,stream; the\n"
            "format is in docs/trace-format.md, samples in tests/data/traces/) through a\n"
            "fresh caching allocator on a simulated\n"
            "`meta` device and prints its peaks beside those PyTorch recorded.\n"
            "\n"
            "options:\n"
            "  --policy NAME         allocator policy: %s (default pytorch)\n"
            "  --capacity SIZE       device capacity (default 80GiB)\n"
            "  --max-split-size SIZE blocks this large are never split (default unlimited)\n"
            "  --json                print the result as JSON\n"
            "  --snapshot FILE       write the allocator snapshot at the end of the trace\n"
            "  --chrome-trace FILE   write a Chrome/Perfetto trace (allocated/reserved counters)\n"
            "  --check               verify every allocator invariant after each operation (slow)\n"
            "  --repeat N            replay N times on fresh allocators, report the fastest ns/op\n"
            "\n"
            "ratio = peak reserved / peak allocated (1.000 = no bytes cached at the peak).\n",
            vr_alloc_policy_names());
}

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
    cJSON_AddNumberToObject(o, "ns_per_op", r->ns_per_op);
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
    printf("\nreserved/allocated = peak reserved / peak allocated\n");
    if (r->first_oom_line)
        printf("first OOM at line %llu: %s\n", (unsigned long long)r->first_oom_line, r->first_oom);
}

int vr_cmd_replay(int argc, char **argv)
{
    const char *trace = NULL;
    vr_replay_options o = {0};
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--check")) {
            o.check = true;
        } else if (!strcmp(a, "--repeat")) {
            long long n;
            if (!has_val || vr_parse_int(argv[++i], "--repeat", 1, 1000000, &n) != VR_OK)
                return vr_cli_fail("replay", 2, "%s", has_val ? vr_last_error() : "--repeat needs a value");
            o.repeat = (int)n;
        } else if (!strcmp(a, "--policy") || !strcmp(a, "--capacity") || !strcmp(a, "--max-split-size") ||
                   !strcmp(a, "--snapshot") || !strcmp(a, "--chrome-trace")) {
            if (!has_val)
                return vr_cli_fail("replay", 2, "%s needs a value (vram replay --help)", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--policy"))
                o.policy = v;
            else if (!strcmp(a, "--snapshot"))
                o.snapshot_path = v;
            else if (!strcmp(a, "--chrome-trace"))
                o.chrome_trace_path = v;
            else if (vr_parse_size(v, a, !strcmp(a, "--capacity") ? &o.capacity : &o.max_split_size) != VR_OK)
                return vr_cli_fail("replay", 2, "%s", vr_last_error());
            else if (!strcmp(a, "--capacity") && o.capacity == 0)
                return vr_cli_fail("replay", 2, "--capacity: must be more than 0");
        } else if (a[0] == '-' && a[1]) {
            return vr_cli_fail("replay", 2, "unknown option '%s' (vram replay --help)", a);
        } else if (trace) {
            return vr_cli_fail("replay", 2, "one trace at a time ('%s' and '%s')", trace, a);
        } else {
            trace = a;
        }
    }
    if (!trace)
        return vr_cli_fail("replay", 2, "give a TRACE file (vram replay --help)");
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
