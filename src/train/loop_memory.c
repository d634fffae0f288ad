/* vram train — device memory of a run: --max-memory (a cap on everything the
 * process holds on the device, the CUDA context included), the up-front
 * refusal of a planned arena that cannot fit (with the plan's numbers and the
 * largest batch that does), the dynamic allocator's cap, the process's device
 * use sampled through NVML, and --dump-batches. */
#include <stdlib.h>
#include <string.h>

#include "train/loop_internal.h"
#include "vram/fit.h"
#include "vram/util.h"

static const char *sz(uint64_t b, char *buf) { return vr_format_size(b, buf, 32); }

/* This process's device bytes now: NVML's per-process figure, else the device-wide used bytes
 * (the GPU is ours alone on a dedicated machine; conservative otherwise). 0 when unknown. */
static uint64_t process_used(vr_trainer *t, const char **how)
{
    *how = "unknown";
    if (vr_device_kind_of(t->dev) != VR_DEVICE_CUDA)
        return 0;
    vr_cuda_info info;
    if (vr_cuda_device_info(vr_device_index(t->dev), &info) != VR_OK || !info.have_nvml)
        return 0;
    if (info.used_by_process >= 0) {
        *how = "NVML, this process";
        return (uint64_t)info.used_by_process;
    }
    *how = "NVML, whole device";
    return info.used;
}

vr_status vr__trainer_memory_open(vr_trainer *t)
{
    if (vr_device_kind_of(t->dev) != VR_DEVICE_CUDA)
        return VR_OK;
    const char *how;
    t->context = process_used(t, &how);
    if (!t->context) {
        uint64_t cost = 0;
        bool known = vr_cuda_context_cost(vr_device_index(t->dev), &cost) == VR_OK && cost;
        t->context = known ? cost : VR_CUDA_CONTEXT_ESTIMATE;
    }
    if (t->cfg.max_memory && t->context >= t->cfg.max_memory) {
        char a[32], b[32];
        return vr_error(VR_ERR_OOM, "vr_train_config.max_memory %s: the CUDA context alone holds %s",
                        sz(t->cfg.max_memory, a), sz(t->context, b));
    }
    return VR_OK;
}

uint64_t vr_trainer_context_bytes(const vr_trainer *t) { return t->context; }

uint64_t vr_trainer_process_peak(vr_trainer *t)
{
    const char *how;
    uint64_t u = process_used(t, &how);
    if (u > t->process_peak)
        t->process_peak = u;
    return t->process_peak;
}

/* The host memory an offloaded plan pins, against what the host has available. */
static vr_status host_check(const vr_trainer *t, const vr_plan *plan)
{
    uint64_t avail = t->cfg.max_host_memory ? t->cfg.max_host_memory : vr_host_mem_available();
    if (!plan->host_size || !avail || plan->host_size <= avail)
        return VR_OK;
    char a[32], b[32], roles[256];
    int n = 0;
    for (int r = 0; r < VR_ROLE_COUNT && n < (int)sizeof roles - 64; r++)
        if (plan->host_total[r])
            n += snprintf(roles + n, sizeof roles - (size_t)n, "%s%s %s", n ? ", " : "", vr_role_name((vr_role)r),
                          sz(plan->host_total[r], a));
    return vr_error(VR_ERR_OOM, "vr_step_config.offload optim: the plan pins %s of host memory (%s) but %s %s; try "
                    "vr_step_config.optim_state 8bit or bf16 (smaller state)", sz(plan->host_size, a), roles,
                    t->cfg.max_host_memory ? "vr_train_config.max_host_memory is" : "the host has", sz(avail, b));
}

