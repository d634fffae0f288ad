/* vram fit: the largest batch that fits a device, and the fastest configuration that fits.
 *
 *   vram fit [model and step flags as vram plan] --capacity SIZE [--device meta|cpu|cuda[:N]]
 *            [--context SIZE] [--global-batch N] [--tflops X | --tflops fp32=X,bf16=Y]
 *            [--bandwidth GBS] [--launch-us US] [--json]
 *
 * Plans candidate steps (vram/fit.h; nothing is allocated) and prints the
 * largest micro-batch of the configuration as given, then every precision ×
 * recompute policy × optimizer-state format × master choice ranked by the cost
 * model. --precision / --recompute / --optim-state / --master pin the
 * search to one. Exit 0 when something fits, 1 when nothing does (with the
 * smallest need found), 2 for a bad flag (one line naming it). */
#define _DEFAULT_SOURCE /* strtok_r: without it clang declares it implicitly (int) and truncates the pointer */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/model_flags.h"
#include "kernels/cpu/kernels_cpu.h"
#include "vram/device.h"
#include "vram/exec.h"
#include "vram/fit.h"
#include "vram/graph.h"
#include "vram/util.h"

static const vr_model_defaults fit_defaults = {
    .gpt_preset = "gpt2", .mlp_preset = "mnist", .batch = 1, .optim = VR_OPTIM_ADAMW, .eval = true,
    .step_heading = "step (--batch is what fit searches; --precision/--recompute/--optim-state/--master pin the "
                    "search)"};

typedef struct opts {
    vr_model_flags m;
    const char *device, *tflops, *kernels;
    uint64_t capacity, context;
    bool has_capacity, has_context, json;
    uint64_t host_capacity;   /* --host-capacity; 0: what the host has available */
    long long global_batch;
    double bandwidth, launch_us;
    bool has_bandwidth, has_launch_us;
} opts;

static void fit_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    vr_model_flags_add(fs, &o->m, &fit_defaults);
    const vr_flag t[] = {
        VR_FLAG_HEADING_TEXT("fit"),
        {"--capacity", VR_FLAG_SIZE, &o->capacity, "SIZE", .given = &o->has_capacity,
         .help = "device memory to fit in (e.g. 16GiB); cuda: the GPU's total"},
        {"--device", VR_FLAG_STRING, &o->device, "SPEC",
         .help = "meta, cpu, cuda, cuda:N (meta: H100 figures, no context)"},
        {"--kernels", VR_FLAG_CHOICE, &o->kernels, NULL, .choices = "cpu|cuda",
         .help = "whose kernels' scratch to count (cuda on --device cuda, else cpu):\n"
                 "cuda adds the 32 MiB cuBLAS workspace and the CUDA kernels' scratch,\n"
                 "so --device meta --kernels cuda fits a GPU run on any machine"},
        {"--context", VR_FLAG_SIZE, &o->context, "SIZE", .given = &o->has_context,
         .help = "CUDA context set aside (cuda: measured, else " VR_XSTR(VR_CUDA_CONTEXT_ESTIMATE_MIB) "MiB)"},
        {"--global-batch", VR_FLAG_INT, &o->global_batch, "N", .lo = 1, .hi = 1 << 30,
         .help = "rows per optimizer step: micro-batch x accum = N"},
        {"--tflops", VR_FLAG_STRING, &o->tflops, "X|P=X,...",
         .help = "effective matmul TFLOP/s, all or per precision (H100: fp32 150,\nbf16 400, fp16 400; cpu: measured)"},
        {"--bandwidth", VR_FLAG_DOUBLE, &o->bandwidth, "GBS", .min = 0, .max = 1e12, .above = true,
         .given = &o->has_bandwidth,
         .help = "memory bandwidth of the other kernels, GB/s (H100: 2500; cpu: measured)"},
        {"--launch-us", VR_FLAG_DOUBLE, &o->launch_us, "US", .min = 0, .max = 1e12, .given = &o->has_launch_us,
         .help = "fixed cost per kernel, microseconds (5; cpu: 1)"},
        {"--host-capacity", VR_FLAG_SIZE, &o->host_capacity, "SIZE",
         .help = "host memory offloaded rows may pin (default: what the host has available)"},
        VR_FLAG_HEADING_TEXT("  (--offload none|optim pins the placement; both are searched otherwise. On cpu and cuda "
                             "the host's\n   update speed and the copy link are measured once, with an offloaded "
                             "step of a 38M-parameter MLP)"),
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "machine-readable output"},
    };
    VR_FLAGS_ADD(fs, t);
}

