/* Thread-local error message behind vr_error() / vr_last_error(). */
#include "vram/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

vr_status vr_error(vr_status s, const char *fmt, ...)
{
    /* formatted apart first: callers may pass vr_last_error() itself as an argument (overlapping
     * vsnprintf source and destination is UB) */
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return s;
}

const char *vr_last_error(void) { return last_error; }

void vr_clear_error(void) { last_error[0] = '\0'; }

const char *vr_status_name(vr_status s)
{
    switch (s) {
    case VR_OK: return "ok";
    case VR_ERR_INVALID: return "invalid argument";
    case VR_ERR_OOM: return "out of memory";
    case VR_ERR_IO: return "i/o error";
    case VR_ERR_FORMAT: return "bad format";
    case VR_ERR_DEVICE: return "device error";
    case VR_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}
