/* vram util — the library's version, from project(VERSION) through the generated vram/version.h, and the
 * text of the versions the libraries it loads report. */
#include "vram/version.h"

#include <stdio.h>

#include "vram/util.h"

const char *vr_version(void) { return VR_VERSION_STRING; }

char *vr_format_version3(int v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return buf;
}
