/* vram plan — the report: the table of bytes per role, the peak, the arena,
 * the dynamic-mode figures, and the per-node timeline; as text or JSON. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "vram/util.h"

static void model_text(const vr_graph *g, char *buf, size_t cap)
{
    const vr_model_config *m = &g->model;
    if (m->kind == VR_MODEL_GPT) {
        const vr_gpt_config *c = &m->gpt;
        snprintf(buf, cap, "gpt L=%d C=%d NH=%d V=%d (wte rows %d) maxT=%d", c->L, c->C, c->NH, c->V, c->Vp, c->maxT);
        return;
    }
    if (m->kind == VR_MODEL_LLAMA) {
        const vr_llama_config *c = &m->llama;
        snprintf(buf, cap, "llama L=%d C=%d NH=%d NKV=%d hd=%d I=%d V=%d (rows %d) maxT=%d %s%s rope %g%s", c->L,
                 c->C, c->NH, c->NKV, c->hd, c->I, c->V, c->Vp, c->maxT, c->tied ? "tied" : "untied",
                 c->qkv_bias ? " qkv-bias" : "", c->rope.theta, c->rope.scaling ? " llama3" : "");
        return;
    }
    size_t k = (size_t)snprintf(buf, cap, "mlp ");
    for (int i = 0; i < m->mlp.n_sizes && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? "-%d" : "%d", m->mlp.sizes[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, " %s", vr_op_name(m->mlp.act));
}

static void step_text(const vr_graph *g, char *buf, size_t cap)
{
    const vr_step_config *s = &g->step;
    int n = snprintf(buf, cap, "B=%d T=%d, %s", g->model.B, g->model.T,
                     s->train ? "training" : "evaluation (no grad)");
    if (s->train && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", accum %d, optimizer %s, recompute %s", s->accum < 1 ? 1 : s->accum,
                      vr_optim_name(s->optim), vr_recompute_name(s->recompute));
    if (s->train && s->recompute_layers == 1 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " in block 0");
    else if (s->train && s->recompute_layers > 1 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " in blocks 0-%d", s->recompute_layers - 1);
    if (s->train && s->norm_from_out && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", norm backward from the output");
    if (s->classifier_rows > 0 && s->kernels == VR_KERNELS_CUDA && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", classifier chunks of %d rows", s->classifier_rows);
    if (n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", %s", vr_precision_name(s->precision));
    if (s->train && s->optim_state != VR_OSTATE_FP32 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", %s optimizer state", vr_optim_state_name(s->optim_state));
    if (s->train && s->no_master && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", no master weights");
    if (s->train && s->split_master && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", split master (16 low bits per weight)");
    if (s->train && s->offload && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", master and optimizer state offloaded to the host");
    if (s->freeze && *s->freeze && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", frozen '%s'", s->freeze);
}

static void node_text(const vr_graph *g, int i, char *buf, size_t cap)
{
    if (i < 0 || i >= g->n_nodes) {
        snprintf(buf, cap, "-");
        return;
    }
    const vr_node *n = &g->nodes[i];
    snprintf(buf, cap, "node %d: %s %s %s", i, vr_phase_name(n->phase), vr_op_name(n->op), n->name);
}

static const char *sz(uint64_t b, char *buf) { return vr_format_size(b, buf, 32); }

void vr_plan_print(const vr_plan *p, FILE *f, bool timeline)
{
    const vr_graph *g = p->graph;
    char a[32], b[32], c[32], line[256];
    model_text(g, line, sizeof line);
    fprintf(f, "model     %s: %lld params, %lld trainable\n", line, (long long)g->n_params, (long long)g->n_trainable);
    step_text(g, line, sizeof line);
    fprintf(f, "step      %s\n", line);
    fprintf(f, "graph     %d tensors, %d nodes: %d forward, %d recompute, %d backward, %d optimizer\n\n", g->n_tensors,
            g->n_nodes, vr_graph_count_phase(g, VR_PHASE_FORWARD), vr_graph_count_phase(g, VR_PHASE_RECOMPUTE),
            vr_graph_count_phase(g, VR_PHASE_BACKWARD), vr_graph_count_phase(g, VR_PHASE_OPTIMIZER));
    fprintf(f, "%-8s %8s %14s %14s %14s %18s\n", "role", "tensors", "total", "max live", "at peak", "at peak (bytes)");
    uint64_t tot = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++) {
        fprintf(f, "%-8s %8d %14s %14s %14s %18llu\n", vr_role_name((vr_role)r), p->count[r], sz(p->total[r], a),
                sz(p->max_live[r], b), sz(p->at_peak[r], c), (unsigned long long)p->at_peak[r]);
        tot += p->at_peak[r];
    }
    fprintf(f, "%-8s %8s %14s %14s %14s %18llu\n\n", "peak", "", "", "", sz(tot, a), (unsigned long long)tot);
    node_text(g, p->peak_node, line, sizeof line);
    fprintf(f, "peak      %s live during %s\n", sz(p->peak, a), line);
    fprintf(f, "          %s with every tensor rounded up to %llu B\n", sz(p->peak_aligned, a),
            (unsigned long long)p->align);
    fprintf(f, "arena     %s (%llu B) = persistent %s + packed %s; arena / aligned peak = %.4f\n",
            sz(p->arena_size, a), (unsigned long long)p->arena_size, sz(p->persistent_size, b),
            sz(p->arena_size - p->persistent_size, c), vr_plan_arena_factor(p));
    if (p->host_size) {
        fprintf(f, "host      %s (%llu B) pinned, all persistent:", sz(p->host_size, a), (unsigned long long)p->host_size);
        for (int r = 0; r < VR_ROLE_COUNT; r++)
            if (p->host_count[r])
                fprintf(f, " %s %s (%llu B)", vr_role_name((vr_role)r), sz(p->host_total[r], b),
                        (unsigned long long)p->host_total[r]);
        fprintf(f, "\n");
    }
    if (p->config.inplace)
        fprintf(f, "in place  %d outputs (gelu, relu, add) written over a dying input\n", p->n_inplace);
    if (p->has_dynamic) {
        const vr_plan_dynamic *d = &p->dynamic;
        fprintf(f, "dynamic   caching allocator (%s) on meta, %d step(s): peak allocated %s, peak reserved %s "
                   "(cache %s over the allocated peak), %lld device segments, %llu driver calls (%llu in the "
                   "last step)\n",
                p->config.alloc_policy ? p->config.alloc_policy : "pytorch", p->config.steps > 0 ? p->config.steps : 2,
                sz(d->peak_allocated, a), sz(d->peak_reserved, b),
                sz(d->peak_reserved > d->peak_allocated ? d->peak_reserved - d->peak_allocated : 0, c),
                (long long)d->device_allocs, (unsigned long long)d->device_calls,
                (unsigned long long)d->device_calls_last_step);
        if (d->status != VR_OK) {
            node_text(g, d->oom_node, line, sizeof line);
            fprintf(f, "          out of memory at %s:\n          %s\n", line, d->error);
        }
    }
    if (!timeline)
        return;
    fprintf(f, "\ntimeline (MiB live during each node)\n%5s %-9s %-16s %-28s", "node", "phase", "op", "name");
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        fprintf(f, " %9s", vr_role_name((vr_role)r));
    fprintf(f, " %10s%s\n", "total", p->has_dynamic ? "  allocated  reserved" : "");
    for (int i = 0; i < p->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        fprintf(f, "%5d %-9s %-16s %-28.28s", i, vr_phase_name(n->phase), vr_op_name(n->op), n->name);
        for (int r = 0; r < VR_ROLE_COUNT; r++)
            fprintf(f, " %9.1f", (double)vr_plan_live(p, i, r) / (double)VR_MiB);
        fprintf(f, " %10.1f", (double)vr_plan_live(p, i, VR_ROLE_COUNT) / (double)VR_MiB);
        if (p->has_dynamic)
            fprintf(f, " %10.1f %9.1f", (double)p->dynamic.allocated[i] / (double)VR_MiB,
                    (double)p->dynamic.reserved[i] / (double)VR_MiB);
        fprintf(f, "%s\n", i == p->peak_node ? "  <- peak" : "");
    }
}

static cJSON *num(double v) { return cJSON_CreateNumber(v); }

char *vr_plan_json(const vr_plan *p, bool timeline)
{
    const vr_graph *g = p->graph;
    char line[256];
    cJSON *root = cJSON_CreateObject();
    model_text(g, line, sizeof line);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "description", line);
    cJSON_AddStringToObject(model, "kind", vr_model_kind_name(g->model.kind));
    cJSON_AddNumberToObject(model, "params", (double)g->n_params);
    cJSON_AddNumberToObject(model, "trainable", (double)g->n_trainable);
    cJSON_AddNumberToObject(model, "batch", g->model.B);
    cJSON_AddNumberToObject(model, "seq", g->model.T);
    cJSON *step = cJSON_AddObjectToObject(root, "step");
    cJSON_AddBoolToObject(step, "train", g->step.train);
    cJSON_AddNumberToObject(step, "accum", g->step.accum < 1 ? 1 : g->step.accum);
    cJSON_AddStringToObject(step, "optim", vr_optim_name(g->step.optim));
    cJSON_AddStringToObject(step, "recompute", vr_recompute_name(g->step.recompute));
    cJSON_AddNumberToObject(step, "recompute_layers", g->step.recompute_layers); /* 0: every block */
    cJSON_AddStringToObject(step, "norm_backward", g->step.norm_from_out ? "output" : "input");
    cJSON_AddNumberToObject(step, "classifier_rows", g->step.classifier_rows); /* 0: the default */
    cJSON_AddStringToObject(step, "precision", vr_precision_name(g->step.precision));
    cJSON_AddStringToObject(step, "optim_state", vr_optim_state_name(g->step.optim_state));
    cJSON_AddStringToObject(step, "master", vr_master_name(g->step.no_master, g->step.split_master));
    cJSON_AddStringToObject(step, "offload", vr_offload_name(g->step.offload));
    cJSON_AddStringToObject(step, "kernels", g->step.kernels == VR_KERNELS_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(step, "attention", vr_attention_name(g->step.attention));
    cJSON_AddNumberToObject(step, "ranks", g->step.world);
    cJSON_AddNumberToObject(step, "zero", g->step.zero);
    cJSON_AddStringToObject(step, "freeze", g->step.freeze ? g->step.freeze : "");
    cJSON *gr = cJSON_AddObjectToObject(root, "graph");
    cJSON_AddNumberToObject(gr, "tensors", g->n_tensors);
    cJSON_AddNumberToObject(gr, "nodes", g->n_nodes);
    int pieces = 0; /* ZeRO >= 1: parameters cut into pieces at the ranks' shard boundaries */
    for (int t = 0; t < g->n_tensors; t++)
        pieces += g->tensors[t].piece_of >= 0;
    cJSON_AddNumberToObject(gr, "pieces", pieces);
    for (int ph = 0; ph < 4; ph++)
        cJSON_AddNumberToObject(gr, vr_phase_name((vr_phase)ph), vr_graph_count_phase(g, (vr_phase)ph));
    cJSON *roles = cJSON_AddObjectToObject(root, "roles");
    for (int r = 0; r < VR_ROLE_COUNT; r++) {
        cJSON *o = cJSON_AddObjectToObject(roles, vr_role_name((vr_role)r));
        cJSON_AddNumberToObject(o, "tensors", p->count[r]);
        cJSON_AddNumberToObject(o, "total", (double)p->total[r]);
        cJSON_AddNumberToObject(o, "max_live", (double)p->max_live[r]);
        cJSON_AddNumberToObject(o, "at_peak", (double)p->at_peak[r]);
    }
    cJSON *pk = cJSON_AddObjectToObject(root, "peak");
    cJSON_AddNumberToObject(pk, "bytes", (double)p->peak);
    cJSON_AddNumberToObject(pk, "node", p->peak_node);
    node_text(g, p->peak_node, line, sizeof line);
    cJSON_AddStringToObject(pk, "at", line);
    cJSON_AddNumberToObject(pk, "aligned_bytes", (double)p->peak_aligned);
    cJSON *ar = cJSON_AddObjectToObject(root, "arena");
    cJSON_AddNumberToObject(ar, "bytes", (double)p->arena_size);
    cJSON_AddNumberToObject(ar, "persistent", (double)p->persistent_size);
    cJSON_AddNumberToObject(ar, "packed", (double)(p->arena_size - p->persistent_size));
    cJSON_AddNumberToObject(ar, "align", (double)p->align);
    cJSON_AddNumberToObject(ar, "factor", vr_plan_arena_factor(p));
    cJSON_AddBoolToObject(ar, "inplace", p->config.inplace);
    cJSON_AddNumberToObject(ar, "inplace_outputs", p->n_inplace);
    cJSON *host = cJSON_AddObjectToObject(root, "host");
    cJSON_AddNumberToObject(host, "bytes", (double)p->host_size);
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        if (p->host_count[r]) {
            cJSON *o = cJSON_AddObjectToObject(host, vr_role_name((vr_role)r));
            cJSON_AddNumberToObject(o, "tensors", p->host_count[r]);
            cJSON_AddNumberToObject(o, "total", (double)p->host_total[r]);
        }
    if (p->has_dynamic) {
        const vr_plan_dynamic *d = &p->dynamic;
        cJSON *dy = cJSON_AddObjectToObject(root, "dynamic");
        cJSON_AddStringToObject(dy, "policy", p->config.alloc_policy ? p->config.alloc_policy : "pytorch");
        cJSON_AddNumberToObject(dy, "peak_allocated", (double)d->peak_allocated);
        cJSON_AddNumberToObject(dy, "peak_reserved", (double)d->peak_reserved);
        cJSON_AddNumberToObject(dy, "peak_requested", (double)d->peak_requested);
        cJSON_AddNumberToObject(dy, "device_segments", (double)d->device_allocs);
        cJSON_AddNumberToObject(dy, "device_calls", (double)d->device_calls);
        cJSON_AddNumberToObject(dy, "device_calls_last_step", (double)d->device_calls_last_step);
        cJSON_AddBoolToObject(dy, "oom", d->status != VR_OK);
        if (d->status != VR_OK) {
            cJSON_AddNumberToObject(dy, "oom_node", d->oom_node);
            cJSON_AddStringToObject(dy, "error", d->error);
        }
    }
    if (timeline) {
        cJSON *tl = cJSON_AddArrayToObject(root, "timeline");
        for (int i = 0; i < p->n_nodes; i++) {
            const vr_node *n = &g->nodes[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "node", i);
            cJSON_AddStringToObject(e, "phase", vr_phase_name(n->phase));
            cJSON_AddStringToObject(e, "op", vr_op_name(n->op));
            cJSON_AddStringToObject(e, "name", n->name);
            for (int r = 0; r < VR_ROLE_COUNT; r++)
                cJSON_AddItemToObject(e, vr_role_name((vr_role)r), num((double)vr_plan_live(p, i, r)));
            cJSON_AddNumberToObject(e, "total", (double)vr_plan_live(p, i, VR_ROLE_COUNT));
            if (p->has_dynamic) {
                cJSON_AddNumberToObject(e, "allocated", (double)p->dynamic.allocated[i]);
                cJSON_AddNumberToObject(e, "reserved", (double)p->dynamic.reserved[i]);
            }
            cJSON_AddItemToArray(tl, e);
        }
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
