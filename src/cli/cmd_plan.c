/* vram plan: where every byte of one training step goes, before it runs.
 *
 *   vram plan [--model gpt|mlp] [--preset NAME] [model flags] [--batch N] [--accum N]
 *             [--optim ...] [--recompute ...] [--freeze GLOBS] [--precision ...]
 *             [--memory planned|dynamic] [--device meta|cpu|cuda[:N]] [--capacity SIZE]
 *             [--eval] [--timeline] [--json]
 *
 * Builds the step graph (vram/graph.h), plans it (vram/plan.h) and prints the
 * bytes per role, the peak, the arena, and whether it fits the capacity with
 * the CUDA context set aside. Every bad flag: one line naming it, exit 2. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/model_flags.h"
#include "vram/device.h"
#include "vram/exec.h"
#include "vram/graph.h"
#include "vram/plan.h"
#include "vram/util.h"

static const vr_model_defaults plan_defaults = {.gpt_preset = "gpt2", .mlp_preset = "mnist", .batch = 8,
                                                .optim = VR_OPTIM_ADAMW, .eval = true};

typedef struct opts {
    vr_model_flags m;  /* model and step flags (cli/model_flags.h) */
    const char *memory, *policy, *device, *kernels;
    uint64_t capacity, context, host_capacity;
    long long steps;
    bool has_capacity, has_context, timeline, json, graph, inplace;
} opts;

static void plan_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    vr_model_flags_add(fs, &o->m, &plan_defaults);
    const vr_flag t[] = {
        VR_FLAG_HEADING_TEXT("memory"),
        {"--memory", VR_FLAG_CHOICE, &o->memory, NULL, .choices = "planned|dynamic",
         .help = "static arena, or also replay through the caching allocator"},
        {"--inplace", VR_FLAG_SWITCH, &o->inplace, NULL, .help = "gelu/relu/add write their output over a dying input"},
        {"--policy", VR_FLAG_STRING, &o->policy, "NAME", .help = "allocator policy in dynamic mode (stitch on cuda, else pytorch: as vram train)"},
        {"--steps", VR_FLAG_INT, &o->steps, "N", .lo = 1, .hi = 1000,
         .help = "dynamic: steps replayed through the allocator (2); device calls of the last one are shown"},
        {"--device", VR_FLAG_STRING, &o->device, "SPEC", .help = "meta, meta:SIZE, cpu, cpu:SIZE, cuda, cuda:N (meta)"},
        {"--capacity", VR_FLAG_SIZE, &o->capacity, "SIZE", .given = &o->has_capacity,
         .help = "device memory to fit in (e.g. 80GiB); cuda: the GPU's total"},
        {"--host-capacity", VR_FLAG_SIZE, &o->host_capacity, "SIZE",
         .help = "host memory the offloaded state must fit in (default: what the host has\n"
                 "available); a plan over it is refused (exit 1)"},
        {"--context", VR_FLAG_SIZE, &o->context, "SIZE", .given = &o->has_context,
         .help = "CUDA context to set aside (cuda: measured, else " VR_XSTR(VR_CUDA_CONTEXT_ESTIMATE_MIB) "MiB)"},
        {"--kernels", VR_FLAG_CHOICE, &o->kernels, NULL, .choices = "cpu|cuda",
         .help = "whose kernels' scratch to count (cuda on --device cuda, else cpu):\n"
                 "cuda adds the 32 MiB cuBLAS workspace and the CUDA kernels' scratch,\n"
                 "so --device meta --kernels cuda plans a GPU run on any machine"},
        VR_FLAG_HEADING_TEXT("output"),
        {"--timeline", VR_FLAG_SWITCH, &o->timeline, NULL, .help = "live bytes per role after each node"},
        {"--graph", VR_FLAG_SWITCH, &o->graph, NULL, .help = "list the nodes with their tensors' shapes"},
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "machine-readable output"},
    };
    VR_FLAGS_ADD(fs, t);
}

static int bad(const char *msg) { return vr_cli_fail("plan", 2, "%s", msg); }

/* Device, capacity and context. */
typedef struct target {
    char spec[64];
    bool cuda, meta;
    uint64_t capacity; /* 0: none given */
    uint64_t context;
    const char *context_how;
} target;

