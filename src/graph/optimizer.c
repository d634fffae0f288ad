/* vram graph — the optimizer step and frozen parameters.
 *
 * Optimizer state lives in flat fp32 buffers over the trainable parameters, in
 * the parameter buffer's order (llm.c's m_memory and v_memory), one view per
 * parameter; under bf16/fp16 so does the fp32 master copy. After the backward,
 * one update node per parameter with a gradient (preceded by the sumsq nodes of
 * the global norm with clipping, and under fp16 for its overflow check) reads the gradient, which therefore
 * dies at its update: the plan sees every gradient freed at the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* Flat master and optimizer buffers over the trainable params (in parameter
 * order), with a view per parameter. */
void vr_optimizer_state(vr_graph *g, const vr_step_config *s)
{
    int n_state = s->optim == VR_OPTIM_MOMENTUM ? 1 : s->optim == VR_OPTIM_ADAM || s->optim == VR_OPTIM_ADAMW ? 2 : 0;
    bool mixed = s->precision != VR_PREC_FP32;
    int64_t n = g->n_trainable;
    if (n == 0)
        return;
    int64_t shape[1] = {n};
    if (mixed)
        g->master = vr_graph_tensor(g, "master", VR_F32, VR_ROLE_MASTER, 1, shape);
    static const char *state_names[2][2] = {{"optim.momentum", NULL}, {"optim.m", "optim.v"}};
    for (int i = 0; i < n_state; i++)
        g->optim[i] = vr_graph_tensor(g, state_names[n_state - 1][i], VR_F32, VR_ROLE_OPTIM, 1, shape);
    int np = g->n_tensors;
    int64_t off = 0;
    for (int64_t want = 0; want < g->n_params;) { /* parameters in buffer order */
        int p = -1;
        for (int t = 0; t < np; t++)
            if (g->tensors[t].role == VR_ROLE_PARAM && g->tensors[t].param_offset == want && g->tensors[t].ndim > 0 &&
                g->tensors[t].view_of == g->params) {
                p = t;
                break;
            }
        if (p < 0)
            break;
        int64_t numel = vr_tensor_numel(&g->tensors[p]);
        want += numel;
        if (g->tensors[p].frozen)
            continue;
        char name[VR_NAME_MAX];
        vr_tensor pt = g->tensors[p];
        if (mixed) {
            snprintf(name, sizeof name, "master.%.56s", pt.name);
            int m = vr_graph_view(g, g->master, name, pt.ndim, pt.shape, off);
            if (m >= 0) {
                g->tensors[m].dtype = VR_F32;
                g->tensors[p].master = m;
            }
        }
        for (int i = 0; i < n_state; i++) {
            snprintf(name, sizeof name, "%s.%.48s", state_names[n_state - 1][i], pt.name);
            int v = vr_graph_view(g, g->optim[i], name, pt.ndim, pt.shape, off); /* may move g->tensors */
            g->tensors[p].optim[i] = v;
        }
        off += numel;
    }
}

/* Clipping (sumsq) and one update node per parameter with a gradient, in buffer order. */
void vr_optimizer_nodes(vr_graph *g, const vr_step_config *s, int n0)
{
    int *order = malloc(sizeof(int) * (size_t)(n0 + 1));
    int no = 0;
    if (!order) {
        vr_graph_fail(g, VR_ERR_OOM, "autodiff: out of host memory");
        return;
    }
    for (int64_t want = 0; want < g->n_params;) {
        int p = -1;
        for (int t = 0; t < n0 && p < 0; t++)
            if (g->tensors[t].view_of == g->params && g->tensors[t].param_offset == want)
                p = t;
        if (p < 0)
            break;
        want += vr_tensor_numel(&g->tensors[p]);
        if (g->tensors[p].grad >= 0)
            order[no++] = p;
    }
    int normsq = -1;
    /* the global norm: for clipping, and under fp16 for the loss scaling's overflow check */
    if ((s->grad_clip > 0 || s->precision == VR_PREC_FP16) && no > 0) {
        int64_t one[1] = {1};
        normsq = vr_graph_tensor(g, "grad.normsq", VR_F32, VR_ROLE_TEMP, 1, one);
        for (int i = 0; i < no; i++) {
            char name[VR_NAME_MAX];
            snprintf(name, sizeof name, "sumsq.%.50s", g->tensors[order[i]].name);
            int id = vr_graph_node(g, VR_OP_SUMSQ, VR_PHASE_OPTIMIZER, name);
            if (id < 0)
                break;
            g->nodes[id].in[0] = g->tensors[order[i]].grad;
            g->nodes[id].out[0] = normsq;
            g->nodes[id].acc[0] = i ? VR_ACC_ADD : VR_ACC_OVERWRITE;
        }
    }
    static const vr_op ops[] = {VR_OP_SGD, VR_OP_SGD, VR_OP_SGD_MOMENTUM, VR_OP_ADAM, VR_OP_ADAMW};
    for (int i = 0; i < no && s->optim != VR_OPTIM_NONE; i++) {
        vr_tensor p = g->tensors[order[i]];
        char name[VR_NAME_MAX];
        snprintf(name, sizeof name, "%s.%.50s", vr_optim_name(s->optim), p.name);
        int id = vr_graph_node(g, ops[s->optim], VR_PHASE_OPTIMIZER, name);
        if (id < 0)
            break;
        vr_node *n = &g->nodes[id];
        n->in[0] = p.grad;
        n->in[1] = normsq;
        n->out[0] = order[i];
        n->out[1] = p.master;
        n->out[2] = p.optim[0];
        n->out[3] = p.optim[1];
    }
    if (s->optim == VR_OPTIM_NONE) /* backward only: the gradients are the step's result */
        for (int i = 0; i < no; i++)
            g->tensors[g->tensors[order[i]].grad].output = true;
    free(order);
}

vr_status vr_graph_freeze(vr_graph *g, const char *patterns)
{
    if (g->err || !patterns || !*patterns)
        return g->err;
    for (const char *p = patterns; *p;) {
        char glob[VR_NAME_MAX];
        size_t len = strcspn(p, ",");
        snprintf(glob, sizeof glob, "%.*s", (int)(len < sizeof glob ? len : sizeof glob - 1), p);
        p += len + (p[len] == ',');
        if (!*glob)
            continue;
        int hits = 0;
        for (int t = 0; t < g->n_tensors; t++) {
            vr_tensor *x = &g->tensors[t];
            if (x->view_of == g->params && x->param_offset >= 0 && vr_glob_match(glob, x->name)) {
                if (!x->frozen)
                    g->n_trainable -= vr_tensor_numel(x);
                x->frozen = true;
                hits++;
            }
        }
        if (!hits)
            return vr_graph_fail(g, VR_ERR_INVALID, "--freeze: '%s' matches no parameter (names look like "
                                 "'wte', 'h.0.attn.c_attn.w', 'fc0.w')", glob), g->err;
    }
    return VR_OK;
}
