/* vram report: one self-contained HTML page that shows where the memory of a
 * training step goes.
 *
 *   vram report [model and step flags as vram plan] [--memory planned|dynamic]
 *               [--policy NAME] [--inplace] [--kernels cpu|cuda] [--capacity SIZE]
 *               [--no-fit] [--run N] [--device SPEC] [--title TEXT] [-o FILE]
 *
 * Plans the step (vram/plan.h), ranks the fitter's configurations for the same
 * rows per optimizer step against --capacity (default 80GiB; vram/fit.h), and
 * writes the page (vram/prof.h) to FILE (report.html) through a temporary file
 * renamed into place. With --run N it first trains N steps on --device (cpu)
 * with the same configuration and adds the measured live bytes and time per node. Every bad flag: one line naming it, exit 2; an unwritable
 * FILE: one line naming it, exit 1, no file left behind. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/model_flags.h"
#include "vram/fit.h"
#include "vram/graph.h"
#include "vram/plan.h"
#include "vram/prof.h"
#include "vram/train.h"
#include "vram/util.h"

#define DEFAULT_CAPACITY (80 * VR_GiB)
#define CUDA_WORKSPACE (32 * VR_MiB) /* as vram plan: cuBLAS's workspace in PyTorch */

static const vr_model_defaults report_defaults = {.gpt_preset = "gpt2", .mlp_preset = "mnist", .batch = 8,
                                                  .optim = VR_OPTIM_ADAMW, .eval = true};

typedef struct opts {
    vr_model_flags m;
    const char *memory, *policy, *kernels, *output, *title, *device;
    uint64_t capacity;
    long long run;
    bool inplace, no_fit;
} opts;

static void report_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    vr_model_flags_add(fs, &o->m, &report_defaults);
    const vr_flag t[] = {
        VR_FLAG_HEADING_TEXT("memory"),
        {"--memory", VR_FLAG_CHOICE, &o->memory, NULL, .choices = "planned|dynamic",
         .help = "static arena, or also replay through the caching allocator"},
        {"--policy", VR_FLAG_STRING, &o->policy, "NAME", .help = "allocator policy in dynamic mode (pytorch)"},
        {"--inplace", VR_FLAG_SWITCH, &o->inplace, NULL, .help = "gelu/relu/add write their output over a dying input"},
        {"--kernels", VR_FLAG_CHOICE, &o->kernels, NULL, .choices = "cpu|cuda",
         .help = "whose kernels' scratch to count (cpu); cuda adds the 32 MiB workspace"},
        {"--capacity", VR_FLAG_SIZE, &o->capacity, "SIZE", .help = "budget for the what-if table (80GiB)"},
        {"--no-fit", VR_FLAG_SWITCH, &o->no_fit, NULL, .help = "leave the what-if table out"},
        VR_FLAG_HEADING_TEXT("run"),
        {"--run", VR_FLAG_INT, &o->run, "N", .lo = 1, .hi = 1000000,
         .help = "train N steps first (generated data) and add the measured live bytes\n"
                 "and the time per node and per op"},
        {"--device", VR_FLAG_STRING, &o->device, "SPEC", .help = "where --run trains: cpu, cpu:SIZE, cuda (cpu)"},
        VR_FLAG_HEADING_TEXT("output"),
        {"--output", VR_FLAG_STRING, &o->output, "FILE", .alias = "-o", .nonempty = true,
         .help = "the HTML file (report.html)"},
        {"--title", VR_FLAG_STRING, &o->title, "TEXT", .help = "the page's title"},
    };
    VR_FLAGS_ADD(fs, t);
}

/* The fitter's table for the same rows per optimizer step; NULL (no table) on error. */
static vr_fit_result *what_if(const vr_model_config *m, const vr_step_config *s, uint64_t capacity)
{
    vr_fit_result *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    vr_fit_options fo = {.capacity = capacity, .global_batch = m->B * (s->accum < 1 ? 1 : s->accum)};
    fo.precisions = (1u << VR_PREC_FP32) | (1u << VR_PREC_BF16) | (1u << s->precision);
    vr_step_config s1 = *s;
    s1.accum = 1;
    if (vr_fit_search(m, &s1, &fo, r) != VR_OK) {
        vr_cli_fail("report", 0, "what-if table left out: %s", vr_last_error());
        free(r);
        return NULL;
    }
    return r;
}

/* Per node of the training graph: host time summed over passes, passes, live bytes. */
typedef struct run_rec {
    int n;
    uint64_t *ns, *passes, *live;
} run_rec;

static void run_hook(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns)
{
    run_rec *r = ctx;
    if (!r->ns) {
        r->n = vr_exec_plan(e)->n_nodes;
        r->ns = calloc((size_t)r->n, sizeof *r->ns);
        r->passes = calloc((size_t)r->n, sizeof *r->passes);
        r->live = calloc((size_t)r->n, sizeof *r->live);
    }
    if (!r->ns || !r->passes || !r->live || node < 0 || node >= r->n)
        return;
    r->ns[node] += t1_ns - t0_ns;
    r->passes[node]++;
    r->live[node] = vr_exec_live(e, node, VR_ROLE_COUNT);
}

