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

#include "vram/fit.h"
#include "vram/plan.h"
#include "vram/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The report's data as a cJSON object (caller deletes; NULL when out of memory):
 * vr_plan_json's object (roles, peak, arena, dynamic, model, step) plus
 * "nodes" {name[], op[], phase[]}, "live" (n_nodes × 7 role bytes, row-major),
 * "peak_tensors" (the tensors live at the peak node) and, when fit is not
 * NULL, "fit" (vr_fit_json's object). title labels the page. Declared as
 * void * so this header does not need cJSON's. */
void *vr_report_data(const vr_plan *p, const vr_fit_result *fit, const char *title);

/* Writes the HTML page with data (a cJSON object from vr_report_data) embedded
 * to path through a temporary file renamed into place: on any error (VR_ERR_IO
 * naming the path) no file is left behind. */
vr_status vr_report_write_html(const char *path, const void *data);

/* The page around the data: prefix + JSON + suffix (report_page.c). */
extern const char vr_report_page_head[];
extern const char vr_report_page_tail[];

#ifdef __cplusplus
}
#endif
#endif
