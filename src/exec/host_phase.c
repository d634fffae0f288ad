/* vram exec — running a node, and the host's phase of an offloaded step.
 *
 * A node runs on the device (the backend), or on the host (vr_node.host: sumsq and updates over host
 * tensors) once the copy that brought its gradient down has landed. After the last sumsq node on the host
 * the clipping factor is computed there (with fp16 loss scaling: the norm divided by the scale, inf/NaN
 * skipping the update and the copies up).
 *
 * Where copies are asynchronous (CUDA), the host's phase — nodes [opt_start, n_nodes) of the last pass —
 * runs on a worker thread started with the pass: while the main thread queues the forward and backward,
 * the worker takes the gradients as they arrive (it waits until the main thread has queued a copy down,
 * then for the copy itself), updates, and queues each parameter's copy up. The nodes it runs touch only
 * persistent tensors, so the main thread keeps their books (binding, live bytes, the on_node hook with
 * the worker's times) after joining it, in node order, as if it had run them. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_internal.h"
#include "vram/util.h"

/* Reads the squared norm the sumsq nodes left (on the host) and sets the clipping factor. */
static vr_status clip_factor(vr_exec *e, int normsq, vr_pass_state *ps)
{
    float sq = 0;
    vr_status st = vr_exec_read(e, normsq, &sq, sizeof sq);
    if (st)
        return st;
    double scale = e->scaling ? e->loss_scale : 1.0;
    ps->grad_norm = sqrt((double)sq) / scale;
    double clip = e->g->step.grad_clip;
    double coef = clip > 0 ? clip / (ps->grad_norm + 1e-6) : 1.0;
    ps->grad_scale = coef < 1.0 ? (float)coef : 1.0f;
    ps->update_scale = (float)(ps->grad_scale / scale);
    ps->skip = e->scaling && !isfinite(ps->grad_norm);
    return VR_OK;
}

/* Nodes that do not run in this pass: a copy of the gradients down or a collective over them before the last
 * micro-batch (they are not final yet), the host's updates and copies up of a step whose fp16 gradients overflowed. */
static bool not_this_pass(const vr_exec *e, const vr_node *nd, int micro, const vr_pass_state *ps)
{
    int accum = e->g->step.accum > 1 ? e->g->step.accum : 1;
    if (nd->op == VR_OP_RESHAPE)
        return true;
    if ((nd->op == VR_OP_COPY || vr__exec_is_grad_comm(nd->op)) && nd->phase == VR_PHASE_BACKWARD)
        return micro + 1 < accum;
    return ps->skip && nd->phase == VR_PHASE_OPTIMIZER && nd->op != VR_OP_SUMSQ;
}

vr_status vr__exec_run_node(vr_exec *e, int i, int micro, const vr_optim_hparams *h, vr_pass_state *ps)
{
    const vr_node *nd = &e->g->nodes[i];
    vr_status st = VR_OK;
    if (!not_this_pass(e, nd, micro, ps)) {
        vr_exec_args a;
        vr__exec_node_args(e, i, micro, h, ps->update_scale, &a);
        if (!nd->host) {
            st = e->be->run_node(&a);
        } else {
            int copy = e->g->tensors[nd->in[0]].producer;
            st = e->be->host_wait && copy >= 0 ? e->be->host_wait(e, copy) : VR_OK;
            if (!st)
                st = vr__exec_host_node(&a);
        }
        if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", vr_last_error());
            return vr_error(st, "exec: node %d (%s %s): %s", i, vr_op_name(nd->op), nd->name, msg);
        }
    }
    if (i == e->last_sumsq && (nd->host || !e->be->clip_result)) {
        float *sq = vr_exec_tensor_ptr(e, nd->out[0]); /* host memory: the CPU backend, or an offloaded norm */
        st = nd->host ? vr__exec_comm_normsq_host(e, sq) : vr__exec_comm_normsq(e, sq, NULL);
        if (!st)
            st = clip_factor(e, nd->out[0], ps);
    }
    return st;
}

/* ------------------------------------------------------------------ the worker */

