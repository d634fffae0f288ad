/* vram train — the trainer: setting up a run, one optimizer step, evaluation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/loop_internal.h"
#include "vram/util.h"

vr_train_config vr_train_config_default(void)
{
    vr_train_config c;
    memset(&c, 0, sizeof c);
    c.model.kind = VR_MODEL_GPT;
    int T = 64;
    vr_gpt_preset("tiny", &c.model.gpt, &T);
    c.model.B = 8;
    c.model.T = T;
    c.step.train = true;
    c.step.accum = 1;
    c.step.optim = VR_OPTIM_ADAMW;
    c.hp = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    c.hp.lr = 1e-3f;
    c.lr_kind = VR_LR_COSINE;
    c.min_lr_frac = 0.1;
    c.steps = 100;
    c.seed = 1337;
    c.memory = VR_MEMORY_PLANNED;
    return c;
}

/* ------------------------------------------------------------------ create */

/* Ranks sharing each batch (1 without data parallel). */
static int ranks(const vr_trainer *t) { return t->cfg.step.world > 1 ? t->cfg.step.world : 1; }

static vr_status open_data(vr_trainer *t)
{
    const vr_train_config *c = &t->cfg;
    const vr_model_config *m = &c->model;
    int W = ranks(t); /* every rank reads the global batch and trains on its rows (rank_rows) */
    if (m->kind == VR_MODEL_MLP) {
        if (c->data && *c->data && strcmp(c->data, "generated"))
            return vr_error(VR_ERR_INVALID,
                            "vr_train_config.data: an MLP trains on the built-in generated task only (got '%s')",
                            c->data);
        return vr__mlp_task_init(&t->task, m->mlp.sizes[0], m->mlp.sizes[m->mlp.n_sizes - 1], m->B * W, c->seed);
    }
    vr_data_config dc = vr_data_config_default(m->B * W, m->T);
    dc.kind = vr_data_kind_for(c->data);
    dc.path = c->data;
    dc.vocab = m->kind == VR_MODEL_LLAMA ? m->llama.V : m->gpt.V;
    dc.order = c->data_order;
    dc.seed = c->seed;
    dc.split = VR_SPLIT_TRAIN;
    return vr_data_open(&dc, &t->train);
}

static vr_status host_batches(vr_trainer *t)
{
    const vr_graph *g = t->g;
    t->inputs = calloc((size_t)t->accum, sizeof(void *));
    t->targets = calloc((size_t)t->accum, sizeof(int32_t *));
    t->mb = calloc((size_t)t->accum, sizeof(vr_exec_batch));
    if (!t->inputs || !t->targets || !t->mb)
        return vr_error(VR_ERR_OOM, "train: out of host memory");
    size_t in = (size_t)vr_tensor_bytes(&g->tensors[g->tokens]), tg = (size_t)vr_tensor_bytes(&g->tensors[g->targets]);
    size_t W = (size_t)ranks(t), r = t->cfg.step.world > 1 ? (size_t)t->cfg.step.rank : 0;
    for (int k = 0; k < t->accum; k++) { /* the global batch; this rank's rows go to the executor */
        t->inputs[k] = malloc(in * W);
        t->targets[k] = malloc(tg * W);
        if (!t->inputs[k] || !t->targets[k])
            return vr_error(VR_ERR_OOM, "train: out of host memory");
        t->mb[k] = (vr_exec_batch){(char *)t->inputs[k] + in * r, (const int32_t *)(const void *)((char *)t->targets[k] + tg * r)};
    }
    return VR_OK;
}

/* The executor settings the training and the evaluation executors share (each adds its own). */
static vr_exec_config exec_config(const vr_train_config *c)
{
    return (vr_exec_config){.memory = c->memory, .alloc_policy = c->alloc_policy, .poison = c->poison,
                            .attention_v1 = c->attention_v1, .unfused = c->unfused, .matmul_tune = c->matmul_tune};
}

