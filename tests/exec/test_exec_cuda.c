/* The CUDA executor against the CPU one (skips without a GPU; CI has none):
 * a tiny GPT's fp32 step on the GPU matches the CPU step (loss, gradient norm,
 * parameters after one AdamW step with clipping) within 1e-4; bf16 (fp32
 * master, fp32 m/v) and fp16 (dynamic loss scaling) give the loss within 1e-2,
 * the gradient norm within 2% and a master close to the fp32 update; fp16's
 * overflow skips and the scale's halving and doubling follow GradScaler; the
 * plan's bytes per role equal what the CUDA run held, in planned and dynamic
 * mode, and the arena is the plan's. Multi-tensor apply (the
 * default) against the per-node optimizer: the same state after each step (bit
 * for bit when the clip factors are equal), in planned, CUDA graph and dynamic
 * mode. The executor's add + layernorm fusion (the default without poison) against every node's own
 * kernels: the same steps (bit for bit with that fusion alone), node by node, under a CUDA graph and
 * with recompute, the adds queueing no work of their own; an fp32 fused step matches the CPU.
 * Linear + GELU fused into one cuBLASLt product (the default) against unfused and the CPU; the
 * pairs found from a graph and its plan (fuse_pairs: runs without a GPU). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exec_test_util.h"
#include "exec/cuda_fuse.h"
#include "exec/cuda_fuse_dbias.h"
#include "exec/exec_internal.h"
#include "kernels/scratch.h"
#include "vram/device.h"

typedef struct run_out {
    double loss, norm;
    float *params;        /* after the step (fp32; the master where there is one) */
    vr_exec_memory mem;
    vr_plan *plan;
    vr_graph *g;
} run_out;

static bool gpu_present(void)
{
    int n = 0;
    return vr_cuda_device_count(&n) == VR_OK && n > 0;
}

static bool run_poison = true; /* run_model's executor poisons (which turns the executor's fusions off) */
static bool run_norm_out;      /* run_model's step: the norms' backward from their output */
static int run_cls_rows;       /* run_model's step: vr_step_config.classifier_rows (0: the default) */

