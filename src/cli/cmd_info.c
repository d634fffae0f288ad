/* vram info: the devices this machine offers and their memory.
 *
 *   vram info [--json]
 *
 * Lists every CUDA device (total/free/used memory, this process's share, the
 * measured cost of a CUDA context, compute capability, SMs, virtual memory,
 * driver and runtime versions), then the host (cpu) and the simulated meta
 * device. Without a GPU it says why and still lists cpu and meta; exit 0. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/dist.h"
#include "vram/exec.h"
#include "vram/device.h"
#include "vram/util.h"

typedef struct cuda_entry {
    vr_cuda_info info;
    vr_status status;           /* of vr_cuda_device_info */
    char error[512];
    vr_status cost_status;      /* of vr_cuda_context_cost */
    uint64_t cost;
    char cost_error[512];
} cuda_entry;

static void version_text(int v, char *buf, size_t cap)
{
    if (v > 0)
        snprintf(buf, cap, "%d.%d", v / 1000, v % 1000 / 10);
    else
        snprintf(buf, cap, "unknown");
}

/* Queries device i: context cost first (it must see the device before our
 * context exists), then the figures, which then include that context. */
static void query_cuda(int i, cuda_entry *e)
{
    memset(e, 0, sizeof *e);
    e->cost_status = vr_cuda_context_cost(i, &e->cost);
    if (e->cost_status != VR_OK)
        snprintf(e->cost_error, sizeof e->cost_error, "%s", vr_last_error());
    e->status = vr_cuda_device_info(i, &e->info);
    if (e->status != VR_OK)
        snprintf(e->error, sizeof e->error, "%s", vr_last_error());
}

static void print_cuda_text(int i, const cuda_entry *e)
{
    char a[32], b[32], c[32], v1[16], v2[16];
    const vr_cuda_info *in = &e->info;
    if (e->status != VR_OK) {
        printf("cuda:%-3d %s\n", i, e->error);
        return;
    }
    printf("cuda:%-3d %s\n", i, in->name);
    printf("         compute capability %d.%d, %d SMs, PCI %s\n", in->cc_major, in->cc_minor, in->sm_count,
           in->pci_bus_id);
    printf("         memory        %s total, %s free, %s used (all processes; %s)\n",
           vr_format_size(in->total, a, sizeof a), vr_format_size(in->free, b, sizeof b),
           vr_format_size(in->used, c, sizeof c), in->have_nvml ? "NVML" : "cudaMemGetInfo");
    if (in->reserved)
        printf("         reserved      %s by the driver (in neither free nor used)\n",
               vr_format_size(in->reserved, a, sizeof a));
    if (in->used_by_process >= 0)
        printf("         this process  %s\n", vr_format_size((uint64_t)in->used_by_process, a, sizeof a));
    if (e->cost_status == VR_OK)
        printf("         context cost  %s (NVML, before and after creating the CUDA context)\n",
               vr_format_size(e->cost, a, sizeof a));
    else
        printf("         context cost  %s\n", e->cost_error);
    if (in->vm_supported)
        printf("         virtual mem   supported, %s granularity\n", vr_format_size(in->vm_granularity, a, sizeof a));
    else
        printf("         virtual mem   not supported (no expandable segments)\n");
    version_text(in->driver_cuda_version, v1, sizeof v1);
    version_text(in->runtime_version, v2, sizeof v2);
    printf("         driver        %s (CUDA %s), runtime %s\n", in->driver_version[0] ? in->driver_version : "version unknown",
           v1, v2);
}