/* A TFLOP/s figure of --tflops; 0, or prints the error and returns 2. */
static int parse_tflop(const char *v, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d > 0) || d > 1e12)
        return vr_cli_fail("fit", 2, "--tflops: '%s' is not a positive number", v);
    *out = d;
    return 0;
}

/* "--tflops 300" (every precision) or "--tflops fp32=150,bf16=400". */
static int parse_tflops(const char *s, vr_fit_cost_model *cm)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    if (!strchr(buf, '=')) {
        double d = 0;
        if (parse_tflop(buf, &d))
            return 2;
        for (int p = 0; p < 3; p++)
            cm->tflops[p] = d;
        return 0;
    }
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        vr_precision p;
        double d = 0;
        if (!eq)
            return vr_cli_fail("fit", 2, "--tflops: '%s' is not PRECISION=X", tok);
        *eq = 0;
        if (vr_precision_parse(tok, "--tflops", &p) != VR_OK)
            return vr_cli_fail("fit", 2, "%s", vr_last_error());
        if (parse_tflop(eq + 1, &d))
            return 2;
        cm->tflops[p] = d;
    }
    return 0;
}

/* The host's throughput: one 512^3 matmul and a 64 MiB copy, best of three. */
static void measure_cpu(vr_fit_cost_model *cm)
{
    enum { N = 512 };
    size_t big = 64 << 20;
    float *a = calloc((size_t)N * N, sizeof *a), *b = calloc((size_t)N * N, sizeof *b);
    float *c = calloc((size_t)N * N, sizeof *c);
    char *x = calloc(big, 1), *y = calloc(big, 1);
    double best_mm = 1e9, best_cp = 1e9;
    for (int r = 0; a && b && c && x && y && r < 3; r++) {
        uint64_t t0 = vr_now_ns();
        vr_cpu_matmul_fwd(c, a, b, NULL, N, N, N);
        uint64_t t1 = vr_now_ns();
        memcpy(y, x, big);
        uint64_t t2 = vr_now_ns();
        best_mm = (double)(t1 - t0) * 1e-9 < best_mm ? (double)(t1 - t0) * 1e-9 : best_mm;
        best_cp = (double)(t2 - t1) * 1e-9 < best_cp ? (double)(t2 - t1) * 1e-9 : best_cp;
    }
    double tf = best_mm < 1e9 && best_mm > 0 ? 2.0 * N * N * N / best_mm / 1e12 : 0.1;
    for (int p = 0; p < 3; p++)
        cm->tflops[p] = tf;
    cm->bandwidth_gbs = best_cp < 1e9 && best_cp > 0 ? 2.0 * (double)big / best_cp / 1e9 : 10.0;
    cm->launch_us = 1.0;
    free(a), free(b), free(c), free(x), free(y);
}

static void host_time(void *ctx, vr_exec *e, int node, uint64_t t0, uint64_t t1)
{
    if (vr_exec_plan(e)->graph->nodes[node].host)
        *(uint64_t *)ctx += t1 - t0;
}

/* Offload's figures on this machine: the host nodes of an offloaded AdamW step (an MLP of 38M parameters, bf16
 * on a GPU) timed on the second step, and a 256 MiB copy from the device to pinned host memory, best of 3. */
