/* NVML through dlopen: the few entry points vram needs, declared here
 * because no nvml.h is installed (types and values from NVML's public API).
 * NVML stays initialised until the process exits. */
#define _GNU_SOURCE
#include "device/nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;                 /* NVML_SUCCESS = 0 */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlMemory_st {            /* nvmlMemory_t (v1): all in bytes */
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct nvmlMemory_v2_st {         /* nvmlMemory_v2_t: reserved split out of used */
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
#define NVML_VALUE_NOT_AVAILABLE (~0ull)

static struct {
    void *lib;
    nvmlReturn_t (*init)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*by_pci)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);  /* optional (R510+) */
    nvmlReturn_t (*processes)(nvmlDevice_t, unsigned *, void *);
    nvmlReturn_t (*driver_version)(char *, unsigned);
    vr_status status;
    char why[256];
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static const char *nv_err(nvmlReturn_t r)
{
    return nv.error_string ? nv.error_string(r) : "unknown NVML error";
}

static void *sym(const char *name)
{
    void *p = dlsym(nv.lib, name);
    if (!p && !nv.why[0])
        snprintf(nv.why, sizeof nv.why, "NVML: libnvidia-ml.so.1 has no %s", name);
    return p;
}

static void load(void)
{
    nv.status = VR_ERR_UNSUPPORTED;
    nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) {
        const char *e = dlerror();
        snprintf(nv.why, sizeof nv.why, "NVML: cannot load libnvidia-ml.so.1 (%s)", e ? e : "not found");
        return;
    }
    *(void **)&nv.init = sym("nvmlInit_v2");
    *(void **)&nv.error_string = sym("nvmlErrorString");
    *(void **)&nv.by_pci = sym("nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&nv.memory = sym("nvmlDeviceGetMemoryInfo");
    *(void **)&nv.memory_v2 = dlsym(nv.lib, "nvmlDeviceGetMemoryInfo_v2");
    *(void **)&nv.processes = sym("nvmlDeviceGetComputeRunningProcesses_v3");
    *(void **)&nv.driver_version = sym("nvmlSystemGetDriverVersion");
    if (!nv.init || !nv.error_string || !nv.by_pci || !nv.memory || !nv.driver_version)
        return;
    nv.why[0] = '\0';  /* per-process figures are optional (older drivers lack _v3) */
    nvmlReturn_t r = nv.init();
    if (r != NVML_SUCCESS) {
        snprintf(nv.why, sizeof nv.why, "NVML: nvmlInit_v2: %s", nv_err(r));
        return;
    }
    nv.status = VR_OK;
}

vr_status vr__nvml_init(void)
{
    pthread_once(&nv_once, load);
    if (nv.status != VR_OK)
        return vr_error(nv.status, "%s", nv.why);
    return VR_OK;
}

vr_status vr__nvml_device(const char *pci_bus_id, void **handle)
{
    vr_status st = vr__nvml_init();
    if (st != VR_OK)
        return st;
    nvmlDevice_t d;
    nvmlReturn_t r = nv.by_pci(pci_bus_id, &d);
    if (r != NVML_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "NVML: nvmlDeviceGetHandleByPciBusId_v2(%s): %s", pci_bus_id, nv_err(r));
    *handle = d;
    return VR_OK;
}

vr_status vr__nvml_memory(void *handle, vr_nvml_mem *out)
{
    nvmlMemory_v2_t m2 = {.version = NVML_MEMORY_V2};
    if (nv.memory_v2 && nv.memory_v2(handle, &m2) == NVML_SUCCESS) {
        *out = (vr_nvml_mem){m2.total, m2.free, m2.used, m2.reserved};
        return VR_OK;
    }
    nvmlMemory_t m;
    nvmlReturn_t r = nv.memory(handle, &m);
    if (r != NVML_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "NVML: nvmlDeviceGetMemoryInfo: %s", nv_err(r));
    *out = (vr_nvml_mem){m.total, m.free, m.used, 0};
    return VR_OK;
}

/* The record stride of nvmlDeviceGetComputeRunningProcesses_v3 differs between
 * drivers: 24 bytes (nvmlProcessInfo_v2_t: pid, usedGpuMemory, gpuInstanceId,
 * computeInstanceId) on most, 32 (with usedGpuCcProtectedMemory) on early
 * R535. The stride for which every record looks sane wins; pid sits at offset
 * 0 and usedGpuMemory at offset 8 either way. */
static int plausible(const unsigned char *buf, unsigned n, size_t stride)
{
    for (unsigned i = 0; i < n; i++) {
        unsigned pid;
        unsigned long long used;
        memcpy(&pid, buf + i * stride, sizeof pid);
        memcpy(&used, buf + i * stride + 8, sizeof used);
        if (pid == 0 || pid > (1u << 22) || (used > (1ull << 44) && used != NVML_VALUE_NOT_AVAILABLE))
            return 0;
    }
    return 1;
}

vr_status vr__nvml_process_used(void *handle, unsigned pid, int64_t *bytes)
{
    *bytes = -1;
    if (!nv.processes)
        return vr_error(VR_ERR_UNSUPPORTED, "NVML: this driver has no nvmlDeviceGetComputeRunningProcesses_v3");
    unsigned n = 16;
    unsigned char *buf = NULL;
    nvmlReturn_t r;
    for (int tries = 0; tries < 4; tries++) {
        unsigned cap = n + 8;
        free(buf);
        buf = calloc(cap, 32);  /* room for the widest record */
        if (!buf)
            return vr_error(VR_ERR_OOM, "NVML: no host memory for the process list");
        n = cap;
        r = nv.processes(handle, &n, buf);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE)
            break;
    }
    if (r != NVML_SUCCESS) {
        free(buf);
        return vr_error(VR_ERR_DEVICE, "NVML: nvmlDeviceGetComputeRunningProcesses_v3: %s", nv_err(r));
    }
    static const size_t strides[] = {24, 32, 16};
    for (size_t s = 0; s < 3; s++) {
        if (!plausible(buf, n, strides[s]))
            continue;
        for (unsigned i = 0; i < n; i++) {
            unsigned p;
            unsigned long long used;
            memcpy(&p, buf + i * strides[s], sizeof p);
            memcpy(&used, buf + i * strides[s] + 8, sizeof used);
            if (p == pid && used != NVML_VALUE_NOT_AVAILABLE)
                *bytes = (int64_t)used;
        }
        break;
    }
    free(buf);
    return VR_OK;
}

vr_status vr__nvml_driver_version(char *buf, size_t cap)
{
    vr_status st = vr__nvml_init();
    if (st != VR_OK)
        return st;
    nvmlReturn_t r = nv.driver_version(buf, (unsigned)cap);
    if (r != NVML_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "NVML: nvmlSystemGetDriverVersion: %s", nv_err(r));
    return VR_OK;
}
