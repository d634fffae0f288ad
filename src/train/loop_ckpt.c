/* vram train — where a run starts and what it leaves: the seeded
 * initialisation, model checkpoints (--init, --save: llm.c GPT files, Hugging Face Llama directories) and vram's resumable
 * state (--save-state, --resume), moved between host files and the device
 * through the executor. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/loop_internal.h"
#include "vram/atomic_file.h"
#include "vram/hf_config.h"
#include "vram/train_state.h"

vr_llmc_config vr__llmc_config_of(const vr_gpt_config *c)
{
    vr_llmc_config l = {c->maxT, c->V, c->Vp ? c->Vp : (c->V + 127) / 128 * 128, c->L, c->NH, c->C};
    return l;
}

/* The flat buffers a resumable state holds, in the order they are written back: the parameters, then the
 * master copy (which overrides the one derived from them; not for fp32 params, whose offloaded host copy
 * equals them, so that a state resumes with or without --offload), then the optimizer state in its format. */
#define STATE_BUFS 8
static void state_buffers(const vr_graph *g, int ids[STATE_BUFS])
{
    int v[STATE_BUFS] = {g->params, g->param_dtype == VR_F32 ? -1 : g->master, g->optim[0], g->optim[1],
                         g->absmax[0], g->absmax[1], g->optim32[0], g->optim32[1]};
    memcpy(ids, v, sizeof v);
}

/* The config integers a state must match, and its buffers (host arrays the caller frees). */
static vr_status describe(vr_trainer *t, vr_train_state *s, void **bufs)
{
    const vr_graph *g = t->g;
    const vr_model_config *m = &t->cfg.model;
    memset(s, 0, sizeof *s);
    snprintf(s->model, sizeof s->model, "%s", vr_model_kind_name(m->kind));
    snprintf(s->optimizer, sizeof s->optimizer, "%s", vr_optim_name(t->cfg.step.optim));
    if (m->kind == VR_MODEL_GPT) {
        vr_state_set_config(s, "layers", m->gpt.L);
        vr_state_set_config(s, "channels", m->gpt.C);
        vr_state_set_config(s, "heads", m->gpt.NH);
        vr_state_set_config(s, "vocab", m->gpt.V);
        vr_state_set_config(s, "padded_vocab", g->model.gpt.Vp);
        vr_state_set_config(s, "max_seq", m->gpt.maxT);
        vr_state_set_config(s, "seq", m->T);
    } else if (m->kind == VR_MODEL_LLAMA) {
        const vr_llama_config *c = &g->model.llama; /* hd and Vp filled in */
        const char *keys[] = {"layers", "channels", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
                              "padded_vocab", "max_seq", "tied", "qkv_bias", "rope_scaling", "seq"};
        int64_t vals[] = {c->L, c->C, c->NH, c->NKV, c->hd, c->I, c->V, c->Vp, c->maxT, c->tied, c->qkv_bias,
                          c->rope.scaling, m->T};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            vr_state_set_config(s, keys[k], vals[k]);
    } else {
        vr_state_set_config(s, "mlp_sizes", m->mlp.n_sizes);
        for (int i = 0; i < m->mlp.n_sizes && i < 16; i++) {
            char nm[24];
            snprintf(nm, sizeof nm, "mlp_size_%d", i);
            vr_state_set_config(s, nm, m->mlp.sizes[i]);
        }
        vr_state_set_config(s, "mlp_act", m->mlp.act);
    }
    vr_state_set_config(s, "batch", m->B);
    vr_state_set_config(s, "accum", t->accum);
    vr_state_set_config(s, "params", g->n_params);
    vr_state_set_config(s, "trainable", g->n_trainable);
    vr_state_set_config(s, "precision", t->cfg.step.precision);
    vr_state_set_config(s, "optim_state", t->cfg.step.optim_state);
    vr_state_set_config(s, "no_master", t->cfg.step.no_master);
    if (t->cfg.step.split_master) /* only when set: states saved before it existed resume as they were */
        vr_state_set_config(s, "split_master", 1);
    if (t->cfg.step.world > 1) { /* a rank's state: its shard of the master and optimizer state */
        vr_state_set_config(s, "world", t->cfg.step.world);
        vr_state_set_config(s, "rank", t->cfg.step.rank);
        vr_state_set_config(s, "zero", t->cfg.step.zero);
    }
    if (t->train) { /* the data itself: resuming on other data would silently train on it */
        vr_state_set_config(s, "data_tokens", (int64_t)vr_data_num_tokens(t->train));
        vr_state_set_config(s, "data_crc32", vr_data_fingerprint(t->train));
    }
    int ids[STATE_BUFS];
    state_buffers(g, ids);
    for (int k = 0; k < STATE_BUFS; k++) {
        bufs[k] = NULL;
        if (ids[k] < 0)
            continue;
        uint64_t bytes = vr_tensor_bytes(&g->tensors[ids[k]]);
        bufs[k] = malloc(bytes ? bytes : 1);
        if (!bufs[k])
            return vr_error(VR_ERR_OOM, "train: out of host memory");
        vr_status st = vr_state_add_buffer(s, g->tensors[ids[k]].name, bufs[k], bytes);
        if (st)
            return st;
    }
    return VR_OK;
}

