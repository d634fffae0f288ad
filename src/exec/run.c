/* vram exec — one step: micro-batch passes over the nodes, then the optimizer.
 *
 * A pass runs nodes [0, end). Before node i, every storage tensor node i refers
 * to (inputs, outputs, scratch) that is not yet bound is bound, in id order
 * (the inputs of the step too, before node 0); the live bytes per role are
 * recorded as node i's timeline entry; the node runs; then each tensor whose
 * count of remaining references drops to zero is let go, in id order, unless
 * it is persistent or an output of the step (those stay bound until the next
 * pass begins, so their values can be read after the step). This is the
 * plan's lifetime rule (vram/plan.h) found again by counting at run time,
 * and the order in which the plan's dynamic replay allocates and frees. An
 * output the plan computes in place takes its dying input's memory and counts
 * from the end of its node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_internal.h"
#include "vram/util.h"

static void sort_ids(int *a, int n)
{
    for (int i = 1; i < n; i++) {
        int v = a[i], j = i - 1;
        for (; j >= 0 && a[j] > v; j--)
            a[j + 1] = a[j];
        a[j + 1] = v;
    }
}

/* Adds the storage of tensor t (-1: none) to the first n entries of e->pending,
 * once, when its bound state is `bound`; returns the new count. */
static int add_pending(vr_exec *e, int t, int n, bool bound)
{
    if (t < 0)
        return n;
    int s = vr_graph_storage(e->g, t);
    if (e->live[s] != bound)
        return n;
    for (int k = 0; k < n; k++)
        if (e->pending[k] == s)
            return n;
    e->pending[n] = s;
    return n + 1;
}

/* Binds what node i needs (and, before node 0, the step's inputs). */
static vr_status bind_for_node(vr_exec *e, int i)
{
    const vr_graph *g = e->g;
    const vr_node *nd = &g->nodes[i];
    int n = 0;
    if (i == 0)
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].view_of < 0 && g->tensors[t].role == VR_ROLE_INPUT && e->left[t] > 0)
                n = add_pending(e, t, n, false);
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        n = add_pending(e, nd->in[k], n, false);
    for (int k = 0; k < VR_NODE_MAX_OUT; k++)
        n = add_pending(e, nd->out[k], n, false);
    n = add_pending(e, nd->scratch, n, false);
    sort_ids(e->pending, n);
    int ni = 0;
    for (int k = 0; k < n; k++) {
        int s = e->pending[k];
        vr_status st = vr__exec_bind(e, s, i);
        if (st)
            return st;
        if (e->plan->tensors[s].base != s)
            e->inplace[ni++] = s;
    }
    e->inplace[ni] = -1;
    return VR_OK;
}

/* Counts node i's references off and lets go of what is no longer needed. */
static void release_after_node(vr_exec *e, int i)
{
    const vr_graph *g = e->g;
    const vr_node *nd = &g->nodes[i];
    int refs[VR_NODE_MAX_IN + VR_NODE_MAX_OUT + 1], nr = 0;
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        if (nd->in[k] >= 0)
            refs[nr++] = nd->in[k];
    for (int k = 0; k < VR_NODE_MAX_OUT; k++)
        if (nd->out[k] >= 0)
            refs[nr++] = nd->out[k];
    if (nd->scratch >= 0)
        refs[nr++] = nd->scratch;
    int n = 0;
    for (int k = 0; k < nr; k++) {
        int s = vr_graph_storage(g, refs[k]);
        if (--e->left[s] == 0 && !e->plan->tensors[s].persistent && !g->tensors[s].output)
            n = add_pending(e, s, n, true);
    }
    sort_ids(e->pending, n);
    for (int k = 0; k < n; k++)
        vr__exec_unbind(e, e->pending[k]);
}