static void run_model(const char *dev_spec, vr_precision prec, vr_memory_mode mode, vr_model_config m, run_out *o)
{
    memset(o, 0, sizeof *o);
    bool cuda = !strncmp(dev_spec, "cuda", 4);
    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .precision = prec, .grad_clip = 1.0f,
                        .norm_from_out = run_norm_out, .classifier_rows = run_cls_rows};
    if (cuda) {
        s.kernels = VR_KERNELS_CUDA;
        s.workspace_bytes = (uint64_t)4 << 20;
    }
    assert_int_equal(vr_graph_build(&m, &s, &o->g), VR_OK);
    vr_plan_config pc = {.memory = mode};
    assert_int_equal(vr_plan_create(o->g, &pc, &o->plan), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open(dev_spec, &dev), VR_OK);
    vr_exec_config ec = {.memory = mode, .poison = run_poison};
    vr_exec *e = NULL;
    if (vr_exec_create(o->plan, dev, &ec, &e) != VR_OK)
        fail_msg("%s", vr_last_error());
    /* the same initial values on every device: built from an fp32 graph's layout (identical) */
    float *p = et_params(o->g, 42);
    assert_int_equal(vr_exec_write(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    void *inputs;
    int32_t *targets;
    et_batch(o->g, 7, &inputs, &targets);
    vr_exec_batch b = {inputs, targets};
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    h.lr = 3e-5f; /* a sign flip of a ~0 gradient moves a parameter 2 lr: under 1e-4 */
    vr_exec_result r;
    if (vr_exec_step(e, &b, &h, &r) != VR_OK)
        fail_msg("%s", vr_last_error());
    o->loss = r.loss;
    o->norm = r.grad_norm;
    assert_int_equal(vr_exec_read(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    o->params = p;
    vr_exec_get_memory(e, &o->mem);
    vr_exec_free(e);
    vr_device_close(dev);
    free(inputs);
    free(targets);
}

static void run_step(const char *dev_spec, vr_precision prec, vr_memory_mode mode, run_out *o)
{
    run_model(dev_spec, prec, mode, et_gpt(4, 32), o);
}

/* A small Llama with every feature the CUDA kernels must get right: grouped-query attention (4 query
 * heads over 2 kv heads of 64: the tensor-core kernels in 16 bits), Llama 3 rope scaling with bands inside
 * T, QKV biases (Qwen2), untied head, T not a multiple of 64. */
static vr_model_config llama_small(void)
{
    vr_model_config m;
    memset(&m, 0, sizeof m);
    m.kind = VR_MODEL_LLAMA;
    m.llama = (vr_llama_config){.L = 2, .C = 256, .NH = 4, .NKV = 2, .hd = 64, .I = 384, .V = 300, .maxT = 128,
                                .rms_eps = 1e-5f, .rope = {500000.0, 1, 32.0, 1.0, 4.0, 32.0}, .tied = false,
                                .qkv_bias = true};
    m.B = 2;
    m.T = 96;
    return m;
}

static void run_free(run_out *o)
{
    free(o->params);
    vr_plan_free(o->plan);
    vr_graph_free(o->g);
}

static void check_plan_equals_run(const run_out *o)
{
    for (int r = 0; r < VR_ROLE_COUNT; r++) {
        assert_true(o->plan->max_live[r] == o->mem.max_live[r]);
        assert_true(o->plan->at_peak[r] == o->mem.at_peak[r]);
    }
    assert_true(o->plan->peak == o->mem.peak);
}

static float max_diff(const float *a, const float *b, int64_t n)
{
    float d = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        if (!(x <= d))
            d = x;
    }
    return d;
}

#define NEED_GPU()                                                                                                    \
    do {                                                                                                              \
        if (!gpu_present())                                                                                           \
            skip();                                                                                                   \
    } while (0)

static void fp32_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    run_out c, g;
    run_step("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, &c);
    run_step("cuda", VR_PREC_FP32, VR_MEMORY_PLANNED, &g);
    printf("fp32: loss cpu %.7f cuda %.7f, norm cpu %.6f cuda %.6f, max param diff %.3g\n", c.loss, g.loss, c.norm,
           g.norm, (double)max_diff(c.params, g.params, c.g->n_params));
    assert_true(fabs(c.loss - g.loss) < 1e-4);
    assert_true(fabs(c.norm - g.norm) < 1e-4 * (1 + c.norm));
    assert_true(max_diff(c.params, g.params, c.g->n_params) < 1e-4f);
    check_plan_equals_run(&g);
    assert_true(g.mem.arena == g.plan->arena_size);
    run_free(&c);
    run_free(&g);
}

/* A 16-bit step (fp32 master and moments) against the fp32 CPU step: the loss within 1e-2, the gradient
 * norm within 2% (under fp16 the device unscales it: 65536x off otherwise), the master within 1e-2; the
 * plan equals the run. fp16 runs with dynamic loss scaling at the default first scale (65536). */
static void close_to_cpu(vr_precision prec)
{
    run_out c, g;
    run_step("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, &c);
    run_step("cuda", prec, VR_MEMORY_PLANNED, &g);
    printf("%s: loss cpu %.7f cuda %.7f, norm cpu %.6f cuda %.6f, max master diff %.3g\n", vr_precision_name(prec),
           c.loss, g.loss, c.norm, g.norm, (double)max_diff(c.params, g.params, c.g->n_params));
    assert_true(fabs(c.loss - g.loss) < 1e-2);
    assert_true(fabs(c.norm - g.norm) < 0.02 * c.norm);
    assert_true(max_diff(c.params, g.params, c.g->n_params) < 1e-2f);
    check_plan_equals_run(&g);
    assert_true(g.mem.arena == g.plan->arena_size);
    run_free(&c);
    run_free(&g);
}

/* A CUDA step g against the CPU's fp32 step c: fp32 as fp32_matches_cpu, 16 bits as close_to_cpu; the plan equals
 * the run. Prints what (and "(fused)" when not poisoned). */
static void expect_like_cpu(const char *what, const run_out *c, const run_out *g, vr_precision prec, bool fused)
{
    double d = (double)max_diff(c->params, g->params, c->g->n_params);
    printf("%s %s%s: loss cpu %.7f cuda %.7f, norm cpu %.6f cuda %.6f, max param diff %.3g\n", what,
           vr_precision_name(prec), fused ? " (fused)" : "", c->loss, g->loss, c->norm, g->norm, d);
    bool fp32 = prec == VR_PREC_FP32;
    assert_true(fabs(c->loss - g->loss) < (fp32 ? 1e-4 : 1e-2));
    assert_true(fabs(c->norm - g->norm) < (fp32 ? 1e-4 * (1 + c->norm) : 0.02 * c->norm));
    assert_true(d < (fp32 ? 1e-4 : 1e-2));
    check_plan_equals_run(g);
    assert_true(g->mem.arena == g->plan->arena_size);
}

/* The Llama on CUDA against the CPU: fp32 as fp32_matches_cpu, bf16 as close_to_cpu; each also without poison,
 * where the executor fuses the residual adds into the RMSNorms after them (the fused kernel writes the bytes of
 * the two: test_kernels_cuda). */
static void llama_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    vr_precision precs[2] = {VR_PREC_FP32, VR_PREC_BF16};
    run_out c;
    run_model("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, llama_small(), &c);
    for (int k = 0; k < 4; k++) {
        run_out g;
        run_poison = k < 2;
        run_model("cuda", precs[k % 2], VR_MEMORY_PLANNED, llama_small(), &g);
        run_poison = true;
        expect_like_cpu("llama", &c, &g, precs[k % 2], k >= 2);
        run_free(&g);
    }
    run_free(&c);
}

/* The norms' backward from their output on CUDA (GPT's LayerNorms, with the next Linear's bias gradient in their
 * pass when not poisoned; the Llama's RMSNorms) against the CPU's step from the input in fp32: as fp32_matches_cpu
 * and close_to_cpu; the plan equals the run. */
static void norm_from_out_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    for (int model = 0; model < 2; model++) {
        vr_model_config m = model ? llama_small() : et_gpt(4, 32);
        run_out c;
        run_model("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, m, &c);
        for (int k = 0; k < 4; k++) {
            vr_precision prec = k % 2 ? VR_PREC_BF16 : VR_PREC_FP32;
            run_out g;
            run_poison = k < 2;
            run_norm_out = true;
            run_model("cuda", prec, VR_MEMORY_PLANNED, m, &g);
            run_norm_out = false;
            run_poison = true;
            expect_like_cpu(model ? "llama norm from output" : "gpt norm from output", &c, &g, prec, k >= 2);
            run_free(&g);
        }
        run_free(&c);
    }
}

/* The classifier in chunks of the rows asked for (vr_step_config.classifier_rows: 24 of GPT's 128 rows, the last
 * chunk partial; 1 row; more than N) against the CPU's step, poisoned and fused, as fp32_matches_cpu and
 * close_to_cpu; the node's planned scratch is those rows of padded logits and the plan equals the run. */
static void classifier_rows_match_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    vr_model_config m = et_gpt(4, 32);
    run_out c;
    run_model("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, m, &c);
    const int rows[3] = {24, 1, 1000};
    for (int k = 0; k < 6; k++) {
        vr_precision prec = k % 2 ? VR_PREC_BF16 : VR_PREC_FP32;
        run_out g;
        run_poison = k < 4;
        run_cls_rows = rows[k / 2];
        run_model("cuda", prec, VR_MEMORY_PLANNED, m, &g);
        run_poison = true;
        int seen = 0;
        for (int i = 0; i < g.g->n_nodes; i++) {
            const vr_node *n = &g.g->nodes[i];
            if (n->op != VR_OP_CLASSIFIER)
                continue;
            int64_t want_rows = run_cls_rows < 4 * 32 ? run_cls_rows : 4 * 32;
            uint64_t vp = vr_scratch_cuda_classifier_vp(g.g->tensors[n->in[1]].shape[0]); /* wte's rows */
            assert_int_equal(vr_tensor_bytes(&g.g->tensors[n->scratch]),
                             (uint64_t)want_rows * vp * (prec == VR_PREC_FP32 ? 4 : 2));
            seen++;
        }
        assert_int_equal(seen, 1);
        char what[64];
        snprintf(what, sizeof what, "classifier chunks of %d rows", run_cls_rows);
        run_cls_rows = 0;
        expect_like_cpu(what, &c, &g, prec, k >= 4);
        run_free(&g);
    }
    run_free(&c);
}

static void bf16_close_to_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    close_to_cpu(VR_PREC_BF16);
}

static void fp16_close_to_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    close_to_cpu(VR_PREC_FP16);
}

/* fp16 starting at a loss scale of 1e30: the scaled loss gradient overflows, so the first steps are
 * skipped (parameters, master and moments untouched) and each halves the scale, until a step goes
 * through; with a window of 2, every 2 good steps in a row double it (torch.amp.GradScaler's rule).
 * Node by node and with a CUDA graph (every change of the scale recaptures). */
static void fp16_scaling_rules(bool graph)
{
    vr_model_config m = et_gpt(4, 32);
    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_FP16,
                        .kernels = VR_KERNELS_CUDA, .workspace_bytes = (uint64_t)4 << 20};
    vr_graph *g = NULL;
    vr_plan *plan = NULL;
    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED};
    assert_int_equal(vr_plan_create(g, &pc, &plan), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cuda", &dev), VR_OK);
    vr_exec_config ec = {.memory = VR_MEMORY_PLANNED, .cuda_graph = graph, .loss_scale = 1e30f,
                         .loss_scale_window = 2};
    vr_exec *e = NULL;
    if (vr_exec_create(plan, dev, &ec, &e) != VR_OK)
        fail_msg("%s", vr_last_error());
    float *p0 = et_params(g, 42), *p = malloc(sizeof(float) * (size_t)g->n_params);
    uint64_t pb = (uint64_t)g->n_params * 4, mb = vr_tensor_bytes(&g->tensors[g->optim[0]]);
    float *m1 = malloc(mb);
    assert_int_equal(vr_exec_write(e, g->params, p0, pb), VR_OK);
    void *inputs;
    int32_t *targets;
    et_batch(g, 7, &inputs, &targets);
    vr_exec_batch b = {inputs, targets};
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    int skipped = 0, good_steps = 0, doubled = 0;
    bool all_skipped_so_far = true;
    for (int k = 0; k < 130 && good_steps < 8; k++) {
        float before = 0, after = 0;
        int good = 0, good_after = 0;
        vr_exec_get_loss_scale(e, &before, &good);
        vr_exec_result r;
        if (vr_exec_step(e, &b, &h, &r) != VR_OK)
            fail_msg("%s", vr_last_error());
        vr_exec_get_loss_scale(e, &after, &good_after);
        assert_true(r.loss_scale == before);
        if (r.skipped) {
            skipped++;
            assert_true(after == before * 0.5f && good_after == 0);
            if (all_skipped_so_far) { /* nothing has moved yet */
                assert_int_equal(vr_exec_read(e, g->params, p, pb), VR_OK);
                assert_memory_equal(p, p0, pb);
                assert_int_equal(vr_exec_read(e, g->optim[0], m1, mb), VR_OK);
                for (uint64_t i = 0; i < mb / 4; i++)
                    assert_true(m1[i] == 0.0f);
            }
        } else {
            all_skipped_so_far = false;
            good_steps++;
            assert_true(isfinite(r.grad_norm) && isfinite(r.loss));
            if (good + 1 == 2) {
                assert_true(after == before * 2.0f && good_after == 0);
                doubled++;
            } else {
                assert_true(after == before && good_after == good + 1);
            }
            h.step++;
        }
    }
    assert_int_equal(vr_exec_read(e, g->params, p, pb), VR_OK);
    printf("fp16 scaling%s: %d steps skipped from 1e30, then %d good steps (%d doublings); params moved: %s\n",
           graph ? " (cuda graph)" : "", skipped, good_steps, doubled, memcmp(p, p0, pb) ? "yes" : "no");
    /* the loss gradient alone, (p - onehot) S / 128 rows, passes fp16's 65504 while S > 8.4e6: at least
     * log2(1e30 / 8.4e6) = 76.6 halvings */
    assert_true(skipped >= 77);
    assert_true(good_steps == 8 && doubled >= 1);
    assert_true(memcmp(p, p0, pb) != 0);
    free(p0), free(p), free(m1), free(inputs), free(targets);
    vr_exec_free(e);
    vr_device_close(dev);
    vr_plan_free(plan);
    vr_graph_free(g);
}

