/* Internal: the JSON Lines records of progress.c (one object per line). */
#ifndef VRAM_TRAIN_PROGRESS_JSON_H
#define VRAM_TRAIN_PROGRESS_JSON_H

#include <stdbool.h>

#include "vram/progress.h"

/* {"event":"step","step":..,"total_steps":..,"loss":..,"lr":..,"ms":..,
 *  "tokens_per_s":..,"grad_norm":..,"memory":{name:bytes,...}}; flush: then fflush(out). */
void vr_progress_json_step(FILE *out, int64_t total_steps, const vr_step_report *s, bool flush);

/* {"event":"eval","step":..,"val_loss":..} */
void vr_progress_json_eval(FILE *out, int64_t step, double val_loss);

/* {"event":"note","message":..} */
void vr_progress_json_note(FILE *out, const char *message);

#endif