/* Records node i's live bytes per role and the peaks. */
static void measure(vr_exec *e, int i)
{
    uint64_t *l = e->timeline + (size_t)i * VR_ROLE_COUNT, total = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++) {
        l[r] = e->live_bytes[r];
        total += l[r];
        if (l[r] > e->mem.max_live[r])
            e->mem.max_live[r] = l[r];
    }
    if (total > e->mem.peak || e->mem.peak_node < 0) {
        e->mem.peak = total;
        e->mem.peak_node = i;
        memcpy(e->mem.at_peak, l, sizeof e->mem.at_peak);
    }
    e->mem.device_used = vr_device_used_by_us(e->dev);
    if (e->mem.device_used > e->mem.device_peak)
        e->mem.device_peak = e->mem.device_used;
}

static void *tensor_ptr(const vr_exec *e, int t) { return t >= 0 ? vr_exec_tensor_ptr(e, t) : NULL; }

/* Fills the backend's arguments for node i. */
uint64_t vr__exec_state_index(const vr_graph *g, const vr_node *n)
{
    if (n->out[0] >= 0 && g->tensors[n->out[0]].param_offset >= 0)
        return (uint64_t)g->tensors[n->out[0]].param_offset;
    return n->out[2] >= 0 ? (uint64_t)g->tensors[n->out[2]].view_offset : 0;
}

void vr__exec_node_args(vr_exec *e, int i, int micro, const vr_optim_hparams *h, float grad_scale, vr_exec_args *a)
{
    const vr_graph *g = e->g;
    const vr_node *nd = &g->nodes[i];
    memset(a, 0, sizeof *a);
    a->g = g;
    a->node = nd;
    a->state = e->be_state;
    a->last_sumsq = i == e->last_sumsq;
    a->exec = e;
    a->micro = micro;
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        a->in[k] = tensor_ptr(e, nd->in[k]);
    for (int k = 0; k < VR_NODE_MAX_OUT; k++) {
        a->out[k] = tensor_ptr(e, nd->out[k]);
        a->acc[k] = nd->acc[k] == VR_ACC_ADD || (nd->acc[k] == VR_ACC_MICRO && micro > 0);
    }
    if (nd->scratch >= 0) {
        a->scratch = tensor_ptr(e, nd->scratch);
        a->scratch_bytes = vr_tensor_bytes(&g->tensors[nd->scratch]);
    }
    if (nd->phase == VR_PHASE_OPTIMIZER && nd->op != VR_OP_SUMSQ && nd->out[0] >= 0) { /* updates (not collectives) */
        a->h = h;
        a->grad_scale = grad_scale;
        a->weight_decay = h && g->tensors[nd->out[0]].ndim >= 2 ? h->weight_decay : 0.0f;
    }
}

/* Lets go of what a previous pass left bound (the outputs). */
static void release_leftovers(vr_exec *e)
{
    for (int t = 0; t < e->g->n_tensors; t++)
        if (e->live[t] && !e->plan->tensors[t].persistent)
            vr__exec_unbind(e, t);
}

/* Tensor t is bound in device memory (not host memory): the backend's staged copies may move it. */
static bool on_device(const vr_exec *e, int t)
{
    return vr_exec_tensor_ptr(e, t) && !e->plan->tensors[vr_graph_storage(e->g, t)].host;
}

/* One input of the step: staged by the backend where it can (the host does not wait), else written. */
static vr_status upload_input(vr_exec *e, int slot, int t, const void *src)
{
    uint64_t bytes = vr_tensor_bytes(&e->g->tensors[t]);
    if (e->be->stage_in && on_device(e, t))
        return e->be->stage_in(e, slot, vr_exec_tensor_ptr(e, t), src, bytes);
    return vr_exec_write(e, t, src, bytes);
}

/* Copies the micro-batch into the bound input tensors. */
static vr_status upload_inputs(vr_exec *e, const vr_exec_batch *b)
{
    const vr_graph *g = e->g;
    if (!b || !b->inputs || !b->targets)
        return vr_error(VR_ERR_INVALID, "exec: a micro-batch without inputs or targets");
    vr_status st = upload_input(e, 0, g->tokens, b->inputs);
    return st ? st : upload_input(e, 1, g->targets, b->targets);
}

