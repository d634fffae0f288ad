/* A model of one's own, written against vram's public headers only: a small residual MLP classifier
 * trained on a synthetic dataset on the cpu device.
 *
 * The data: 2048 points x in [-1,1]^8, four classes: 2 * [x0 > 0] + [x1 * x2 > 0]. The second bit is an
 * XOR of two features' signs, so a linear model cannot learn it: the hidden layers must.
 * The model, (B, D) features -> logits (B, K):
 *     h0 = relu(fc0(x))              fc0.w (H, D), fc0.b (H)
 *     h1 = h0 + relu(fc1(h0))        fc1.w (H, H), fc1.b (H)   (a residual block)
 *     logits = out(h1)               out.w (K, H), out.b (K)
 *     losses = softmax cross-entropy(logits, labels)  (B)
 * The steps, each a public call:
 *     graph   vr_graph_new, vr_graph_tensor (inputs), vr_graph_set_inputs, vr_graph_param_buffer and
 *             vr_graph_param (the weights, views of one flat buffer), vr_graph_linear / relu / add /
 *             softmax_xent (the ops), vr_graph_set_loss, then vr_graph_backward (autodiff + AdamW)
 *     plan    vr_plan_create: every tensor's bytes, role and place, before anything runs
 *     exec    vr_device_open("cpu"), vr_exec_create (one arena of the planned size), vr_exec_write (the
 *             initial weights), vr_exec_step per batch; vr_exec_get_memory: what the run really held
 *
 * What the op set does not cover fails when the model is built, never silently: each op is a typed
 * function (vr_graph_linear, vr_graph_relu, ...), so calling one that does not exist (vr_graph_tanh) is
 * an implicit declaration, an error in C99 and later (the example's builds pass
 * -Werror=implicit-function-declaration, which GCC 14 and clang 16 make the default); shapes that do
 * not fit are VR_ERR_INVALID from the builder call, naming the node; a forward op autodiff has no rule for
 * is VR_ERR_UNSUPPORTED from vr_graph_backward, naming the node.
 *
 * Exit status 0 only when the mean loss of the last 20 steps is below half of the first 20's.
 * Build: cc mlp_classifier.c $(pkg-config --cflags --libs vram), or find_package(vram) and vram::vram.
 * On the CPU, run it with OMP_WAIT_POLICY=passive (vram/exec.h says why); it uses one thread. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vram/device.h>
#include <vram/exec.h>
#include <vram/graph.h>
#include <vram/plan.h>
#include <vram/status.h>
#include <vram/version.h>

enum { D = 8, H = 64, K = 4, B = 64, ROWS = 2048, STEPS = 300 };

/* ------------------------------------------------------------------ data */