static void measure_offload(const char *spec, vr_fit_cost_model *cm)
{
    vr_device *dev = NULL;
    if (vr_device_open(spec, &dev) != VR_OK)
        return;
    bool cuda = vr_device_kind_of(dev) == VR_DEVICE_CUDA;
    vr_model_config m = {.kind = VR_MODEL_MLP, .B = 8, .T = 1};
    m.mlp = (vr_mlp_config){.n_sizes = 5, .sizes = {1024, 4096, 4096, 4096, 10}, .act = VR_OP_RELU};
    vr_step_config st = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .offload = VR_OFFLOAD_OPTIM,
                         .precision = cuda ? VR_PREC_BF16 : VR_PREC_FP32,
                         .workspace_bytes = cuda ? VR_CUDA_WORKSPACE_BYTES : 0,
                         .kernels = cuda ? VR_KERNELS_CUDA : VR_KERNELS_CPU};
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    vr_exec *e = NULL;
    uint64_t host_ns = 0;
    vr_exec_config ec = {.memory = VR_MEMORY_PLANNED, .on_node = host_time, .on_node_ctx = &host_ns};
    if (!vr_graph_build(&m, &st, &g) && !vr_plan_create(g, NULL, &p) && !vr_exec_create(p, dev, &ec, &e)) {
        float *x = calloc((size_t)8 * 1024, sizeof *x);
        int32_t y[8] = {0};
        vr_exec_batch b = {x, y};
        vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
        bool ok = x && !vr_exec_step(e, &b, &h, NULL);
        host_ns = 0;
        h.step = 2;
        if (ok && !vr_exec_step(e, &b, &h, NULL) && host_ns)
            cm->host_elems_per_s = (double)g->n_trainable / ((double)host_ns * 1e-9);
        free(x);
    }
    vr_exec_free(e);
    vr_plan_free(p);
    vr_graph_free(g);
    size_t big = (size_t)256 << 20;
    void *d = NULL, *hbuf = NULL;
    double best = 0;
    if (!vr_device_malloc(dev, big, &d) && !vr_device_host_alloc(dev, big, &hbuf))
        for (int r = 0; r < 3; r++) {
            uint64_t t0 = vr_now_ns();
            if (vr_device_memcpy(dev, hbuf, d, big, VR_COPY_DEVICE_TO_HOST))
                break;
            double gbs = (double)big / ((double)(vr_now_ns() - t0) * 1e-9) / 1e9;
            best = gbs > best ? gbs : best;
        }
    if (best > 0)
        cm->link_gbs = best;
    vr_device_free(dev, d, big);
    vr_device_host_free(dev, hbuf);
    vr_device_close(dev);
}

/* Device, capacity, context; the step's workspace on cuda; the cost model. */
typedef struct target {
    char spec[64];
    bool cuda;          /* a GPU measured (--device cuda) */
    bool cuda_kernels;  /* the CUDA kernels' scratch and workspace planned (--kernels) */
    uint64_t capacity, context;
    const char *context_how, *cost_how;
} target;