/* The step's losses into e->losses, and their sum into *loss_sum. */
static vr_status read_losses(vr_exec *e, bool last, double *loss_sum)
{
    const vr_graph *g = e->g;
    uint64_t bytes = (uint64_t)e->rows * sizeof(float);
    vr_status st = e->be->read_losses && on_device(e, g->losses) ? e->be->read_losses(e, e->losses, bytes, last)
                                                                 : vr_exec_read(e, g->losses, e->losses, bytes);
    for (int64_t r = 0; r < e->rows && !st; r++)
        *loss_sum += e->losses[r];
    return st;
}

/* How a pass queues its device work: node by node, node by node into a CUDA graph
 * being captured, or one replay of the captured graph (the node loop then only
 * keeps the books: binding, live bytes, releasing; the addresses are the arena's). */
enum { PASS_NODES, PASS_CAPTURE, PASS_REPLAY };

static vr_status run_pass(vr_exec *e, int end, int micro, const vr_exec_batch *b, const vr_optim_hparams *h,
                          vr_pass_state *ps, double *loss_sum, int mode)
{
    const vr_graph *g = e->g;
    release_leftovers(e);
    memcpy(e->left, end == g->n_nodes ? e->uses_all : e->uses_pre, sizeof(int) * (size_t)g->n_tensors);
    vr_status st = VR_OK;
    bool capturing = false;
    /* offload on a GPU: the host's phase runs on a thread of its own from the start of the last pass */
    bool worker = end == g->n_nodes && mode == PASS_NODES && vr__host_worker_wanted(e);
    if (worker && (st = vr__host_worker_start(e, micro, h, ps)))
        return st;
    int last = worker ? e->opt_start : end; /* the nodes this thread runs */
    for (int i = 0; i < end && !st; i++) {
        if (i == last) { /* the worker's nodes: wait for it, then keep their books in order */
            vr_status ws = vr__host_worker_join(e);
            if (ws) {
                st = ws;
                break;
            }
        }
        if ((st = bind_for_node(e, i)))
            break;
        if (i == 0 && (st = upload_inputs(e, b)))
            break;
        if (i == 0 && mode == PASS_CAPTURE) {
            if ((st = e->be->capture_begin(e)))
                break;
            capturing = true;
        } else if (i == 0 && mode == PASS_REPLAY && (st = e->be->replay(e))) {
            break;
        }
        measure(e, i);
        uint64_t t0 = e->cfg.on_node ? vr_now_ns() : 0, t1 = 0;
        if (i < last && mode != PASS_REPLAY) {
            st = vr__exec_run_node(e, i, micro, h, ps);
            vr__host_worker_issued(e, i);
            if (st)
                break;
            t1 = e->cfg.on_node ? vr_now_ns() : 0;
        } else if (i >= last) { /* run by the worker: its times */
            t0 = e->host_t0[i];
            t1 = e->host_t1[i];
        }
        if (e->cfg.on_node && !st && mode != PASS_REPLAY) /* before the node's dead tensors go */
            e->cfg.on_node(e->cfg.on_node_ctx, e, i, t0, t1);
        release_after_node(e, i);
        for (int k = 0; e->inplace[k] >= 0; k++) /* in-place outputs count from here on */
            vr__exec_count(e, e->inplace[k]);
    }
    if (worker && st) /* an error before the worker's nodes: stop it */
        vr__host_worker_cancel(e);
    if (capturing) {
        vr_status ce = e->be->capture_end(e, !st);
        if (!st)
            st = ce;
        if (!st)
            st = e->be->replay(e);
    }
    if (!st && g->losses >= 0 && loss_sum) /* NULL: the caller queues the losses' readback itself */
        st = read_losses(e, end == g->n_nodes, loss_sum);
    return st;
}

/* The hyperparameters a captured step holds as launch arguments are those of h? (lr and step
 * are read from device memory.) */
static bool same_baked(const vr_optim_hparams *a, const vr_optim_hparams *b)
{
    return a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps && a->weight_decay == b->weight_decay &&
           a->momentum == b->momentum && a->dampening == b->dampening && a->nesterov == b->nesterov;
}

bool vr_exec_cuda_graph_state(const vr_exec *e, bool *on, const char **reason)
{
    if (on)
        *on = e->graph;
    if (reason)
        *reason = e->graph_asked && !e->graph ? e->graph_off : "";
    return e->graph_asked;
}