typedef struct vr_host_worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    vr_exec *e;
    int micro;
    const vr_optim_hparams *h;
    vr_pass_state *ps;
    int issued;        /* the main thread has queued nodes [0, issued] */
    bool cancel;
    vr_status status;
    char error[1024];  /* the worker's error message (errors are per thread) */
} vr_host_worker;

bool vr__host_worker_wanted(const vr_exec *e)
{
    /* the profiler's per-node events are the main thread's alone */
    return e->be->host_wait && e->plan->host_size && e->opt_start < e->g->n_nodes && !e->cfg.profile;
}

/* Waits until the main thread has queued node `node` (false: cancelled). */
static bool wait_issued(vr_host_worker *w, int node)
{
    pthread_mutex_lock(&w->lock);
    while (w->issued < node && !w->cancel)
        pthread_cond_wait(&w->cond, &w->lock);
    bool ok = !w->cancel;
    pthread_mutex_unlock(&w->lock);
    return ok;
}

static void *worker_main(void *arg)
{
    vr_host_worker *w = arg;
    vr_exec *e = w->e;
    const vr_graph *g = e->g;
    vr_status st = vr_device_use(e->dev);
    bool synced = false;
    for (int i = e->opt_start; i < g->n_nodes && !st; i++) {
        const vr_node *nd = &g->nodes[i];
        int copy = nd->host ? g->tensors[nd->in[0]].producer : -1;
        /* a device node here (under ZeRO 1 and 2 the broadcasts of the new weights): after every node of the
         * main thread (the communicator's calls keep one order on every rank) and every copy up */
        int wait = nd->host || nd->op == VR_OP_COPY ? copy : e->opt_start - 1;
        if (wait >= 0 && !wait_issued(w, wait)) {
            st = vr_error(VR_ERR_INVALID, "exec: the step stopped before node %d (%s)", i, nd->name);
            break;
        }
        if (!nd->host && nd->op != VR_OP_COPY && !synced && e->be->copies_done &&
            (st = e->be->copies_done(e)))
            break;
        synced |= !nd->host && nd->op != VR_OP_COPY;
        e->host_t0[i] = vr_now_ns();
        st = vr__exec_run_node(e, i, w->micro, w->h, w->ps);
        e->host_t1[i] = vr_now_ns();
    }
    w->status = st;
    if (st)
        snprintf(w->error, sizeof w->error, "%s", vr_last_error());
    return NULL;
}

vr_status vr__host_worker_start(vr_exec *e, int micro, const vr_optim_hparams *h, vr_pass_state *ps)
{
    int N = e->g->n_nodes;
    if (!e->host_t0) {
        e->host_t0 = calloc((size_t)N + 1, sizeof *e->host_t0);
        e->host_t1 = calloc((size_t)N + 1, sizeof *e->host_t1);
        if (!e->host_t0 || !e->host_t1)
            return vr_error(VR_ERR_OOM, "exec: out of host memory");
    }
    vr_host_worker *w = calloc(1, sizeof *w);
    if (!w)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    *w = (vr_host_worker){.e = e, .micro = micro, .h = h, .ps = ps, .issued = -1};
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
        return vr_error(VR_ERR_OOM, "exec: could not start the host's update thread");
    }
    e->worker = w;
    return VR_OK;
}

void vr__host_worker_issued(vr_exec *e, int node)
{
    vr_host_worker *w = e->worker;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->issued = node;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Waits for the worker and frees it; its status (and, with report, its message as this thread's error). */
static vr_status finish(vr_exec *e, bool report)
{
    vr_host_worker *w = e->worker;
    if (!w)
        return VR_OK;
    pthread_join(w->thread, NULL);
    vr_status st = w->status;
    if (st && report)
        vr_error(st, "%s", w->error);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
    e->worker = NULL;
    return st;
}

vr_status vr__host_worker_join(vr_exec *e) { return finish(e, true); }

void vr__host_worker_cancel(vr_exec *e)
{
    vr_host_worker *w = e->worker;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->cancel = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    finish(e, false); /* the step's own error stays the one reported */
}
