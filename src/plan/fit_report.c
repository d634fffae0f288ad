/* vram fit — the ranked table of configurations, as text or JSON. */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "vram/fit.h"
#include "vram/util.h"

static void time_text(double s, char *buf, size_t cap)
{
    if (s >= 1.0)
        snprintf(buf, cap, "%.2f s", s);
    else if (s >= 1e-3)
        snprintf(buf, cap, "%.2f ms", s * 1e3);
    else
        snprintf(buf, cap, "%.1f us", s * 1e6);
}

static void flops_text(double f, char *buf, size_t cap)
{
    static const char *unit[] = {"", "K", "M", "G", "T", "P", "E"};
    int u = 0;
    while (f >= 1000 && u < 6)
        f /= 1000, u++;
    snprintf(buf, cap, "%.2f %s", f, unit[u]);
}

void vr_fit_print(const vr_fit_result *r, FILE *f)
{
    const vr_fit_options *o = &r->options;
    char cap[32];
    fprintf(f, "cost model: matmul FLOPs at fp32 %.4g, bf16 %.4g, fp16 %.4g TFLOP/s; other kernels at %.4g GB/s; "
               "%.4g us per kernel; offload: host updates %.3g params/s, link %.4g GB/s\n",
            o->cost.tflops[VR_PREC_FP32], o->cost.tflops[VR_PREC_BF16], o->cost.tflops[VR_PREC_FP16],
            o->cost.bandwidth_gbs, o->cost.launch_us, o->cost.host_elems_per_s, o->cost.link_gbs);
    fprintf(f, "%s configurations for %s of step memory (%d plans)", o->global_batch ? "global batch" : "largest batch",
            vr_format_size(o->capacity, cap, sizeof cap), r->plans);
    if (o->global_batch)
        fprintf(f, ": %d rows per step", o->global_batch);
    bool ranks = r->step.world > 1;
    if (ranks)
        fprintf(f, "\n%d ranks: each row's need is its largest rank's arena; collectives at %.4g GB/s; micro-batch and "
                "tokens per rank", r->step.world, o->cost.comm_gbs);
    fprintf(f, "\n\n%4s  %-9s %-12s %-5s %-6s %-7s%s %13s %12s %11s %11s %11s %-4s %11s %14s %10s\n", "rank",
            "precision", "recompute", "state", "master", "offload", ranks ? " zero" : "", "micro x accum",
            "tokens/step", "peak", "need", "host", "fits", "FLOP/step", "est. step", "tokens/s");
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        char mb[32], pk[32], nd[32], hs[32] = "-", tm[32] = "-", tps[32] = "-", tf[32] = "-", tok[32] = "-", rc[32];
        int n = snprintf(rc, sizeof rc, w->recompute_layers ? "%s:%d" : "%s", vr_recompute_name(w->recompute),
                         w->recompute_layers); /* act:18: the first 18 blocks */
        if (w->norm_from_out && n > 0 && (size_t)n < sizeof rc) /* +out: the norms' backward from their output */
            snprintf(rc + n, sizeof rc - (size_t)n, "+out");
        if (w->point.host)
            vr_format_size(w->point.host, hs, sizeof hs);
        if (w->micro)
            snprintf(mb, sizeof mb, "%d x %d", w->micro, w->accum);
        else
            snprintf(mb, sizeof mb, "none (B=1)");
        if (w->fits) {
            time_text(w->cost.seconds, tm, sizeof tm);
            snprintf(tps, sizeof tps, "%.0f", w->tokens_per_s);
            flops_text(w->cost.flops, tf, sizeof tf);
            snprintf(tok, sizeof tok, "%lld", (long long)w->tokens);
        }
        char z[16] = "";
        if (ranks)
            snprintf(z, sizeof z, " %4d", w->zero);
        fprintf(f, "%3d%c  %-9s %-12s %-5s %-6s %-7s%s %13s %12s %11s %11s %11s %-4s %11s %14s %10s\n", i + 1,
                i == r->best ? '*' : ' ', vr_precision_name(w->precision), rc,
                vr_optim_state_name(w->optim_state), w->precision == VR_PREC_FP32 ? "-" : vr_master_name(w->no_master, w->split_master),
                vr_offload_name(w->offload), z, mb, tok, vr_format_size(w->point.peak, pk, sizeof pk),
                vr_format_size(w->point.need, nd, sizeof nd), hs, w->fits ? "yes" : "no", tf, tm, tps);
    }
}