const char *vr_exec_attention_kernels(const vr_exec *e) { return e->attention; }

void vr_exec_fused_pairs(const vr_exec *e, int *fwd, int *bwd)
{
    if (fwd)
        *fwd = e->fused_fwd;
    if (bwd)
        *bwd = e->fused_bwd;
}

int vr_exec_fused_bias_grads(const vr_exec *e) { return e->fused_dbias; }

int vr_exec_fused_qkv_bias(const vr_exec *e) { return e->fused_qkvb; }

void vr_exec_get_loss_scale(const vr_exec *e, float *scale, int *good)
{
    *scale = e->loss_scale;
    *good = e->scale_good;
}

vr_status vr_exec_set_loss_scale(vr_exec *e, float scale, int good)
{
    if (!e->scaling)
        return VR_OK;
    if (!(scale > 0.0f) || isinf(scale) || good < 0)
        return vr_error(VR_ERR_INVALID, "exec: loss scale %g (good steps %d): must be finite and > 0", scale, good);
    e->loss_scale = scale;
    e->scale_good = good;
    return VR_OK;
}

/* After an fp16 step: an inf/NaN norm (an overflow; the optimizers skipped on the device) halves the
 * loss scale, `window` good steps in a row double it. Returns whether the step was skipped. */
static bool update_loss_scale(vr_exec *e, double norm)
{
    if (!isfinite(norm)) {
        e->loss_scale *= 0.5f;
        e->scale_good = 0;
        return true;
    }
    if (++e->scale_good >= e->cfg.loss_scale_window) {
        e->loss_scale *= 2.0f;
        e->scale_good = 0;
    }
    return false;
}

/* The end of a step whose passes ran (st: how they went): offloaded copies landed, the clipping result, the
 * loss scale, the count; res from the losses' sum. */
static vr_status step_end(vr_exec *e, vr_pass_state *ps, double loss_sum, int accum, vr_status st, vr_exec_result *res)
{
    const vr_graph *g = e->g;
    if (!st && e->be->copies_done) /* offload: the weights are back on the device */
        st = e->be->copies_done(e);
    if (!st && e->last_sumsq >= 0 && !g->nodes[e->last_sumsq].host && e->be->clip_result) {
        double sc = 1.0;
        st = e->be->clip_result(e, &ps->grad_norm, &sc);
        ps->grad_scale = (float)sc;
    }
    float scale = e->loss_scale;
    bool skipped = false;
    if (!st && e->scaling) /* torch.amp.GradScaler.update: the device (or host) already skipped the update */
        skipped = update_loss_scale(e, ps->grad_norm);
    if (!st)
        e->steps_run++;
    if (res) {
        res->loss = e->rows ? loss_sum / ((double)e->rows * accum) : NAN;
        res->grad_norm = ps->grad_norm;
        res->grad_scale = ps->grad_scale;
        res->loss_scale = scale;
        res->skipped = skipped;
    }
    if (st) /* leave nothing half-bound behind */
        release_leftovers(e);
    return st;
}

bool vr_exec_can_start_ahead(const vr_exec *e)
{
    return e->n_pend == 1 && !e->scaling && !e->cfg.comm;
}

bool vr_exec_step_queued(const vr_exec *e) { return e->n_pend > 0 && e->pend[e->pend_first].queued; }