static int resolve_device(const opts *o, target *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->spec, sizeof t->spec, "%s", o->device ? o->device : "meta");
    const char *colon = strchr(t->spec, ':');
    size_t kind = colon ? (size_t)(colon - t->spec) : strlen(t->spec);
    if ((kind == 4 && !strncmp(t->spec, "meta", 4)) || (kind == 3 && !strncmp(t->spec, "cpu", 3))) {
        if (colon && vr_parse_size(colon + 1, "--device", &t->capacity) != VR_OK)
            return bad(vr_last_error());
        t->meta = kind == 4;
        t->context_how = t->meta ? "none (meta device: address space only)" : "none (host memory)";
    } else if (kind == 4 && !strncmp(t->spec, "cuda", 4)) {
        long long idx = 0;
        if (colon && vr_parse_int(colon + 1, "--device", 0, 1024, &idx) != VR_OK)
            return bad(vr_last_error());
        t->cuda = true;
        vr_cuda_info info;
        if (vr_cuda_device_info((int)idx, &info) == VR_OK)
            t->capacity = info.total;
        uint64_t cost = 0;
        if (o->has_context) {
            t->context = o->context;
            t->context_how = "as given";
        } else if (vr_cuda_context_cost((int)idx, &cost) == VR_OK && cost > 0) {
            t->context = cost;
            t->context_how = "measured";
        } else {
            t->context = VR_CUDA_CONTEXT_ESTIMATE;
            t->context_how = "estimate (" VR_XSTR(VR_CUDA_CONTEXT_ESTIMATE_MIB)
                             " MiB, vram's measured on an H100; no GPU to measure here)";
        }
    } else {
        return vr_cli_fail("plan", 2, "--device: '%s' is not one of meta, meta:SIZE, cpu, cpu:SIZE, cuda, cuda:N",
                           t->spec);
    }
    if (o->has_capacity)
        t->capacity = o->capacity;
    if (o->has_context && !t->cuda)
        t->context = o->context, t->context_how = "as given";
    return 0;
}

/* The most ranks whose plans `vram plan --gpus N` makes one by one (each rank owns other parameters); past it,
 * ranks 0 and N-1 (equal shares of the elements, but the last rank's hold the tail, the first's the embeddings). */
#define PLAN_RANKS_MAX 64

/* --gpus N: every rank's plan (its own shard of master and optimizer state), as a table or JSON (into root);
 * offloaded, each rank's pinned host bytes too, and their sum over the ranks (all on this host) into
 * *host_total. Returns 0, or a one-line error's status. */
static int ranks_report(const vr_model_config *m, const vr_step_config *s0, const vr_plan_config *pc, uint64_t context,
                        const vr_plan *p0, cJSON *root, uint64_t *host_total)
{
    int N = s0->world;
    bool off = s0->offload == VR_OFFLOAD_OPTIM;
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "ranks") : NULL;
    if (!root)
        printf("\nranks     %d (ZeRO %d): each rank's plan%s\n%-6s %11s %11s %11s %11s %11s %11s %11s%s\n", N,
               s0->zero, N > PLAN_RANKS_MAX ? " (first and last rank)" : "", "rank", "params", "master", "grads",
               "optim", "acts+temp", "arena", "+ context", off ? "   host (pinned)" : "");
    *host_total = 0;
    for (int r = 0; r < N; r++) {
        bool shown = !(N > PLAN_RANKS_MAX && r > 0 && r < N - 1);
        if (!shown && !off) /* offloaded: every rank's host bytes are summed */
            continue;
        vr_step_config s = *s0;
        s.rank = r;
        vr_graph *g = NULL;
        vr_plan *own = NULL; /* rank s0->rank's plan is p0, already made */
        if (r != s0->rank && (vr_graph_build(m, &s, &g) || vr_plan_create(g, pc, &own))) {
            int rc = vr_cli_fail("plan", 1, "rank %d: %s", r, vr_last_error());
            vr_graph_free(g);
            return rc;
        }
        const vr_plan *p = own ? own : p0;
        *host_total += p->host_size;
        if (!shown) {
            vr_plan_free(own);
            vr_graph_free(g);
            continue;
        }
        uint64_t v[7] = {p->max_live[VR_ROLE_PARAM], p->max_live[VR_ROLE_MASTER], p->max_live[VR_ROLE_GRAD],
                         p->max_live[VR_ROLE_OPTIM], p->at_peak[VR_ROLE_ACT] + p->at_peak[VR_ROLE_TEMP], p->arena_size,
                         p->arena_size + context};
        if (arr) {
            cJSON *o = cJSON_CreateObject(), *roles = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            for (int k = 0; k < VR_ROLE_COUNT; k++)
                cJSON_AddNumberToObject(roles, vr_role_name((vr_role)k), (double)p->max_live[k]);
            cJSON_AddItemToObject(o, "roles", roles);
            cJSON_AddNumberToObject(o, "peak", (double)p->peak);
            cJSON_AddNumberToObject(o, "arena", (double)p->arena_size);
            cJSON_AddNumberToObject(o, "need", (double)(p->arena_size + context));
            cJSON_AddNumberToObject(o, "host", (double)p->host_size);
            /* the model states it holds: its parameter buffer (ZeRO 3: its share), and the trainable elements it
             * updates (ZeRO >= 1; the sharded master, state and reduced gradients are of these) */
            const vr_graph *pg = p->graph;
            int64_t owned = 0;
            for (int t = 0; t < pg->n_tensors; t++)
                if (pg->tensors[t].param_offset >= 0 && !pg->tensors[t].split && pg->tensors[t].owner == r)
                    owned += vr_tensor_numel(&pg->tensors[t]);
            cJSON_AddNumberToObject(o, "param_buffer", (double)vr_tensor_bytes(&pg->tensors[pg->params]));
            cJSON_AddNumberToObject(o, "owned", (double)(s.zero >= 1 ? owned : pg->n_trainable));
            cJSON_AddItemToArray(arr, o);
        } else {
            char b[8][32];
            for (int k = 0; k < 7; k++)
                vr_format_size(v[k], b[k], sizeof b[k]);
            vr_format_size(p->host_size, b[7], sizeof b[7]);
            printf("%-6d %11s %11s %11s %11s %11s %11s %11s", r, b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
            printf(off ? " %15s\n" : "\n", b[7]);
        }
        vr_plan_free(own);
        vr_graph_free(g);
    }
    if (!root)
        printf("          params, master, grads, optim: most bytes live at once; acts+temp at the peak. NCCL's own\n"
               "          buffers are outside the arena: measured when the ranks start (vram train prints them)\n");
    if (!root && off) {
        char b[32];
        printf("          host: master, state and gradient copy of the rank's share; %s pinned by all %d ranks\n",
               vr_format_size(*host_total, b, sizeof b), N);
    }
    return 0;
}

