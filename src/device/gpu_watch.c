/* vram watch's figures (vram/device.h): NVML's device-wide view of every GPU. */
#include "device/nvml.h"
#include "vram/device.h"

vr_status vr_gpu_count(int *n) { return vr__nvml_count(n); }

vr_status vr_gpu_sample_get(int index, vr_gpu_sample *out) { return vr__nvml_sample(index, out); }