vr_status vr__trainer_memory_check(vr_trainer *t, const vr_plan *plan, uint64_t held, const char *what)
{
    vr_status hst = host_check(t, plan);
    if (hst)
        return hst;
    if (t->cfg.memory != VR_MEMORY_PLANNED)
        return VR_OK;
    char a[32], b[32], c[32], d[32], e[32];
    char where[256];
    uint64_t avail;
    if (t->cfg.max_memory) {
        avail = t->cfg.max_memory - t->context;
        if (t->context)
            snprintf(where, sizeof where, "vr_train_config.max_memory %s minus the CUDA context %s",
                     sz(t->cfg.max_memory, a), sz(t->context, b));
        else
            snprintf(where, sizeof where, "vr_train_config.max_memory %s", sz(t->cfg.max_memory, a));
    } else {
        vr_device_mem dm;
        if (vr_device_mem_info(t->dev, &dm) != VR_OK)
            return VR_OK; /* nothing to check against: the allocation itself will say */
        avail = dm.free;
        snprintf(where, sizeof where, "%s free of %s on %s", sz(dm.free, a), sz(dm.total, b), vr_device_name(t->dev));
    }
    if (t->cfg.max_memory) /* the free figure already leaves out what this run holds */
        avail = avail > held ? avail - held : 0;
    else
        held = 0;
    if (plan->arena_size <= avail)
        return VR_OK;
    const vr_model_config *m = &t->cfg.model;
    const vr_step_config *s = &t->cfg.step;
    char roles[512];
    int n = 0;
    for (int r = 0; r < VR_ROLE_COUNT && n < (int)sizeof roles - 64; r++)
        if (plan->at_peak[r])
            n += snprintf(roles + n, sizeof roles - (size_t)n, "%s%s %s", n ? ", " : "", vr_role_name((vr_role)r),
                          sz(plan->at_peak[r], a));
    char held_s[96] = "";
    if (held)
        snprintf(held_s, sizeof held_s, " beside the training arena's %s", sz(held, e));
    char fit[512] = "";
    if (!held && m->B > 1) {
        vr_fit_batch fb;
        if (vr_fit_max_batch(m, s, avail, &fb) == VR_OK) {
            if (fb.B > 0)
                snprintf(fit, sizeof fit, " The largest batch that fits: vr_model_config.B %d (arena %s; B=%d needs "
                         "%s).", fb.B, sz(fb.at.need, c), fb.next.B, sz(fb.next.need, d));
            else
                snprintf(fit, sizeof fit, " Not even vr_model_config.B 1 fits (arena %s).", sz(fb.next.need, c));
        }
    }
    return vr_error(VR_ERR_OOM,
                    "out of memory, refused before allocating anything: the plan of the %s step (B=%d T=%d, %s, "
                    "recompute %s, accum %d) needs an arena of %s (at its peak: %s), but %s is available%s (%s).%s "
                    "Try: vram fit with the same configuration for the largest batch; a smaller vr_model_config.B with "
                    "vr_step_config.accum N for the same tokens per step; vr_step_config.recompute selective or "
                    "block; vr_step_config.precision bf16.",
                    what, m->B, m->T, vr_precision_name(s->precision), vr_recompute_name(s->recompute),
                    s->accum > 1 ? s->accum : 1, sz(plan->arena_size, b), roles, sz(avail, c), held_s, where, fit);
}

vr_status vr__trainer_memory_cap(vr_trainer *t, vr_exec *e)
{
    vr_alloc *al = vr_exec_allocator(e);
    if (!t->cfg.max_memory || !al)
        return VR_OK;
    vr_device_mem dm;
    vr_status st = vr_device_mem_info(t->dev, &dm);
    if (st || !dm.total)
        return st ? st : vr_error(VR_ERR_DEVICE, "vr_train_config.max_memory: the device reports no total memory");
    double frac = (double)(t->cfg.max_memory - t->context) / (double)dm.total;
    if (frac > 1)
        frac = 1;
    if ((st = vr_alloc_set_memory_fraction(al, frac)))
        return st;
    vr_alloc_stats as;
    vr_alloc_get_stats(al, &as);
    char a[32], b[32];
    if ((uint64_t)as.reserved_bytes[VR_POOL_ALL].current > vr_alloc_limit(al))
        return vr_error(VR_ERR_OOM,
                        "vr_train_config.max_memory: the persistent tensors alone reserve %s, over the cap of %s",
                        sz((uint64_t)as.reserved_bytes[VR_POOL_ALL].current, a), sz(vr_alloc_limit(al), b));
    return VR_OK;
}

vr_status vr__trainer_memory_sample(vr_trainer *t)
{
    if (!t->cfg.max_memory || vr_device_kind_of(t->dev) != VR_DEVICE_CUDA)
        return VR_OK;
    uint64_t peak = vr_trainer_process_peak(t);
    if (peak > t->cfg.max_memory) {
        char a[32], b[32];
        return vr_error(VR_ERR_OOM,
                        "vr_train_config.max_memory %s: this process used %s of device memory after step %lld (NVML)",
                        sz(t->cfg.max_memory, a), sz(peak, b), (long long)t->step);
    }
    return VR_OK;
}

vr_status vr__trainer_dump_batch(vr_trainer *t, int k)
{
    if (!t->dump)
        return VR_OK;
    int B = t->cfg.model.B, T = t->cfg.model.T;
    const int32_t *x = t->inputs[k], *y = t->targets[k];
    int32_t *row = malloc(sizeof(int32_t) * (size_t)(T + 1));
    if (!row)
        return vr_error(VR_ERR_OOM, "vr_train_config.dump_batches: out of host memory");
    vr_status st = VR_OK;
    for (int b = 0; b < B && !st; b++) {
        for (int i = 0; i + 1 < T; i++)
            if (y[(size_t)b * T + i] != x[(size_t)b * T + i + 1])
                st = vr_error(VR_ERR_INVALID,
                              "vr_train_config.dump_batches: row %d's targets are not its inputs shifted by one", b);
        memcpy(row, x + (size_t)b * T, sizeof(int32_t) * (size_t)T);
        row[T] = y[(size_t)b * T + T - 1];
        if (!st && fwrite(row, sizeof(int32_t), (size_t)(T + 1), t->dump) != (size_t)(T + 1))
            st = vr_error(VR_ERR_IO, "vr_train_config.dump_batches: write failed");
    }
    free(row);
    return st;
}