static cJSON *cuda_json(int i, const cuda_entry *e)
{
    const vr_cuda_info *in = &e->info;
    cJSON *o = cJSON_CreateObject();
    char spec[32], cc[16];
    snprintf(spec, sizeof spec, "cuda:%d", i);
    cJSON_AddStringToObject(o, "spec", spec);
    cJSON_AddStringToObject(o, "kind", "cuda");
    if (e->status != VR_OK) {
        cJSON_AddStringToObject(o, "error", e->error);
        return o;
    }
    cJSON_AddStringToObject(o, "name", in->name);
    cJSON_AddStringToObject(o, "pci_bus_id", in->pci_bus_id);
    cJSON_AddNumberToObject(o, "total_bytes", (double)in->total);
    cJSON_AddNumberToObject(o, "free_bytes", (double)in->free);
    cJSON_AddNumberToObject(o, "used_bytes", (double)in->used);
    cJSON_AddNumberToObject(o, "driver_reserved_bytes", (double)in->reserved);
    if (in->used_by_process >= 0)
        cJSON_AddNumberToObject(o, "process_used_bytes", (double)in->used_by_process);
    else
        cJSON_AddNullToObject(o, "process_used_bytes");
    if (e->cost_status == VR_OK) {
        cJSON_AddNumberToObject(o, "context_cost_bytes", (double)e->cost);
    } else {
        cJSON_AddNullToObject(o, "context_cost_bytes");
        cJSON_AddStringToObject(o, "context_cost_error", e->cost_error);
    }
    snprintf(cc, sizeof cc, "%d.%d", in->cc_major, in->cc_minor);
    cJSON_AddStringToObject(o, "compute_capability", cc);
    cJSON_AddNumberToObject(o, "sm_count", in->sm_count);
    cJSON_AddBoolToObject(o, "vm_supported", in->vm_supported);
    cJSON_AddNumberToObject(o, "vm_granularity_bytes", (double)in->vm_granularity);
    cJSON_AddBoolToObject(o, "nvml", in->have_nvml);
    cJSON_AddStringToObject(o, "driver_version", in->driver_version);
    cJSON_AddNumberToObject(o, "driver_cuda_version", in->driver_cuda_version);
    cJSON_AddNumberToObject(o, "runtime_version", in->runtime_version);
    return o;
}

/* cpu or meta: opens spec and reads its memory figures. */
static vr_status host_device(const char *spec, char *name, size_t cap, vr_device_mem *m)
{
    vr_device *dev;
    vr_status st = vr_device_open(spec, &dev);
    if (st != VR_OK)
        return st;
    snprintf(name, cap, "%s", vr_device_name(dev));
    st = vr_device_mem_info(dev, m);
    vr_device_close(dev);
    return st;
}

typedef struct opts {
    bool json;
} opts;

static void info_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    const vr_flag t[] = {
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "machine-readable output"},
    };
    VR_FLAGS_ADD(fs, t);
}

