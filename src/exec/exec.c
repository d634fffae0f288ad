/* vram exec — creating an executor: the backend, the memory (arena or
 * caching allocator), binding tensors to addresses, moving values in and out.
 *
 * Binding a storage tensor makes it live: planned mode points it at its arena
 * offset, dynamic mode asks the allocator for its raw bytes. Either way the
 * executor adds its bytes to the live count of its role; unbinding undoes
 * both. The step loop (run.c) decides when. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_internal.h"
#include "kernels/optim_math.h"
#include "vram/convert.h"
#include "vram/util.h"

vr_optim_hparams vr_optim_hparams_default(vr_optim o)
{
    vr_optim_hparams h;
    memset(&h, 0, sizeof h);
    h.lr = 3e-4f;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.weight_decay = o == VR_OPTIM_ADAMW ? 0.1f : 0.0f;
    h.momentum = 0.9f;
    h.step = 1;
    return h;
}

/* ------------------------------------------------------------------ binding */

static uint64_t storage_bytes(const vr_exec *e, int s) { return e->plan->tensors[s].bytes; }

/* Bytes of a tensor's storage nothing has written yet are poisoned? Parameters,
 * optimizer state and inputs are always written before they are read. */
static bool poisonable(const vr_exec *e, int s)
{
    vr_role r = e->g->tensors[s].role;
    return e->cfg.poison && r != VR_ROLE_PARAM && r != VR_ROLE_OPTIM && r != VR_ROLE_MASTER && r != VR_ROLE_INPUT;
}

static int base_of(const vr_exec *e, int s) { return e->plan->tensors[s].base; }

/* The live-byte counters of storage tensor s: the device's or (offload) the host's. */
static uint64_t *role_bytes(vr_exec *e, int s) { return e->plan->tensors[s].host ? e->host_bytes : e->live_bytes; }

/* Sets every byte of bound storage tensor s to v, where it lives. */
static vr_status fill(vr_exec *e, int s, int v)
{
    if (e->plan->tensors[s].host) {
        memset(e->ptr[s], v, storage_bytes(e, s));
        return VR_OK;
    }
    return vr_device_memset(e->dev, e->ptr[s], v, storage_bytes(e, s));
}

vr_status vr__exec_bind(vr_exec *e, int s, int node)
{
    uint64_t bytes = storage_bytes(e, s);
    int b = base_of(e, s);
    if (b != s) { /* in place over a dying input: its memory, counted after the node */
        if (!e->holders[b])
            return vr_error(VR_ERR_INVALID, "exec: %s is planned in place over %s, which is not in memory",
                            e->g->tensors[s].name, e->g->tensors[b].name);
        e->holders[b]++;
        e->ptr[s] = e->block[b];
        e->live[s] = true;
        e->counted[s] = false;
        return VR_OK;
    }
    bool host = e->plan->tensors[s].host;
    if (host) {
        e->block[s] = (char *)e->host_arena + e->plan->tensors[s].offset;
    } else if (s == e->shared_params) {
        e->block[s] = e->cfg.params_from->ptr[e->cfg.params_from->g->params];
    } else if (e->cfg.memory == VR_MEMORY_PLANNED) {
        e->block[s] = (char *)e->arena + (e->plan->tensors[s].offset - e->arena_lo);
    } else {
        vr_status st = vr_alloc_malloc(e->alloc, bytes, 0, &e->block[s]);
        if (st != VR_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", vr_last_error());
            if (node >= 0)
                return vr_error(st, "exec: %s (%s) for node %d (%s): %s", e->g->tensors[s].name,
                                vr_role_name(e->plan->tensors[s].role), node, e->g->nodes[node].name, msg);
            return vr_error(st, "exec: %s (%s): %s", e->g->tensors[s].name, vr_role_name(e->plan->tensors[s].role),
                            msg);
        }
    }
    e->holders[s] = 1;
    e->ptr[s] = e->block[s];
    e->live[s] = true;
    e->counted[s] = true;
    role_bytes(e, s)[e->plan->tensors[s].role] += bytes;
    if (poisonable(e, s))
        return fill(e, s, 0xFF);
    return VR_OK;
}

void vr__exec_count(vr_exec *e, int s)
{
    if (e->live[s] && !e->counted[s]) {
        e->counted[s] = true;
        role_bytes(e, s)[e->plan->tensors[s].role] += storage_bytes(e, s);
    }
}