static void add_point(cJSON *o, const char *name, const vr_fit_point *p)
{
    cJSON *j = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(j, "batch", p->B);
    cJSON_AddNumberToObject(j, "peak", (double)p->peak);
    cJSON_AddNumberToObject(j, "need", (double)p->need);
    cJSON_AddNumberToObject(j, "host", (double)p->host);
    cJSON_AddBoolToObject(j, "fits", p->fits);
}

void *vr_fit_json(const vr_fit_result *r)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    const vr_fit_options *o = &r->options;
    cJSON_AddNumberToObject(root, "capacity", (double)o->capacity);
    cJSON_AddNumberToObject(root, "global_batch", o->global_batch);
    cJSON *cm = cJSON_AddObjectToObject(root, "cost_model");
    cJSON *tf = cJSON_AddObjectToObject(cm, "tflops");
    for (int p = VR_PREC_FP32; p <= VR_PREC_FP16; p++)
        cJSON_AddNumberToObject(tf, vr_precision_name((vr_precision)p), o->cost.tflops[p]);
    cJSON_AddNumberToObject(cm, "bandwidth_gbs", o->cost.bandwidth_gbs);
    cJSON_AddNumberToObject(cm, "launch_us", o->cost.launch_us);
    cJSON_AddNumberToObject(cm, "host_params_per_s", o->cost.host_elems_per_s);
    cJSON_AddNumberToObject(cm, "link_gbs", o->cost.link_gbs);
    cJSON_AddNumberToObject(root, "host_capacity", (double)o->host_capacity);
    cJSON_AddNumberToObject(root, "plans", r->plans);
    cJSON_AddNumberToObject(root, "smallest_need", (double)r->smallest_need);
    if (r->best >= 0)
        cJSON_AddNumberToObject(root, "best", r->best);
    else
        cJSON_AddNullToObject(root, "best");
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < r->n_rows; i++) {
        const vr_fit_row *w = &r->rows[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToArray(rows, j);
        cJSON_AddStringToObject(j, "precision", vr_precision_name(w->precision));
        cJSON_AddStringToObject(j, "recompute", vr_recompute_name(w->recompute));
        cJSON_AddNumberToObject(j, "recompute_layers", w->recompute_layers); /* 0: every block */
        cJSON_AddStringToObject(j, "norm_backward", w->norm_from_out || r->step.norm_from_out ? "output" : "input");
        cJSON_AddStringToObject(j, "optim_state", vr_optim_state_name(w->optim_state));
        cJSON_AddStringToObject(j, "master",
                                w->precision == VR_PREC_FP32 ? "-" : vr_master_name(w->no_master, w->split_master));
        cJSON_AddStringToObject(j, "offload", vr_offload_name(w->offload));
        cJSON_AddNumberToObject(j, "zero", w->zero);
        cJSON_AddNumberToObject(j, "comm_seconds", w->cost.comm_seconds);
        cJSON_AddNumberToObject(j, "host", (double)w->point.host);
        cJSON_AddNumberToObject(j, "host_seconds", w->cost.host_seconds);
        cJSON_AddNumberToObject(j, "copy_seconds", w->cost.copy_seconds);
        cJSON_AddNumberToObject(j, "micro_batch", w->micro);
        cJSON_AddNumberToObject(j, "accum", w->accum);
        cJSON_AddNumberToObject(j, "max_micro_batch", w->max_micro);
        cJSON_AddBoolToObject(j, "fits", w->fits);
        cJSON_AddNumberToObject(j, "peak", (double)w->point.peak);
        cJSON_AddNumberToObject(j, "need", (double)w->point.need);
        cJSON_AddNumberToObject(j, "tokens_per_step", (double)w->tokens);
        cJSON_AddNumberToObject(j, "flops", w->cost.flops);
        cJSON_AddNumberToObject(j, "bytes", w->cost.bytes);
        cJSON_AddNumberToObject(j, "launches", (double)w->cost.launches);
        cJSON_AddNumberToObject(j, "step_seconds", w->cost.seconds);
        cJSON_AddNumberToObject(j, "tokens_per_s", w->tokens_per_s);
    }
    return root;
}

void *vr_fit_batch_json(const vr_fit_batch *b)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddNumberToObject(j, "batch", b->B);
    cJSON_AddBoolToObject(j, "capped", b->capped);
    cJSON_AddNumberToObject(j, "plans", b->plans);
    add_point(j, "at", &b->at);
    add_point(j, "next", &b->next);
    return j;
}
