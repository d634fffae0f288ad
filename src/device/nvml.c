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
    /* optional, for vram watch */
    nvmlReturn_t (*count)(unsigned *);
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*utilization)(nvmlDevice_t, unsigned *);   /* nvmlUtilization_t: gpu, memory (%) */
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned *); /* sensor 0: the GPU die, °C */
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned *);         /* milliwatts */
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
    *(void **)&nv.count = dlsym(nv.lib, "nvmlDeviceGetCount_v2");
    *(void **)&nv.by_index = dlsym(nv.lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nv.name = dlsym(nv.lib, "nvmlDeviceGetName");
    *(void **)&nv.utilization = dlsym(nv.lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&nv.temperature = dlsym(nv.lib, "nvmlDeviceGetTemperature");
    *(void **)&nv.power = dlsym(nv.lib, "nvmlDeviceGetPowerUsage");
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

/* The compute processes on a GPU: up to cap (pid, bytes) pairs (bytes -1: not reported); *n the count. */
vr_status vr__nvml_processes(void *handle, unsigned *pids, int64_t *bytes, int cap, int *n_out)
{
    *n_out = 0;
    if (!nv.processes)
        return vr_error(VR_ERR_UNSUPPORTED, "NVML: this driver has no nvmlDeviceGetComputeRunningProcesses_v3");
    unsigned n = 16;
    unsigned char *buf = NULL;
    nvmlReturn_t r;
    for (int tries = 0; tries < 4; tries++) {
        unsigned room = n + 8;
        free(buf);
        buf = calloc(room, 32);  /* room for the widest record */
        if (!buf)
            return vr_error(VR_ERR_OOM, "NVML: no host memory for the process list");
        n = room;
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
        for (unsigned i = 0; i < n && *n_out < cap; i++) {
            unsigned p;
            unsigned long long used;
            memcpy(&p, buf + i * strides[s], sizeof p);
            memcpy(&used, buf + i * strides[s] + 8, sizeof used);
            pids[*n_out] = p;
            bytes[(*n_out)++] = used == NVML_VALUE_NOT_AVAILABLE ? -1 : (int64_t)used;
        }
        break;
    }
    free(buf);
    return VR_OK;
}

vr_status vr__nvml_process_used(void *handle, unsigned pid, int64_t *bytes)
{
    *bytes = -1;
    unsigned pids[256];
    int64_t used[256];
    int n = 0;
    vr_status st = vr__nvml_processes(handle, pids, used, 256, &n);
    for (int i = 0; i < n; i++)
        if (pids[i] == pid)
            *bytes = used[i];
    return st;
}

vr_status vr__nvml_count(int *n)
{
    *n = 0;
    vr_status st = vr__nvml_init();
    if (st != VR_OK)
        return st;
    unsigned c = 0;
    if (!nv.count || !nv.by_index)
        return vr_error(VR_ERR_UNSUPPORTED, "NVML: this driver has no nvmlDeviceGetCount_v2");
    nvmlReturn_t r = nv.count(&c);
    if (r != NVML_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "NVML: nvmlDeviceGetCount_v2: %s", nv_err(r));
    *n = (int)c;
    return VR_OK;
}

vr_status vr__nvml_sample(int index, vr_gpu_sample *out)
{
    memset(out, 0, sizeof *out);
    out->index = index;
    out->temperature_c = out->util_gpu = out->util_memory = -1;
    out->power_w = -1;
    vr_status st = vr__nvml_init();
    if (st != VR_OK)
        return st;
    nvmlDevice_t d;
    nvmlReturn_t r = nv.by_index ? nv.by_index((unsigned)index, &d) : 1;
    if (r != NVML_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "NVML: GPU %d: %s", index, nv.by_index ? nv_err(r) : "no nvmlDeviceGetHandleByIndex_v2");
    vr_nvml_mem m;
    if ((st = vr__nvml_memory(d, &m)) != VR_OK)
        return st;
    out->total = m.total;
    out->used = m.used;
    if (nv.name && nv.name(d, out->name, sizeof out->name) != NVML_SUCCESS)
        out->name[0] = 0;
    unsigned u[2], t, mw;
    if (nv.utilization && nv.utilization(d, u) == NVML_SUCCESS)
        out->util_gpu = (int)u[0], out->util_memory = (int)u[1];
    if (nv.temperature && nv.temperature(d, 0, &t) == NVML_SUCCESS)
        out->temperature_c = (int)t;
    if (nv.power && nv.power(d, &mw) == NVML_SUCCESS)
        out->power_w = mw / 1000.0;
    vr__nvml_processes(d, out->pids, out->proc_used, VR_GPU_MAX_PROCS, &out->n_procs);
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
