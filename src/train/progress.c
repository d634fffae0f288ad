/* Progress reporting: a redrawn bar on terminals, plain lines elsewhere, or
 * JSON Lines (progress_json.c). The caller passes every figure in, memory
 * included; this file only formats and paces the output. */
#define _DEFAULT_SOURCE /* isatty, fileno, ioctl(TIOCGWINSZ) */
#include "vram/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "train/progress_json.h"
#include "vram/util.h"

#define REDRAW_NS 100000000ull /* bar redraw interval, and JSON lines' flush interval: 100 ms */

struct vr_progress {
    FILE *out;
    vr_progress_mode mode;
    int64_t total, every;
    double ema_ms;        /* smoothed step time, for the ETA */
    uint64_t last_draw_ns; /* the bar's last redraw; JSON: the last flush */
    int bar_shown;        /* a bar line is on screen (not yet ended by '\n') */
    char line[512];       /* the last bar drawn, redrawn after notes */
};

char *vr_format_duration(double seconds, char *buf, size_t cap)
{
    if (!(seconds >= 0) || !isfinite(seconds)) {
        snprintf(buf, cap, "?");
        return buf;
    }
    long long s = (long long)(seconds + 0.5);
    if (s < 60) snprintf(buf, cap, "%llds", s);
    else if (s < 3600) snprintf(buf, cap, "%lldm%02llds", s / 60, s % 60);
    else snprintf(buf, cap, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
    return buf;
}

static int terminal_width(FILE *out)
{
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
    const char *cols = getenv("COLUMNS");
    int c = cols ? atoi(cols) : 0;
    return c > 20 ? c : 100;
}

vr_status vr_progress_open(FILE *out, const vr_progress_opts *opts, vr_progress **p)
{
    *p = calloc(1, sizeof **p);
    if (!*p) return vr_error(VR_ERR_OOM, "progress: out of host memory");
    (*p)->out = out;
    (*p)->mode = opts->mode;
    if ((*p)->mode == VR_PROGRESS_AUTO) (*p)->mode = isatty(fileno(out)) ? VR_PROGRESS_BAR : VR_PROGRESS_LINES;
    (*p)->total = opts->total_steps > 0 ? opts->total_steps : 0;
    (*p)->every = opts->every > 0 ? opts->every : 1;
    return VR_OK;
}

vr_progress_mode vr_progress_get_mode(const vr_progress *p) { return p->mode; }

/* "12.3k" style rate. */
static void format_rate(double v, char *buf, size_t cap)
{
    if (v >= 1e6) snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, cap, "%.1fk", v / 1e3);
    else snprintf(buf, cap, "%.0f", v);
}

/* Appends printf output to buf at *len, never past cap. */
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0) *len = *len + (size_t)k < cap ? *len + (size_t)k : cap - 1;
}

static void append_memory(char *buf, size_t cap, size_t *len, const vr_step_report *s, const char *sep)
{
    char size[32];
    for (int i = 0; i < s->nmem; i++)
        append(buf, cap, len, "%s%s %s", sep, s->mem[i].name ? s->mem[i].name : "?",
               vr_format_size(s->mem[i].bytes, size, sizeof size));
}

static void draw_bar(vr_progress *p, const vr_step_report *s)
{
    char rate[32], eta[32];
    size_t len = 0, cap = sizeof p->line;
    char *b = p->line;
    format_rate(s->ms > 0 ? (double)s->tokens * 1000.0 / s->ms : 0, rate, sizeof rate);
    if (p->total > 0) {
        const int width = 20;
        int filled = (int)((double)width * (double)s->step / (double)p->total);
        filled = filled < 0 ? 0 : filled > width ? width : filled;
        append(b, cap, &len, "%lld/%lld [", (long long)s->step, (long long)p->total);
        for (int i = 0; i < width; i++) append(b, cap, &len, "%c", i < filled ? '#' : '.');
        append(b, cap, &len, "] loss %.4f  %s tok/s  eta %s", s->loss, rate,
               vr_format_duration(p->ema_ms * (double)(p->total - s->step) / 1000.0, eta, sizeof eta));
    } else {
        append(b, cap, &len, "step %lld  loss %.4f  %s tok/s", (long long)s->step, s->loss, rate);
    }
    append_memory(b, cap, &len, s, "  ");
    int w = terminal_width(p->out) - 1;
    if ((size_t)w < len) b[w] = '\0';
    fprintf(p->out, "\r%s\033[K", b);
    fflush(p->out);
    p->bar_shown = 1;
}