void vr__exec_unbind(vr_exec *e, int s)
{
    if (!e->live[s])
        return;
    if (e->counted[s])
        role_bytes(e, s)[e->plan->tensors[s].role] -= storage_bytes(e, s);
    int b = base_of(e, s);
    if (--e->holders[b] == 0) {
        if (e->cfg.memory == VR_MEMORY_DYNAMIC && b != e->shared_params && !e->plan->tensors[b].host)
            vr_alloc_free(e->alloc, e->block[b]);
        e->block[b] = NULL;
    }
    e->ptr[s] = NULL;
    e->live[s] = false;
    e->counted[s] = false;
}

/* ------------------------------------------------------------------ create */

static vr_status pick_backend(vr_exec *e)
{
    vr_device_kind k = vr_device_kind_of(e->dev);
    if (k == VR_DEVICE_CPU) {
        if (e->g->step.precision != VR_PREC_FP32)
            return vr_error(VR_ERR_UNSUPPORTED,
                            "exec: the CPU runs fp32 only (vr_step_config.precision %s needs a GPU)",
                            vr_precision_name(e->g->step.precision));
        e->be = vr__exec_backend_cpu();
        return VR_OK;
    }
    if (k == VR_DEVICE_CUDA) {
        e->be = vr__exec_backend_cuda();
        if (!e->be)
            return vr_error(VR_ERR_UNSUPPORTED, "exec: device %s: this build has no CUDA executor (built without "
                            "nvcc); run on a cpu device", vr_device_name(e->dev));
        return VR_OK;
    }
    return vr_error(VR_ERR_UNSUPPORTED, "exec: device %s has no bytes to compute on (meta is for planning: use "
                    "'vram plan')", vr_device_name(e->dev));
}

/* Counts references per storage tensor in nodes [0, end). */
static void count_uses(const vr_graph *g, int end, int *uses)
{
    for (int i = 0; i < end; i++) {
        const vr_node *n = &g->nodes[i];
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (n->in[k] >= 0)
                uses[vr_graph_storage(g, n->in[k])]++;
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (n->out[k] >= 0)
                uses[vr_graph_storage(g, n->out[k])]++;
        if (n->scratch >= 0)
            uses[vr_graph_storage(g, n->scratch)]++;
    }
}

/* Planned mode: the arena, less the persistent region when that holds only a
 * shared parameter buffer. */
static vr_status make_arena(vr_exec *e)
{
    const vr_plan *p = e->plan;
    e->arena_lo = 0;
    if (e->shared_params >= 0) {
        bool only_params = true;
        for (int t = 0; t < p->n_tensors; t++)
            if (e->g->tensors[t].view_of < 0 && p->tensors[t].persistent && p->tensors[t].first >= 0 &&
                t != e->shared_params)
                only_params = false;
        if (only_params)
            e->arena_lo = p->persistent_size;
    }
    e->arena_bytes = p->arena_size - e->arena_lo;
    vr_status st = vr_device_malloc(e->dev, e->arena_bytes, &e->arena);
    if (st != VR_OK) {
        char msg[1024], a[32];
        snprintf(msg, sizeof msg, "%s", vr_last_error());
        return vr_error(st, "exec: the planned arena (%s) does not fit: %s. Try: a smaller batch "
                        "(vr_step_config.accum keeps the effective batch), vr_step_config.recompute block, or "
                        "'vram plan' with the same flags to see where the bytes go",
                        vr_format_size(e->arena_bytes, a, sizeof a), msg);
    }
    e->mem.arena = e->arena_bytes;
    return VR_OK;
}

/* Offload: the host tensors' arena (pinned on a GPU). */
static vr_status make_host_arena(vr_exec *e)
{
    uint64_t bytes = e->plan->host_size;
    vr_status st = bytes ? vr_device_host_alloc(e->dev, bytes, &e->host_arena) : VR_OK;
    if (st) {
        char msg[1024], a[32];
        snprintf(msg, sizeof msg, "%s", vr_last_error());
        return vr_error(st, "exec: the offloaded master weights and optimizer state need %s of pinned host memory: %s",
                        vr_format_size(bytes, a, sizeof a), msg);
    }
    e->mem.host_arena = bytes;
    return VR_OK;
}

static vr_status check_shared(vr_exec *e)
{
    const vr_exec *o = e->cfg.params_from;
    e->shared_params = -1;
    if (!o)
        return VR_OK;
    if (o->dev != e->dev || o->g->n_params != e->g->n_params || !o->ptr[o->g->params])
        return vr_error(VR_ERR_INVALID, "exec: params_from must run the same model on the same device");
    e->shared_params = e->g->params;
    return VR_OK;
}