vr_status vr_exec_step_start(vr_exec *e, const vr_exec_batch *micro, const vr_optim_hparams *h)
{
    const vr_graph *g = e->g;
    int accum = g->step.train && g->step.accum > 1 ? g->step.accum : 1;
    if (e->n_pend && !vr_exec_can_start_ahead(e))
        return vr_error(VR_ERR_INVALID, "exec: %s in flight (vr_exec_step_finish %s first)",
                        e->n_pend > 1 ? "two steps are" : "a step is", e->n_pend > 1 ? "one" : "it");
    if (!micro)
        return vr_error(VR_ERR_INVALID, "exec: no micro-batches");
    if (e->opt_start < g->n_nodes && !h)
        return vr_error(VR_ERR_INVALID, "exec: the graph has optimizer nodes but no hyperparameters were given");
    vr_pass_state ps = {.grad_scale = 1.0f, .update_scale = 1.0f, .grad_norm = NAN};
    double loss_sum = 0;
    /* the kernels go to the current device: make it this executor's (another may have run on another GPU of this
     * process, on this thread, since) */
    vr_status st = vr_device_use(e->dev);
    if (st)
        return st;
    vr_exec_pending *p = &e->pend[(e->pend_first + e->n_pend) % 2];
    memset(p, 0, sizeof *p);
    int mode = PASS_NODES;
    if (e->graph && h) {
        st = e->be->graph_scalars(e, h);
        if (!st && accum == 1 && e->steps_run > 0) /* the first step warms up (algorithms, modules) */
            mode = e->graph_captured && same_baked(&e->graph_h, h) && e->graph_scale == e->loss_scale ? PASS_REPLAY
                                                                                                 : PASS_CAPTURE;
    }
    if (mode == PASS_CAPTURE) {
        e->graph_captured = false;
        st = run_pass(e, g->n_nodes, 0, &micro[0], h, &ps, &loss_sum, mode);
        if (!st) {
            e->graph_captured = true;
            e->graph_h = *h;
            e->graph_scale = e->loss_scale;
        } else { /* could not capture: this step, and the later ones, node by node (vr_exec_cuda_graph_state) */
            snprintf(e->graph_off, sizeof e->graph_off, "after a failed capture: %s", vr_last_error());
            e->graph = false;
            loss_sum = 0;
            st = VR_OK;
            mode = PASS_NODES;
        }
    } else if (mode == PASS_REPLAY) {
        /* the replay queued; its losses (and clipping result) queued down behind it, read by the finish */
        bool queue = e->be->losses_queue && g->losses >= 0;
        st = run_pass(e, g->n_nodes, 0, &micro[0], h, &ps, queue ? NULL : &loss_sum, mode);
        if (!st && queue) {
            st = e->be->losses_queue(e, (size_t)e->rows * sizeof(float), &p->set);
            if (st == VR_ERR_UNSUPPORTED) { /* no pinned staging for them: read now */
                vr_clear_error();
                queue = false;
                st = read_losses(e, true, &loss_sum);
            }
        }
        if (!st && queue) {
            p->queued = true;
            p->ps = ps;
            e->n_pend++;
            return VR_OK;
        }
    }
    if (mode == PASS_NODES)
        for (int m = 0; m < accum && !st; m++)
            st = run_pass(e, m + 1 == accum ? g->n_nodes : e->opt_start, m, &micro[m], h, &ps, &loss_sum, mode);
    if ((st = step_end(e, &ps, loss_sum, accum, st, &p->res)))
        return st;
    e->n_pend++;
    return VR_OK;
}

vr_status vr_exec_step_finish(vr_exec *e, vr_exec_result *res)
{
    if (!e->n_pend)
        return vr_error(VR_ERR_INVALID, "exec: no step in flight (vr_exec_step_start one first)");
    vr_exec_pending *p = &e->pend[e->pend_first];
    e->pend_first = (e->pend_first + 1) % 2;
    e->n_pend--;
    if (!p->queued) {
        if (res)
            *res = p->res;
        return VR_OK;
    }
    double loss_sum = 0;
    vr_status st = vr_device_use(e->dev);
    if (!st)
        st = e->be->losses_wait(e, p->set, e->losses, (size_t)e->rows * sizeof(float));
    for (int64_t r = 0; r < e->rows && !st; r++)
        loss_sum += e->losses[r];
    return step_end(e, &p->ps, loss_sum, 1, st, res);
}

vr_status vr_exec_step(vr_exec *e, const vr_exec_batch *micro, const vr_optim_hparams *h, vr_exec_result *res)
{
    if (e->n_pend)
        return vr_error(VR_ERR_INVALID, "exec: a step is in flight (vr_exec_step_finish it first)");
    vr_status st = vr_exec_step_start(e, micro, h);
    return st ? st : vr_exec_step_finish(e, res);
}