static void free_bufs(void **bufs)
{
    for (int k = 0; k < STATE_BUFS; k++)
        free(bufs[k]);
}

/* A rank's own state file: PATH.rankR with several ranks, PATH otherwise. */
static const char *rank_path(const vr_trainer *t, const char *path, char *buf, size_t cap)
{
    if (t->cfg.step.world <= 1)
        return path;
    snprintf(buf, cap, "%s.rank%d", path, t->cfg.step.rank);
    return buf;
}

vr_status vr_trainer_save_state(vr_trainer *t, const char *path_arg)
{
    if (vr__trainer_settled(t, "vr_trainer_save_state"))
        return VR_ERR_INVALID;
    char pbuf[4096];
    const char *path = rank_path(t, path_arg, pbuf, sizeof pbuf);
    vr_train_state *s = malloc(sizeof *s);
    void *bufs[STATE_BUFS] = {0};
    if (!s)
        return vr_error(VR_ERR_OOM, "train: out of host memory");
    vr_status st = describe(t, s, bufs);
    for (int k = 0; k < s->nbuffers && !st; k++) { /* buffers in state_buffers' order */
        int id = vr_graph_find(t->g, s->buffers[k].name);
        st = vr_exec_read(t->exec, id, s->buffers[k].data, s->buffers[k].bytes);
    }
    if (!st) {
        s->step = t->step;
        s->tokens_seen = t->tokens_seen;
        s->rng[0] = t->rng;
        s->data_seed = t->cfg.seed;
        s->data_pos = t->train ? vr_data_tell(t->train) : (vr_data_pos){0, t->task.next};
        int good = 0;
        vr_exec_get_loss_scale(t->exec, &s->loss_scale, &good);
        /* not part of the model's description (describe): read back from the file on resume */
        st = vr_state_set_config(s, "skipped_steps", t->skipped);
        if (!st)
            st = vr_state_set_config(s, "loss_scale_good", good);
        if (!st)
            st = vr_state_save(path, s);
    }
    free_bufs(bufs);
    free(s);
    return st;
}

