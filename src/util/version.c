/* vram util — the library's version, from project(VERSION) through the generated vram/version.h. */
#include "vram/version.h"

const char *vr_version(void) { return VR_VERSION_STRING; }
