/* vram exec — per-node GPU time of the CUDA backend (see cuda_prof.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda_prof.h"

struct vr_cuda_prof {
    int n;          /* nodes */
    void **ev;      /* n + 1 events: before node i, after the last */
    bool *rec;      /* ev[i] recorded this step */
    double *ms;     /* per node, summed over the counted steps */
    int seen;       /* steps read back (the first is not counted) */
    bool pending;   /* a step ended and was not read back */
};

vr_status vr__cuda_prof_new(int n_nodes, bool enabled, vr_cuda_prof **out)
{
    *out = NULL;
    if (!enabled)
        return VR_OK;
    vr_cuda_prof *p = calloc(1, sizeof *p);
    if (p) {
        p->n = n_nodes;
        p->ev = calloc((size_t)n_nodes + 1, sizeof *p->ev);
        p->rec = calloc((size_t)n_nodes + 1, sizeof *p->rec);
        p->ms = calloc((size_t)n_nodes, sizeof *p->ms);
    }
    if (!p || !p->ev || !p->rec || !p->ms) {
        vr__cuda_prof_end(p, NULL);
        return vr_error(VR_ERR_OOM, "exec: profiler: out of host memory");
    }
    vr_status st = vr_cuda_events_create(p->ev, n_nodes + 1);
    if (st) {
        memset(p->ev, 0, ((size_t)n_nodes + 1) * sizeof *p->ev);
        vr__cuda_prof_end(p, NULL);
        return st;
    }
    *out = p;
    return VR_OK;
}

/* Adds the step that ended to the sums (the first one only counts as seen). */
static vr_status collect(vr_cuda_prof *p)
{
    if (!p->pending)
        return VR_OK;
    p->pending = false;
    if (p->seen++ == 0)
        return VR_OK;
    for (int i = 0; i < p->n; i++) {
        if (!p->rec[i])
            continue;
        int j = i + 1;
        while (j < p->n && !p->rec[j])
            j++;
        float ms = 0;
        vr_status st = vr_cuda_event_ms(p->ev[i], p->ev[j], &ms);
        if (st)
            return st;
        p->ms[i] += ms;
    }
    return VR_OK;
}

vr_status vr__cuda_prof_before(vr_cuda_prof *p, const vr_cuda_ctx *ctx, int i)
{
    if (!p)
        return VR_OK;
    if (i == 0 && p->pending) { /* a new step (a later micro-batch's pass re-records its events) */
        vr_status st = collect(p);
        if (st)
            return st;
        memset(p->rec, 0, ((size_t)p->n + 1) * sizeof *p->rec);
    }
    p->rec[i] = true;
    return vr_cuda_event_record(ctx, p->ev[i]);
}

vr_status vr__cuda_prof_after(vr_cuda_prof *p, const vr_cuda_ctx *ctx, int i)
{
    if (!p || i != p->n - 1)
        return VR_OK;
    p->rec[p->n] = true;
    p->pending = true;
    return vr_cuda_event_record(ctx, p->ev[p->n]);
}

typedef struct row {
    char key[VR_NAME_MAX + 8];
    double ms;
    int nodes;
} row;

static int by_ms(const void *a, const void *b)
{
    double x = ((const row *)a)->ms, y = ((const row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* "h.6.attproj.bwd" -> "h.*.attproj.bwd" */
static void strip_layer(const char *name, char *out, size_t cap)
{
    const char *d = strchr(name, '.');
    if (d && d[1] >= '0' && d[1] <= '9') {
        const char *e = d + 1;
        while (*e >= '0' && *e <= '9')
            e++;
        snprintf(out, cap, "%.*s.*%s", (int)(d - name), name, e);
    } else {
        snprintf(out, cap, "%s", name);
    }
}

static int add_row(row *rows, int n, const char *key, double ms)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(rows[k].key, key)) {
            rows[k].ms += ms;
            rows[k].nodes++;
            return n;
        }
    snprintf(rows[n].key, sizeof rows[n].key, "%s", key);
    rows[n].ms = ms;
    rows[n].nodes = 1;
    return n + 1;
}

static void print_rows(row *rows, int n, double steps, double total, const char *title)
{
    qsort(rows, (size_t)n, sizeof *rows, by_ms);
    fprintf(stderr, "  %-34s %10s %6s %6s\n", title, "ms/step", "%", "nodes");
    for (int k = 0; k < n; k++)
        if (rows[k].ms > 0)
            fprintf(stderr, "  %-34s %10.3f %6.1f %6d\n", rows[k].key, rows[k].ms / steps,
                    100.0 * rows[k].ms / total, rows[k].nodes);
}

void vr__cuda_prof_end(vr_cuda_prof *p, const vr_graph *g)
{
    if (!p)
        return;
    if (g && collect(p) == VR_OK && p->seen > 1) {
        double steps = p->seen - 1, total = 0;
        row *rows = calloc((size_t)p->n, sizeof *rows);
        if (rows) {
            for (int i = 0; i < p->n; i++)
                total += p->ms[i];
            fprintf(stderr, "vram profile: GPU time per node, mean of %d steps after the first: "
                            "%.3f ms/step\n", (int)steps, total / steps);
            int n = 0;
            for (int i = 0; i < p->n; i++)
                n = add_row(rows, n, vr_op_name(g->nodes[i].op), p->ms[i]);
            print_rows(rows, n, steps, total > 0 ? total : 1, "by op");
            n = 0;
            for (int i = 0; i < p->n; i++) {
                char key[VR_NAME_MAX + 8];
                strip_layer(g->nodes[i].name, key, sizeof key);
                n = add_row(rows, n, key, p->ms[i]);
            }
            print_rows(rows, n, steps, total > 0 ? total : 1, "by node name");
            free(rows);
        }
    }
    if (p->ev)
        vr_cuda_events_destroy(p->ev, p->n + 1);
    free(p->ev);
    free(p->rec);
    free(p->ms);
    free(p);
}