static vr_status resume(vr_trainer *t, const char *path_arg)
{
    char pbuf[4096];
    const char *path = rank_path(t, path_arg, pbuf, sizeof pbuf);
    vr_train_state *want = malloc(sizeof *want), *file = malloc(sizeof *file);
    void *bufs[STATE_BUFS] = {0};
    vr_status st = !want || !file ? vr_error(VR_ERR_OOM, "train: out of host memory") : VR_OK;
    if (!st)
        st = describe(t, want, bufs);
    if (!st)
        st = vr_state_read_meta(path, file);
    if (!st && strcmp(file->model, want->model))
        st = vr_error(VR_ERR_FORMAT, "%s: the state holds a %s model, not a %s", path, file->model, want->model);
    if (!st && strcmp(file->optimizer, want->optimizer))
        st = vr_error(VR_ERR_FORMAT, "%s: the state was saved with vr_step_config.optim %s, not %s", path,
                      file->optimizer, want->optimizer);
    int64_t fcrc = 0, wcrc = 0, fn = 0, wn = 0;
    if (!st && vr_state_get_config(want, "data_crc32", &wcrc) && vr_state_get_config(file, "data_crc32", &fcrc) &&
        vr_state_get_config(want, "data_tokens", &wn) && vr_state_get_config(file, "data_tokens", &fn) &&
        (fcrc != wcrc || fn != wn))
        st = vr_error(VR_ERR_FORMAT,
                      "%s: the state was saved training on other data (%lld tokens, crc32 %08llx; this run's "
                      "vr_train_config.data has %lld tokens, crc32 %08llx): give the vr_train_config.data it was "
                      "trained on",
                      path, (long long)fn, (unsigned long long)fcrc, (long long)wn, (unsigned long long)wcrc);
    if (!st)
        st = vr_state_config_match(path, file, want);
    if (!st && file->data_seed != t->cfg.seed)
        st = vr_error(VR_ERR_FORMAT, "%s: the state was saved with vr_train_config.seed %llu, not %llu", path,
                      (unsigned long long)file->data_seed, (unsigned long long)t->cfg.seed);
    if (!st)
        st = vr_state_load(path, want);
    for (int k = 0; k < want->nbuffers && !st; k++)
        st = vr_exec_write(t->exec, vr_graph_find(t->g, want->buffers[k].name), want->buffers[k].data,
                           want->buffers[k].bytes);
    if (!st) {
        t->step = want->step;
        t->tokens_seen = want->tokens_seen;
        t->rng = want->rng[0];
        if (want->step < 0)
            st = vr_error(VR_ERR_FORMAT, "%s: step %lld is out of range", path, (long long)want->step);
        else if (t->train && vr_data_seek(t->train, want->data_pos)) {
            char why[512];
            snprintf(why, sizeof why, "%s", vr_last_error());
            st = vr_error(VR_ERR_FORMAT, "%s: data_pos (epoch %llu, batch %llu) is out of range: %s", path,
                          (unsigned long long)want->data_pos.epoch, (unsigned long long)want->data_pos.batch, why);
        } else if (!t->train)
            t->task.next = want->data_pos.batch;
    }
    int64_t skipped = 0, good = 0; /* fp16 loss scaling (absent in older states: none skipped) */
    if (!st) {
        vr_state_get_config(file, "skipped_steps", &skipped);
        vr_state_get_config(file, "loss_scale_good", &good);
        if (skipped < 0 || skipped > want->step)
            st = vr_error(VR_ERR_FORMAT, "%s: skipped_steps %lld is out of range [0, step %lld]", path,
                          (long long)skipped, (long long)want->step);
        else if (good < 0 || good > INT32_MAX)
            st = vr_error(VR_ERR_FORMAT, "%s: loss_scale_good %lld is out of range", path, (long long)good);
        else if (!(file->loss_scale > 0.0f) || isinf(file->loss_scale))
            st = vr_error(VR_ERR_FORMAT, "%s: loss_scale %g is out of range (finite, > 0)", path,
                          (double)file->loss_scale);
    }
    if (!st) {
        t->skipped = skipped;
        st = vr_exec_set_loss_scale(t->exec, file->loss_scale, (int)good);
    }
    if (t->cfg.step.world > 1) { /* every rank's file of the same step (a run killed between two ranks' saves) */
        double v[2] = {st ? -1 : (double)t->step, st ? -1 : -(double)t->step}; /* least step, -(greatest step) */
        vr_status cs = vr_comm_min_host(t->cfg.comm, v, 2);
        if (!st && cs)
            st = cs;
        else if (!st && v[0] < 0)
            st = vr_error(VR_ERR_INVALID, "vr_train_config.resume: another rank could not read its state file");
        else if (!st && v[0] != -v[1])
            st = vr_error(VR_ERR_FORMAT, "vr_train_config.resume: the ranks' state files are of steps %.0f to %.0f "
                          "(a run stopped between two ranks' saves); resume from an earlier state", v[0], -v[1]);
    }
    free_bufs(bufs);
    free(want);
    free(file);
    return st;
}

