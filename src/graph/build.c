/* vram graph — the whole step: model forward, freezing, backward, optimizer. */
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"

vr_status vr_graph_build(const vr_model_config *m, const vr_step_config *s, vr_graph **out)
{
    *out = NULL;
    if ((unsigned)s->precision > VR_PREC_FP16 || (unsigned)s->optim > VR_OPTIM_ADAMW ||
        (unsigned)s->recompute > VR_RECOMPUTE_SELECTIVE)
        return vr_error(VR_ERR_INVALID, "step config: bad precision, optimizer or recompute value");
    if (s->accum < 0)
        return vr_error(VR_ERR_INVALID, "--accum: must be >= 1 (got %d)", s->accum);
    vr_graph *g = vr_graph_new(s->precision);
    if (!g)
        return vr_error(VR_ERR_OOM, "graph: out of host memory");
    g->step = *s;
    if (g->step.accum < 1)
        g->step.accum = 1;
    if (s->freeze) {
        snprintf(g->freeze_buf, sizeof g->freeze_buf, "%s", s->freeze);
        g->step.freeze = g->freeze_buf;
    }
    vr_status st;
    if (m->kind == VR_MODEL_GPT)
        st = vr_gpt_forward(g, &m->gpt, m->B, m->T);
    else if (m->kind == VR_MODEL_MLP)
        st = vr_mlp_forward(g, &m->mlp, m->B);
    else if (m->kind == VR_MODEL_LLAMA)
        st = vr_llama_forward(g, &m->llama, m->B, m->T);
    else
        st = vr_error(VR_ERR_INVALID, "--model: unknown model kind %d", (int)m->kind);
    if (!st && s->freeze)
        st = vr_graph_freeze(g, s->freeze);
    if (!st && s->train) {
        vr_step_config sc = g->step;
        st = vr_graph_backward(g, &sc);
        g->step.freeze = s->freeze ? g->freeze_buf : NULL;
    }
    if (!st && s->workspace_bytes) {
        int64_t shape[1] = {(int64_t)((s->workspace_bytes + 3) / 4)};
        int w = vr_graph_tensor(g, "workspace", VR_F32, VR_ROLE_TEMP, 1, shape);
        if (w >= 0)
            g->tensors[w].persistent = true;
        st = g->err;
    }
    if (st) {
        vr_graph_free(g);
        return st;
    }
    *out = g;
    return VR_OK;
}