static void fp16_loss_scaling(void **state)
{
    (void)state;
    NEED_GPU();
    fp16_scaling_rules(false);
    fp16_scaling_rules(true);
}

static void dynamic_equals_plan(void **state)
{
    (void)state;
    NEED_GPU();
    run_out d, p;
    run_step("cuda", VR_PREC_BF16, VR_MEMORY_DYNAMIC, &d);
    run_step("cuda", VR_PREC_BF16, VR_MEMORY_PLANNED, &p);
    check_plan_equals_run(&d);
    assert_true(d.mem.peak_requested == d.plan->dynamic.peak_requested);
    assert_true(fabs(d.loss - p.loss) < 1e-6);
    run_free(&d);
    run_free(&p);
}

/* Steps of a bf16 tiny GPT with lr and step changing every step (and weight decay at step 5, which
 * recaptures): node by node, and with cuda_graph (step 1 node by node, step 2 captured, the rest
 * replayed). Same losses, norms and parameters (sumsq's fp32 atomics may reorder a few additions:
 * 1e-5), and the plan still equals the run. */
/* Executor switches of graph_steps beyond the CUDA graph: fusion off (unfused); *fused_adds (not NULL: device times on,
 * node by node only) counts the adds right before a layernorm that queued no work in the last step. */
typedef struct step_opts {
    bool unfused;
    vr_precision prec;  /* with fp32 false: VR_PREC_FP32 (0) reads as bf16, the default */
    bool fp32;          /* fp32 (VR_PREC_FP32 is 0, so prec cannot say it) */
    int *fused_adds;
    int *fused_bias;    /* not NULL: vr_exec_fused_bias_grads after the steps */
    int *fused_qkvb;    /* not NULL: vr_exec_fused_qkv_bias after the steps */
    bool deterministic; /* vram's attention with the v1 backward (no atomics in dQ): bit-for-bit repeatable */
    vr_recompute recompute;
    bool split;         /* bf16: a split master (vr_step_config.split_master) */
    bool tie_free;      /* no initial weight halfway between two bf16 values (its last bit flipped) */
    int accum;          /* micro-batches a step (0: 1) */
    int *ahead;         /* not NULL: each step started before the one before it is finished
                         * (vr_exec_step_start), where allowed; *ahead: how many were */
} step_opts;

/* Step k's batch (micro-batch mb) and hyperparameters in graph_steps_opts: lr and step change every step,
 * weight decay from step 4 on (a recapture). */
static void step_k(const vr_graph *g, int k, int accum, vr_exec_batch *b, vr_optim_hparams *h)
{
    for (int mb = 0; mb < accum; mb++) { /* the first micro-batch of step k is the batch of a run without */
        void *inputs;
        int32_t *targets;
        et_batch(g, 7 + k + 1000 * (uint64_t)mb, &inputs, &targets);
        b[mb] = (vr_exec_batch){inputs, targets};
    }
    *h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    h->lr = 1e-3f / (float)(k + 1);
    h->step = k + 1;
    if (k >= 4)
        h->weight_decay = 0.05f;
}

static void batches_free(vr_exec_batch *b, int accum)
{
    for (int mb = 0; mb < accum; mb++) {
        free((void *)b[mb].inputs);
        free((void *)b[mb].targets);
    }
}

static void start_k(vr_exec *e, const vr_graph *g, int k, int accum)
{
    vr_exec_batch b[4];
    vr_optim_hparams h;
    step_k(g, k, accum, b, &h);
    if (vr_exec_step_start(e, b, &h) != VR_OK)
        fail_msg("step %d start: %s", k, vr_last_error());
    batches_free(b, accum); /* the inputs were copied */
}

