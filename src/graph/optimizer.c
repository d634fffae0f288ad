/* vram graph — the optimizer step and frozen parameters.
 *
 * Optimizer state lives in flat buffers over the trainable parameters, in the parameter buffer's order
 * (llm.c's m_memory and v_memory), one view per parameter; under bf16/fp16 so does the fp32 master copy
 * (unless the step asks for none: bf16 weights updated with stochastic rounding). The state's format
 * (vr_step_config.optim_state) is its dtype:
 *   fp32   optim.m, optim.v (or optim.momentum): f32 over all trainable parameters;
 *   bf16   the same buffers in bf16 (the kernels round stochastically);
 *   8bit   optim.m, optim.v: u8 codes of the tensors that quantize (vram/optim_state.h), with
 *          optim.m.absmax, optim.v.absmax: one f32 per block of 256 of them; optim.m.f32, optim.v.f32:
 *          f32 state of the tensors too small to quantize. Each parameter's optim[i] is a view of the
 *          codes or of the f32 buffer, and absmax[i] a view of its blocks (-1 when f32).
 * After the backward, one update node per parameter with a gradient (preceded by the sumsq nodes of the
 * global norm with clipping, and under fp16 for its overflow check) reads the gradient, which therefore
 * dies at its update: the plan sees every gradient freed at the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "vram/optim_state.h"

static int by_offset(const void *a, const void *b)
{
    const int64_t *x = a, *y = b; /* {param_offset, id} */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The parameter tensors among the first n (views of the flat buffer with an offset), in buffer order:
 * ids into out (capacity n), their count returned. They must tile the buffer without gaps; a gap is a
 * builder's error (recorded; -1 returned), never parameters silently left out of the step. */
static int param_order(vr_graph *g, int n, int *out)
{
    int64_t (*key)[2] = malloc(sizeof *key * (size_t)(n + 1));
    if (!key)
        return vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
    int nk = 0;
    for (int t = 0; t < n; t++)
        if (g->tensors[t].view_of == g->params && g->tensors[t].param_offset >= 0 && g->tensors[t].ndim > 0) {
            key[nk][0] = g->tensors[t].param_offset;
            key[nk++][1] = t;
        }
    qsort(key, (size_t)nk, sizeof *key, by_offset);
    int no = 0;
    int64_t want = 0;
    for (int k = 0; k < nk && want < g->n_params; k++) {
        if (key[k][0] < want) /* a second tensor at an offset already covered (first one wins) */
            continue;
        if (key[k][0] > want)
            break;
        out[no++] = (int)key[k][1];
        want += vr_tensor_numel(&g->tensors[key[k][1]]);
    }
    free(key);
    if (want != g->n_params)
        return vr_graph_fail(g, VR_ERR_INVALID, "graph: the parameters cover elements [0, %lld) of the %lld-element "
                             "parameter buffer; no parameter starts at element %lld",
                             (long long)want, (long long)g->n_params, (long long)want);
    return no;
}

static int state_count(vr_optim o) { return o == VR_OPTIM_MOMENTUM ? 1 : o == VR_OPTIM_ADAM || o == VR_OPTIM_ADAMW ? 2 : 0; }

/* One flat buffer (none when n is 0). */
static int flat(vr_graph *g, const char *name, vr_dtype dt, vr_role role, int64_t n)
{
    int64_t shape[1] = {n};
    return n > 0 ? vr_graph_tensor(g, name, dt, role, 1, shape) : -1;
}

/* Flat master and optimizer buffers over the trainable params (in parameter order), with a view per
 * parameter (see the file comment for the formats). */
