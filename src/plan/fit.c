/* vram fit — the largest micro-batch that fits (exponential + binary search over
 * B, one plan per probe) and the search over precision × recompute policy ×
 * micro-batch/accumulation, ranked by the cost model (fit_cost.c). */
#include <string.h>

#include "vram/fit.h"
#include "vram/plan.h"

/* Builds and plans the step (of rank s->rank) at micro-batch B; fills pt (and *cost when cm is given). */
static vr_status probe_rank(const vr_model_config *m, const vr_step_config *s, int B, uint64_t capacity,
                            vr_fit_point *pt, const vr_fit_cost_model *cm, vr_fit_cost *cost, int *plans)
{
    vr_model_config mm = *m;
    mm.B = B;
    vr_graph *g = NULL;
    vr_status st = vr_graph_build(&mm, s, &g);
    if (st)
        return st;
    vr_plan *p = NULL;
    st = vr_plan_create(g, NULL, &p);
    if (!st) {
        *pt = (vr_fit_point){.B = B, .peak = p->peak, .need = p->arena_size, .host = p->host_size,
                             .fits = p->arena_size <= capacity};
        if (cm)
            *cost = vr_fit_step_cost(g, cm);
        (*plans)++;
    }
    vr_plan_free(p);
    vr_graph_free(g);
    return st;
}

/* probe_rank for rank 0, and with ranks the largest rank's plan (rank 0's cost); *big (may be NULL): that rank. */
static vr_status probe(const vr_model_config *m, const vr_step_config *s, int B, uint64_t capacity,
                       vr_fit_point *pt, const vr_fit_cost_model *cm, vr_fit_cost *cost, int *plans, int *big)
{
    vr_step_config s0 = *s;
    s0.rank = 0;
    vr_status st = probe_rank(m, &s0, B, capacity, pt, cm, cost, plans);
    if (big)
        *big = 0;
    for (int r = 1; !st && s->world > 1 && r < s->world; r++) {
        vr_fit_point q;
        s0.rank = r;
        if ((st = probe_rank(m, &s0, B, capacity, &q, NULL, NULL, plans)))
            break;
        if (q.need > pt->need) {
            *pt = q;
            if (big)
                *big = r;
        }
    }
    return st;
}

/* The search for the largest batch; rank >= 0: only that rank is planned at each probe (else every rank). */
static vr_status max_batch(const vr_model_config *m, const vr_step_config *s, uint64_t capacity, int rank,
                           const vr_fit_point *first, vr_fit_batch *out)
{
    vr_fit_point lo = *first, hi = {0}, pt;
    vr_step_config one = *s;
    one.rank = rank;
    vr_status st = VR_OK;
    /* Exponential: double until a probe does not fit (or the cap fits). */
    while (!hi.B) {
        if (lo.B == VR_FIT_MAX_BATCH) {
            out->capped = true;
            break;
        }
        int b = lo.B > VR_FIT_MAX_BATCH / 2 ? VR_FIT_MAX_BATCH : 2 * lo.B;
        if ((st = rank >= 0 ? probe_rank(m, &one, b, capacity, &pt, NULL, NULL, &out->plans)
                            : probe(m, s, b, capacity, &pt, NULL, NULL, &out->plans, NULL)))
            return st;
        *(pt.fits ? &lo : &hi) = pt;
    }
    /* Binary: lo fits, hi does not; stop when they are neighbours. */
    while (hi.B && hi.B - lo.B > 1) {
        int b = lo.B + (hi.B - lo.B) / 2;
        if ((st = rank >= 0 ? probe_rank(m, &one, b, capacity, &pt, NULL, NULL, &out->plans)
                            : probe(m, s, b, capacity, &pt, NULL, NULL, &out->plans, NULL)))
            return st;
        *(pt.fits ? &lo : &hi) = pt;
    }
    out->B = lo.B;
    out->at = lo;
    out->next = hi;
    return VR_OK;
}

/* With ranks, the search plans only the rank that needs the most at B = 1 (found once for the configuration:
 * the ranks differ by their shares of the parameters and state, the same at every B). The two batches it ends
 * on are then planned on every rank, so that its points are the largest rank's, as a search over every rank
 * gives them; should those disagree with it (at a larger B another rank's arena packed larger), the search
 * runs again over every rank. */
