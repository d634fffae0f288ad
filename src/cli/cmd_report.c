/* vram report: one self-contained HTML page that shows where the memory of a
 * training step goes.
 *
 *   vram report [model and step flags as vram plan] [--memory planned|dynamic]
 *               [--policy NAME] [--inplace] [--kernels cpu|cuda] [--capacity SIZE]
 *               [--no-fit] [--title TEXT] [-o FILE]
 *
 * Plans the step (vram/plan.h), ranks the fitter's configurations for the same
 * rows per optimizer step against --capacity (default 80GiB; vram/fit.h), and
 * writes the page (vram/prof.h) to FILE (report.html) through a temporary file
 * renamed into place. Every bad flag: one line naming it, exit 2; an unwritable
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
#include "vram/util.h"

#define DEFAULT_CAPACITY (80 * VR_GiB)
#define CUDA_WORKSPACE (32 * VR_MiB) /* as vram plan: cuBLAS's workspace in PyTorch */

static const vr_model_defaults report_defaults = {"gpt2", "mnist", 8, 0, VR_OPTIM_ADAMW};

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
               "output\n"
               "  -o, --output FILE        the HTML file (report.html)\n"
               "  --title TEXT             the page's title\n");
}

typedef struct opts {
    vr_model_flags m;
    const char *memory, *policy, *kernels, *output, *title;
    uint64_t capacity;
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
        static const char *valued[] = {"--memory", "--policy", "--kernels", "--capacity", "-o", "--output", "--title"};
        int k = -1;
        for (int j = 0; j < 7; j++)
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
        default: o->title = v; break;
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
        fprintf(stderr, "vram report: what-if table left out: %s\n", vr_last_error());
        free(r);
        return NULL;
    }
    return r;
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
    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g) != VR_OK)
        return vr_cli_fail("report", 2, "%s", vr_last_error());
    vr_plan *p = NULL;
    if (vr_plan_create(g, &pc, &p) != VR_OK) {
        rc = vr_cli_fail("report", strstr(vr_last_error(), "policy") ? 2 : 1, "%s", vr_last_error());
        vr_graph_free(g);
        return rc;
    }
    vr_fit_result *fit = o.no_fit || !s.train ? NULL : what_if(&m, &s, o.capacity);
    cJSON *data = vr_report_data(p, fit, o.title);
    if (!data)
        rc = vr_cli_fail("report", 1, "out of host memory building the report");
    else if (vr_report_write_html(o.output, data) != VR_OK)
        rc = vr_cli_fail("report", 1, "%s", vr_last_error());
    else {
        char a[32];
        printf("wrote %s: peak %s at node %d of %d\n", o.output, vr_format_size(p->peak, a, sizeof a), p->peak_node,
               p->n_nodes);
    }
    cJSON_Delete(data);
    free(fit);
    vr_plan_free(p);
    vr_graph_free(g);
    return rc;
}
