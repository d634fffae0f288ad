/* vram graph — the whole step: model forward, freezing, backward, optimizer. */
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "kernels/scratch.h"

bool vr_step_config_split_master_ok(const vr_step_config *s)
{
    return s->precision == VR_PREC_BF16 && !s->no_master && s->offload == VR_OFFLOAD_NONE;
}

vr_status vr_step_config_check(const vr_step_config *s)
{
    if ((unsigned)s->precision > VR_PREC_FP16 || (unsigned)s->optim > VR_OPTIM_ADAMW ||
        (unsigned)s->recompute > VR_RECOMPUTE_ACT)
        return vr_error(VR_ERR_INVALID, "step config: bad precision, optimizer or recompute value");
    if (s->recompute_layers < 0 || (s->recompute_layers && s->recompute == VR_RECOMPUTE_NONE))
        return vr_error(VR_ERR_INVALID, "vr_step_config.recompute_layers: %d %s", s->recompute_layers,
                        s->recompute_layers < 0 ? "is negative"
                                                : "needs a recompute policy (act, selective or block) to limit");
    if ((unsigned)s->optim_state > VR_OSTATE_8BIT)
        return vr_error(VR_ERR_INVALID, "step config: bad optim_state value %d", (int)s->optim_state);
    if (s->train && s->optim_state != VR_OSTATE_FP32 && s->optim != VR_OPTIM_MOMENTUM && s->optim != VR_OPTIM_ADAM &&
        s->optim != VR_OPTIM_ADAMW)
        return vr_error(VR_ERR_INVALID, "vr_step_config.optim_state: %s state needs an optimizer with state "
                        "(momentum, adam, adamw); %s has none", vr_optim_state_name(s->optim_state),
                        vr_optim_name(s->optim));
    if (s->no_master && s->precision != VR_PREC_BF16)
        return vr_error(VR_ERR_INVALID, "vr_step_config.no_master: needs bf16 precision (%s %s)",
                        vr_precision_name(s->precision),
                        s->precision == VR_PREC_FP32 ? "weights are their own fp32 master"
                                                     : "weights lose small updates without an fp32 master");
    if (s->split_master && !vr_step_config_split_master_ok(s))
        return vr_error(VR_ERR_INVALID, "vr_step_config.split_master: needs bf16 precision, a master and no offload "
                        "(%s%s%s): the bf16 weights are the high half of the fp32 master on the device",
                        vr_precision_name(s->precision), s->no_master ? ", no master" : "",
                        s->offload ? ", offload optim: the host's update keeps a full fp32 master" : "");
    if (s->norm_from_out && !s->train)
        return vr_error(VR_ERR_INVALID, "vr_step_config.norm_from_out: the norms' backward from their output needs a "
                        "training step (an evaluation has no backward)");
    if (s->classifier_rows < 0)
        return vr_error(VR_ERR_INVALID, "vr_step_config.classifier_rows: %d is negative (0: the default)",
                        s->classifier_rows);
    if ((unsigned)s->offload > VR_OFFLOAD_OPTIM)
        return vr_error(VR_ERR_INVALID, "step config: bad offload value %d", (int)s->offload);
    if ((unsigned)s->attention > VR_ATTENTION_CUDNN)
        return vr_error(VR_ERR_INVALID, "step config: bad attention value %d", (int)s->attention);
    if (s->train && s->offload && s->optim == VR_OPTIM_NONE)
        return vr_error(VR_ERR_INVALID,
                        "vr_step_config.offload: 'optim' needs an optimizer (there is no state to offload)");
    if (s->offload && s->no_master)
        return vr_error(VR_ERR_INVALID, "vr_step_config.offload: 'optim' keeps the fp32 master weights on the "
                        "host; it cannot run with vr_step_config.no_master");
    if (s->accum < 0)
        return vr_error(VR_ERR_INVALID, "vr_step_config.accum: must be >= 1 (got %d)", s->accum);
    if (s->world < 0 || s->world > VR_MAX_RANKS || (s->world > 0 && (s->rank < 0 || s->rank >= s->world)))
        return vr_error(VR_ERR_INVALID, "vr_step_config.world: %d ranks (rank %d): must be 1..%d", s->world, s->rank,
                        VR_MAX_RANKS);
    if (s->zero < 0 || s->zero > 3)
        return vr_error(VR_ERR_INVALID, "vr_step_config.zero: stage %d: must be 0, 1, 2 or 3", s->zero);
    if (s->zero && s->world < 1)
        return vr_error(VR_ERR_INVALID, "vr_step_config.zero: stage %d needs data parallel ranks "
                        "(vr_step_config.world N, or mpirun)", s->zero);
    return VR_OK;
}

vr_status vr_graph_build(const vr_model_config *m, const vr_step_config *s, vr_graph **out)
{
    *out = NULL;
    vr_status cst = vr_step_config_check(s);
    if (cst)
        return cst;
    if (s->classifier_rows > 0 && s->kernels != VR_KERNELS_CUDA) /* known here, not when the flags are read */
        return vr_error(VR_ERR_INVALID, "vr_step_config.classifier_rows: sizes the CUDA kernels' classifier chunks; "
                        "the CPU kernels' are %d rows", VR_SCRATCH_CPU_CLASSIFIER_ROWS);
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
        st = vr_error(VR_ERR_INVALID, "vr_model_config.kind: unknown model kind %d", (int)m->kind);
    if (!st && s->freeze)
        st = vr_graph_freeze(g, s->freeze);
    if (!st && s->train) {
        vr_step_config sc = g->step;
        st = vr_graph_backward(g, &sc);
        g->step.freeze = s->freeze ? g->freeze_buf : NULL;
    }
    if (!st && s->world >= 1 && s->zero == 3)
        st = vr_graph_zero3(g, s);
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
