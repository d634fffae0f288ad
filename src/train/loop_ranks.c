/* vram train — data parallel: every rank must train the same step. Ranks started by `vram train --gpus N`
 * share their flags by construction; ranks started by mpirun (or Slurm) each parse their own, and a rank with
 * another learning rate, batch or model would silently train something else (or hang in a collective of
 * another size). So before anything is allocated the ranks compare a hash of the settings that define the
 * step and the run (model, micro-batch, step, optimizer, schedule, seed, data, memory mode); the device, the
 * output paths and the rank itself are each rank's own. */
#include <stdio.h>
#include <string.h>

#include "train/loop_internal.h"
#include "vram/dist.h"

/* The settings every rank must share, as text (%a: floats exactly). */
static int settings(const vr_train_config *c, char *buf, size_t cap)
{
    const vr_model_config *m = &c->model;
    const vr_step_config *s = &c->step;
    const vr_optim_hparams *h = &c->hp;
    int n = snprintf(buf, cap, "model %d B %d T %d", (int)m->kind, m->B, m->T);
    if (m->kind == VR_MODEL_GPT)
        n += snprintf(buf + n, cap - (size_t)n, " gpt %d %d %d %d %d %d", m->gpt.L, m->gpt.C, m->gpt.NH, m->gpt.V,
                      m->gpt.Vp, m->gpt.maxT);
    else if (m->kind == VR_MODEL_LLAMA)
        n += snprintf(buf + n, cap - (size_t)n, " llama %d %d %d %d %d %d %d %d %d %a %a %d %a %a %a %a %d %d",
                      m->llama.L, m->llama.C, m->llama.NH, m->llama.NKV, m->llama.hd, m->llama.I, m->llama.V,
                      m->llama.Vp, m->llama.maxT, (double)m->llama.rms_eps, m->llama.rope.theta, m->llama.rope.scaling,
                      m->llama.rope.factor, m->llama.rope.low_freq, m->llama.rope.high_freq, m->llama.rope.orig_max_t,
                      m->llama.tied, m->llama.qkv_bias);
    else
        for (int i = 0; i < m->mlp.n_sizes && i < VR_MLP_MAX_SIZES; i++)
            n += snprintf(buf + n, cap - (size_t)n, " %d", m->mlp.sizes[i]);
    n += snprintf(buf + n, cap - (size_t)n,
                  " step %d %d %d %d %d %d %d %d %d %d %a [%s] world %d zero %d ws %llu hp %a %a %a %a %a %a %a %d"
                  " sched %d %lld %a %lld seed %llu data %s %d %d mem %d %s %d init %s resume %d scale %a %d attn %d split %d",
                  (int)s->precision, (int)s->optim, (int)s->recompute, s->recompute_layers, s->accum, (int)s->optim_state, s->no_master,
                  (int)s->offload, (int)m->mlp.act, s->train, s->grad_clip, s->freeze ? s->freeze : "", s->world,
                  s->zero, (unsigned long long)s->workspace_bytes, (double)h->lr, (double)h->beta1, (double)h->beta2,
                  (double)h->eps, (double)h->weight_decay, (double)h->momentum, (double)h->dampening, h->nesterov,
                  (int)c->lr_kind, (long long)c->warmup, c->min_lr_frac, (long long)c->steps,
                  (unsigned long long)c->seed, c->data ? c->data : "generated", (int)c->data_order, c->eval_batches,
                  (int)c->memory, c->alloc_policy ? c->alloc_policy : "", c->inplace, c->init ? c->init : "",
                  c->resume != NULL, (double)c->loss_scale, c->loss_scale_window, (int)s->attention, s->split_master);
    return n;
}

vr_status vr__trainer_check_ranks(const vr_trainer *t)
{
    if (t->cfg.step.world <= 1 || !t->cfg.comm)
        return VR_OK;
    char buf[4096];
    int n = settings(&t->cfg, buf, sizeof buf);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < n && i < (int)sizeof buf; i++)
        h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
    double hi = (double)(h >> 32), lo = (double)(h & 0xffffffffu);
    double v[4] = {hi, lo, -hi, -lo}; /* the least and (negated) the largest over the ranks */
    vr_status st = vr_comm_min_host(t->cfg.comm, v, 4);
    if (st)
        return st;
    if (v[0] != -v[2] || v[1] != -v[3])
        return vr_error(VR_ERR_INVALID, "ranks: the %d ranks were started with different settings (model, batch, "
                        "step, optimizer, schedule, seed or data); give every rank the same flags",
                        t->cfg.step.world);
    return VR_OK;
}
