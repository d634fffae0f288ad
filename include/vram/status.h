/* vram — status codes and the thread-local error message.
 *
 * Every fallible vr_ function returns a vr_status. On failure it has also
 * stored a one-line, human-readable message (naming the file, field or flag at
 * fault) that vr_last_error() returns until the next failure on this thread. */
#ifndef VRAM_STATUS_H
#define VRAM_STATUS_H

#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef enum vr_status {
    VR_OK = 0,
    VR_ERR_INVALID,     /* bad argument, flag or configuration */
    VR_ERR_OOM,         /* a device (or host) could not provide the memory */
    VR_ERR_IO,          /* a file could not be read or written */
    VR_ERR_FORMAT,      /* a file was read but its contents are wrong */
    VR_ERR_DEVICE,      /* the device or its driver reported an error */
    VR_ERR_UNSUPPORTED, /* not available in this build or on this device */
} vr_status;

/* Stores the formatted message as this thread's last error and returns s. */
vr_status vr_error(vr_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The message stored by the last failing call on this thread ("" if none). */
const char *vr_last_error(void);

/* Forgets this thread's last error message. */
void vr_clear_error(void);

/* A short constant name for a status ("ok", "out of memory", ...). */
const char *vr_status_name(vr_status s);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