static void print_line(vr_progress *p, const vr_step_report *s)
{
    char line[512], rate[32];
    size_t len = 0;
    format_rate(s->ms > 0 ? (double)s->tokens * 1000.0 / s->ms : 0, rate, sizeof rate);
    if (p->total > 0) append(line, sizeof line, &len, "step %lld/%lld", (long long)s->step, (long long)p->total);
    else append(line, sizeof line, &len, "step %lld", (long long)s->step);
    append(line, sizeof line, &len, " | loss %.6f | lr %.2e | %.1f ms | %s tok/s", s->loss, s->lr, s->ms, rate);
    if (isfinite(s->grad_norm) && s->grad_norm >= 0) append(line, sizeof line, &len, " | norm %.4f", s->grad_norm);
    if (s->loss_scale > 0) append(line, sizeof line, &len, " | scale %g%s", s->loss_scale,
                                  s->skipped ? " (overflow: update skipped)" : "");
    append_memory(line, sizeof line, &len, s, " | ");
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
}

void vr_progress_step(vr_progress *p, const vr_step_report *s)
{
    if (!p) return;
    p->ema_ms = p->ema_ms > 0 ? 0.9 * p->ema_ms + 0.1 * s->ms : s->ms;
    int last = p->total > 0 && s->step >= p->total;
    switch (p->mode) {
    case VR_PROGRESS_BAR: {
        uint64_t now = vr_now_ns();
        if (last || !p->bar_shown || now - p->last_draw_ns >= REDRAW_NS) {
            draw_bar(p, s);
            p->last_draw_ns = now;
        }
        break;
    }
    case VR_PROGRESS_LINES:
        if (last || s->step % p->every == 0 || s->step == 1) print_line(p, s);
        break;
    case VR_PROGRESS_JSON: { /* a record every step, flushed at most every 100 ms (and the last): a flush is a
                              * system call, and the GPU waits for the host between steps */
        uint64_t now = vr_now_ns();
        bool flush = last || now - p->last_draw_ns >= REDRAW_NS;
        vr_progress_json_step(p->out, p->total, s, flush);
        if (flush) p->last_draw_ns = now;
        break;
    }
    default: break;
    }
}

/* Writes one whole line above the bar (or plainly), then restores the bar. */
static void message_line(vr_progress *p, const char *text)
{
    if (p->mode == VR_PROGRESS_BAR && p->bar_shown) {
        fprintf(p->out, "\r\033[K%s\n%s", text, p->line);
    } else {
        fprintf(p->out, "%s\n", text);
    }
    fflush(p->out);
}

void vr_progress_eval(vr_progress *p, int64_t step, double val_loss)
{
    if (!p || p->mode == VR_PROGRESS_QUIET) return;
    if (p->mode == VR_PROGRESS_JSON) {
        vr_progress_json_eval(p->out, step, val_loss);
        return;
    }
    char text[128];
    snprintf(text, sizeof text, "step %lld: val loss %.6f", (long long)step, val_loss);
    message_line(p, text);
}

void vr_progress_note(vr_progress *p, const char *fmt, ...)
{
    if (!p || p->mode == VR_PROGRESS_QUIET) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (p->mode == VR_PROGRESS_JSON) vr_progress_json_note(p->out, text);
    else message_line(p, text);
}

void vr_progress_close(vr_progress *p)
{
    if (!p) return;
    fflush(p->out); /* JSON step records not flushed yet */
    if (p->mode == VR_PROGRESS_BAR && p->bar_shown) {
        fputc('\n', p->out);
        fflush(p->out);
    }
    free(p);
}
