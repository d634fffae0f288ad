/* vram watch: a live view of every GPU, like nvidia-smi -l.
 *
 *   vram watch [--interval S] [--count N] [--json]
 *
 * Each sample: per GPU its memory used/total, utilisation, temperature, power
 * and compute processes (NVML, vram/device.h), and the vram train processes
 * running on this machine with their planned and used bytes, from the status
 * files they write after every step (/tmp/vram-<uid>/<pid>.json, status_file.c).
 * --json prints one JSON line per sample. Without a GPU (no NVML) it prints a
 * one-line note per sample and still shows vram's processes; with --count the
 * command ends after N samples (exit 0), without it runs until interrupted. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <sys/types.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "vram/device.h"
#include "vram/util.h"

/* The vram train processes of this user that are alive: their status files as a JSON array. */
static cJSON *vram_processes(void)
{
    cJSON *arr = cJSON_CreateArray();
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/vram-%u", (unsigned)getuid());
    DIR *d = opendir(dir);
    if (!d)
        return arr;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (pid <= 0 || strcmp(end, ".json"))
            continue;
        if (kill((pid_t)pid, 0) != 0)
            continue; /* a run that died without removing its file */
        char path[384], buf[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        cJSON *o = cJSON_Parse(buf);
        if (o)
            cJSON_AddItemToArray(arr, o);
    }
    closedir(d);
    return arr;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void sample(bool json)
{
    int n = 0;
    vr_status st = vr_gpu_count(&n);
    char why[512];
    snprintf(why, sizeof why, "%s", st ? vr_last_error() : "");
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "time", (double)time(NULL));
    cJSON *gpus = cJSON_AddArrayToObject(root, "gpus");
    if (st)
        cJSON_AddStringToObject(root, "note", why);
    char a[32], b[32];
    if (!json) {
        time_t now = time(NULL);
        char ts[32];
        strftime(ts, sizeof ts, "%H:%M:%S", localtime(&now));
        printf("--- %s\n", ts);
        if (st)
            printf("no GPU to watch: %s\n", why);
    }
    for (int i = 0; i < n; i++) {
        vr_gpu_sample s;
        if (vr_gpu_sample_get(i, &s) != VR_OK) {
            if (!json)
                printf("gpu %d: %s\n", i, vr_last_error());
            continue;
        }
        cJSON *g = cJSON_CreateObject();
        cJSON_AddNumberToObject(g, "index", i);
        cJSON_AddStringToObject(g, "name", s.name);
        cJSON_AddNumberToObject(g, "used", (double)s.used);
        cJSON_AddNumberToObject(g, "total", (double)s.total);
        cJSON_AddNumberToObject(g, "util_gpu", s.util_gpu);
        cJSON_AddNumberToObject(g, "util_memory", s.util_memory);
        cJSON_AddNumberToObject(g, "temperature_c", s.temperature_c);
        cJSON_AddNumberToObject(g, "power_w", s.power_w);
        cJSON *procs = cJSON_AddArrayToObject(g, "processes");
        for (int k = 0; k < s.n_procs; k++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "pid", s.pids[k]);
            cJSON_AddNumberToObject(p, "used", (double)s.proc_used[k]);
            cJSON_AddItemToArray(procs, p);
        }
        cJSON_AddItemToArray(gpus, g);
        if (!json) {
            printf("gpu %d %-28s %10s / %-10s  util %3d%%  mem util %3d%%  %3d C  %6.1f W\n", i, s.name,
                   vr_format_size(s.used, a, sizeof a), vr_format_size(s.total, b, sizeof b), s.util_gpu,
                   s.util_memory, s.temperature_c, s.power_w);
            for (int k = 0; k < s.n_procs; k++)
                printf("    pid %-8u %s\n", s.pids[k],
                       s.proc_used[k] < 0 ? "(not reported)" : vr_format_size((uint64_t)s.proc_used[k], a, sizeof a));
        }
    }
    cJSON *vp = vram_processes();
    cJSON_AddItemToObject(root, "vram", vp);
    if (!json) {
        const cJSON *p;
        cJSON_ArrayForEach(p, vp) {
            const cJSON *dev = cJSON_GetObjectItemCaseSensitive(p, "device");
            printf("vram train pid %.0f on %s: step %.0f, planned %s, used %s\n", num(p, "pid"),
                   cJSON_IsString(dev) ? dev->valuestring : "?", num(p, "step"),
                   vr_format_size((uint64_t)num(p, "planned"), a, sizeof a),
                   vr_format_size((uint64_t)num(p, "used"), b, sizeof b));
        }
    } else {
        char *s = cJSON_PrintUnformatted(root);
        printf("%s\n", s);
        free(s);
    }
    fflush(stdout);
    cJSON_Delete(root);
}

typedef struct opts {
    double interval;
    long long count;
    bool json;
} opts;

static void watch_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    const vr_flag t[] = {
        {"--interval", VR_FLAG_DOUBLE, &o->interval, "S", .help = "seconds between samples (1; fractions allowed)",
         .min = 0.01, .max = 86400},
        {"--count", VR_FLAG_INT, &o->count, "N", .help = "stop after N samples (default: until interrupted)", .lo = 1,
         .hi = 1000000000},
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "one JSON line per sample"},
    };
    VR_FLAGS_ADD(fs, t);
}

static int run(int argc, char **argv)
{
    opts o = {.interval = 1};
    int rc = vr_flags_parse(&vr_cli_watch, &o, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc == 1 ? 0 : rc;
    double interval = o.interval;
    long long count = o.count;
    bool json = o.json;
    for (long long k = 0; !count || k < count; k++) {
        if (k) {
            struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
            nanosleep(&ts, NULL);
        }
        sample(json);
    }
    return 0;
}

const vr_cli_command vr_cli_watch = {
    "watch", "live view of every GPU (memory, processes, utilisation) and of running vram trainings", run,
    "[--interval S] [--count N] [--json]",
    "A live view of every GPU (memory used/total, per-process use, utilisation, temperature,\n"
    "power; NVML) and of the running vram train processes (planned vs used bytes, from\n"
    "/tmp/vram-<uid>/<pid>.json, which vram train rewrites after every step).",
    watch_flags, sizeof(opts)};
