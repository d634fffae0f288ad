/* vram — seeing where memory goes: the self-contained HTML report.
 *
 * The report is one HTML file with no network access: the page's figures live
 * in one embedded JSON blob (vr_report_data) that a little inline JavaScript
 * renders as SVG: the step's live bytes per role over its nodes (and, in
 * dynamic mode, the caching allocator's allocated/reserved curves), the
 * tensors live at the peak, the fitter's what-if table and a glossary.
 * All byte figures are exact integers, the same as `vram plan --json`'s. */
#ifndef VRAM_PROF_H
#define VRAM_PROF_H

#include <stdbool.h>
#include <stdint.h>

#include "vram/exec.h"
#include "vram/fit.h"
#include "vram/plan.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

/* What a measured run adds to the report (vram report --run): per node of the plan's graph. */
typedef struct vr_report_run {
    int steps;                 /* optimizer steps run */
    const char *device;        /* where ("cpu", "cuda") */
    const double *node_ms;     /* [n_nodes] mean host ms per pass of the node */
    const uint64_t *live;      /* [n_nodes] measured live bytes (all roles) during the node */
} vr_report_run;

/* The report's data as a cJSON object (caller deletes; NULL when out of memory):
 * vr_plan_json's object (roles, peak, arena, dynamic, model, step) plus
 * "nodes" {name[], op[], phase[]}, "live" (n_nodes × 7 role bytes, row-major),
 * "peak_tensors" (the tensors live at the peak node), when fit is not
 * NULL "fit" (vr_fit_json's object), when run is not NULL "run" {steps,
 * device, node_ms[], live[]}. title labels the page. Declared as
 * void * so this header does not need cJSON's. */
void *vr_report_data(const vr_plan *p, const vr_fit_result *fit, const vr_report_run *run, const char *title);

/* Writes the HTML page with data (a cJSON object from vr_report_data) embedded
 * to path through a temporary file renamed into place: on any error (VR_ERR_IO
 * naming the path) no file is left behind. */
vr_status vr_report_write_html(const char *path, const void *data);

/* ------------------------------------------------------------ Chrome/Perfetto traces
 * A run's trace in the trace-event JSON format ({"traceEvents": [...]}; open it in
 * ui.perfetto.dev or chrome://tracing): on pid 1, thread 1 a complete ("X") slice per
 * node per pass (host clock; args: op, phase, step), thread 0 a slice per step; a
 * counter ("C") track "live bytes" with the bytes per role at each node and, with the
 * caching allocator, a track "allocator" with its allocated and reserved bytes;
 * instant ("i") events for what vr_trace_instant records (checkpoints, OOM).
 * Timestamps in µs from the first node. Written through a temporary file renamed
 * into place by vr_trace_close. */
typedef struct vr_trace vr_trace;

/* Starts a trace to be written to path (a temporary file beside it until
 * vr_trace_close). VR_ERR_IO naming path when it cannot be written. The nodes are
 * named from the graph of the executor that reports them. */
vr_status vr_trace_open(const char *path, vr_trace **out);

/* The executor hook (vr_exec_config.on_node / vr_train_config.on_node; ctx is the vr_trace). */
void vr_trace_on_node(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns);

/* An instant event named name (e.g. "checkpoint model.bin", "OOM") at the host clock now. */
void vr_trace_instant(vr_trace *t, const char *name);

/* Finishes the JSON and renames it into place (commit) or removes it (!commit); frees t.
 * Returns the first write error (VR_ERR_IO naming the path). */
vr_status vr_trace_close(vr_trace *t, bool commit);

/* The page around the data: prefix + JSON + suffix (report_page.c). */
extern const char vr_report_page_head[];
extern const char vr_report_page_tail[];

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