vr_status vr_exec_create(const vr_plan *plan, vr_device *dev, const vr_exec_config *cfg, vr_exec **out)
{
    *out = NULL;
    if (!plan || !dev)
        return vr_error(VR_ERR_INVALID, "exec: no plan or no device");
    vr_exec *e = calloc(1, sizeof *e);
    if (!e)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    e->plan = plan;
    e->g = plan->graph;
    e->dev = dev;
    if (cfg)
        e->cfg = *cfg;
    e->mem.peak_node = -1;
    const vr_graph *g = e->g;
    int T = g->n_tensors, N = g->n_nodes;
    e->ptr = calloc((size_t)T + 1, sizeof *e->ptr);
    e->live = calloc((size_t)T + 1, sizeof *e->live);
    e->counted = calloc((size_t)T + 1, sizeof *e->counted);
    e->block = calloc((size_t)T + 1, sizeof *e->block);
    e->holders = calloc((size_t)T + 1, sizeof(int));
    e->inplace = calloc((size_t)T + 1, sizeof(int));
    e->uses_all = calloc((size_t)T + 1, sizeof(int));
    e->uses_pre = calloc((size_t)T + 1, sizeof(int));
    e->left = calloc((size_t)T + 1, sizeof(int));
    e->pending = calloc((size_t)T + 1, sizeof(int));
    e->timeline = calloc(((size_t)N + 1) * VR_ROLE_COUNT, sizeof(uint64_t));
    e->rows = g->losses >= 0 ? vr_tensor_numel(&g->tensors[g->losses]) : 0;
    e->losses = calloc((size_t)e->rows + 1, sizeof(float));
    vr_status st = VR_OK;
    if (!e->ptr || !e->live || !e->counted || !e->block || !e->holders || !e->inplace || !e->uses_all || !e->uses_pre || !e->left || !e->pending || !e->timeline ||
        !e->losses)
        st = vr_error(VR_ERR_OOM, "exec: out of host memory");
    if (!st)
        st = pick_backend(e);
    if (!st)
        st = check_shared(e);
    if (!st)
        st = vr__exec_comm_check(e);
    if (st) {
        vr_exec_free(e);
        return st;
    }
    e->opt_start = N;
    e->last_sumsq = -1;
    for (int i = N - 1; i >= 0; i--)
        if (g->nodes[i].phase == VR_PHASE_OPTIMIZER)
            e->opt_start = i;
    for (int i = 0; i < N; i++)
        if (g->nodes[i].op == VR_OP_SUMSQ)
            e->last_sumsq = i;
    count_uses(g, N, e->uses_all);
    count_uses(g, e->opt_start, e->uses_pre);

    e->loss_scale = 1.0f;
    e->scaling = g->step.precision == VR_PREC_FP16 && g->step.train && e->opt_start < N;
    if (e->scaling) {
        if (!(e->cfg.loss_scale >= 0.0f) || isinf(e->cfg.loss_scale) || e->cfg.loss_scale_window < 0) {
            vr_exec_free(e);
            return vr_error(VR_ERR_INVALID, "exec: the loss scale must be finite and > 0, its window >= 0");
        }
        e->loss_scale = e->cfg.loss_scale > 0.0f ? e->cfg.loss_scale : 65536.0f;
        if (!e->cfg.loss_scale_window)
            e->cfg.loss_scale_window = 2000;
    }
    e->graph_asked = e->cfg.cuda_graph;
    if (e->cfg.cuda_graph) { /* replays need fixed addresses and nothing queued between nodes (nor the host's work
                              * of an offloaded step) */
        const char *why = e->cfg.memory != VR_MEMORY_PLANNED ? "with dynamic memory (vr_exec_config.memory)"
                          : e->cfg.poison                    ? "with vr_exec_config.poison"
                          : e->opt_start >= N                ? "for a graph without optimizer nodes"
                          : g->step.train && g->step.accum > 1
                              ? "with more than one micro-batch per step (vr_step_config.accum)"
                          : plan->host_size     ? "with the optimizer's host phase (vr_step_config.offload)"
                          : g->step.world >= 1 ? "with data-parallel ranks (vr_step_config.world)"
                                               : NULL;
        if (why) {
            snprintf(e->graph_off, sizeof e->graph_off, "%s", why);
            e->cfg.cuda_graph = false;
        }
    }
    st = make_host_arena(e);
    if (!st && e->cfg.memory == VR_MEMORY_PLANNED) {
        st = make_arena(e);
    } else if (!st) {
        vr_alloc_config ac = {.policy = e->cfg.alloc_policy};
        st = vr_alloc_create(dev, &ac, &e->alloc);
    }
    /* the persistent tensors, in id order (as the plan's replay) */
    for (int t = 0; t < T && !st; t++)
        if (g->tensors[t].view_of < 0 && plan->tensors[t].persistent && plan->tensors[t].first >= 0)
            st = vr__exec_bind(e, t, -1);
    for (int t = 0; t < T && !st; t++) {
        vr_role r = g->tensors[t].role;
        if (e->live[t] && t != e->shared_params && (r == VR_ROLE_OPTIM || r == VR_ROLE_PARAM || r == VR_ROLE_MASTER))
            st = fill(e, t, 0);
    }
    if (!st && e->be->init)
        st = e->be->init(e);
    if (!st)
        e->graph = e->cfg.cuda_graph && e->be->graph_ok && e->be->graph_ok(e);
    if (!st && e->cfg.cuda_graph && !e->graph)
        snprintf(e->graph_off, sizeof e->graph_off, "%s", e->be->graph_ok ? "without the step's workspace "
                 "(vr_step_config.workspace_bytes)" : "on a device without CUDA graphs");
    if (st) {
        vr_exec_free(e);
        return st;
    }
    e->mem.device_used = e->mem.device_peak = vr_device_used_by_us(dev);
    *out = e;
    return VR_OK;
}

