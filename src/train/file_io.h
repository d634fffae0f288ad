/* Inside the train layer: opening the files it reads (text, token, model and
 * state files). */
#ifndef VRAM_TRAIN_FILE_IO_H
#define VRAM_TRAIN_FILE_IO_H

#include <stdint.h>
#include <stdio.h>

#include "vram/status.h"

/* Opens path for reading ("rb") and gives its size in bytes; VR_ERR_IO
 * ("<path>: cannot open: ..." or "cannot stat: ...") with *f NULL on failure. */
vr_status vr__file_open_read(const char *path, FILE **f, uint64_t *size);

#endif