vr_status vr__trainer_load_start(vr_trainer *t)
{
    const vr_train_config *c = &t->cfg;
    const vr_graph *g = t->g;
    if (c->init && c->resume)
        return vr_error(VR_ERR_INVALID, "vr_train_config.init and vr_train_config.resume: give one (a state already "
                        "holds the weights)");
    if (c->resume)
        return resume(t, c->resume);
    if (c->init && g->model.kind == VR_MODEL_MLP)
        return vr_error(VR_ERR_INVALID, "vr_train_config.init: an MLP has no model checkpoint format; start it from "
                        "vr_train_config.resume");
    float *p = malloc(sizeof(float) * (size_t)g->n_params);
    if (!p)
        return vr_error(VR_ERR_OOM, "train: out of host memory");
    vr_status st = VR_OK;
    if (c->init && g->model.kind == VR_MODEL_LLAMA) {
        st = vr_hf_load_llama(c->init, &g->model.llama, p);
    } else if (c->init) {
        vr_llmc_config lc = vr__llmc_config_of(&g->model.gpt);
        st = vr_llmc_load(c->init, &lc, p, (size_t)g->n_params);
    } else {
        vr_train_init_params(g, c->seed, p);
    }
    t->rng = c->seed;
    if (!st)
        st = vr_exec_write(t->exec, g->params, p, sizeof(float) * (uint64_t)g->n_params);
    free(p);
    return st;
}

vr_status vr_trainer_check_save(const vr_trainer *t, const char *path)
{
    const vr_graph *g = t->g;
    if (g->model.kind == VR_MODEL_MLP)
        return vr_error(VR_ERR_INVALID, "vr_train_run_opts.save: an MLP has no model checkpoint format; save it "
                        "with vr_train_run_opts.save_state");
    if (g->step.world > 1 && g->step.rank != 0)
        return VR_OK; /* rank 0 writes */
    if (g->model.kind == VR_MODEL_GPT)
        return vr_atomic_check_writable(path);
    if (mkdir(path, 0777) && errno != EEXIST)
        return vr_error(VR_ERR_IO, "%s: cannot create the directory: %s", path, strerror(errno));
    char file[4096];
    snprintf(file, sizeof file, "%s/model.safetensors", path);
    return vr_atomic_check_writable(file);
}

vr_status vr_trainer_save_model(vr_trainer *t, const char *path)
{
    const vr_graph *g = t->g;
    vr_status st = vr_trainer_check_save(t, path);
    if (st)
        return st;
    float *p = malloc(sizeof(float) * (size_t)g->n_params);
    if (!p)
        return vr_error(VR_ERR_OOM, "train: out of host memory");
    st = vr_trainer_read_params(t, p, g->n_params);
    if (!st && g->step.world > 1 && g->step.rank != 0) {
        /* gathered for rank 0, which writes */
    } else if (!st && g->model.kind == VR_MODEL_GPT) {
        vr_llmc_config lc = vr__llmc_config_of(&g->model.gpt);
        st = vr_llmc_save(path, &lc, p, (size_t)g->n_params);
    } else if (!st) {
        st = vr_hf_save_llama(path, &g->model.llama, p, VR_F32);
    }
    free(p);
    return st;
}