void vr_exec_free(vr_exec *e)
{
    if (!e)
        return;
    vr__host_worker_cancel(e);
    free(e->host_t0);
    free(e->host_t1);
    if (e->be && e->be->fini && e->be_state)
        e->be->fini(e);
    if (e->live)
        for (int t = 0; t < e->g->n_tensors; t++)
            vr__exec_unbind(e, t);
    if (e->alloc)
        vr_alloc_destroy(e->alloc);
    if (e->arena)
        vr_device_free(e->dev, e->arena, e->arena_bytes);
    vr_device_host_free(e->dev, e->host_arena);
    free(e->ptr);
    free(e->live);
    free(e->counted);
    free(e->block);
    free(e->holders);
    free(e->inplace);
    free(e->uses_all);
    free(e->uses_pre);
    free(e->left);
    free(e->pending);
    free(e->timeline);
    free(e->losses);
    free(e);
}

/* ------------------------------------------------------------------ values in and out */

void *vr_exec_tensor_ptr(const vr_exec *e, int t)
{
    if (!e || t < 0 || t >= e->g->n_tensors)
        return NULL;
    const vr_tensor *x = &e->g->tensors[t];
    int s = vr_graph_storage(e->g, t);
    if (!e->live[s])
        return NULL;
    return (char *)e->ptr[s] + (x->view_of >= 0 ? (uint64_t)x->view_offset * vr_dtype_size(x->dtype) : 0);
}

/* Copies between the host and tensor t's memory (device or, offloaded, host). */
static vr_status copy_io(vr_exec *e, int t, void *dst, const void *src, uint64_t bytes, vr_copy_kind kind)
{
    if (e->plan->tensors[vr_graph_storage(e->g, t)].host) {
        memcpy(dst, src, bytes);
        return VR_OK;
    }
    return vr_device_memcpy(e->dev, dst, src, bytes, kind);
}

static vr_status check_io(vr_exec *e, int t, uint64_t bytes, void **dev_ptr)
{
    if (t < 0 || t >= e->g->n_tensors)
        return vr_error(VR_ERR_INVALID, "exec: tensor id %d is not in the graph", t);
    const vr_tensor *x = &e->g->tensors[t];
    if (bytes != vr_tensor_bytes(x))
        return vr_error(VR_ERR_INVALID, "exec: %s holds %llu bytes, not %llu", x->name,
                        (unsigned long long)vr_tensor_bytes(x), (unsigned long long)bytes);
    *dev_ptr = vr_exec_tensor_ptr(e, t);
    if (!*dev_ptr)
        return vr_error(VR_ERR_INVALID, "exec: %s is not in memory now (only persistent tensors and the last "
                        "step's outputs are)", x->name);
    return VR_OK;
}

/* The parameter buffer holds this rank's parameters only (ZeRO-3: graph/zero3.c)? */
static bool params_sharded(const vr_graph *g) { return vr_tensor_numel(&g->tensors[g->params]) != g->n_params; }