static int resolve_device(const opts *o, target *t, vr_step_config *s, vr_fit_cost_model *cm)
{
    memset(t, 0, sizeof *t);
    snprintf(t->spec, sizeof t->spec, "%s", o->device ? o->device : "meta");
    *cm = vr_fit_cost_h100();
    t->context_how = "none";
    t->cost_how = "H100 figures";
    if (!strcmp(t->spec, "cpu")) {
        measure_cpu(cm);
        t->cost_how = "measured on this host";
    } else if (!strncmp(t->spec, "cuda", 4) && (!t->spec[4] || t->spec[4] == ':')) {
        long long idx = 0;
        if (t->spec[4] && vr_parse_int(t->spec + 5, "--device", 0, 1024, &idx) != VR_OK)
            return vr_cli_fail("fit", 2, "%s", vr_last_error());
        t->cuda = true;
        uint64_t cost = 0;
        if (o->has_context)
            t->context = o->context, t->context_how = "as given";
        else if (vr_cuda_context_cost((int)idx, &cost) == VR_OK && cost > 0)
            t->context = cost, t->context_how = "measured";
        else
            t->context = VR_CUDA_CONTEXT_ESTIMATE,
            t->context_how = "estimate (" VR_XSTR(VR_CUDA_CONTEXT_ESTIMATE_MIB) " MiB, vram's on an H100)";
        vr_cuda_info info;
        if (vr_cuda_device_info((int)idx, &info) == VR_OK)
            t->capacity = info.total;
    } else if (strcmp(t->spec, "meta")) {
        return vr_cli_fail("fit", 2, "--device: '%s' is not one of meta, cpu, cuda, cuda:N", t->spec);
    }
    t->cuda_kernels = o->kernels ? !strcmp(o->kernels, "cuda") : t->cuda;
    if (t->cuda && !t->cuda_kernels)
        return vr_cli_fail("fit", 2, "--kernels cpu: a CUDA device runs the CUDA kernels (leave it out, or "
                           "--device meta)");
    if (t->cuda_kernels) {
        s->workspace_bytes = VR_CUDA_WORKSPACE_BYTES;
        s->kernels = VR_KERNELS_CUDA;
    }
    if (o->has_capacity)
        t->capacity = o->capacity;
    if (o->has_context && !t->cuda)
        t->context = o->context, t->context_how = "as given";
    if (!t->capacity)
        return vr_cli_fail("fit", 2, "--capacity: needed (no GPU to read it from)");
    if (o->tflops && parse_tflops(o->tflops, cm))
        return 2;
    if (o->has_bandwidth)
        cm->bandwidth_gbs = o->bandwidth;
    if (o->has_launch_us)
        cm->launch_us = o->launch_us;
    if (o->tflops || o->has_bandwidth || o->has_launch_us)
        t->cost_how = "as given";
    if ((!strcmp(t->spec, "cpu") || t->cuda) && s->train && s->optim != VR_OPTIM_NONE &&
        !(o->m.offload && s->offload == VR_OFFLOAD_NONE))
        measure_offload(t->spec, cm);
    return 0;
}

static void print_batch(const vr_step_config *s, const vr_fit_batch *b)
{
    char n1[32], p1[32], n2[32], p2[32];
    printf("largest batch (%s, recompute %s, accum %d): ", vr_precision_name(s->precision),
           vr_recompute_name(s->recompute), s->accum);
    if (!b->B) {
        printf("none: B=1 needs %s (peak %s)\n", vr_format_size(b->next.need, n1, sizeof n1),
               vr_format_size(b->next.peak, p1, sizeof p1));
        return;
    }
    printf("B=%d%s\n  B=%-8d need %s (peak %s): fits\n", b->B, b->capped ? " (the search's cap)" : "", b->at.B,
           vr_format_size(b->at.need, n1, sizeof n1), vr_format_size(b->at.peak, p1, sizeof p1));
    if (b->next.B)
        printf("  B=%-8d need %s (peak %s): does not fit\n", b->next.B, vr_format_size(b->next.need, n2, sizeof n2),
               vr_format_size(b->next.peak, p2, sizeof p2));
}

/* The chosen configuration's bytes per role, on the device (at the plan's peak) and on the host. */
static void print_roles(const vr_model_config *model, const vr_step_config *s0, const vr_fit_row *w)
{
    vr_model_config m = *model;
    vr_step_config s = *s0;
    m.B = w->micro;
    vr_fit_row_step(w, &s);
    vr_graph *g = NULL;
    vr_plan *p = NULL;
    char a[32], b[32];
    for (int r = 0; r < (s.world > 1 ? s.world : 1); r++) { /* with ranks: the largest rank's */
        vr_graph *gr = NULL;
        vr_plan *pr = NULL;
        s.rank = r;
        if (!vr_graph_build(&m, &s, &gr) && !vr_plan_create(gr, NULL, &pr) && (!p || pr->arena_size > p->arena_size)) {
            vr_plan_free(p);
            vr_graph_free(g);
            p = pr, g = gr, pr = NULL, gr = NULL;
        }
        vr_plan_free(pr);
        vr_graph_free(gr);
    }
    if (p) {
        if (s.world > 1)
            printf("bytes of rank %d (the largest of the %d ranks' arenas)\n", p->graph->step.rank, s.world);
        printf("bytes     %-8s %14s %14s\n", "role", "device (peak)", "host");
        for (int r = 0; r < VR_ROLE_COUNT; r++)
            printf("          %-8s %14s %14s\n", vr_role_name((vr_role)r), vr_format_size(p->at_peak[r], a, sizeof a),
                   p->host_total[r] ? vr_format_size(p->host_total[r], b, sizeof b) : "-");
        printf("          %-8s %14s %14s\n", "arena", vr_format_size(p->arena_size, a, sizeof a),
               p->host_size ? vr_format_size(p->host_size, b, sizeof b) : "-");
    }
    vr_plan_free(p);
    vr_graph_free(g);
}

