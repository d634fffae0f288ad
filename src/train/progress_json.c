/* JSON Lines progress records (non-finite numbers become null): the step record, written every step, by
 * snprintf (cJSON's number printing took ~40 us a step on the lent GPU machines' host, while the GPU waited);
 * the rare ones with cJSON. */
#include "train/progress_json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
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

/* A bounded line: text appended while it fits (a record is ~300 bytes; memory names longer than the rest
 * leave it unwritten rather than cut). */
typedef struct line {
    char b[4096];
    size_t n;
} line;

static void put(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line *l, const char *fmt, ...)
{
    if (l->n >= sizeof l->b) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->b + l->n, sizeof l->b - l->n, fmt, ap);
    va_end(ap);
    l->n = k < 0 ? sizeof l->b : l->n + (size_t)k;
}

/* s as a JSON string: quotes, backslashes and control characters escaped */
static void str(line *l, const char *s)
{
    put(l, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') put(l, "\\%c", c);
        else if (c < 0x20) put(l, "\\u%04x", c);
        else put(l, "%c", c);
    }
    put(l, "\"");
}

/* ,"key":value: %.17g reads back to the same double; NaN and infinities are null */
static void num(line *l, const char *key, double v)
{
    if (isfinite(v)) put(l, ",\"%s\":%.17g", key, v);
    else put(l, ",\"%s\":null", key);
}

void vr_progress_json_step(FILE *out, int64_t total_steps, const vr_step_report *s, bool flush)
{
    line l = {.n = 0};
    put(&l, "{\"event\":\"step\",\"step\":%lld", (long long)s->step);
    if (total_steps > 0) put(&l, ",\"total_steps\":%lld", (long long)total_steps);
    num(&l, "loss", s->loss);
    num(&l, "lr", s->lr);
    num(&l, "ms", s->ms);
    put(&l, ",\"tokens\":%llu", (unsigned long long)s->tokens);
    num(&l, "tokens_per_s", s->ms > 0 ? (double)s->tokens * 1000.0 / s->ms : 0.0);
    if (isfinite(s->grad_norm) && s->grad_norm >= 0) num(&l, "grad_norm", s->grad_norm);
    if (s->loss_scale > 0) {
        num(&l, "loss_scale", s->loss_scale);
        put(&l, ",\"skipped\":%s", s->skipped ? "true" : "false");
    }
    if (s->nmem > 0) {
        put(&l, ",\"memory\":{");
        for (int i = 0; i < s->nmem; i++) {
            put(&l, "%s", i ? "," : "");
            str(&l, s->mem[i].name ? s->mem[i].name : "?");
            put(&l, ":%llu", (unsigned long long)s->mem[i].bytes);
        }
        put(&l, "}");
    }
    put(&l, "}\n");
    if (l.n >= sizeof l.b) return; /* cannot happen with these fields; never half a record */
    fwrite(l.b, 1, l.n, out);
    if (flush) fflush(out);
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