/* Is t the parameter buffer and host the model's flat weights in fp32 (of a 16-bit or a sharded buffer)? */
static bool params_as_f32(const vr_exec *e, int t, uint64_t bytes)
{
    const vr_graph *g = e->g;
    return t == g->params && (g->param_dtype != VR_F32 || params_sharded(g)) &&
           bytes == (uint64_t)g->n_params * sizeof(float);
}

/* Between the model's flat fp32 weights (param_offset) and the parameter buffer's raw values (view_offset), for
 * each parameter the buffer holds; flat elements of the others are left alone. */
static void buffer_to_flat(const vr_graph *g, float *flat, const void *buf)
{
    size_t es = vr_dtype_size(g->param_dtype);
    for (int t = 0; t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of == g->params && x->param_offset >= 0)
            vr_convert(VR_F32, flat + x->param_offset, g->param_dtype, (const char *)buf + (size_t)x->view_offset * es,
                       (size_t)vr_tensor_numel(x));
    }
}

/* Under a split master the 16-bit weights are the high halves of their fp32 values (vr_split_hi: to nearest,
 * ties away from zero), every rank's alike; else rounded to nearest even. */
static void flat_to_buffer(const vr_graph *g, void *buf, const float *flat)
{
    size_t es = vr_dtype_size(g->param_dtype);
    for (int t = 0; t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of != g->params || x->param_offset < 0)
            continue;
        char *dst = (char *)buf + (size_t)x->view_offset * es;
        const float *src = flat + x->param_offset;
        size_t n = (size_t)vr_tensor_numel(x);
        if (g->step.split_master)
            for (size_t i = 0; i < n; i++)
                ((uint16_t *)dst)[i] = vr_split_hi(vr_f32_bits(src[i]));
        else
            vr_convert(g->param_dtype, dst, VR_F32, src, n);
    }
}

/* The master copy (flat over the trainable params this rank updates, in buffer order) to or from the fp32 values at
 * host[param_offset...]: fp32, or a split master's low halves (the weights hold the high halves: flat_to_buffer;
 * reading, host holds them widened and gets the low halves added). */
static vr_status master_io(vr_exec *e, float *host, bool write)
{
    const vr_graph *g = e->g;
    if (g->master < 0 || !e->live[g->master])
        return VR_OK;
    bool split = g->tensors[g->master].dtype == VR_U16;
    size_t most = 0; /* a split master's low halves go through one buffer, of the largest tensor */
    for (int t = 0; split && t < g->n_tensors; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of == g->params && x->param_offset >= 0 && x->master >= 0 && (size_t)vr_tensor_numel(x) > most)
            most = (size_t)vr_tensor_numel(x);
    }
    uint16_t *lo = split ? malloc(most * 2 + 1) : NULL;
    if (split && !lo)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    vr_status st = VR_OK;
    for (int t = 0; t < g->n_tensors && !st; t++) {
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of != g->params || x->param_offset < 0 || x->master < 0)
            continue;
        size_t n = (size_t)vr_tensor_numel(x);
        float *h = host + x->param_offset;
        for (size_t i = 0; split && write && i < n; i++)
            lo[i] = vr_split_lo(vr_f32_bits(h[i]));
        void *buf = split ? (void *)lo : (void *)h;
        st = write ? vr_exec_write(e, x->master, buf, n * (split ? 2 : 4))
                   : vr_exec_read(e, x->master, buf, n * (split ? 2 : 4));
        for (size_t i = 0; split && !write && !st && i < n; i++)
            h[i] = vr_bits_f32(vr_split_join((uint16_t)(vr_f32_bits(h[i]) >> 16), lo[i]));
    }
    free(lo);
    return st;
}

static vr_status write_params_f32(vr_exec *e, const float *host)
{
    const vr_graph *g = e->g;
    uint64_t bytes = vr_tensor_bytes(&g->tensors[g->params]);
    void *h = malloc(bytes + 1), *p;
    if (!h)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    flat_to_buffer(g, h, host);
    vr_status st = check_io(e, g->params, bytes, &p);
    if (!st)
        st = copy_io(e, g->params, p, h, bytes, VR_COPY_HOST_TO_DEVICE);
    free(h);
    return st ? st : master_io(e, (float *)host, true);
}

