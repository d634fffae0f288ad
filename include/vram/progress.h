/* vram — progress reporting for training loops.
 *
 * Three styles: on a terminal, one line redrawn in place (a bar with
 * step/total, loss, tokens/s, ETA and memory); elsewhere, one plain line per
 * step; with --json, one JSON object per line (JSON Lines):
 *   {"event":"step","step":12,"total_steps":1000,"loss":2.31,"lr":0.0003,
 *    "ms":45.1,"tokens_per_s":90800,"grad_norm":1.2,"memory":{"peak":123456}}
 * Memory figures are bytes named by the caller (e.g. "allocated", "peak"). */
#ifndef VRAM_PROGRESS_H
#define VRAM_PROGRESS_H

#include <stdint.h>
#include <stdio.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef enum vr_progress_mode {
    VR_PROGRESS_AUTO,  /* BAR when the stream is a terminal, else LINES */
    VR_PROGRESS_BAR,   /* one line redrawn with '\r' */
    VR_PROGRESS_LINES, /* a plain line per reported step */
    VR_PROGRESS_JSON,  /* a JSON object per line */
    VR_PROGRESS_QUIET, /* nothing */
} vr_progress_mode;

typedef struct vr_progress_opts {
    vr_progress_mode mode;
    int64_t total_steps; /* for step/total, the bar and the ETA; 0 if unknown */
    int64_t every;       /* LINES: report every n-th step (and the last); 0 = 1 */
} vr_progress_opts;

typedef struct vr_progress_mem {
    const char *name; /* e.g. "allocated", "reserved", "peak" */
    uint64_t bytes;
} vr_progress_mem;

typedef struct vr_step_report {
    int64_t step;     /* optimizer steps completed, 1-based */
    double loss;      /* mean training loss of the step */
    double lr;        /* learning rate used */
    double ms;        /* wall time of the step, milliseconds */
    uint64_t tokens;  /* tokens processed in the step (B*T*accumulation) */
    double grad_norm; /* global gradient norm; NAN (or < 0) when not computed */
    int nmem;
    const vr_progress_mem *mem; /* nmem memory figures, bytes */
    double loss_scale; /* fp16: the dynamic loss scale of the step; 0 (not shown) otherwise */
    int skipped;       /* fp16: the update was skipped (the gradients overflowed) */
} vr_step_report;

typedef struct vr_progress vr_progress;

/* Starts reporting to `out` (e.g. stdout); AUTO picks BAR if out is a tty. */
vr_status vr_progress_open(FILE *out, const vr_progress_opts *opts, vr_progress **p);

/* The mode in effect (AUTO resolved). */
vr_progress_mode vr_progress_get_mode(const vr_progress *p);

/* Reports one finished step (the bar redraws at most every 100 ms, and on the last step). */
void vr_progress_step(vr_progress *p, const vr_step_report *s);

/* Reports an evaluation: validation loss after `step` steps. */
void vr_progress_eval(vr_progress *p, int64_t step, double val_loss);

/* Prints a message line without breaking the bar (JSON: {"event":"note",...}). */
void vr_progress_note(vr_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends the bar's line and frees (NULL is fine). */
void vr_progress_close(vr_progress *p);

/* Formats seconds as "45s", "12m03s" or "3h07m". Returns buf. */
char *vr_format_duration(double seconds, char *buf, size_t cap);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
