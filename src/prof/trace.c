/* The Chrome/Perfetto trace of a run (vram/prof.h): events are appended to a
 * temporary file as the executor reports each node; the closing bracket and
 * the rename come at vr_trace_close.
 *
 * Tracks (pid 1): tid 0 "steps" (a slice per optimizer step, emitted when the
 * next one begins) and tid 1 "nodes": a slice per node per pass. On the CPU its
 * time is the host's, emitted as the node is reported. With the executor's
 * device times (CUDA, vr_exec_device_times) a step's nodes are kept until its
 * last one, whose report reads the step's spans back from the device (one wait
 * per step), and each node's slice is its span on the GPU between the events
 * recorded before and after it on its stream, placed in the host's clock by the
 * step's anchor: tid 1 "nodes (GPU compute stream)", tid 2 "GPU copies"
 * (offload), tid 3 "GPU collectives" (data parallel); a node that queued no
 * device work (a host node of an offloaded step, a reshape, a multi-tensor
 * group's member) keeps its host time on tid 4 "host", or tid 5 "host updates" for the offloaded
 * step's host nodes (sumsq, updates), which run on a thread of their own beside the main one. The counters are
 * placed at their node's slice (never going back on their track). A step
 * starts at node 0 after the last node of the graph ran (micro-batch passes of
 * one step restart at node 0 without reaching the optimizer nodes). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/atomic_file.h"
#include "vram/prof.h"
#include "vram/util.h"

/* A node reported in a step whose device times are read at its end. */
typedef struct held {
    int node, pass;
    uint64_t t0, t1;                   /* host clock */
    uint64_t live[VR_ROLE_COUNT];
    long long allocated, reserved;     /* allocator < 0: none */
} held;

struct vr_trace {
    vr_atomic_file af;
    const vr_graph *g;
    bool open, any;            /* any: an event was written (comma before the next) */
    uint64_t origin_ns;        /* host clock of the first node: ts 0 */
    int64_t step;              /* 1-based step of the nodes being reported; 0 before the first */
    int last_node;             /* previous node reported, -1 */
    int pass;                  /* pass (micro-batch) of the step being reported */
    uint64_t step_t0, step_t1; /* ns of the current step's first slice start and last slice end */
    int device;                /* device times: -1 not known yet, 0 no, 1 yes */
    unsigned named;            /* tids whose thread_name was written */
    held *held;                /* device times: the step's nodes so far */
    int n_held, cap_held;
    uint64_t live_ts, alloc_ts; /* device times: the counters' last ts (ns) */
};

static void emit(vr_trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(vr_trace *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (t->any)
        vr_atomic_write(&t->af, ",\n", 2);
    vr_atomic_write(&t->af, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    t->any = true;
}

/* µs since the origin, as a decimal with ns precision. */
static double us(const vr_trace *t, uint64_t ns) { return ns >= t->origin_ns ? (double)(ns - t->origin_ns) / 1e3 : 0; }

/* Node names are identifiers (h.0.fch); anything else becomes '_' so the JSON stays valid. */
static void clean(char *dst, const char *src, size_t cap)
{
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++)
        dst[i] = (src[i] == '"' || src[i] == '\\' || (unsigned char)src[i] < 0x20) ? '_' : src[i];
    dst[i] = 0;
}

vr_status vr_trace_open(const char *path, vr_trace **out)
{
    *out = NULL;
    vr_trace *t = calloc(1, sizeof *t);
    if (!t)
        return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    vr_status st = vr_atomic_open(&t->af, path);
    if (st) {
        free(t);
        return st;
    }
    t->open = true;
    t->last_node = -1;
    static const char head[] = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    vr_atomic_write(&t->af, head, strlen(head));
    emit(t, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"vram train\"}}");
    emit(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"steps\"}}");
    t->device = -1;
    t->named = 1u; /* tid 0 */
    *out = t;
    return VR_OK;
}

static void end_step(vr_trace *t)
{
    if (t->step < 1)
        return;
    emit(t, "{\"name\": \"step %lld\", \"cat\": \"step\", \"ph\": \"X\", \"pid\": 1, \"tid\": 0, \"ts\": %.3f, "
            "\"dur\": %.3f, \"args\": {\"step\": %lld}}",
         (long long)t->step, us(t, t->step_t0), (double)(t->step_t1 - t->step_t0) / 1e3, (long long)t->step);
}

/* The track's name, written before its first event. */
static void track(vr_trace *t, int tid)
{
    static const char *const names[] = {"steps", "nodes", "GPU copies", "GPU collectives", "host", "host updates"};
    if (t->named & (1u << tid))
        return;
    t->named |= 1u << tid;
    const char *name = tid == 1 && t->device == 1 ? "nodes (GPU compute stream)" : names[tid];
    emit(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}", tid,
         name);
}

static void slice(vr_trace *t, int tid, int node, uint64_t t0, uint64_t t1)
{
    const vr_node *n = &t->g->nodes[node];
    char name[sizeof n->name];
    clean(name, n->name, sizeof name);
    track(t, tid);
    emit(t, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"node\": %d, \"op\": \"%s\", \"step\": %lld}}",
         name, vr_phase_name(n->phase), tid, us(t, t0), t1 > t0 ? (double)(t1 - t0) / 1e3 : 0.0, node,
         vr_op_name(n->op), (long long)t->step);
}