static int report(const opts *o, const target *t, uint64_t step_cap, const vr_step_config *s,
                  const vr_fit_batch *b, const vr_fit_result *r)
{
    char a[32], c[32], d[32];
    const vr_fit_row *best = r->best >= 0 ? &r->rows[r->best] : NULL;
    if (o->json) {
        cJSON *root = vr_fit_json(r);
        cJSON *mb = vr_fit_batch_json(b);
        if (!root || !mb) {
            cJSON_Delete(root), cJSON_Delete(mb);
            return vr_cli_fail("fit", 1, "could not build the JSON output");
        }
        cJSON *dev = cJSON_AddObjectToObject(root, "device");
        cJSON_AddStringToObject(dev, "spec", t->spec);
        cJSON_AddNumberToObject(dev, "capacity", (double)t->capacity);
        cJSON_AddNumberToObject(dev, "context", (double)t->context);
        cJSON_AddNumberToObject(dev, "step_capacity", (double)step_cap);
        cJSON_AddStringToObject(dev, "kernels", t->cuda_kernels ? "cuda" : "cpu");
        cJSON_AddNumberToObject(mb, "T", r->model.T);
        cJSON_AddStringToObject(mb, "precision", vr_precision_name(s->precision));
        cJSON_AddStringToObject(mb, "recompute", vr_recompute_name(s->recompute));
        cJSON_AddNumberToObject(mb, "accum", s->accum);
        cJSON_AddItemToObject(root, "max_batch", mb);
        cJSON_AddBoolToObject(root, "fits", best != NULL);
        char *js = cJSON_Print(root);
        printf("%s\n", js ? js : "null");
        free(js);
        cJSON_Delete(root);
    } else {
        printf("device    %s, capacity %s; CUDA context %s (%s); %s for the step%s\n", t->spec,
               vr_format_size(t->capacity, a, sizeof a), vr_format_size(t->context, c, sizeof c), t->context_how,
               vr_format_size(step_cap, d, sizeof d),
               t->cuda_kernels ? "; CUDA kernels (cuBLAS workspace 32 MiB counted as temp)" : "; CPU kernels");
        if (r->model.kind == VR_MODEL_GPT)
            printf("sequence  T=%d (a token is one position); cost model: %s\n", r->model.T, t->cost_how);
        else
            printf("rows      MLP samples (a token is one row); cost model: %s\n", t->cost_how);
        print_batch(s, b);
        printf("\n");
        vr_fit_print(r, stdout);
        if (best) {
            char zs[48] = "";
            if (s->world > 1)
                snprintf(zs, sizeof zs, ", ZeRO %d over %d ranks", best->zero, s->world);
            char rl[48] = "";
            if (best->recompute_layers)
                snprintf(rl, sizeof rl, " in the first %d block%s (--recompute-layers %d)", best->recompute_layers,
                         best->recompute_layers == 1 ? "" : "s", best->recompute_layers);
            char cr[48] = "";
            if (s->classifier_rows > 0 && t->cuda_kernels)
                snprintf(cr, sizeof cr, ", classifier chunks of %d rows", s->classifier_rows);
            printf("\nbest      %s, recompute %s%s, %s optimizer state%s%s%s%s%s, micro-batch %d x accum %d: need %s, "
                   "est. %.2f ms/step, %.0f tokens/s\n", vr_precision_name(best->precision),
                   vr_recompute_name(best->recompute), rl, vr_optim_state_name(best->optim_state),
                   best->no_master ? ", no master weights" : best->split_master ? ", split master" : "",
                   best->offload ? ", master and state offloaded to the host" : "",
                   s->norm_from_out    ? ", norm backward from the output"
                   : best->norm_from_out ? ", norm backward from the output (--norm-backward output)"
                                         : "",
                   cr, zs,
                   best->micro, best->accum, vr_format_size(best->point.need, a, sizeof a),
                   best->cost.seconds * 1e3, best->tokens_per_s);
            print_roles(&r->model, s, best);
        }
    }
    if (best)
        return 0;
    const vr_fit_row *lo = &r->rows[0];
    for (int i = 1; i < r->n_rows; i++)
        if (r->rows[i].point.need < lo->point.need)
            lo = &r->rows[i];
    return vr_cli_fail("fit", 1, "does not fit: the smallest step found (%s, recompute %s, micro-batch 1) needs %s "
                       "(peak %s), more than the %s left for the step", vr_precision_name(lo->precision),
                       vr_recompute_name(lo->recompute), vr_format_size(lo->point.need, a, sizeof a),
                       vr_format_size(lo->point.peak, c, sizeof c), vr_format_size(step_cap, d, sizeof d));
}