static void graph_steps_opts(bool graph, step_opts so, int steps, double *loss, double *norm, float **params,
                             run_out *o)
{
    memset(o, 0, sizeof *o);
    vr_model_config m = et_gpt(4, 32);
    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .precision = so.fp32 ? VR_PREC_FP32 : so.prec ? so.prec : VR_PREC_BF16,
                        .grad_clip = 1.0f, .kernels = VR_KERNELS_CUDA, .workspace_bytes = (uint64_t)4 << 20};
    s.recompute = so.recompute;
    s.split_master = so.split;
    s.accum = so.accum > 1 ? so.accum : 1;
    if (so.deterministic)
        s.attention = VR_ATTENTION_VRAM;
    assert_int_equal(vr_graph_build(&m, &s, &o->g), VR_OK);
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED};
    assert_int_equal(vr_plan_create(o->g, &pc, &o->plan), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cuda", &dev), VR_OK);
    vr_exec_config ec = {.memory = VR_MEMORY_PLANNED, .cuda_graph = graph, .unfused = so.unfused,
                         .device_times = so.fused_adds != NULL, .attention_v1 = so.deterministic ? 3u : 0u};
    vr_exec *e = NULL;
    if (vr_exec_create(o->plan, dev, &ec, &e) != VR_OK)
        fail_msg("%s", vr_last_error());
    assert_true(e->graph == graph);
    float *p = et_params(o->g, 42);
    for (int64_t i = 0; so.tie_free && i < o->g->n_params; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        u ^= (u & 0xFFFFu) == 0x8000u;
        memcpy(&p[i], &u, 4);
    }
    assert_int_equal(vr_exec_write(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    assert_true(s.accum <= 4);
    bool started = false; /* step k was started by the iteration before */
    for (int k = 0; k < steps; k++) {
        vr_exec_result r;
        if (so.ahead) {
            if (!started)
                start_k(e, o->g, k, s.accum);
            started = k + 1 < steps && vr_exec_can_start_ahead(e);
            if (started) {
                start_k(e, o->g, k + 1, s.accum);
                (*so.ahead)++;
            }
            if (vr_exec_step_finish(e, &r) != VR_OK)
                fail_msg("step %d finish: %s", k, vr_last_error());
        } else {
            vr_exec_batch b[4];
            vr_optim_hparams h;
            step_k(o->g, k, s.accum, b, &h);
            if (vr_exec_step(e, b, &h, &r) != VR_OK)
                fail_msg("%s", vr_last_error());
            batches_free(b, s.accum);
        }
        loss[k] = r.loss;
        norm[k] = r.grad_norm;
        if (graph && k >= 1)
            assert_true(e->graph && e->graph_captured);
    }
    if (so.fused_bias)
        *so.fused_bias = vr_exec_fused_bias_grads(e);
    if (so.fused_qkvb)
        *so.fused_qkvb = vr_exec_fused_qkv_bias(e);
    if (so.fused_adds) {
        *so.fused_adds = 0;
        for (int i = 0; i + 1 < o->g->n_nodes; i++) {
            uint64_t t0, t1;
            int lane;
            if (o->g->nodes[i].op == VR_OP_ADD && o->g->nodes[i + 1].op == VR_OP_LAYERNORM &&
                !vr_exec_device_span(e, i, 0, &t0, &t1, &lane))
                (*so.fused_adds)++;
        }
    }
    assert_int_equal(vr_exec_read(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    *params = p;
    vr_exec_get_memory(e, &o->mem);
    vr_exec_free(e);
    vr_device_close(dev);
}

/* Two runs of graph_steps_opts over the same K (<= PAIR_MAX) steps, and how far apart they ended: the largest
 * |difference| of their losses and of their norms over the steps, and of their final parameters. */
enum { PAIR_MAX = 8 };
typedef struct step_pair {
    double l0[PAIR_MAX], n0[PAIR_MAX], l1[PAIR_MAX], n1[PAIR_MAX];
    float *p0, *p1;
    run_out a, b;
    double dl, dn;
    float dp;
} step_pair;

static void pair_run(step_pair *r, bool graph0, step_opts o0, bool graph1, step_opts o1, int K)
{
    assert_true(K <= PAIR_MAX);
    graph_steps_opts(graph0, o0, K, r->l0, r->n0, &r->p0, &r->a);
    graph_steps_opts(graph1, o1, K, r->l1, r->n1, &r->p1, &r->b);
    r->dl = r->dn = 0;
    for (int k = 0; k < K; k++) {
        r->dl = fmax(r->dl, fabs(r->l0[k] - r->l1[k]));
        r->dn = fmax(r->dn, fabs(r->n0[k] - r->n1[k]));
    }
    r->dp = max_diff(r->p0, r->p1, r->a.g->n_params);
}

/* Frees both runs and the parameters they handed out. */
static void pair_free(step_pair *r)
{
    free(r->p0);
    free(r->p1);
    r->a.params = r->b.params = NULL;
    run_free(&r->a);
    run_free(&r->b);
}

static void cuda_graph_equals_nodes(void **state)
{
    (void)state;
    NEED_GPU();
    enum { K = 7 };
    step_pair r;
    pair_run(&r, false, (step_opts){0}, true, (step_opts){0}, K);
    printf("cuda graph: %d steps, losses %.6f..%.6f, max |loss diff| %.3g, |norm diff| %.3g, param diff %.3g\n", K,
           r.l0[0], r.l0[K - 1], r.dl, r.dn, (double)r.dp);
    assert_true(r.l0[K - 1] != r.l0[0]); /* the steps changed something (fresh batches: not always downhill) */
    assert_true(r.dl < 1e-5 && r.dn < 1e-5 && r.dp < 1e-5f);
    check_plan_equals_run(&r.b);
    assert_true(r.b.mem.arena == r.b.plan->arena_size);
    pair_free(&r);
}

/* Each step started before the one before it is finished (vr_exec_step_start, as vr_trainer_lookahead does):
 * under a CUDA graph the replays queue back to back, each one's losses read through its own staging set; step 4
 * (new weight decay) recaptures with step 3 in flight. The same losses, norms and parameters bit for bit as one
 * step at a time (vram's deterministic attention), and the plan still equals the run. Node by node too. */
static void steps_ahead_equal_steps(void **state)
{
    (void)state;
    NEED_GPU();
    enum { K = 8 };
    for (int graph = 0; graph < 2; graph++) {
        int ahead = 0;
        step_pair r;
        pair_run(&r, graph, (step_opts){.deterministic = true}, graph,
                 (step_opts){.deterministic = true, .ahead = &ahead}, K);
        printf("steps ahead (%s): %d of %d started before the one before finished, max |loss diff| %.3g, |norm "
               "diff| %.3g, param diff %.3g\n", graph ? "cuda graph" : "node by node", ahead, K - 1, r.dl, r.dn,
               (double)r.dp);
        assert_int_equal(ahead, K - 1);
        assert_true(r.dl == 0 && r.dn == 0 && r.dp == 0.0f);
        check_plan_equals_run(&r.b);
        pair_free(&r);
    }
}

/* ------------------------------------------------------------------ add + layernorm fusion */

/* Fused (the default) against unfused, both with deterministic kernels (vram's attention, its v1
 * backward), over several steps: bf16 and fp32 node by node, bf16 under a CUDA graph and with block
 * recompute (the recompute phase's pairs too), fp32 with 2 micro-batches a step (gradients added to). The
 * add + layernorm kernel writes the bytes of the add and the layernorm (test_kernels_cuda checks that bit for
 * bit), so with that fusion alone the steps are equal bit for bit (printed); other executor fusions that
 * vr_exec_config.unfused also turns off (Linear + GELU; the Linear bias gradients summed by the layernorm_bwd
 * before them; q|k|v's from the attention's identities) round differently, so the assertions take
 * fuse_matches' bounds. The tiny GPT's residual adds before ln2, the next ln1 and lnf (2 layers: 4,
 * recompute's on top) queue nothing when fused, none when not; its 4 projections' bias gradients come from
 * the layernorm_bwd nodes when fused, its 2 q|k|v ones from the identities. */
static void fused_equals_unfused(void **state)
{
    (void)state;
    NEED_GPU();
    enum { K = 4 };
    for (int v = 0; v < 5; v++) {
        bool graph = v == 2;
        vr_precision prec = v == 1 || v == 4 ? VR_PREC_FP32 : VR_PREC_BF16;
        bool fp32 = prec == VR_PREC_FP32;
        vr_recompute rc = v == 3 ? VR_RECOMPUTE_BLOCK : VR_RECOMPUTE_NONE;
        int accum = v == 4 ? 2 : 1; /* the bias gradients added to by the second micro-batch's layernorm_bwd */
        int fa0 = -1, fa1 = -1, fb0 = -1, fb1 = -1, fq0 = -1, fq1 = -1;
        step_pair r;
        pair_run(&r, graph,
                 (step_opts){.prec = prec, .fp32 = fp32, .fused_adds = graph ? NULL : &fa0, .fused_bias = &fb0,
                             .fused_qkvb = &fq0, .deterministic = true, .recompute = rc, .accum = accum},
                 graph,
                 (step_opts){.unfused = true, .prec = prec, .fp32 = fp32, .fused_adds = graph ? NULL : &fa1,
                             .fused_bias = &fb1, .fused_qkvb = &fq1, .deterministic = true, .recompute = rc,
                             .accum = accum},
                 K);
        printf("fusion (%s%s%s%s): %d steps, loss %.6f..%.6f, fused vs unfused |loss| %.3g |norm| %.3g params %.3g;"
               " adds without work: fused %d, unfused %d; bias gradients in layernorm_bwd: fused %d, unfused %d;"
               " q|k|v bias gradients by the identities: fused %d, unfused %d\n",
               fp32 ? "fp32" : "bf16", graph ? ", cuda graph" : "", rc ? ", block recompute" : "",
               accum > 1 ? ", 2 micro-batches" : "", K, r.l0[0],
               r.l0[K - 1], r.dl, r.dn, (double)r.dp, fa0, fa1, fb0, fb1, fq0, fq1);
        assert_true(r.dl < (fp32 ? 1e-5 : 1e-2) && r.dp < (fp32 ? 1e-4f : 1e-2f));
        /* attproj's after ln2.bwd, fcproj's after the next ln1.bwd or lnf.bwd: two a layer; under block
         * recompute the recomputed block comes between ln1.bwd (lnf.bwd) and fcproj.bwd: attproj's at least
         * (fcproj's where the block's tensors are apart from its bias gradient: fuse_pairs) */
        if (rc)
            assert_true(fb0 >= 2 && fb0 <= 4);
        else
            assert_int_equal(fb0, 4);
        assert_int_equal(fb1, 0);
        assert_int_equal(fq0, 2); /* both layers' qkv.bwd */
        assert_int_equal(fq1, 0);
        if (!graph) {
            assert_true(rc ? fa0 >= 4 : fa0 == 4);
            assert_true(fa1 == 0);
        }
        check_plan_equals_run(&r.a);
        assert_true(r.a.mem.arena == r.a.plan->arena_size);
        pair_free(&r);
    }
}

/* An fp32 step with the fusion on (no poison) matches the CPU step as fp32_matches_cpu does. */
static void fused_fp32_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    run_out c, g;
    run_poison = false;
    run_step("cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, &c);
    run_step("cuda", VR_PREC_FP32, VR_MEMORY_PLANNED, &g);
    run_poison = true;
    printf("fp32 fused: loss cpu %.7f cuda %.7f, norm cpu %.6f cuda %.6f, max param diff %.3g\n", c.loss, g.loss,
           c.norm, g.norm, (double)max_diff(c.params, g.params, c.g->n_params));
    assert_true(fabs(c.loss - g.loss) < 1e-4);
    assert_true(fabs(c.norm - g.norm) < 1e-4 * (1 + c.norm));
    assert_true(max_diff(c.params, g.params, c.g->n_params) < 1e-4f);
    check_plan_equals_run(&g);
    run_free(&c);
    run_free(&g);
}

/* ------------------------------------------------------------------ multi-tensor apply */

/* A GPT whose larger tensors span several multi-tensor chunks, with partial last chunks:
 * L=2 C=48 NH=4 V=300 (wte 384x48 = 4.5 chunks, fc 48x192 = 2.25, c_attn 48x144 = 1.7), B=4 T=32. */
static vr_model_config mt_gpt(void)
{
    vr_model_config m = et_gpt(4, 32);
    m.gpt = (vr_gpt_config){.L = 2, .C = 48, .NH = 4, .V = 300, .Vp = 0, .maxT = 32};
    return m;
}

/* Distance in representable values between two floats (0: same bits; +0/-0 count as equal). */
static int64_t ulps32(float a, float b)
{
    int32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    int64_t X = x < 0 ? (int64_t)INT32_MIN - x : x, Y = y < 0 ? (int64_t)INT32_MIN - y : y;
    return X > Y ? X - Y : Y - X;
}

static int64_t ulps16(uint16_t a, uint16_t b)
{
    int32_t X = (a & 0x8000) ? -(int32_t)(a & 0x7fff) : (int32_t)a, Y = (b & 0x8000) ? -(int32_t)(b & 0x7fff) : (int32_t)b;
    return X > Y ? X - Y : Y - X;
}

static void *read_all(vr_exec *e, int t)
{
    const vr_graph *g = vr_exec_plan(e)->graph;
    uint64_t bytes = vr_tensor_bytes(&g->tensors[t]);
    void *h = malloc(bytes);
    assert_non_null(h);
    if (vr_exec_read(e, t, h, bytes) != VR_OK)
        fail_msg("%s", vr_last_error());
    return h;
}

/* The optimizer's state of `to` = that of `from`: raw 16-bit params, then master, m, v. */
static void copy_state(vr_exec *from, vr_exec *to)
{
    const vr_graph *g = vr_exec_plan(from)->graph;
    int ts[4] = {g->params, g->master, g->optim[0], g->optim[1]};
    for (int k = 0; k < 4; k++) {
        if (ts[k] < 0)
            continue;
        void *h = read_all(from, ts[k]);
        if (vr_exec_write(to, ts[k], h, vr_tensor_bytes(&g->tensors[ts[k]])) != VR_OK)
            fail_msg("%s", vr_last_error());
        free(h);
    }
}

/* Compares the state of b with a's: returns the worst distance, counts differing elements. Params
 * (bf16) in bf16 ulps; master, m, v: |d| <= 4 ulps of the larger value + 1e-6 of the buffer's
 * largest magnitude (a clip factor one ulp apart moves m by ~1e-7 of its gradient term, which m's
 * own cancellation can make many ulps of m), reported as a failure count. */
static void compare_state(vr_exec *a, vr_exec *b, bool exact, int64_t *params_ulps, int64_t *diff, int64_t *bad)
{
    const vr_graph *g = vr_exec_plan(a)->graph;
    uint16_t *pa = read_all(a, g->params), *pb = read_all(b, g->params);
    for (int64_t i = 0; i < g->n_params; i++) {
        int64_t u = ulps16(pa[i], pb[i]);
        *diff += u != 0;
        if (u > *params_ulps)
            *params_ulps = u;
        if (exact ? u != 0 : u > 1)
            (*bad)++;
    }
    free(pa);
    free(pb);
    int ts[3] = {g->master, g->optim[0], g->optim[1]};
    for (int k = 0; k < 3; k++) {
        if (ts[k] < 0)
            continue;
        float *xa = read_all(a, ts[k]), *xb = read_all(b, ts[k]);
        int64_t n = vr_tensor_numel(&g->tensors[ts[k]]);
        float big = 0;
        for (int64_t i = 0; i < n; i++)
            big = fmaxf(big, fabsf(xa[i]));
        for (int64_t i = 0; i < n; i++) {
            int64_t u = ulps32(xa[i], xb[i]);
            *diff += u != 0;
            float m = fmaxf(fabsf(xa[i]), fabsf(xb[i]));
            float tol = 4.0f * (nextafterf(m, INFINITY) - m) + 1e-6f * big;
            if (exact ? u != 0 : !(fabsf(xa[i] - xb[i]) <= tol))
                (*bad)++;
        }
        free(xa);
        free(xb);
    }
}

enum { MT_NODES, MT_PLANNED, MT_GRAPH, MT_NODES_DYNAMIC, MT_DYNAMIC, MT_RUNS };

/* Steps of the bf16 GPT above (AdamW, lr and step changing every step, weight decay changed at steps
 * 4 and 5 (to 0) so that the CUDA graph recaptures), from the same state each step: the per-node optimizer
 * (planned; dynamic) against multi-tensor apply planned (poisoned), in CUDA graph mode (planned), and
 * dynamic (poisoned; against the per-node dynamic run). Each step: losses equal,
 * norms within 1e-6 relative (summation order), the state (params, master, m, v) bit for bit equal
 * when the clip factors are, else params within 1 bf16 ulp and master/m/v within rounding; then the
 * others take the per-node state again. Also: the plan equals each run, per_node_optimizer turns it
 * off (and the environment does not). Returns the steps compared exactly. */
static int mt_compare(vr_optim optim, float clip, int steps)
{
    vr_model_config m = mt_gpt();
    vr_step_config sc = {.train = true, .accum = 1, .optim = optim, .precision = VR_PREC_BF16,
                         .grad_clip = clip, .kernels = VR_KERNELS_CUDA, .workspace_bytes = (uint64_t)4 << 20};
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(&m, &sc, &g), VR_OK);
    vr_plan *plan[2] = {NULL, NULL};
    vr_plan_config pc = {.memory = VR_MEMORY_PLANNED}, pd = {.memory = VR_MEMORY_DYNAMIC};
    assert_int_equal(vr_plan_create(g, &pc, &plan[0]), VR_OK);
    assert_int_equal(vr_plan_create(g, &pd, &plan[1]), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cuda", &dev), VR_OK);
    vr_exec_config cfg[MT_RUNS] = {
        {.memory = VR_MEMORY_PLANNED, .per_node_optimizer = true},
        {.memory = VR_MEMORY_PLANNED, .poison = true},
        {.memory = VR_MEMORY_PLANNED, .cuda_graph = true},
        {.memory = VR_MEMORY_DYNAMIC, .per_node_optimizer = true},
        {.memory = VR_MEMORY_DYNAMIC, .poison = true},
    };
    static const char *names[MT_RUNS] = {"nodes", "multi-tensor", "multi-tensor + cuda graph", "nodes dynamic",
                                         "multi-tensor dynamic"};
    bool dyn[MT_RUNS] = {false, false, false, true, true}, mt[MT_RUNS] = {false, true, true, false, true};
    vr_exec *e[MT_RUNS] = {NULL};
    float *p0 = et_params(g, 42);
    for (int r = 0; r < MT_RUNS; r++) {
        if (vr_exec_create(plan[dyn[r]], dev, &cfg[r], &e[r]) != VR_OK)
            fail_msg("%s: %s", names[r], vr_last_error());
        assert_true(e[r]->multi_tensor == mt[r]);
        assert_true(e[r]->graph == (r == MT_GRAPH));
        assert_int_equal(vr_exec_write(e[r], g->params, p0, (uint64_t)g->n_params * 4), VR_OK);
    }
    free(p0);
    vr_optim_hparams h = vr_optim_hparams_default(optim);
    int exact_steps = 0;
    for (int k = 0; k < steps; k++) {
        void *inputs;
        int32_t *targets;
        et_batch(g, 100 + k, &inputs, &targets);
        vr_exec_batch b = {inputs, targets};
        h.lr = 1e-3f / (float)(k + 1);
        h.step = k + 1;
        if (k == 3)
            h.weight_decay = 0.05f;
        if (k == 4)
            h.weight_decay = 0.0f; /* recaptures again: the table (decay flags) must not change */
        vr_exec_result res[MT_RUNS];
        for (int r = 0; r < MT_RUNS; r++)
            if (vr_exec_step(e[r], &b, &h, &res[r]) != VR_OK)
                fail_msg("%s step %d: %s", names[r], k + 1, vr_last_error());
        free(inputs);
        free(targets);
        for (int r = 1; r < MT_RUNS; r++) {
            int b0 = dyn[r] ? MT_NODES_DYNAMIC : MT_NODES; /* its per-node twin */
            if (!mt[r])
                continue;
            bool exact = res[r].grad_scale == res[b0].grad_scale;
            int64_t pu = 0, diff = 0, bad = 0;
            compare_state(e[b0], e[r], exact, &pu, &diff, &bad);
            double dn = fabs(res[r].grad_norm - res[b0].grad_norm) / res[b0].grad_norm;
            printf("multi-tensor %s, clip %g, step %d, %s: loss %.7f (nodes %.7f), norm %.9g (nodes %.9g, rel %.2g), "
                   "clip factor %.9g (nodes %.9g, %s), %lld elements differ (params max %lld bf16 ulp), %lld out "
                   "of tolerance\n",
                   vr_optim_name(optim), (double)clip, k + 1, names[r], res[r].loss, res[b0].loss, res[r].grad_norm, res[b0].grad_norm,
                   dn, res[r].grad_scale, res[b0].grad_scale, exact ? "equal: bit for bit" : "differ: ulps",
                   (long long)diff, (long long)pu, (long long)bad);
            assert_true(fabs(res[r].loss - res[b0].loss) <= 1e-6);
            assert_true(dn <= 1e-6);
            assert_true(bad == 0);
            exact_steps += exact && r == MT_PLANNED;
            if (r == MT_GRAPH && k >= 1)
                assert_true(e[r]->graph && e[r]->graph_captured);
            assert_true(e[r]->multi_tensor);
        }
        for (int r = 1; r < MT_RUNS; r++)
            copy_state(e[0], e[r]);
    }
    for (int r = 0; r < MT_RUNS; r++) {
        vr_exec_memory mem;
        vr_exec_get_memory(e[r], &mem);
        const vr_plan *pl = plan[dyn[r]];
        for (int q = 0; q < VR_ROLE_COUNT; q++) {
            assert_true(pl->max_live[q] == mem.max_live[q]);
            assert_true(pl->at_peak[q] == mem.at_peak[q]);
        }
        assert_true(pl->peak == mem.peak);
        if (!dyn[r])
            assert_true(mem.arena == pl->arena_size);
        vr_exec_free(e[r]);
    }
    /* the configuration switch (the library reads no environment) */
    setenv("VRAM_MULTI_TENSOR", "0", 1);
    vr_exec *x = NULL;
    assert_int_equal(vr_exec_create(plan[0], dev, &cfg[MT_PLANNED], &x), VR_OK);
    assert_true(x->multi_tensor);
    vr_exec_free(x);
    unsetenv("VRAM_MULTI_TENSOR");
    vr_exec_config off = cfg[MT_PLANNED];
    off.per_node_optimizer = true;
    assert_int_equal(vr_exec_create(plan[0], dev, &off, &x), VR_OK);
    assert_false(x->multi_tensor);
    vr_exec_free(x);
    vr_device_close(dev);
    vr_plan_free(plan[0]);
    vr_plan_free(plan[1]);
    vr_graph_free(g);
    return exact_steps;
}

static void multi_tensor_equals_nodes(void **state)
{
    (void)state;
    NEED_GPU();
    /* clipping never active (factor 1 on both sides): every step bit for bit */
    assert_int_equal(mt_compare(VR_OPTIM_ADAMW, 1000.0f, 6), 6);
    /* clipping active every step (the norms are ~1): factors may differ in the last bit */
    mt_compare(VR_OPTIM_ADAMW, 0.05f, 6);
    /* the other optimizers, bit for bit */
    assert_int_equal(mt_compare(VR_OPTIM_ADAM, 1000.0f, 3), 3);
    assert_int_equal(mt_compare(VR_OPTIM_MOMENTUM, 1000.0f, 3), 3);
    assert_int_equal(mt_compare(VR_OPTIM_SGD, 1000.0f, 3), 3);
}

/* ------------------------------------------------------------------ Linear + GELU fusion */

/* One run of fuse_matches: a tiny GPT (L = 2) trained `steps` AdamW steps with clipping. */
typedef struct fuse_case {
    const char *dev;
    vr_precision prec;
    vr_memory_mode mode;
    vr_recompute recompute;
    bool unfused, graph;
} fuse_case;

static void fuse_steps(const fuse_case *fc, int steps, double *loss, int *fwd, int *bwd, run_out *o)
{
    memset(o, 0, sizeof *o);
    bool cuda = !strncmp(fc->dev, "cuda", 4);
    vr_model_config m = et_gpt(4, 32);
    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .precision = fc->prec,
                        .grad_clip = 1.0f, .recompute = fc->recompute};
    if (cuda) {
        s.kernels = VR_KERNELS_CUDA;
        s.workspace_bytes = (uint64_t)4 << 20;
    }
    assert_int_equal(vr_graph_build(&m, &s, &o->g), VR_OK);
    vr_plan_config pc = {.memory = fc->mode, .inplace = true};
    assert_int_equal(vr_plan_create(o->g, &pc, &o->plan), VR_OK);
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open(fc->dev, &dev), VR_OK);
    vr_exec_config ec = {.memory = fc->mode, .poison = !fc->graph, .unfused = fc->unfused, .cuda_graph = fc->graph};
    vr_exec *e = NULL;
    if (vr_exec_create(o->plan, dev, &ec, &e) != VR_OK)
        fail_msg("%s", vr_last_error());
    vr_exec_fused_pairs(e, fwd, bwd);
    float *p = et_params(o->g, 42);
    assert_int_equal(vr_exec_write(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    for (int k = 0; k < steps; k++) {
        void *inputs;
        int32_t *targets;
        et_batch(o->g, 7 + k, &inputs, &targets);
        vr_exec_batch b = {inputs, targets};
        h.lr = 1e-5f; /* an Adam step moves a parameter with a ~0 gradient by up to lr, either way */
        h.step = k + 1;
        vr_exec_result r;
        if (vr_exec_step(e, &b, &h, &r) != VR_OK)
            fail_msg("%s", vr_last_error());
        loss[k] = r.loss;
        free(inputs);
        free(targets);
    }
    if (fc->graph)
        assert_true(e->graph && e->graph_captured);
    int fwd_run = 0, bwd_run = 0; /* after the steps: backward pairs cuBLASLt had no DGELU algorithm for are out */
    vr_exec_fused_pairs(e, &fwd_run, &bwd_run);
    assert_int_equal(fwd_run, *fwd);
    if (bwd_run != *bwd)
        printf("fusion %s: %d of %d backward pairs without a cuBLASLt DGELU algorithm (run unfused)\n",
               vr_precision_name(fc->prec), *bwd - bwd_run, *bwd);
    if (fc->prec == VR_PREC_BF16) /* the training case: cuBLASLt has DGELU for bf16 on sm_80+ */
        assert_int_equal(bwd_run, *bwd);
    assert_int_equal(vr_exec_read(e, o->g->params, p, (uint64_t)o->g->n_params * 4), VR_OK);
    o->params = p;
    vr_exec_get_memory(e, &o->mem);
    vr_exec_free(e);
    vr_device_close(dev);
}

/* The pairs an executor would fuse, found from the graph and the plan alone (no GPU needed: a stand-in
 * executor holding only what vr__cuda_fuse_init reads). A tiny GPT (L = 2) and GPT-2 124M's shape with
 * accumulation: without recompute every block's forward and backward pair; under block recompute the
 * recompute nodes' forward pairs (the forward's fch input dies at the fch) and every backward pair; under
 * selective, every backward pair, and in dynamic memory no forward pair (the fch input dies there); under act
 * (the GELU outputs re-run) every pair. The Linear bias gradients a layernorm_bwd sums (cuda_fuse_dbias): two
 * a block in planned memory (attproj's, and fcproj's across the GELU re-run before it), at least one under
 * block recompute, none in dynamic memory. */
static void fuse_pairs(void **state)
{
    (void)state;
#ifndef VRAM_HAVE_CUDA
    skip(); /* the pair finder is CUDA code (src/exec/cuda_fuse_cuda.c) */
#else
    const vr_gpt_config shapes[2] = {{.L = 2, .C = 32, .NH = 4, .V = 60, .Vp = 0, .maxT = 32},
                                     {.L = 12, .C = 768, .NH = 12, .V = 50257, .Vp = 50304, .maxT = 1024}};
    for (int sh = 0; sh < 2; sh++)
        for (int rc = 0; rc < 4; rc++)
            for (int dyn = 0; dyn < 2; dyn++) {
                vr_model_config m = et_gpt(4, sh ? 1024 : 32);
                m.gpt = shapes[sh];
                vr_step_config s = {.train = true, .accum = sh ? 2 : 1, .optim = VR_OPTIM_ADAMW,
                                    .precision = VR_PREC_BF16, .grad_clip = 1.0f, .recompute = (vr_recompute)rc,
                                    .kernels = VR_KERNELS_CUDA, .workspace_bytes = (uint64_t)4 << 20};
                vr_graph *g = NULL;
                vr_plan *p = NULL;
                assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
                vr_plan_config pc = {.memory = dyn ? VR_MEMORY_DYNAMIC : VR_MEMORY_PLANNED, .inplace = true};
                assert_int_equal(vr_plan_create(g, &pc, &p), VR_OK);
                vr_exec e;
                memset(&e, 0, sizeof e);
                e.g = g;
                e.plan = p;
                e.cfg.memory = pc.memory;
                e.opt_start = g->n_nodes;
                for (int i = g->n_nodes - 1; i >= 0; i--)
                    if (g->nodes[i].phase == VR_PHASE_OPTIMIZER)
                        e.opt_start = i;
                vr_cuda_fuse f;
                assert_int_equal(vr__cuda_fuse_init(&f, &e), VR_OK);
                int L = shapes[sh].L;
                printf("fuse pairs: L %d recompute %d %s: forward %d backward %d\n", L, rc, dyn ? "dynamic" : "planned",
                       f.fwd, f.bwd);
                assert_int_equal(f.bwd, L);
                if (rc != VR_RECOMPUTE_SELECTIVE)
                    assert_int_equal(f.fwd, L);
                else if (dyn)
                    assert_int_equal(f.fwd, 0);
                for (int i = 0; i < g->n_nodes; i++) /* every part on a node of its op, the pair adjacent */
                    if (f.part[i] && (g->nodes[i].op == VR_OP_MATMUL || g->nodes[i].op == VR_OP_MATMUL_BWD))
                        assert_true(f.part[i + 1] && (g->nodes[i + 1].op == VR_OP_GELU ||
                                                      g->nodes[i + 1].op == VR_OP_GELU_BWD));
                vr__cuda_fuse_free(&f);
                vr_cuda_fuse_dbias fb;
                assert_int_equal(vr__cuda_fuse_dbias_init(&fb, &e), VR_OK);
                printf("bias gradients in layernorm_bwd: L %d recompute %d %s: %d\n", L, rc, dyn ? "dynamic" : "planned",
                       fb.pairs);
                if (dyn)
                    assert_int_equal(fb.pairs, 0);
                else if (rc == VR_RECOMPUTE_BLOCK)
                    assert_true(fb.pairs >= L && fb.pairs <= 2 * L);
                else
                    assert_int_equal(fb.pairs, 2 * L);
                for (int i = 0; i < g->n_nodes && fb.to; i++) /* a layernorm_bwd, and the matmul_bwd reading its dinp */
                    if (fb.to[i] >= 0)
                        assert_true(g->nodes[i].op == VR_OP_LAYERNORM_BWD && g->nodes[fb.to[i]].op == VR_OP_MATMUL_BWD &&
                                    g->nodes[fb.to[i]].in[0] == g->nodes[i].out[0]);
                vr__cuda_fuse_dbias_free(&fb);
                e.cfg.unfused = true;
                assert_int_equal(vr__cuda_fuse_init(&f, &e), VR_OK);
                assert_true(f.fwd == 0 && f.bwd == 0);
                vr__cuda_fuse_free(&f);
                assert_int_equal(vr__cuda_fuse_dbias_init(&fb, &e), VR_OK);
                assert_int_equal(fb.pairs, 0);
                vr__cuda_fuse_dbias_free(&fb);
                vr_plan_free(p);
                vr_graph_free(g);
            }
#endif
}

/* A Linear and the GELU beside it as one cuBLASLt product (the default) against every node's own
 * kernels (vr_exec_config.unfused) and the CPU, over 4 steps: fp32 fused within 1e-4 of unfused and of
 * the CPU (losses, parameters: cuBLASLt's fp32 GELU is within ~1e-3 of vram's, test_kernels_cuda), bf16
 * within close_to_cpu's 1e-2; in planned memory (poisoned),
 * dynamic memory, a CUDA graph, block, selective and act recompute. The pairs were fused (both GPT blocks'
 * backward; the forward's, and recompute's under block), none when unfused, and the plan still equals
 * the run. */
static void fuse_matches(void **state)
{
    (void)state;
    NEED_GPU();
    enum { K = 4, L = 2 };
    const vr_recompute rcs[4] = {VR_RECOMPUTE_NONE, VR_RECOMPUTE_BLOCK, VR_RECOMPUTE_SELECTIVE, VR_RECOMPUTE_ACT};
    for (int r = 0; r < 4; r++) {
        double lc[K];
        int f0, b0;
        run_out c;
        fuse_case cc = {"cpu", VR_PREC_FP32, VR_MEMORY_PLANNED, rcs[r], false, false};
        fuse_steps(&cc, K, lc, &f0, &b0, &c);
        assert_true(f0 == 0 && b0 == 0);
        for (int pi = 0; pi < 2; pi++) {
            vr_precision prec = pi ? VR_PREC_BF16 : VR_PREC_FP32;
            bool fp32 = prec == VR_PREC_FP32;
            double lu[K];
            run_out u;
            fuse_case uc = {"cuda", prec, VR_MEMORY_PLANNED, rcs[r], true, false};
            fuse_steps(&uc, K, lu, &f0, &b0, &u);
            assert_true(f0 == 0 && b0 == 0);
            for (int v = 0; v < 3; v++) { /* planned, dynamic, planned with a CUDA graph */
                fuse_case fc = {"cuda", prec, v == 1 ? VR_MEMORY_DYNAMIC : VR_MEMORY_PLANNED, rcs[r], false, v == 2};
                double lf[K];
                int fwd = 0, bwd = 0;
                run_out f;
                fuse_steps(&fc, K, lf, &fwd, &bwd, &f);
                double dlu = 0, dlc = 0;
                for (int k = 0; k < K; k++) {
                    dlu = fmax(dlu, fabs(lf[k] - lu[k]));
                    dlc = fmax(dlc, fabs(lf[k] - lc[k]));
                }
                float dpu = max_diff(f.params, u.params, c.g->n_params), dpc = max_diff(f.params, c.params, c.g->n_params);
                printf("fusion %s recompute %d %s%s: pairs fwd %d bwd %d; loss %.6f, |loss - unfused| %.3g, "
                       "|loss - cpu| %.3g, param diff unfused %.3g cpu %.3g\n", vr_precision_name(prec), (int)rcs[r],
                       v == 1 ? "dynamic" : "planned", v == 2 ? " cuda graph" : "", fwd, bwd, lf[K - 1], dlu, dlc,
                       (double)dpu, (double)dpc);
                assert_int_equal(bwd, L);
                /* none: both forward pairs; block: recompute's at least (the forward's fch input dies there);
                 * selective: where the arena keeps the dead fch input apart from the gelu's output */
                if (rcs[r] == VR_RECOMPUTE_NONE || rcs[r] == VR_RECOMPUTE_ACT)
                    assert_int_equal(fwd, L);
                else if (rcs[r] == VR_RECOMPUTE_BLOCK)
                    assert_true(fwd >= L);
                assert_true(dlu < (fp32 ? 1e-4 : 1e-2) && dpu < (fp32 ? 1e-4f : 1e-2f));
                assert_true(dlc < (fp32 ? 1e-4 : 1e-2) && dpc < (fp32 ? 1e-4f : 1e-2f));
                check_plan_equals_run(&f);
                run_free(&f);
            }
            check_plan_equals_run(&u);
            run_free(&u);
        }
        run_free(&c);
    }
}

/* ------------------------------------------------------------------ split master */

/* A split master (the bf16 weights are the high halves of the fp32 master, its 16 low bits beside them) against a
 * full fp32 master, deterministic kernels, node by node and as a CUDA graph, from weights with no exact tie: the
 * master role is 2 bytes a weight (u16) and the plan equals the run; the first step (same bf16 weights) is the full
 * master's bit for bit. Later steps part where an updated master falls on a tie (1 in 65,536 values: the bf16
 * weight rounds away from zero instead of to even) and Adam carries the difference on: bounded as bf16 allows. */
static void split_master_matches_full(void **state)
{
    (void)state;
    NEED_GPU();
    enum { K = 6 };
    for (int graph = 0; graph < 2; graph++) {
        step_pair r;
        pair_run(&r, graph, (step_opts){.deterministic = true, .tie_free = true}, graph,
                 (step_opts){.deterministic = true, .tie_free = true, .split = true}, K);
        const vr_graph *g = r.b.g;
        printf("split master (%s): losses %.6f..%.6f, max |loss diff| %.3g, |norm diff| %.3g, param diff %.3g; master "
               "%s %llu B for %lld trainable\n", graph ? "cuda graph" : "node by node", r.l1[0], r.l1[K - 1], r.dl,
               r.dn, (double)r.dp, vr_dtype_name(g->tensors[g->master].dtype),
               (unsigned long long)vr_tensor_bytes(&g->tensors[g->master]), (long long)g->n_trainable);
        assert_int_equal(g->tensors[g->master].dtype, VR_U16);
        assert_true(vr_tensor_bytes(&g->tensors[g->master]) == (uint64_t)g->n_trainable * 2);
        assert_true(r.l1[K - 1] != r.l1[0]);
        assert_true(r.l0[0] == r.l1[0] && fabs(r.n0[0] - r.n1[0]) <= 1e-6 * r.n0[0]);
        assert_true(r.dl < 1e-3 && r.dn < 1e-2 && r.dp < 5e-3f);
        check_plan_equals_run(&r.b);
        assert_true(r.b.mem.arena == r.b.plan->arena_size);
        assert_true(r.a.plan->arena_size - r.b.plan->arena_size >= (uint64_t)g->n_trainable * 2 * 9 / 10);
        pair_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fp32_matches_cpu),
        cmocka_unit_test(bf16_close_to_cpu),
        cmocka_unit_test(fp16_close_to_cpu),
        cmocka_unit_test(llama_matches_cpu),
        cmocka_unit_test(norm_from_out_matches_cpu),
        cmocka_unit_test(classifier_rows_match_cpu),
        cmocka_unit_test(fp16_loss_scaling),
        cmocka_unit_test(dynamic_equals_plan),
        cmocka_unit_test(cuda_graph_equals_nodes),
        cmocka_unit_test(steps_ahead_equal_steps),
        cmocka_unit_test(fused_equals_unfused),
        cmocka_unit_test(fused_fp32_matches_cpu),
        cmocka_unit_test(multi_tensor_equals_nodes),
        cmocka_unit_test(fuse_pairs),
        cmocka_unit_test(fuse_matches),
        cmocka_unit_test(split_master_matches_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