vr_status vr_trainer_create(const vr_train_config *c, vr_trainer **out)
{
    *out = NULL;
    vr_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return vr_error(VR_ERR_OOM, "train: out of host memory");
    t->cfg = *c;
    t->cfg.step.train = true;
    t->accum = c->step.accum > 1 ? c->step.accum : 1;
    vr_status st = VR_OK;
    if (t->accum > VR_TRAIN_MAX_ACCUM)
        st = vr_error(VR_ERR_INVALID, "vr_step_config.accum: at most %d (got %d)", VR_TRAIN_MAX_ACCUM, t->accum);
    if (!st && c->steps < 1)
        st = vr_error(VR_ERR_INVALID, "vr_train_config.steps: must be >= 1 (got %lld)", (long long)c->steps);
    if (!st && !(c->hp.lr > 0))
        st = vr_error(VR_ERR_INVALID, "vr_train_config.hp.lr: must be > 0 (got %g)", (double)c->hp.lr);
    t->sched = (vr_lr_schedule){c->lr_kind, c->hp.lr, c->warmup, c->steps, c->min_lr_frac};
    if (!st && vr_lr_check(&t->sched)) {
        char why[512]; /* a copy: vr_error must not read the buffer it writes */
        snprintf(why, sizeof why, "%s", vr_last_error());
        st = vr_error(VR_ERR_INVALID, "vr_train_config.warmup and vr_train_config.hp.lr: %s", why);
    }
    if (!st)
        st = vr__trainer_check_ranks(t);
    if (!st)
        st = vr_device_open(c->device ? c->device : "cpu", &t->dev);
    if (!st && vr_device_kind_of(t->dev) == VR_DEVICE_CUDA) { /* the CUDA kernels' scratch and cuBLAS workspace */
        t->cfg.step.kernels = VR_KERNELS_CUDA;
        if (!t->cfg.step.workspace_bytes)
            t->cfg.step.workspace_bytes = VR_CUDA_WORKSPACE_BYTES;
    }
    if (!st)
        st = vr__trainer_memory_open(t);
    if (!st)
        st = vr_graph_build(&t->cfg.model, &t->cfg.step, &t->g);
    vr_plan_config pc = {.memory = c->memory, .alloc_policy = c->alloc_policy, .inplace = c->inplace};
    if (!st)
        st = vr_plan_create(t->g, &pc, &t->plan);
    if (!st)
        st = vr__trainer_memory_check(t, t->plan, 0, "training");
    vr_exec_config ec = exec_config(c);
    ec.loss_scale = c->loss_scale;
    ec.loss_scale_window = c->loss_scale_window;
    ec.cuda_graph = c->cuda_graph;
    ec.per_node_optimizer = c->per_node_optimizer;
    ec.profile = c->profile;
    ec.on_node = c->on_node;
    ec.on_node_ctx = c->on_node_ctx;
    ec.device_times = c->device_times;
    ec.comm = c->comm;
    if (!st)
        st = vr_exec_create(t->plan, t->dev, &ec, &t->exec);
    if (!st)
        st = vr__trainer_memory_cap(t, t->exec);
    if (!st && c->dump_batches) {
        if (c->model.kind != VR_MODEL_GPT)
            st = vr_error(VR_ERR_INVALID, "vr_train_config.dump_batches: GPT models only");
        else if (!(t->dump = fopen(c->dump_batches, "wb")))
            st = vr_error(VR_ERR_IO, "vr_train_config.dump_batches: cannot write '%s'", c->dump_batches);
    }
    if (!st)
        st = open_data(t);
    if (!st)
        st = host_batches(t);
    if (!st)
        st = vr__trainer_load_start(t);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", vr_last_error());
        vr_trainer_free(t);
        return vr_error(st, "%s", msg);
    }
    *out = t;
    return VR_OK;
}

void vr_trainer_free(vr_trainer *t)
{
    if (!t)
        return;
    vr_exec_free(t->eexec); /* before the training executor whose parameters it borrows */
    vr_plan_free(t->eplan);
    vr_graph_free(t->eg);
    vr_data_close(t->val);
    vr_exec_free(t->exec);
    vr_plan_free(t->plan);
    vr_graph_free(t->g);
    vr_data_close(t->train);
    if (t->dump)
        fclose(t->dump);
    vr__mlp_task_free(&t->task);
    for (int k = 0; t->inputs && k < t->accum; k++) {
        free(t->inputs[k]);
        free(t->targets[k]);
    }
    free(t->inputs);
    free(t->targets);
    free(t->mb);
    if (t->dev)
        vr_device_close(t->dev);
    free(t);
}

/* ------------------------------------------------------------------ step */

static vr_status next_train_batch(vr_trainer *t, int k)
{
    if (t->train)
        return vr_data_next(t->train, t->inputs[k], t->targets[k]);
    vr__mlp_task_batch(&t->task, 0, t->task.next++, t->inputs[k], t->targets[k]);
    return VR_OK;
}

/* A step that failed with st puts the data back where it stood before it (pos, next), so that a retried or
 * resumed run skips no batch; returns st with its message. */
static vr_status put_back(vr_trainer *t, vr_data_pos pos, uint64_t next, vr_status st)
{
    char why[1024]; /* the seek must not replace the step's error */
    snprintf(why, sizeof why, "%s", vr_last_error());
    if (t->train)
        vr_data_seek(t->train, pos);
    t->task.next = next;
    return vr_error(st, "%s", why);
}