static int run(int argc, char **argv)
{
    opts o = {0};
    int rc = vr_flags_parse(&vr_cli_info, &o, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc == 1 ? 0 : rc;
    bool json = o.json;

    int ncuda = 0;
    char cuda_error[512] = "";
    if (vr_cuda_device_count(&ncuda) != VR_OK)
        snprintf(cuda_error, sizeof cuda_error, "%s", vr_last_error());
    cuda_entry *cuda = calloc(ncuda > 0 ? (size_t)ncuda : 1, sizeof *cuda);
    if (!cuda)
        return vr_cli_fail("info", 1, "out of host memory");
    for (int i = 0; i < ncuda; i++) {
        query_cuda(i, &cuda[i]);
        if (cuda[i].status != VR_OK)
            rc = 1;
    }

    static const char *host_specs[] = {"cpu", "meta"};
    char names[2][192];
    vr_device_mem mem[2];
    vr_status host_st[2];
    char host_err[2][512];
    for (int i = 0; i < 2; i++) {
        host_st[i] = host_device(host_specs[i], names[i], sizeof names[i], &mem[i]);
        if (host_st[i] != VR_OK) {
            snprintf(host_err[i], sizeof host_err[i], "%s", vr_last_error());
            rc = 1;
        }
    }

    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "vram_version", "0.1.0");
        cJSON *cu = cJSON_AddObjectToObject(root, "cuda");
        cJSON_AddNumberToObject(cu, "runtime_version", vr_cuda_runtime_version());
        const char *why = "";
        int dv = vr_exec_cudnn_version(&why);
        cJSON_AddNumberToObject(cu, "cudnn_version", dv);
        if (!dv)
            cJSON_AddStringToObject(cu, "cudnn_why", why);
        cJSON_AddNumberToObject(cu, "device_count", ncuda);
        if (cuda_error[0])
            cJSON_AddStringToObject(cu, "error", cuda_error);
        else
            cJSON_AddNullToObject(cu, "error");
        cJSON *devs = cJSON_AddArrayToObject(root, "devices");
        for (int i = 0; i < ncuda; i++)
            cJSON_AddItemToArray(devs, cuda_json(i, &cuda[i]));
        for (int i = 0; i < 2; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "spec", host_specs[i]);
            cJSON_AddStringToObject(o, "kind", host_specs[i]);
            if (host_st[i] != VR_OK) {
                cJSON_AddStringToObject(o, "error", host_err[i]);
            } else {
                cJSON_AddStringToObject(o, "name", names[i]);
                cJSON_AddNumberToObject(o, "total_bytes", (double)mem[i].total);
                cJSON_AddNumberToObject(o, "free_bytes", (double)mem[i].free);
            }
            cJSON_AddItemToArray(devs, o);
        }
        char *text = cJSON_Print(root);
        if (text)
            puts(text);
        else
            rc = 1;
        free(text);
        cJSON_Delete(root);
    } else {
        if (cuda_error[0]) {
            char v[16];
            version_text(vr_cuda_runtime_version(), v, sizeof v);
            printf("cuda     %s%s", strncmp(cuda_error, "no CUDA device", 14) ? "no CUDA device: " : "", cuda_error);
            putchar('\n');
            if (vr_cuda_runtime_version())
                printf("         (this vram was built with CUDA runtime %s)\n", v);
        }
        for (int i = 0; i < ncuda; i++)
            print_cuda_text(i, &cuda[i]);
        char a[32], b[32];
        if (host_st[0] == VR_OK)
            printf("cpu      host memory: %s total, %s available\n", vr_format_size(mem[0].total, a, sizeof a),
                   vr_format_size(mem[0].free, b, sizeof b));
        else
            printf("cpu      %s\n", host_err[0]);
        if (host_st[1] == VR_OK)
            printf("meta     simulated (address space only): %s default capacity; meta:<size> for another\n",
                   vr_format_size(mem[1].total, a, sizeof a));
        else
            printf("meta     %s\n", host_err[1]);
        const char *why = "";
        int dv = vr_exec_cudnn_version(&why);
        char v3[32];
        if (dv)
            printf("cudnn    %s (CUDA attention: cuDNN's fused flash attention)\n",
                   vr_format_version3(dv, v3, sizeof v3));
        else
            printf("cudnn    not loaded: %s (CUDA attention: vram's kernels)\n", why);
        int nv = 0;
        bool nccl = vr_comm_nccl_available(&nv);
        printf("dist     mpi: %s; nccl: %s", vr_comm_mpi_built() ? "yes" : "no (built without MPI)",
               nccl ? "yes" : "no (libnccl.so.2 not found)");
        if (nccl)
            printf(" %s", vr_format_version3(nv, v3, sizeof v3));
        printf("\n");
    }
    free(cuda);
    return rc;
}

const vr_cli_command vr_cli_info = {
    "info", "list devices: GPUs (memory, CUDA context cost, versions), cpu, meta", run, "[--json]",
    "Lists the devices vram can use: CUDA GPUs (memory, measured CUDA context cost,\n"
    "compute capability, driver and runtime versions), the host (cpu) and the\n"
    "simulated meta device.",
    info_flags, sizeof(opts)};