/* Trains o->run steps; on success *trainer holds the run (its plan is the report's). */
static int measured_run(const opts *o, const vr_model_config *m, const vr_step_config *s, vr_memory_mode mem,
                        run_rec *rec, vr_trainer **trainer)
{
    vr_train_config c = vr_train_config_default();
    c.model = *m;
    c.step = *s;
    c.steps = o->run;
    c.device = o->device ? o->device : "cpu";
    c.memory = mem;
    c.alloc_policy = o->policy;
    c.inplace = o->inplace;
    c.on_node = run_hook;
    c.on_node_ctx = rec;
    if (vr_trainer_create(&c, trainer) != VR_OK)
        return vr_cli_fail("report", 1, "--run: %s", vr_last_error());
    for (long long k = 0; k < o->run; k++) {
        vr_train_step_info info;
        if (vr_trainer_step(*trainer, &info) != VR_OK)
            return vr_cli_fail("report", 1, "--run: step %lld: %s", k + 1, vr_last_error());
    }
    return 0;
}

static int run(int argc, char **argv)
{
    opts o = {.output = "report.html", .capacity = DEFAULT_CAPACITY};
    int rc = vr_flags_parse(&vr_cli_report, &o, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc == 1 ? 0 : rc;
    vr_model_config m;
    vr_step_config s;
    if ((rc = vr_model_flags_configure("report", &o.m, &report_defaults, &m, &s)))
        return rc;
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED, .alloc_policy = o.policy, .inplace = o.inplace};
    if (o.memory && !strcmp(o.memory, "dynamic"))
        pc.memory = VR_MEMORY_DYNAMIC;
    if (o.policy && pc.memory != VR_MEMORY_DYNAMIC)
        return vr_cli_fail("report", 2, "--policy: only with --memory dynamic");
    if (o.kernels && !strcmp(o.kernels, "cuda")) {
        s.workspace_bytes = CUDA_WORKSPACE;
        s.kernels = VR_KERNELS_CUDA;
    }
    if (o.device && !o.run)
        return vr_cli_fail("report", 2, "--device: only with --run N");
    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g) != VR_OK)
        return vr_cli_fail("report", 2, "%s", vr_last_error());
    vr_plan *p = NULL;
    if (vr_plan_create(g, &pc, &p) != VR_OK) {
        rc = vr_cli_fail("report", strstr(vr_last_error(), "policy") ? 2 : 1, "%s", vr_last_error());
        vr_graph_free(g);
        return rc;
    }
    run_rec rec = {0};
    vr_trainer *tr = NULL;
    vr_report_run run = {0};
    double *ms = NULL;
    const vr_plan *shown = p;
    if (o.run && !s.train)
        rc = vr_cli_fail("report", 2, "--run: not with --eval");
    else if (o.run && !(rc = measured_run(&o, &m, &s, pc.memory, &rec, &tr))) {
        shown = vr_trainer_plan(tr); /* the run's plan (its kernels' scratch on cuda) */
        ms = calloc((size_t)rec.n + 1, sizeof *ms);
        if (!ms || !rec.ns || rec.n != shown->n_nodes)
            rc = vr_cli_fail("report", 1, "--run: no per-node figures were recorded");
        for (int i = 0; !rc && i < rec.n; i++)
            ms[i] = rec.passes[i] ? (double)rec.ns[i] / 1e6 / (double)rec.passes[i] : 0;
        run = (vr_report_run){(int)o.run, o.device ? o.device : "cpu", ms, rec.live};
    }
    vr_fit_result *fit = rc || o.no_fit || !s.train ? NULL : what_if(&m, &s, o.capacity);
    cJSON *data = rc ? NULL : vr_report_data(shown, fit, o.run ? &run : NULL, o.title);
    if (rc)
        ;
    else if (!data)
        rc = vr_cli_fail("report", 1, "out of host memory building the report");
    else if (vr_report_write_html(o.output, data) != VR_OK)
        rc = vr_cli_fail("report", 1, "%s", vr_last_error());
    else {
        char a[32];
        printf("wrote %s: peak %s at node %d of %d\n", o.output, vr_format_size(shown->peak, a, sizeof a),
               shown->peak_node, shown->n_nodes);
    }
    cJSON_Delete(data);
    free(fit);
    free(ms);
    free(rec.ns);
    free(rec.passes);
    free(rec.live);
    vr_trainer_free(tr);
    vr_plan_free(p);
    vr_graph_free(g);
    return rc;
}

const vr_cli_command vr_cli_report = {
    "report", "a self-contained HTML page of where a step's memory goes (roles over time, peak, what-if)", run,
    "[options] [-o FILE]",
    "Writes one self-contained HTML page (no network needed) showing where the memory of a\n"
    "training step goes: live bytes per role over the step, the tensors live at the peak, the\n"
    "caching allocator's figures (--memory dynamic), the fitter's what-if table, a glossary.",
    report_flags, sizeof(opts)};
