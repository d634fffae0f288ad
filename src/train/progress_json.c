/* JSON Lines progress records, built with cJSON (non-finite numbers become null). */
#include "train/progress_json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

static void emit(FILE *out, cJSON *o)
{
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    if (text) {
        fputs(text, out);
        fputc('\n', out);
        fflush(out);
    }
    free(text);
    cJSON_Delete(o);
}

void vr_progress_json_step(FILE *out, int64_t total_steps, const vr_step_report *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", "step");
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    if (total_steps > 0) cJSON_AddNumberToObject(o, "total_steps", (double)total_steps);
    cJSON_AddNumberToObject(o, "loss", s->loss);
    cJSON_AddNumberToObject(o, "lr", s->lr);
    cJSON_AddNumberToObject(o, "ms", s->ms);
    cJSON_AddNumberToObject(o, "tokens", (double)s->tokens);
    cJSON_AddNumberToObject(o, "tokens_per_s", s->ms > 0 ? (double)s->tokens * 1000.0 / s->ms : 0.0);
    if (isfinite(s->grad_norm) && s->grad_norm >= 0) cJSON_AddNumberToObject(o, "grad_norm", s->grad_norm);
    if (s->loss_scale > 0) {
        cJSON_AddNumberToObject(o, "loss_scale", s->loss_scale);
        cJSON_AddBoolToObject(o, "skipped", s->skipped);
    }
    if (s->nmem > 0) {
        cJSON *m = cJSON_AddObjectToObject(o, "memory");
        for (int i = 0; m && i < s->nmem; i++)
            cJSON_AddNumberToObject(m, s->mem[i].name ? s->mem[i].name : "?", (double)s->mem[i].bytes);
    }
    emit(out, o);
}

void vr_progress_json_eval(FILE *out, int64_t step, double val_loss)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", "eval");
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "val_loss", val_loss);
    emit(out, o);
}

void vr_progress_json_note(FILE *out, const char *message)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", "note");
    cJSON_AddStringToObject(o, "message", message);
    emit(out, o);
}