/* Loads the micro-batches of step `s` (0-based) and starts it on the executor; *pos, *next: where the data stood
 * before (put back if it cannot start), *lr: its learning rate. */
static vr_status start_step(vr_trainer *t, int64_t s, vr_data_pos *pos, uint64_t *next, float *lr)
{
    *pos = t->train ? vr_data_tell(t->train) : (vr_data_pos){0, 0};
    *next = t->task.next;
    vr_status st = VR_OK;
    for (int k = 0; k < t->accum && !st; k++)
        if (!(st = next_train_batch(t, k)))
            st = vr__trainer_dump_batch(t, k);
    vr_optim_hparams h = t->cfg.hp;
    h.step = s - t->skipped + 1; /* a skipped fp16 step did not step the optimizer */
    h.lr = (float)vr_lr_at(&t->sched, s);
    *lr = h.lr;
    if (!st)
        st = vr_exec_step_start(t->exec, t->mb, &h);
    return st ? put_back(t, *pos, *next, st) : VR_OK;
}

void vr_trainer_lookahead(vr_trainer *t, bool on) { t->lookahead = on; }

vr_status vr__trainer_settled(const vr_trainer *t, const char *what)
{
    if (!t->ahead)
        return VR_OK;
    return vr_error(VR_ERR_INVALID, "%s: the next step is queued (vr_trainer_lookahead): run it with "
                    "vr_trainer_step first", what);
}

vr_status vr_trainer_step(vr_trainer *t, vr_train_step_info *info)
{
    uint64_t t0 = vr_now_ns();
    vr_status st = VR_OK;
    /* where the data stood before this step (put_back) */
    vr_data_pos pos0;
    uint64_t next0;
    float lr;
    if (t->ahead) { /* started by the call before */
        pos0 = t->ahead_pos, next0 = t->ahead_next, lr = t->ahead_lr;
        t->ahead = false;
    } else if ((st = start_step(t, t->step, &pos0, &next0, &lr))) {
        return st;
    }
    /* the next step queued behind this one before waiting for it, so that the GPU does not wait for the host
     * between them; one that cannot start now starts in the next call instead (and fails there, if it does) */
    if (t->lookahead && t->cfg.step.world <= 1 && vr_exec_can_start_ahead(t->exec) &&
        (vr_exec_step_queued(t->exec) || t->ahead_always)) {
        if (!start_step(t, t->step + 1, &t->ahead_pos, &t->ahead_next, &t->ahead_lr))
            t->ahead = true;
        else
            vr_clear_error();
    }
    vr_exec_result res;
    if ((st = vr_exec_step_finish(t->exec, &res))) {
        if (t->ahead) { /* the step behind it is dropped too: its batches go back with this one's */
            char why[1024]; /* its finish must not replace this step's error */
            snprintf(why, sizeof why, "%s", vr_last_error());
            vr_exec_result drop;
            (void)vr_exec_step_finish(t->exec, &drop);
            t->ahead = false;
            (void)vr_error(st, "%s", why); /* this step's message again */
        }
        return put_back(t, pos0, next0, st);
    }
    if (t->cfg.step.world > 1) { /* the mean over the ranks: the loss of the global batch */
        double l = res.loss;
        if ((st = vr_comm_sum_host(t->cfg.comm, &l, 1)))
            return st;
        res.loss = l / t->cfg.step.world;
    }
    t->step++;
    t->skipped += res.skipped;
    if ((st = vr__trainer_memory_sample(t)))
        return st;
    uint64_t tokens = (uint64_t)t->cfg.model.B * (uint64_t)t->cfg.model.T * (uint64_t)t->accum * (uint64_t)ranks(t);
    t->tokens_seen += tokens;
    if (info) {
        info->step = t->step;
        info->loss = res.loss;
        info->lr = lr;
        info->grad_norm = res.grad_norm;
        info->loss_scale = res.loss_scale;
        info->skipped = res.skipped;
        info->skipped_total = t->skipped;
        info->ms = (double)(vr_now_ns() - t0) / 1e6;
        info->tokens = tokens;
    }
    return VR_OK;
}

/* ------------------------------------------------------------------ evaluation */