static uint64_t next_u64(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { return (float)((next_u64(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

/* ROWS points (ROWS, D) and their labels (ROWS). */
static void make_data(float *x, int32_t *y)
{
    uint64_t s = 1;
    for (int i = 0; i < ROWS; i++) {
        float *p = x + (size_t)i * D;
        for (int j = 0; j < D; j++)
            p[j] = uniform(&s);
        y[i] = 2 * (p[0] > 0) + (p[1] * p[2] > 0);
    }
}

/* ------------------------------------------------------------------ the model */

/* One linear layer's weight (dout, din) and bias (dout) at element *off of the parameter buffer. */
static void dense(vr_graph *g, const char *name, int din, int dout, int64_t *off, int *w, int *b)
{
    char nm[VR_NAME_MAX];
    float bound = 1.0f / sqrtf((float)din); /* nn.Linear's default init */
    snprintf(nm, sizeof nm, "%s.w", name);
    *w = vr_graph_param(g, nm, 2, (int64_t[]){dout, din}, *off, VR_INIT_UNIFORM, bound);
    *off += (int64_t)dout * din;
    snprintf(nm, sizeof nm, "%s.b", name);
    *b = vr_graph_param(g, nm, 1, (int64_t[]){dout}, *off, VR_INIT_UNIFORM, bound);
    *off += dout;
}

/* The training step of the model above with AdamW; NULL after an error (vr_last_error says which). */
static vr_graph *build_step(void)
{
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    if (!g)
        return NULL;
    int64_t n_params = (int64_t)H * D + H + (int64_t)H * H + H + (int64_t)K * H + K;
    vr_graph_param_buffer(g, n_params);
    int x = vr_graph_tensor(g, "features", VR_F32, VR_ROLE_INPUT, 2, (int64_t[]){B, D});
    int y = vr_graph_tensor(g, "labels", VR_I32, VR_ROLE_INPUT, 1, (int64_t[]){B});
    vr_graph_set_inputs(g, x, y);

    int64_t off = 0;
    int w0, b0, w1, b1, w2, b2;
    dense(g, "fc0", D, H, &off, &w0, &b0);
    dense(g, "fc1", H, H, &off, &w1, &b1);
    dense(g, "out", H, K, &off, &w2, &b2);

    int h0 = vr_graph_relu(g, "fc0.relu", vr_graph_linear(g, "fc0", x, w0, b0));
    int r = vr_graph_relu(g, "fc1.relu", vr_graph_linear(g, "fc1", h0, w1, b1));
    int h1 = vr_graph_add(g, "res", h0, r);
    int logits = vr_graph_linear(g, "logits", h1, w2, b2);
    int losses = vr_graph_softmax_xent(g, "losses", logits, y, NULL);
    /* Builder calls after an error do nothing: one check at the end covers them all. */
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_FP32, .accum = 1};
    if (vr_graph_set_loss(g, losses) || vr_step_config_check(&s) || vr_graph_backward(g, &s)) {
        vr_graph_free(g);
        return NULL;
    }
    return g;
}

/* Initial weights from each parameter's init hint (the graph holds no values). */
static float *init_params(const vr_graph *g)
{
    float *p = calloc((size_t)g->n_params, sizeof *p);
    uint64_t s = 42;
    for (int t = 0; p && t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->role != VR_ROLE_PARAM || x->param_offset < 0)
            continue;
        for (int64_t i = 0; i < vr_tensor_numel(x); i++)
            p[x->param_offset + i] = x->init == VR_INIT_UNIFORM ? x->init_scale * uniform(&s) : 0.0f;
    }
    return p;
}

/* ------------------------------------------------------------------ plan, run */

static void print_plan(const vr_plan *p)
{
    printf("planned bytes per role (before anything runs):\n  %-8s %10s %10s %10s\n", "role", "total", "max live",
           "at peak");
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        printf("  %-8s %10llu %10llu %10llu\n", vr_role_name((vr_role)r), (unsigned long long)p->total[r],
               (unsigned long long)p->max_live[r], (unsigned long long)p->at_peak[r]);
    printf("  peak %llu bytes live (node %d, %s), arena %llu bytes\n", (unsigned long long)p->peak, p->peak_node,
           p->graph->nodes[p->peak_node].name, (unsigned long long)p->arena_size);
}

static int fail(const char *what)
{
    fprintf(stderr, "mlp_classifier: %s: %s\n", what, vr_last_error());
    return 1;
}

int main(void)
{
    printf("vram %s (headers %s)\n", vr_version(), VR_VERSION_STRING);
    vr_exec_cpu_set_threads(1); /* matrices of 64 columns: threads would only wait on each other */
    float *x = malloc(sizeof(float) * ROWS * D);
    int32_t *y = malloc(sizeof(int32_t) * ROWS);
    if (!x || !y)
        return 1;
    make_data(x, y);

    vr_graph *g = build_step();
    if (!g)
        return fail("model");
    printf("graph: %lld parameters, %d nodes (%d forward)\n", (long long)g->n_params, g->n_nodes, g->n_forward);
    vr_plan *p = NULL;
    if (vr_plan_create(g, NULL, &p))
        return fail("plan");
    print_plan(p);

    vr_device *dev = NULL;
    vr_exec *e = NULL;
    if (vr_device_open("cpu", &dev))
        return fail("device");
    if (vr_exec_create(p, dev, NULL, &e))
        return fail("exec");
    float *w = init_params(g);
    if (!w || vr_exec_write(e, g->params, w, (uint64_t)g->n_params * sizeof(float)))
        return fail("initial weights");

    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    h.lr = 3e-3f;
    h.weight_decay = 0.0f;
    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        int row = (step * B) % ROWS; /* ROWS is a multiple of B: one epoch every ROWS / B steps */
        vr_exec_batch batch = {.inputs = x + (size_t)row * D, .targets = y + row};
        vr_exec_result res;
        h.step = step + 1;
        if (vr_exec_step(e, &batch, &h, &res))
            return fail("step");
        if (step < 20)
            first += res.loss / 20;
        if (step >= STEPS - 20)
            last += res.loss / 20;
        if (step % 50 == 0 || step == STEPS - 1)
            printf("step %3d  loss %.4f\n", step, res.loss);
    }
    vr_exec_memory mem;
    vr_exec_get_memory(e, &mem);
    printf("ran with %llu bytes live at the peak (planned %llu), arena %llu bytes (planned %llu)\n",
           (unsigned long long)mem.peak, (unsigned long long)p->peak, (unsigned long long)mem.arena,
           (unsigned long long)p->arena_size);
    printf("mean loss: first 20 steps %.4f, last 20 steps %.4f\n", first, last);
    int ok = last < 0.5 * first && mem.peak == p->peak && mem.arena == p->arena_size;

    free(w);
    vr_exec_free(e);
    vr_device_close(dev);
    vr_plan_free(p);
    vr_graph_free(g);
    free(x);
    free(y);
    if (!ok) {
        fprintf(stderr, "mlp_classifier: FAIL: the loss did not halve, or the run held other bytes than planned\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
