/* vram train's status file, read by vram watch: after every step (the last node
 * of the graph) the training process writes $TMPDIR-independent
 * /tmp/vram-<uid>/<pid>.json (atomically):
 *   {"pid": N, "device": "cuda", "step": N, "planned": BYTES, "used": BYTES, "time": UNIX_S}
 * planned: the plan's arena (planned mode) or its peak (dynamic); used: the most
 * bytes the executor held during a node (vr_exec_memory.device_peak when the
 * device reports it, else the measured live peak). Removed when the run ends.
 * The hook chains to the trace writer when there is one. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "vram/atomic_file.h"
#include "vram/prof.h"

void vr_cli_status_path(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/vram-%u/%ld.json", (unsigned)getuid(), (long)getpid());
}

void vr_cli_status_hook(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns)
{
    vr_cli_status *s = ctx;
    if (s->trace)
        vr_trace_on_node(s->trace, e, node, t0_ns, t1_ns);
    const vr_plan *p = vr_exec_plan(e);
    if (node != p->n_nodes - 1)
        return;
    s->steps++;
    char dir[64], path[96], buf[512];
    snprintf(dir, sizeof dir, "/tmp/vram-%u", (unsigned)getuid());
    mkdir(dir, 0700);
    vr_cli_status_path(path, sizeof path);
    vr_exec_memory m;
    vr_exec_get_memory(e, &m);
    uint64_t planned = p->has_dynamic ? p->dynamic.peak_reserved : p->arena_size;
    uint64_t used = m.device_peak ? m.device_peak : m.peak;
    int n = snprintf(buf, sizeof buf,
                     "{\"pid\": %ld, \"device\": \"%s\", \"step\": %lld, \"planned\": %llu, \"used\": %llu, "
                     "\"time\": %lld}\n",
                     (long)getpid(), s->device, (long long)s->steps, (unsigned long long)planned,
                     (unsigned long long)used, (long long)time(NULL));
    if (n > 0 && (size_t)n < sizeof buf)
        vr_atomic_write_file(path, buf, (size_t)n); /* best effort: watch is optional */
}