static int run(int argc, char **argv)
{
    opts o = {0};
    int rc = vr_flags_parse(&vr_cli_fit, &o, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (o.m.batch)
        return vr_cli_fail("fit", 2, "--batch: vram fit searches the batch (use --global-batch N to fix the rows "
                                     "per optimizer step)");
    if (o.global_batch && o.m.accum)
        return vr_cli_fail("fit", 2, "--accum: not with --global-batch (fit chooses micro-batch x accum)");
    vr_model_config m;
    vr_step_config s;
    target t;
    vr_fit_options fo = {.global_batch = (int)o.global_batch};
    if ((rc = vr_model_flags_configure("fit", &o.m, &fit_defaults, &m, &s)) ||
        (rc = resolve_device(&o, &t, &s, &fo.cost)))
        return rc;
    fo.capacity = t.capacity > t.context ? t.capacity - t.context : 0;
    if (o.m.precision)
        fo.precisions = 1u << s.precision;
    if (o.m.optim_state)
        fo.optim_states = 1u << s.optim_state;
    if (o.m.master)
        fo.masters = s.no_master ? 2u : s.split_master ? 4u : 1u;
    if (o.m.recompute)
        fo.recomputes = 1u << s.recompute;
    if (o.m.offload)
        fo.offloads = 1u << s.offload;
    if (o.m.zero_given)
        fo.zeros = 1u << s.zero;
    fo.norm_backward_pinned = o.m.norm_backward != NULL;
    fo.host_capacity = o.host_capacity ? o.host_capacity : vr_host_mem_available();
    vr_fit_batch b;
    vr_fit_result *r = calloc(1, sizeof *r);
    if (!r)
        return vr_cli_fail("fit", 1, "out of host memory");
    if (vr_fit_max_batch(&m, &s, fo.capacity, &b) != VR_OK || vr_fit_search(&m, &s, &fo, r) != VR_OK) {
        free(r);
        return vr_cli_fail("fit", 2, "%s", vr_last_error());
    }
    rc = report(&o, &t, fo.capacity, &s, &b, r);
    free(r);
    return rc;
}

const vr_cli_command vr_cli_fit = {
    "fit", "the largest batch that fits a device, and the fastest configuration that fits", run,
    "--capacity SIZE [options]",
    "Finds the largest batch whose planned step fits the capacity, then ranks every precision x\n"
    "recompute policy (largest micro-batch, or micro x accum = --global-batch) by an estimated\n"
    "step time: matmul FLOPs / TFLOP/s + other kernels' bytes / bandwidth + launches.",
    fit_flags, sizeof(opts)};