vr_status vr_fit_max_batch(const vr_model_config *m, const vr_step_config *s, uint64_t capacity,
                           vr_fit_batch *out)
{
    memset(out, 0, sizeof *out);
    vr_fit_point first;
    int big = 0;
    vr_status st = probe(m, s, 1, capacity, &first, NULL, NULL, &out->plans, &big);
    if (st)
        return st;
    if (!first.fits) {
        out->next = first;
        return VR_OK;
    }
    if (s->world <= 1)
        return max_batch(m, s, capacity, -1, &first, out);
    if ((st = max_batch(m, s, capacity, big, &first, out)))
        return st;
    vr_fit_point at = first, next = {0};
    if (out->B > 1 && (st = probe(m, s, out->B, capacity, &at, NULL, NULL, &out->plans, NULL)))
        return st;
    if (out->next.B && (st = probe(m, s, out->next.B, capacity, &next, NULL, NULL, &out->plans, NULL)))
        return st;
    if (at.fits && (!out->next.B || !next.fits)) {
        out->at = at;
        out->next = next;
        return VR_OK;
    }
    int plans = out->plans;
    memset(out, 0, sizeof *out);
    out->plans = plans;
    return max_batch(m, s, capacity, -1, &first, out);
}

/* The largest divisor of n that is at most k (k >= 1). */
static int largest_divisor_at_most(int n, int k)
{
    for (int d = k < n ? k : n; d > 1; d--)
        if (n % d == 0)
            return d;
    return 1;
}

/* One row: the best batching for the precision and recompute policy in s. */
static vr_status search_row(const vr_model_config *m, vr_step_config s, const vr_fit_options *o, vr_fit_row *row,
                            int *plans)
{
    memset(row, 0, sizeof *row);
    row->precision = s.precision;
    row->recompute = s.recompute;
    row->optim_state = s.optim_state;
    row->no_master = s.no_master;
    row->split_master = s.split_master;
    row->offload = s.offload;
    row->zero = s.world > 1 ? s.zero : 0;
    int G = o->global_batch;
    vr_fit_batch b;
    s.accum = G ? 1 : s.accum > 1 ? s.accum : 1;
    vr_status st = vr_fit_max_batch(m, &s, o->capacity, &b);
    *plans += b.plans;
    if (st)
        return st;
    row->max_micro = b.B;
    row->micro = G ? (b.B >= G ? G : 0) : b.B;
    row->accum = s.accum;
    vr_fit_point smallest = b.B ? b.at : b.next; /* the first probe, at B = 1 */
    if (G > 1 && !row->micro) {
        /* The whole global batch does not fit at once: accumulate (the gradients then persist). */
        s.accum = 2;
        if ((st = vr_fit_max_batch(m, &s, o->capacity, &b)))
            return st;
        *plans += b.plans;
        row->max_micro = b.B;
        if (b.B) {
            row->micro = largest_divisor_at_most(G, b.B);
            row->accum = G / row->micro;
        } else {
            smallest = b.next;
        }
    }
    if (!row->micro) {
        row->point = smallest;
        row->accum = G > 1 ? G : row->accum;
        return VR_OK;
    }
    s.accum = row->accum;
    if ((st = probe(m, &s, row->micro, o->capacity, &row->point, &o->cost, &row->cost, plans, NULL)))
        return st;
    row->fits = row->point.fits && (!o->host_capacity || row->point.host <= o->host_capacity);
    row->tokens = (int64_t)row->micro * row->accum * (m->kind != VR_MODEL_MLP ? m->T : 1);
    row->tokens_per_s = row->cost.seconds > 0 ? (double)row->tokens / row->cost.seconds : 0;
    return VR_OK;
}

void vr_fit_row_step(const vr_fit_row *w, vr_step_config *s)
{
    s->precision = w->precision;
    s->recompute = w->recompute;
    s->recompute_layers = w->recompute_layers;
    if (w->norm_from_out)
        s->norm_from_out = true;
    s->optim_state = w->optim_state;
    s->no_master = w->no_master;
    s->split_master = w->split_master;
    s->offload = w->offload;
    s->accum = w->accum;
    s->zero = s->world > 0 ? w->zero : 0;
}

/* The best row recomputes (act, selective, block) at its batching: the fewest first blocks recomputed that still fit
 * (a binary search over N, memory falling as N grows), when fewer than all: the same batch with less recompute. */
