/* The Chrome/Perfetto trace of a run (vram/prof.h): events are appended to a
 * temporary file as the executor reports each node; the closing bracket and
 * the rename come at vr_trace_close.
 *
 * Tracks (pid 1): tid 0 "steps" (a slice per optimizer step, emitted when the
 * next one begins), tid 1 "nodes" (a slice per node per pass, the host's time: a
 * launch for a device node, the work itself for a host node of an offloaded
 * step), and with the executor's device times (CUDA) tid 2 "GPU compute" and
 * tid 3 "GPU copies" (offload): each node's span on the device in the last pass
 * of a step, emitted after the step's last node. A step starts
 * at node 0 after the last node of the graph ran (micro-batch passes of one
 * step restart at node 0 without reaching the optimizer nodes). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/atomic_file.h"
#include "vram/prof.h"
#include "vram/util.h"

struct vr_trace {
    vr_atomic_file af;
    const vr_graph *g;
    bool open, any;            /* any: an event was written (comma before the next) */
    uint64_t origin_ns;        /* host clock of the first node: ts 0 */
    int64_t step;              /* 1-based step of the nodes being reported; 0 before the first */
    int last_node;             /* previous node reported, -1 */
    uint64_t step_t0, step_t1; /* host ns of the current step's first node start and last node end */
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
    emit(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": \"nodes\"}}");
    emit(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 2, \"args\": {\"name\": \"GPU compute\"}}");
    emit(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 3, \"args\": {\"name\": \"GPU copies\"}}");
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

/* The step's spans on the device (when the executor keeps them). */
static void device_spans(vr_trace *t, vr_exec *e)
{
    for (int i = 0; i < t->g->n_nodes; i++) {
        uint64_t a, b;
        int lane;
        if (!vr_exec_device_span(e, i, &a, &b, &lane))
            continue;
        char name[sizeof t->g->nodes[i].name];
        clean(name, t->g->nodes[i].name, sizeof name);
        emit(t, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, "
                "\"dur\": %.3f, \"args\": {\"node\": %d, \"op\": \"%s\", \"step\": %lld}}",
             name, vr_phase_name(t->g->nodes[i].phase), 2 + lane, us(t, a), b > a ? (double)(b - a) / 1e3 : 0.0, i,
             vr_op_name(t->g->nodes[i].op), (long long)t->step);
    }
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
    if (!t->origin_ns)
        t->origin_ns = t0_ns;
    if (node == 0 && (t->last_node < 0 || t->last_node == t->g->n_nodes - 1)) {
        end_step(t);
        t->step++;
        t->step_t0 = t0_ns;
    }
    t->step_t1 = t1_ns;
    t->last_node = node;
    const vr_node *n = &t->g->nodes[node];
    char name[sizeof n->name];
    clean(name, n->name, sizeof name);
    emit(t, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"node\": %d, \"op\": \"%s\", \"step\": %lld}}",
         name, vr_phase_name(n->phase), us(t, t0_ns), (double)(t1_ns - t0_ns) / 1e3, node, vr_op_name(n->op),
         (long long)t->step);
    char args[512];
    int len = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        len += snprintf(args + len, sizeof args - (size_t)len, "%s\"%s\": %llu", r ? ", " : "",
                        vr_role_name((vr_role)r), (unsigned long long)vr_exec_live(e, node, r));
    emit(t, "{\"name\": \"live bytes\", \"ph\": \"C\", \"pid\": 1, \"tid\": 0, \"ts\": %.3f, \"args\": {%s}}",
         us(t, t0_ns), args);
    if (node == t->g->n_nodes - 1)
        device_spans(t, e);
    vr_alloc *a = vr_exec_allocator(e);
    if (a) {
        vr_alloc_stats s;
        vr_alloc_get_stats(a, &s);
        emit(t, "{\"name\": \"allocator\", \"ph\": \"C\", \"pid\": 1, \"tid\": 0, \"ts\": %.3f, "
                "\"args\": {\"allocated\": %lld, \"reserved\": %lld}}",
             us(t, t0_ns), (long long)s.allocated_bytes[VR_POOL_ALL].current,
             (long long)s.reserved_bytes[VR_POOL_ALL].current);
    }
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
        end_step(t);
        vr_atomic_write(&t->af, "\n]}\n", 4);
        st = vr_atomic_commit(&t->af);
    } else {
        vr_atomic_abort(&t->af);
    }
    free(t);
    return st;
}