vr_status vr__trainer_eval_setup(vr_trainer *t)
{
    if (t->eexec)
        return VR_OK;
    const vr_train_config *c = &t->cfg;
    vr_step_config s;
    memset(&s, 0, sizeof s);
    s.precision = c->step.precision;
    s.kernels = c->step.kernels;
    s.attention = c->step.attention;
    s.classifier_rows = c->step.classifier_rows; /* the classifier's chunks as the training step's */
    s.workspace_bytes = c->step.workspace_bytes; /* cuBLASLt's and cuDNN's, as the training step's */
    vr_status st = vr_graph_build(&c->model, &s, &t->eg);
    vr_plan_config pc = {.memory = c->memory, .alloc_policy = c->alloc_policy, .inplace = c->inplace};
    if (!st)
        st = vr_plan_create(t->eg, &pc, &t->eplan);
    if (!st)
        st = vr__trainer_memory_check(t, t->eplan, t->plan->arena_size, "evaluation");
    vr_exec_config ec = exec_config(c);
    ec.params_from = t->exec;
    if (!st)
        st = vr_exec_create(t->eplan, t->dev, &ec, &t->eexec);
    if (!st)
        st = vr__trainer_memory_cap(t, t->eexec);
    if (!st && c->model.kind != VR_MODEL_MLP) {
        vr_data_config dc = vr_data_config_default(c->model.B, c->model.T);
        dc.kind = vr_data_kind_for(c->data);
        dc.path = c->data;
        dc.vocab = c->model.kind == VR_MODEL_LLAMA ? c->model.llama.V : c->model.gpt.V;
        dc.seed = c->seed;
        dc.split = VR_SPLIT_VAL;
        st = vr_data_open(&dc, &t->val);
    }
    if (st) { /* leave no half-made evaluation behind */
        vr_exec_free(t->eexec);
        vr_plan_free(t->eplan);
        vr_graph_free(t->eg);
        t->eexec = NULL;
        t->eplan = NULL;
        t->eg = NULL;
        t->val = NULL;
    }
    return st;
}

vr_status vr_trainer_eval(vr_trainer *t, double *val_loss)
{
    vr_status st = vr__trainer_settled(t, "vr_trainer_eval");
    if (st)
        return st;
    st = vr__trainer_eval_setup(t);
    if (st)
        return st;
    int64_t nb = t->cfg.eval_batches > 0 ? t->cfg.eval_batches : 8;
    if (t->val) {
        int64_t per = (int64_t)vr_data_batches_per_epoch(t->val);
        nb = nb < per ? nb : per;
        if ((st = vr_data_seek(t->val, (vr_data_pos){0, 0})))
            return st;
    }
    double sum = 0;
    for (int64_t k = 0; k < nb; k++) {
        if (t->val)
            st = vr_data_next(t->val, t->inputs[0], t->targets[0]);
        else
            vr__mlp_task_batch(&t->task, 1, (uint64_t)k, t->inputs[0], t->targets[0]);
        vr_exec_result res;
        vr_exec_batch b = {t->inputs[0], t->targets[0]}; /* the held-out batch (not a rank's training rows) */
        if (!st)
            st = vr_exec_step(t->eexec, &b, NULL, &res);
        if (st)
            return st;
        sum += res.loss;
    }
    *val_loss = sum / (double)nb;
    return VR_OK;
}

/* ------------------------------------------------------------------ accessors */

int64_t vr_trainer_steps_done(const vr_trainer *t) { return t->step; }
const vr_graph *vr_trainer_graph(const vr_trainer *t) { return t->g; }
const vr_plan *vr_trainer_plan(const vr_trainer *t) { return t->plan; }
vr_exec *vr_trainer_exec(vr_trainer *t) { return t->exec; }
const vr_plan *vr_trainer_eval_plan(const vr_trainer *t) { return t->eplan; }
vr_exec *vr_trainer_eval_exec(vr_trainer *t) { return t->eexec; }

vr_status vr_trainer_read_params(vr_trainer *t, float *host, int64_t n)
{
    if (vr__trainer_settled(t, "vr_trainer_read_params"))
        return VR_ERR_INVALID;
    if (n != t->g->n_params)
        return vr_error(VR_ERR_INVALID, "train: the model has %lld parameters, not %lld", (long long)t->g->n_params,
                        (long long)n);
    const vr_graph *g = t->g;
    vr_status st = vr_exec_read(t->exec, g->params, host, (uint64_t)n * sizeof(float));
    if (st || g->step.world <= 1 || g->step.zero < 1)
        return st;
    /* sharded: each element from the rank that updates it (the frozen ones from rank 0; a split parameter's from
     * its pieces' owners), summed over ranks */
    for (int i = 0; i < g->n_tensors; i++) {
        const vr_tensor *x = &g->tensors[i];
        int from = x->owner >= 0 ? x->owner : 0;
        if (x->param_offset >= 0 && !x->split && from != g->step.rank)
            memset(host + x->param_offset, 0, sizeof(float) * (size_t)vr_tensor_numel(x));
    }
    return vr_comm_sum_host_f32(t->cfg.comm, host, n);
}