static vr_status fewest_blocks(const vr_model_config *m, vr_step_config s, const vr_fit_options *o, vr_fit_row *row,
                               int *plans)
{
    int L = m->kind == VR_MODEL_GPT ? m->gpt.L : m->kind == VR_MODEL_LLAMA ? m->llama.L : 0;
    if (!row->fits || row->recompute == VR_RECOMPUTE_NONE || L < 2)
        return VR_OK;
    vr_fit_row_step(row, &s);
    int lo = 0, hi = L; /* N = hi fits (every block), N = lo does not (none: the row above it) */
    vr_fit_point pt, best = row->point;
    vr_fit_cost cost = row->cost;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        s.recompute_layers = mid;
        vr_fit_cost c;
        vr_status st = probe(m, &s, row->micro, o->capacity, &pt, &o->cost, &c, plans, NULL);
        if (st)
            return st;
        if (pt.fits && (!o->host_capacity || pt.host <= o->host_capacity)) {
            hi = mid;
            best = pt;
            cost = c;
        } else {
            lo = mid;
        }
    }
    if (hi < L) {
        row->recompute_layers = hi;
        row->point = best;
        row->cost = cost;
        row->tokens_per_s = cost.seconds > 0 ? (double)row->tokens / cost.seconds : 0;
    }
    return VR_OK;
}

/* Blocks a row recomputes: its first recompute_layers, or all L (0); none without a policy. */
static int blocks_recomputed(const vr_fit_row *w, int L)
{
    return w->recompute == VR_RECOMPUTE_NONE ? 0 : w->recompute_layers ? w->recompute_layers : L;
}

/* The best row recomputes at its batching and the step reads the norms' inputs: the same row with the norms'
 * backward from their output (their inputs, the residual stream, not kept), taken when it needs no recompute, else
 * when it needs fewer blocks of the row's policy (fewest_blocks with it). */
static vr_status spare_recompute(const vr_model_config *m, vr_step_config s, const vr_fit_options *o, vr_fit_row *row,
                                 int *plans)
{
    int L = m->kind == VR_MODEL_GPT ? m->gpt.L : m->kind == VR_MODEL_LLAMA ? m->llama.L : 0;
    if (!row->fits || row->recompute == VR_RECOMPUTE_NONE || !s.train || s.norm_from_out || o->norm_backward_pinned ||
        L < 1)
        return VR_OK;
    vr_fit_row w = *row;
    w.norm_from_out = true;
    w.recompute = VR_RECOMPUTE_NONE;
    w.recompute_layers = 0;
    vr_step_config t = s;
    vr_fit_row_step(&w, &t);
    vr_status st = probe(m, &t, w.micro, o->capacity, &w.point, &o->cost, &w.cost, plans, NULL);
    if (st)
        return st;
    if (!w.point.fits || (o->host_capacity && w.point.host > o->host_capacity)) {
        w.recompute = row->recompute; /* every block fits (less than the row without it): the fewest that do */
        if ((st = fewest_blocks(m, s, o, &w, plans)))
            return st;
        if (blocks_recomputed(&w, L) >= blocks_recomputed(row, L))
            return VR_OK;
    }
    w.tokens_per_s = w.cost.seconds > 0 ? (double)w.tokens / w.cost.seconds : 0;
    *row = w;
    return VR_OK;
}

/* Ranking: fitting rows first, by tokens/s (then smaller need); the rest by need. */
static bool before(const vr_fit_row *a, const vr_fit_row *b)
{
    if (a->fits != b->fits)
        return a->fits;
    if (a->fits && a->tokens_per_s != b->tokens_per_s)
        return a->tokens_per_s > b->tokens_per_s;
    return a->point.need < b->point.need;
}

