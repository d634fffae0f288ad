/* Opening the files the train layer reads: file_io.h. */
#define _POSIX_C_SOURCE 200809L
#include "train/file_io.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

vr_status vr__file_open_read(const char *path, FILE **f, uint64_t *size)
{
    *size = 0;
    *f = NULL;
    struct stat pre; /* before fopen: a FIFO would block it, a directory opens and reads as garbage */
    if (stat(path, &pre) == 0 && S_ISDIR(pre.st_mode))
        return vr_error(VR_ERR_IO, "%s: is a directory, not a file", path);
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode))
        return vr_error(VR_ERR_IO, "%s: is not a regular file", path);
    *f = fopen(path, "rb");
    if (!*f)
        return vr_error(VR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(*f), &st) != 0) {
        vr_status s = vr_error(VR_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        fclose(*f);
        *f = NULL;
        return s;
    }
    *size = (uint64_t)st.st_size;
    return VR_OK;
}
