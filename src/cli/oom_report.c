/* vram train: the memory report of a step that ran out of memory (--oom-report).
 *
 * The failing step is re-planned from the run's configuration (the CUDA kernels'
 * scratch and workspace on a cuda device, as the trainer does; in dynamic mode
 * replayed through the caching allocator at the run's capacity, so the page
 * marks where it ran out) and written as vram report's HTML page. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "vram/plan.h"
#include "vram/train.h"
#include "vram/prof.h"
#include "vram/util.h"

/* The capacity a run had: --max-memory, else the SIZE of cpu:SIZE / meta:SIZE (0: none known). */
static uint64_t run_capacity(const vr_train_config *c)
{
    uint64_t cap = 0;
    const char *colon = c->device ? strchr(c->device, ':') : NULL;
    if (colon && strncmp(c->device, "cuda", 4) && vr_parse_size(colon + 1, "--device", &cap) != VR_OK)
        cap = 0;
    if (c->max_memory && (!cap || c->max_memory < cap))
        cap = c->max_memory;
    return cap;
}

int vr_cli_oom_report(const vr_train_config *c, const char *path, char *written, size_t cap)
{
    char def[256];
    if (!path) {
        const char *dir = getenv("TMPDIR");
        snprintf(def, sizeof def, "%s/vram-oom-%ld.html", dir && *dir ? dir : "/tmp", (long)getpid());
        path = def;
    }
    vr_model_config m = c->model;
    vr_step_config s = c->step;
    s.train = true;
    if (c->device && !strncmp(c->device, "cuda", 4)) {
        s.kernels = VR_KERNELS_CUDA;
        if (!s.workspace_bytes)
            s.workspace_bytes = (uint64_t)32 << 20;
    }
    vr_plan_config pc = {.memory = c->memory, .alloc_policy = c->alloc_policy, .inplace = c->inplace,
                         .capacity = run_capacity(c)};
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    cJSON *data = NULL;
    vr_status st = vr_graph_build(&m, &s, &g);
    if (!st)
        st = vr_plan_create(g, &pc, &p);
    if (!st && !(data = vr_report_data(p, NULL, NULL, "vram train: the step that ran out of memory")))
        st = VR_ERR_OOM;
    if (!st)
        st = vr_report_write_html(path, data);
    cJSON_Delete(data);
    vr_plan_free(p);
    vr_graph_free(g);
    if (st)
        return -1;
    snprintf(written, cap, "%s", path);
    return 0;
}