vr_status vr_fit_search(const vr_model_config *m, const vr_step_config *s, const vr_fit_options *o,
                        vr_fit_result *out)
{
    memset(out, 0, sizeof *out);
    out->model = *m;
    out->step = *s;
    out->options = *o;
    vr_fit_options *opt = &out->options;
    if (opt->global_batch < 0)
        return vr_error(VR_ERR_INVALID, "fit: global batch %d is negative", opt->global_batch);
    if (!opt->precisions)
        opt->precisions = 1u << VR_PREC_FP32 | 1u << VR_PREC_BF16;
    if (!opt->recomputes)
        opt->recomputes = 1u << VR_RECOMPUTE_NONE | 1u << VR_RECOMPUTE_ACT | 1u << VR_RECOMPUTE_SELECTIVE |
                          1u << VR_RECOMPUTE_BLOCK;
    if (!s->train) /* no backward: nothing to recompute */
        opt->recomputes = 1u << VR_RECOMPUTE_NONE;
    const vr_fit_cost_model zero = {0};
    if (!memcmp(&opt->cost, &zero, sizeof zero))
        opt->cost = vr_fit_cost_h100();
    bool stateful = s->train && (s->optim == VR_OPTIM_MOMENTUM || s->optim == VR_OPTIM_ADAM || s->optim == VR_OPTIM_ADAMW);
    if (!opt->optim_states)
        opt->optim_states = stateful ? 7u : 1u << VR_OSTATE_FP32;
    if (!stateful)
        opt->optim_states &= 1u << VR_OSTATE_FP32;
    if (!opt->masters)
        opt->masters = 7u;
    if (!s->train)
        opt->masters = 1u;
    if (!opt->offloads)
        opt->offloads = 3u;
    if (!s->train || s->optim == VR_OPTIM_NONE)
        opt->offloads = 1u;
    if (!opt->zeros)
        opt->zeros = s->world > 1 && s->train && s->optim != VR_OPTIM_NONE ? 15u : 1u << (s->world > 0 ? s->zero : 0);
    static const vr_recompute order[4] = {VR_RECOMPUTE_NONE, VR_RECOMPUTE_ACT, VR_RECOMPUTE_SELECTIVE,
                                          VR_RECOMPUTE_BLOCK};
    for (int c = 0; c < 3 * 4 * 3 * 3 * 2 * 4; c++) { /* nm: 0 fp32 master, 1 none, 2 split */
        int p = c / 288, r = c / 72 % 4, os = c / 24 % 3, nm = c / 8 % 3, off = c / 4 % 2, z = c % 4;
        if (!(opt->precisions & 1u << p) || !(opt->recomputes & 1u << order[r]) || !(opt->optim_states & 1u << os) ||
            !(opt->masters & 1u << nm) || (nm && p != VR_PREC_BF16) || !(opt->offloads & 1u << off) || (nm && off) ||
            !(opt->zeros & 1u << z))
            continue;
        if (out->n_rows == VR_FIT_MAX_ROWS)
            return vr_error(VR_ERR_INVALID, "fit: more than %d configurations to try", VR_FIT_MAX_ROWS);
        {
            vr_step_config ss = *s;
            ss.zero = s->world > 0 ? z : 0;
            ss.precision = (vr_precision)p;
            ss.recompute = order[r];
            ss.optim_state = (vr_optim_state)os;
            ss.no_master = nm == 1;
            ss.split_master = nm == 2;
            ss.offload = (vr_offload)off;
            vr_fit_row row;
            vr_status st = search_row(m, ss, opt, &row, &out->plans);
            if (st)
                return st;
            int k = out->n_rows++; /* insertion into the ranked rows */
            while (k > 0 && before(&row, &out->rows[k - 1])) {
                out->rows[k] = out->rows[k - 1];
                k--;
            }
            out->rows[k] = row;
        }
    }
    if (!out->n_rows)
        return vr_error(VR_ERR_INVALID, "fit: no precision, recompute policy or state format to try");
    out->best = out->rows[0].fits ? 0 : -1;
    for (int i = 1; i < out->n_rows && out->best >= 0; i++) { /* as fast and more exact */
        const vr_fit_row *w = &out->rows[i], *b = &out->rows[out->best];
        int wx = 2 * ((int)w->optim_state + w->no_master) + (int)w->offload; /* inexactness, then placement */
        int bx = 2 * ((int)b->optim_state + b->no_master) + (int)b->offload;
        if (w->fits && w->tokens_per_s >= (1.0 - VR_FIT_SAME_SPEED) * out->rows[0].tokens_per_s && wx < bx)
            out->best = i;
    }
    out->smallest_need = out->rows[0].point.need;
    for (int i = 0; i < out->n_rows; i++)
        if (out->rows[i].point.need < out->smallest_need)
            out->smallest_need = out->rows[i].point.need;
    if (out->best >= 0) {
        vr_status st = fewest_blocks(m, *s, opt, &out->rows[out->best], &out->plans);
        if (!st)
            st = spare_recompute(m, *s, opt, &out->rows[out->best], &out->plans);
        if (st)
            return st;
    }
    return VR_OK;
}