static void counters(vr_trace *t, uint64_t live_ts, const uint64_t *live, uint64_t alloc_ts, long long allocated,
                     long long reserved)
{
    char args[512];
    int len = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        len += snprintf(args + len, sizeof args - (size_t)len, "%s\"%s\": %llu", r ? ", " : "",
                        vr_role_name((vr_role)r), (unsigned long long)live[r]);
    emit(t, "{\"name\": \"live bytes\", \"ph\": \"C\", \"pid\": 1, \"tid\": 0, \"ts\": %.3f, \"args\": {%s}}",
         us(t, live_ts), args);
    if (allocated >= 0)
        emit(t, "{\"name\": \"allocator\", \"ph\": \"C\", \"pid\": 1, \"tid\": 0, \"ts\": %.3f, "
                "\"args\": {\"allocated\": %lld, \"reserved\": %lld}}",
             us(t, alloc_ts), allocated, reserved);
}

/* The step's held nodes, each at its span on the device (e NULL or no span: its host time). */
static void flush(vr_trace *t, vr_exec *e)
{
    for (int k = 0; k < t->n_held; k++) {
        const held *h = &t->held[k];
        uint64_t a = h->t0, b = h->t1;
        int lane = 3; /* tid 4: the host */
        if (!e || !vr_exec_device_span(e, h->node, h->pass, &a, &b, &lane)) {
            a = h->t0;
            b = h->t1;
            lane = t->g->nodes[h->node].host ? 4 : 3; /* the offloaded updates run on a thread of their own */
        }
        if (k == 0 || a < t->step_t0)
            t->step_t0 = a;
        if (k == 0 || b > t->step_t1)
            t->step_t1 = b;
        slice(t, 1 + lane, h->node, a, b);
        t->live_ts = a > t->live_ts ? a : t->live_ts;
        t->alloc_ts = h->allocated >= 0 && a > t->alloc_ts ? a : t->alloc_ts;
        counters(t, t->live_ts, h->live, t->alloc_ts, h->allocated, h->reserved);
    }
    t->n_held = 0;
}

void vr_trace_on_node(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns)
{
    vr_trace *t = ctx;
    if (!t || !t->open)
        return;
    if (!t->g)
        t->g = vr_exec_plan(e)->graph;
    if (node < 0 || node >= t->g->n_nodes || vr_exec_plan(e)->graph != t->g)
        return; /* another executor's (the evaluation graph's) nodes are not traced */
    if (t->device < 0)
        t->device = vr_exec_device_times(e) ? 1 : 0;
    if (!t->origin_ns)
        t->origin_ns = t0_ns;
    if (node == 0 && (t->last_node < 0 || t->last_node == t->g->n_nodes - 1)) {
        if (t->n_held) /* a step that did not reach its last node */
            flush(t, NULL);
        end_step(t);
        t->step++;
        t->pass = 0;
        t->step_t0 = t0_ns;
    } else if (node == 0) {
        t->pass++;
    }
    t->last_node = node;
    vr_alloc *al = vr_exec_allocator(e);
    vr_alloc_stats s;
    if (al)
        vr_alloc_get_stats(al, &s);
    held h = {.node = node, .pass = t->pass, .t0 = t0_ns, .t1 = t1_ns, .allocated = -1, .reserved = -1};
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        h.live[r] = vr_exec_live(e, node, r);
    if (al) {
        h.allocated = (long long)s.allocated_bytes[VR_POOL_ALL].current;
        h.reserved = (long long)s.reserved_bytes[VR_POOL_ALL].current;
    }
    if (t->device != 1) { /* the host's time, written now */
        t->step_t1 = t1_ns;
        slice(t, 1, node, t0_ns, t1_ns);
        counters(t, t0_ns, h.live, t0_ns, h.allocated, h.reserved);
        return;
    }
    if (t->n_held == t->cap_held) {
        int cap = t->cap_held ? 2 * t->cap_held : 256;
        held *m = realloc(t->held, sizeof *m * (size_t)cap);
        if (!m)
            return; /* out of host memory: the node is left out of the trace */
        t->held = m;
        t->cap_held = cap;
    }
    t->held[t->n_held++] = h;
    if (node == t->g->n_nodes - 1)
        flush(t, e);
}

void vr_trace_instant(vr_trace *t, const char *name)
{
    if (!t || !t->open)
        return;
    char clean_name[256];
    clean(clean_name, name, sizeof clean_name);
    uint64_t now = vr_now_ns();
    if (!t->origin_ns)
        t->origin_ns = now;
    emit(t, "{\"name\": \"%s\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 1, \"tid\": 0, \"ts\": %.3f}", clean_name,
         us(t, now));
}

vr_status vr_trace_close(vr_trace *t, bool commit)
{
    if (!t)
        return VR_OK;
    vr_status st = VR_OK;
    if (commit) {
        if (t->n_held) /* a step that did not reach its last node (an OOM): its host times */
            flush(t, NULL);
        end_step(t);
        vr_atomic_write(&t->af, "\n]}\n", 4);
        st = vr_atomic_commit(&t->af);
    } else {
        vr_atomic_abort(&t->af);
    }
    free(t->held);
    free(t);
    return st;
}
