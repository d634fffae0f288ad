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

static void usage(FILE *f)
{
    fprintf(f, "usage: vram report [options] [-o FILE]\n\n"
               "Writes one self-contained HTML page (no network needed) showing where the memory of a\n"
               "training step goes: live bytes per role over the step, the tensors live at the peak, the\n"
               "caching allocator's figures (--memory dynamic), the fitter's what-if table, a glossary.\n\n");
    vr_model_flags_usage(f, &report_defaults);
    fprintf(f, "step\n");
    vr_step_flags_usage(f, &report_defaults);
    fprintf(f, "  --eval                   no-grad evaluation step\n"
               "memory\n"
               "  --memory planned|dynamic static arena, or also replay through the caching allocator\n"
               "  --policy NAME            allocator policy in dynamic mode (pytorch)\n"
               "  --inplace                gelu/relu/add write their output over a dying input\n"
               "  --kernels cpu|cuda       whose kernels' scratch to count (cpu); cuda adds the 32 MiB workspace\n"
               "  --capacity SIZE          budget for the what-if table (80GiB)\n"
               "  --no-fit                 leave the what-if table out\n"
               "run\n"
               "  --run N                  train N steps first (generated data) and add the measured live bytes\n"
               "                           and the time per node and per op\n"
               "  --device SPEC            where --run trains: cpu, cpu:SIZE, cuda (cpu)\n"
               "output\n"
               "  -o, --output FILE        the HTML file (report.html)\n"
               "  --title TEXT             the page's title\n");
}

typedef struct opts {
    vr_model_flags m;
    const char *memory, *policy, *kernels, *output, *title, *device;
    uint64_t capacity;
    long long run;
    bool inplace, no_fit;
} opts;

static int parse_args(int argc, char **argv, opts *o)
{
    o->output = "report.html";
    o->capacity = DEFAULT_CAPACITY;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        int r = vr_model_flags_parse("report", argc, argv, &i, &o->m);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(a, "--inplace") || !strcmp(a, "--no-fit")) {
            *(a[2] == 'i' ? &o->inplace : &o->no_fit) = true;
            continue;
        }
        static const char *valued[] = {"--memory", "--policy", "--kernels", "--capacity", "-o",
                                       "--output", "--title", "--run", "--device"};
        int k = -1;
        for (int j = 0; j < 9; j++)
            if (!strcmp(a, valued[j]))
                k = j;
        if (k < 0)
            return vr_cli_fail("report", 2, "unknown flag '%s' (see vram report --help)", a);
        if (i + 1 >= argc)
            return vr_cli_fail("report", 2, "%s needs a value", a);
        const char *v = argv[++i];
        switch (k) {
        case 0: o->memory = v; break;
        case 1: o->policy = v; break;
        case 2:
            if (strcmp(v, "cpu") && strcmp(v, "cuda"))
                return vr_cli_fail("report", 2, "--kernels: '%s' is not one of cpu|cuda", v);
            o->kernels = v;
            break;
        case 3:
            if (vr_parse_size(v, a, &o->capacity) != VR_OK)
                return vr_cli_fail("report", 2, "%s", vr_last_error());
            break;
        case 4: case 5:
            if (!*v)
                return vr_cli_fail("report", 2, "%s: empty file name", a);
            o->output = v;
            break;
        case 6: o->title = v; break;
        case 7:
            if (vr_parse_int(v, a, 1, 1000000, &o->run) != VR_OK)
                return vr_cli_fail("report", 2, "%s", vr_last_error());
            break;
        default: o->device = v; break;
        }
    }
    return 0;
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

int vr_cmd_report(int argc, char **argv)
{
    opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    vr_model_config m;
    vr_step_config s;
    if ((rc = vr_model_flags_configure("report", &o.m, &report_defaults, &m, &s)))
        return rc;
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED, .alloc_policy = o.policy, .inplace = o.inplace};
    if (o.memory && !strcmp(o.memory, "dynamic"))
        pc.memory = VR_MEMORY_DYNAMIC;
    else if (o.memory && strcmp(o.memory, "planned"))
        return vr_cli_fail("report", 2, "--memory: '%s' is not one of planned|dynamic", o.memory);
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