/* The parameters this rank holds widened to fp32 (the master's values where it has them); 0 elsewhere. */
static vr_status read_params_f32(vr_exec *e, float *host)
{
    const vr_graph *g = e->g;
    uint64_t bytes = vr_tensor_bytes(&g->tensors[g->params]);
    void *h = malloc(bytes + 1), *p;
    if (!h)
        return vr_error(VR_ERR_OOM, "exec: out of host memory");
    vr_status st = check_io(e, g->params, bytes, &p);
    if (!st)
        st = copy_io(e, g->params, h, p, bytes, VR_COPY_DEVICE_TO_HOST);
    if (!st) {
        memset(host, 0, sizeof(float) * (size_t)g->n_params);
        buffer_to_flat(g, host, h);
    }
    free(h);
    return st ? st : master_io(e, host, false);
}

vr_status vr_exec_read(vr_exec *e, int t, void *host, uint64_t bytes)
{
    if (params_as_f32(e, t, bytes))
        return read_params_f32(e, host);
    void *p;
    vr_status st = check_io(e, t, bytes, &p);
    return st ? st : copy_io(e, t, host, p, bytes, VR_COPY_DEVICE_TO_HOST);
}

vr_status vr_exec_write(vr_exec *e, int t, const void *host, uint64_t bytes)
{
    if (params_as_f32(e, t, bytes))
        return write_params_f32(e, host);
    void *p;
    vr_status st = check_io(e, t, bytes, &p);
    if (!st)
        st = copy_io(e, t, p, host, bytes, VR_COPY_HOST_TO_DEVICE);
    if (!st && t == e->g->params && e->g->master >= 0 && e->cfg.params_from == NULL) {
        /* raw values (fp32 ones under offload, a resumed state's 16-bit ones): the master starts from them */
        float *f = malloc(sizeof(float) * (size_t)e->g->n_params + 1);
        if (!f)
            return vr_error(VR_ERR_OOM, "exec: out of host memory");
        buffer_to_flat(e->g, f, host);
        st = master_io(e, f, true);
        free(f);
    }
    return st;
}

/* ------------------------------------------------------------------ figures */

void vr_exec_get_memory(vr_exec *e, vr_exec_memory *out)
{
    e->mem.device_used = vr_device_used_by_us(e->dev); /* the books, not the driver: every step reads it */
    if (e->alloc) {
        vr_alloc_stats s;
        vr_alloc_get_stats(e->alloc, &s);
        e->mem.peak_allocated = (uint64_t)s.allocated_bytes[VR_POOL_ALL].peak;
        e->mem.peak_reserved = (uint64_t)s.reserved_bytes[VR_POOL_ALL].peak;
        e->mem.peak_requested = (uint64_t)s.requested_bytes[VR_POOL_ALL].peak;
        e->mem.device_allocs = s.num_device_alloc;
    }
    memcpy(e->mem.host, e->host_bytes, sizeof e->mem.host);
    *out = e->mem;
}

uint64_t vr_exec_live(const vr_exec *e, int node, int role)
{
    if (node < 0 || node >= e->g->n_nodes)
        return 0;
    const uint64_t *l = e->timeline + (size_t)node * VR_ROLE_COUNT;
    if (role >= 0 && role < VR_ROLE_COUNT)
        return l[role];
    uint64_t s = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        s += l[r];
    return s;
}

void vr_exec_reset_peaks(vr_exec *e)
{
    memset(e->mem.max_live, 0, sizeof e->mem.max_live);
    memset(e->mem.at_peak, 0, sizeof e->mem.at_peak);
    e->mem.peak = 0;
    e->mem.peak_node = -1;
    e->mem.device_peak = e->mem.device_used;
    if (e->alloc)
        vr_alloc_reset_peak(e->alloc);
}

bool vr_exec_device_times(vr_exec *e) { return e->be->device_times && e->be->device_times(e); }

bool vr_exec_device_span(vr_exec *e, int node, int pass, uint64_t *t0_ns, uint64_t *t1_ns, int *lane)
{
    return e->be->device_span && node >= 0 && node < e->g->n_nodes &&
           e->be->device_span(e, node, pass, t0_ns, t1_ns, lane);
}

vr_alloc *vr_exec_allocator(vr_exec *e) { return e->alloc; }
const vr_plan *vr_exec_plan(const vr_exec *e) { return e->plan; }
vr_device *vr_exec_device(const vr_exec *e) { return e->dev; }
const char *vr_exec_backend_name(const vr_exec *e) { return e->be ? e->be->name : "none"; }