void vr_optimizer_state(vr_graph *g, const vr_step_config *s)
{
    int n_state = state_count(s->optim);
    bool mixed = s->precision != VR_PREC_FP32 && !s->no_master;
    bool q8 = s->optim_state == VR_OSTATE_8BIT && n_state > 0;
    if (g->n_trainable == 0)
        return;
    int np = g->n_tensors;
    int *order = malloc(sizeof(int) * (size_t)(np + 1));
    if (!order) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        return;
    }
    int no = param_order(g, np, order);
    int64_t nq = 0, nblocks = 0, n32 = 0; /* quantized elements, their blocks, f32-state elements */
    for (int i = 0; i < no; i++) {
        int64_t numel = vr_tensor_numel(&g->tensors[order[i]]);
        if (g->tensors[order[i]].frozen)
            continue;
        if (q8 && vr_q8_quantized(numel))
            nq += numel, nblocks += vr_q8_blocks(numel);
        else
            n32 += numel;
    }
    if (mixed)
        g->master = flat(g, "master", VR_F32, VR_ROLE_MASTER, g->n_trainable);
    static const char *names[2][2] = {{"optim.momentum", NULL}, {"optim.m", "optim.v"}};
    vr_dtype sdt = s->optim_state == VR_OSTATE_BF16 ? VR_BF16 : VR_F32;
    for (int i = 0; i < n_state; i++) {
        const char *nm = names[n_state - 1][i];
        char name[VR_NAME_MAX];
        if (q8) {
            g->optim[i] = flat(g, nm, VR_U8, VR_ROLE_OPTIM, nq);
            snprintf(name, sizeof name, "%s.absmax", nm);
            g->absmax[i] = flat(g, name, VR_F32, VR_ROLE_OPTIM, nblocks);
            snprintf(name, sizeof name, "%s.f32", nm);
            g->optim32[i] = flat(g, name, VR_F32, VR_ROLE_OPTIM, n32);
        } else {
            g->optim[i] = flat(g, nm, sdt, VR_ROLE_OPTIM, n32);
        }
    }
    int64_t off = 0, qoff = 0, boff = 0, soff = 0;
    for (int k = 0; k < no; k++) {
        int p = order[k];
        vr_tensor pt = g->tensors[p];
        if (pt.frozen)
            continue;
        int64_t numel = vr_tensor_numel(&pt);
        bool quant = q8 && vr_q8_quantized(numel);
        char name[VR_NAME_MAX];
        if (mixed) {
            snprintf(name, sizeof name, "master.%.56s", pt.name);
            int mv = vr_graph_view(g, g->master, name, pt.ndim, pt.shape, off); /* may move g->tensors */
            g->tensors[p].master = mv;
        }
        for (int i = 0; i < n_state; i++) {
            const char *nm = names[n_state - 1][i];
            snprintf(name, sizeof name, "%s.%.48s", nm, pt.name);
            int v = vr_graph_view(g, quant ? g->optim[i] : q8 ? g->optim32[i] : g->optim[i], name, pt.ndim, pt.shape,
                                  quant ? qoff : q8 ? soff : off);
            g->tensors[p].optim[i] = v; /* vr_graph_view may move g->tensors */
            if (quant) {
                int64_t nb[1] = {vr_q8_blocks(numel)};
                snprintf(name, sizeof name, "%s.absmax.%.40s", nm, pt.name);
                int a = vr_graph_view(g, g->absmax[i], name, 1, nb, boff);
                g->tensors[p].absmax[i] = a;
            }
        }
        off += numel;
        if (quant)
            qoff += numel, boff += vr_q8_blocks(numel);
        else
            soff += numel;
    }
    free(order);
}

/* Clipping (sumsq) and one update node per parameter with a gradient, in buffer order. */
void vr_optimizer_nodes(vr_graph *g, const vr_step_config *s, int n0)
{
    int *order = malloc(sizeof(int) * (size_t)(n0 + 1));
    if (!order) {
        vr_graph_fail(g, VR_ERR_OOM, "autodiff: out of host memory");
        return;
    }
    int np = param_order(g, n0, order), no = 0;
    for (int i = 0; i < np; i++)
        if (g->tensors[order[i]].grad >= 0)
            order[no++] = order[i];
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
        n->out[4] = p.absmax[0];
        n->out[5] = p.absmax[1];
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
