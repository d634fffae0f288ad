/* vram — learning-rate schedules: lr(step) as a pure function.
 *
 * Every schedule warms up linearly over the first warmup_steps
 * (lr_max * (step+1) / warmup_steps, as llm.c), then
 *   constant: lr_max;
 *   cosine:   decays from lr_max to lr_max * min_frac along half a cosine,
 *             reaching the minimum at total_steps and staying there after. */
#ifndef VRAM_SCHEDULE_H
#define VRAM_SCHEDULE_H

#include <stdint.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef enum vr_lr_kind {
    VR_LR_CONSTANT,
    VR_LR_COSINE,
} vr_lr_kind;

typedef struct vr_lr_schedule {
    vr_lr_kind kind;
    double lr_max;        /* peak learning rate */
    int64_t warmup_steps; /* >= 0 */
    int64_t total_steps;  /* cosine: steps until lr_max * min_frac is reached */
    double min_frac;      /* cosine: final lr as a fraction of lr_max, in [0,1] */
} vr_lr_schedule;

/* The learning rate for 0-based optimizer step `step`. */
double vr_lr_at(const vr_lr_schedule *s, int64_t step);

/* Checks the fields (lr > 0, warmup <= total for cosine, min_frac in [0,1]). */
vr_status vr_lr_check(const vr_lr_schedule *s);

/* Parses "constant" or "cosine"; errors name `what` (e.g. "--lr-schedule"). */
vr_status vr_lr_parse_kind(const char *text, const char *what, vr_lr_kind *out);

/* The name of a kind ("constant", "cosine"). */
const char *vr_lr_kind_name(vr_lr_kind kind);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