static int run(int argc, char **argv)
{
    opts o = {0};
    int rc = vr_flags_parse(&vr_cli_plan, &o, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc == 1 ? 0 : rc;
    vr_model_config m;
    vr_step_config s;
    target t;
    if ((rc = vr_model_flags_configure("plan", &o.m, &plan_defaults, &m, &s)) || (rc = resolve_device(&o, &t)))
        return rc;
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED, .alloc_policy = o.policy, .inplace = o.inplace,
                         .steps = (int)o.steps};
    if (o.memory && !strcmp(o.memory, "dynamic"))
        pc.memory = VR_MEMORY_DYNAMIC;
    if (o.policy && pc.memory != VR_MEMORY_DYNAMIC)
        return vr_cli_fail("plan", 2, "--policy: only with --memory dynamic");
    if (!o.policy && pc.memory == VR_MEMORY_DYNAMIC && t.cuda) /* as vram train on a GPU (cmd_train.c) */
        pc.alloc_policy = "stitch";
    if (o.kernels ? !strcmp(o.kernels, "cuda") : t.cuda) {
        s.workspace_bytes = VR_CUDA_WORKSPACE_BYTES;
        s.kernels = VR_KERNELS_CUDA;
    }
    pc.capacity = t.capacity > t.context ? t.capacity - t.context : t.capacity ? 1 : 0;

    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g) != VR_OK)
        return bad(vr_last_error());
    vr_plan *p = NULL;
    if (vr_plan_create(g, &pc, &p) != VR_OK) {
        int r = vr_cli_fail("plan", strstr(vr_last_error(), "policy") ? 2 : 1, "%s", vr_last_error());
        vr_graph_free(g);
        return r;
    }
    uint64_t need = (p->has_dynamic ? p->dynamic.peak_reserved : p->arena_size) + t.context;
    bool fits = t.capacity ? need <= t.capacity && (!p->has_dynamic || p->dynamic.status == VR_OK) : true;
    uint64_t host_cap = o.host_capacity ? o.host_capacity : p->host_size ? vr_host_mem_available() : 0;
    uint64_t host_need = p->host_size; /* with ranks: all of theirs (ranks_report) */
    bool host_fits = !host_cap || host_need <= host_cap;
    char a[32], b[32], c[32];
    if (o.json) {
        char *js = vr_plan_json(p, o.timeline);
        cJSON *root = js ? cJSON_Parse(js) : NULL;
        free(js);
        if (!root) {
            vr_plan_free(p);
            vr_graph_free(g);
            return vr_cli_fail("plan", 1, "could not build the JSON output");
        }
        cJSON *d = cJSON_AddObjectToObject(root, "device");
        cJSON_AddStringToObject(d, "spec", t.spec);
        cJSON_AddNumberToObject(d, "context", (double)t.context);
        cJSON_AddStringToObject(d, "context_source", t.context_how);
        cJSON_AddNumberToObject(d, "capacity", (double)t.capacity);
        cJSON_AddNumberToObject(d, "need", (double)need);
        cJSON_AddBoolToObject(d, "fits", fits);
        if (s.world >= 1 && (rc = ranks_report(&m, &s, &pc, t.context, p, root, &host_need))) {
            cJSON_Delete(root);
            vr_plan_free(p);
            vr_graph_free(g);
            return rc;
        }
        host_fits = !host_cap || host_need <= host_cap;
        cJSON *h = cJSON_GetObjectItem(root, "host");
        cJSON_AddNumberToObject(h, "capacity", (double)host_cap);
        cJSON_AddNumberToObject(h, "need", (double)host_need);
        cJSON_AddBoolToObject(h, "fits", host_fits);
        char *out = cJSON_Print(root);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(root);
    } else {
        if (o.graph) {
            vr_graph_print(g, stdout);
            printf("\n");
        }
        vr_plan_print(p, stdout, o.timeline);
        printf("device    %s; CUDA context %s%s%s\n", t.spec, t.context ? vr_format_size(t.context, a, sizeof a) : "",
               t.context ? ", " : "", t.context_how);
        if (s.kernels == VR_KERNELS_CUDA)
            printf("          CUDA kernels; library workspace %s (cuBLAS; cuDNN's attention plans) counted as temp; "
                   "attention %s\n", vr_format_size(VR_CUDA_WORKSPACE_BYTES, a, sizeof a), vr_attention_name(s.attention));
        else
            printf("          CPU kernels' scratch%s\n",
                   t.meta ? " (--kernels cuda: a GPU run's, with the cuBLAS workspace and the CUDA kernels' scratch)"
                          : "");
        printf("need      %s = %s %s + context %s\n", vr_format_size(need, a, sizeof a),
               p->has_dynamic ? "peak reserved" : "arena", vr_format_size(need - t.context, b, sizeof b),
               vr_format_size(t.context, c, sizeof c));
        if (t.capacity)
            printf("capacity  %s: %s (%s %s)\n", vr_format_size(t.capacity, a, sizeof a),
                   fits ? "fits" : "DOES NOT FIT", fits ? "headroom" : "short by",
                   vr_format_size(fits ? t.capacity - need : need - t.capacity, b, sizeof b));
        else
            printf("capacity  none given (--capacity SIZE to check a fit)\n");
        if (!fits && s.train && s.precision == VR_PREC_BF16 && !s.no_master && !s.split_master && !s.offload &&
            p->total[VR_ROLE_MASTER])
            printf("hint      --master split keeps the same fp32 master in 2 bytes a weight instead of 4 (-%s); "
                   "vram fit tries every option\n", vr_format_size(p->total[VR_ROLE_MASTER] / 2, a, sizeof a));
        if (s.world >= 1 && (rc = ranks_report(&m, &s, &pc, t.context, p, NULL, &host_need))) {
            vr_plan_free(p);
            vr_graph_free(g);
            return rc;
        }
        host_fits = !host_cap || host_need <= host_cap;
        if (host_cap)
            printf("host cap  %s%s: %s (%s %s)\n", vr_format_size(host_cap, a, sizeof a),
                   o.host_capacity ? "" : " available (MemAvailable)", host_fits ? "fits" : "DOES NOT FIT",
                   host_fits ? "headroom" : "short by",
                   vr_format_size(host_fits ? host_cap - host_need : host_need - host_cap, b, sizeof b));
    }
    rc = 0;
    if (!host_fits)
        rc = vr_cli_fail("plan", 1, "--offload optim: the plan pins %s of host memory, more than the host's %s%s",
                         vr_format_size(host_need, a, sizeof a), vr_format_size(host_cap, b, sizeof b),
                         o.host_capacity ? " (--host-capacity)" : " available");
    vr_plan_free(p);
    vr_graph_free(g);
    return rc;
}

const vr_cli_command vr_cli_plan = {
    "plan", "where every byte of a training step goes, before it runs (bytes per role, peak, fit)", run,
    "[options]",
    "Plans one training step and says where every byte goes (params, master weights, grads,\n"
    "optimizer state, inputs, activations, temporaries), the peak, and whether it fits.",
    plan_flags, sizeof(opts)};
