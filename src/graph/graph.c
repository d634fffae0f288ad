/* vram graph — tensors, nodes, views and the queries over them.
 * Nothing here allocates tensor memory: a tensor is a name, a dtype and a shape. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "kernels/scratch.h"
#include "vram/util.h"

/* ------------------------------------------------------------------ names */

size_t vr_dtype_size(vr_dtype dt)
{
    static const size_t sizes[VR_DTYPE_COUNT] = {4, 2, 2, 4, 1, 2};
    return (unsigned)dt < VR_DTYPE_COUNT ? sizes[dt] : 0;
}

const char *vr_dtype_name(vr_dtype dt)
{
    static const char *names[VR_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32", "u8", "u16"};
    return (unsigned)dt < VR_DTYPE_COUNT ? names[dt] : "?";
}

const char *vr_role_name(vr_role r)
{
    static const char *names[VR_ROLE_COUNT] = {"params", "master", "grads", "optim", "inputs", "acts", "temp"};
    return (unsigned)r < VR_ROLE_COUNT ? names[r] : "?";
}

const char *vr_model_kind_name(vr_model_kind k)
{
    return k == VR_MODEL_GPT ? "gpt" : k == VR_MODEL_LLAMA ? "llama" : "mlp";
}

const char *vr_phase_name(vr_phase p)
{
    static const char *names[] = {"forward", "recompute", "backward", "optimizer"};
    return (unsigned)p < 4 ? names[p] : "?";
}

static const char *prec_names[] = {"fp32", "bf16", "fp16"};
static const char *optim_names[] = {"none", "sgd", "momentum", "adam", "adamw"};
static const char *recompute_names[] = {"none", "block", "selective", "act"};
static const char *ostate_names[] = {"fp32", "bf16", "8bit"};
static const char *offload_names[] = {"none", "optim"};
static const char *attention_names[] = {"auto", "vram", "cudnn"};
_Static_assert(VR_ATTENTION_AUTO == VR_SCRATCH_ATTN_AUTO && VR_ATTENTION_VRAM == VR_SCRATCH_ATTN_VRAM &&
                   VR_ATTENTION_CUDNN == VR_SCRATCH_ATTN_CUDNN,
               "vr_attention and kernels/scratch.h's VR_SCRATCH_ATTN_* agree");

const char *vr_precision_name(vr_precision p) { return (unsigned)p < 3 ? prec_names[p] : "?"; }
const char *vr_optim_name(vr_optim o) { return (unsigned)o < 5 ? optim_names[o] : "?"; }
const char *vr_recompute_name(vr_recompute r) { return (unsigned)r < 4 ? recompute_names[r] : "?"; }
const char *vr_optim_state_name(vr_optim_state o) { return (unsigned)o < 3 ? ostate_names[o] : "?"; }
const char *vr_master_name(bool no_master, bool split_master)
{
    return no_master ? "none" : split_master ? "split" : "fp32";
}
const char *vr_offload_name(vr_offload o) { return (unsigned)o < 2 ? offload_names[o] : "?"; }
const char *vr_attention_name(vr_attention a) { return (unsigned)a < 3 ? attention_names[a] : "?"; }

static vr_status parse_name(const char *s, const char *what, const char **names, int n, int *out)
{
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return VR_OK;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strcat(list, names[i]);
        if (i + 1 < n)
            strcat(list, "|");
    }
    return vr_error(VR_ERR_INVALID, "%s: '%s' is not one of %s", what, s ? s : "", list);
}

vr_status vr_precision_parse(const char *s, const char *what, vr_precision *out)
{
    int v = 0;
    vr_status st = parse_name(s, what, prec_names, 3, &v);
    *out = (vr_precision)v;
    return st;
}

vr_status vr_optim_parse(const char *s, const char *what, vr_optim *out)
{
    int v = 0;
    vr_status st = parse_name(s, what, optim_names, 5, &v);
    *out = (vr_optim)v;
    return st;
}

vr_status vr_recompute_parse(const char *s, const char *what, vr_recompute *out)
{
    int v = 0;
    vr_status st = parse_name(s, what, recompute_names, 4, &v);
    *out = (vr_recompute)v;
    return st;
}

vr_status vr_optim_state_parse(const char *s, const char *what, vr_optim_state *out)
{
    int v = 0;
    vr_status st = parse_name(s, what, ostate_names, 3, &v);
    *out = (vr_optim_state)v;
    return st;
}

vr_status vr_offload_parse(const char *s, const char *what, vr_offload *out)
{
    int v = 0;
    vr_status st = parse_name(s, what, offload_names, 2, &v);
    *out = (vr_offload)v;
    return st;
}

vr_status vr_attention_parse(const char *s, const char *what, vr_attention *out)
{
    int v = 0;
    vr_status st = parse_name(s, what, attention_names, 3, &v);
    *out = (vr_attention)v;
    return st;
}

/* ------------------------------------------------------------------ graph */

vr_graph *vr_graph_new(vr_precision p)
{
    vr_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->params = g->master = g->optim[0] = g->optim[1] = -1;
    g->absmax[0] = g->absmax[1] = g->optim32[0] = g->optim32[1] = g->host_grads = -1;
    g->tokens = g->targets = g->losses = g->loss_node = -1;
    g->step.precision = p;
    g->param_dtype = p == VR_PREC_BF16 ? VR_BF16 : p == VR_PREC_FP16 ? VR_F16 : VR_F32;
    g->act_dtype = g->param_dtype;
    return g;
}

void vr_graph_free(vr_graph *g)
{
    if (!g)
        return;
    free(g->tensors);
    free(g->nodes);
    free(g);
}

vr_status vr_graph_status(const vr_graph *g) { return g->err; }

int vr_graph_fail(vr_graph *g, vr_status s, const char *fmt, ...)
{
    if (g->err != VR_OK)
        return -1; /* keep the first message */
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->err = vr_error(s, "%s", msg);
    return -1;
}

static void set_name(char *dst, const char *src)
{
    snprintf(dst, VR_NAME_MAX, "%s", src ? src : "");
}

int vr_graph_tensor(vr_graph *g, const char *name, vr_dtype dt, vr_role role, int ndim, const int64_t *shape)
{
    if (g->err)
        return -1;
    if (ndim < 1 || ndim > VR_MAX_DIMS || (unsigned)dt >= VR_DTYPE_COUNT)
        return vr_graph_fail(g, VR_ERR_INVALID, "tensor %s: bad rank %d or dtype", name, ndim);
    int64_t dims[VR_MAX_DIMS]; /* copied first: shape may point into g->tensors, which may move */
    for (int i = 0; i < ndim; i++)
        dims[i] = shape[i];
    shape = dims;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1)
            return vr_graph_fail(g, VR_ERR_INVALID, "tensor %s: dimension %d is %lld", name, i,
                                 (long long)shape[i]);
    /* numel * element size must fit in int64 (checked: shapes come from flags and files) */
    int64_t bytes = (int64_t)vr_dtype_size(dt);
    for (int i = 0; i < ndim; i++)
        if (!vr_mul_i64(bytes, shape[i], &bytes))
            return vr_graph_fail(g, VR_ERR_INVALID, "tensor %s: the shape's byte size overflows 64 bits", name);
    if (g->n_tensors == g->cap_tensors) {
        int cap = g->cap_tensors ? 2 * g->cap_tensors : 256;
        vr_tensor *t = realloc(g->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        g->tensors = t;
        g->cap_tensors = cap;
    }
    int id = g->n_tensors++;
    vr_tensor *t = &g->tensors[id];
    memset(t, 0, sizeof *t);
    set_name(t->name, name);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = dims[i];
    t->role = role;
    t->view_of = -1;
    t->param_offset = -1;
    t->grad = t->master = t->optim[0] = t->optim[1] = t->absmax[0] = t->absmax[1] = -1;
    t->producer = -1;
    t->owner = -1;
    t->piece_of = -1;
    t->persistent = role == VR_ROLE_PARAM || role == VR_ROLE_MASTER || role == VR_ROLE_OPTIM;
    return id;
}

int vr_graph_tensor_like(vr_graph *g, const char *name, int like, vr_dtype dt, vr_role role)
{
    if (g->err)
        return -1;
    int64_t shape[VR_MAX_DIMS];
    memcpy(shape, g->tensors[like].shape, sizeof shape);
    return vr_graph_tensor(g, name, dt, role, g->tensors[like].ndim, shape);
}

int vr_graph_view(vr_graph *g, int src, const char *name, int ndim, const int64_t *shape, int64_t offset)
{
    if (g->err)
        return -1;
    int base = vr_graph_storage(g, src);
    int64_t off = offset + (src != base ? g->tensors[src].view_offset : 0);
    vr_tensor s = g->tensors[src];
    int id = vr_graph_tensor(g, name, s.dtype, s.role, ndim, shape);
    if (id < 0)
        return -1;
    vr_tensor *t = &g->tensors[id];
    if (off < 0 || off + vr_tensor_numel(t) > vr_tensor_numel(&g->tensors[base]))
        return vr_graph_fail(g, VR_ERR_INVALID, "view %s: elements [%lld, %lld) outside %s (%lld)", name,
                             (long long)off, (long long)(off + vr_tensor_numel(t)), g->tensors[base].name,
                             (long long)vr_tensor_numel(&g->tensors[base]));
    t->view_of = base;
    t->view_offset = off;
    t->persistent = s.persistent;
    t->host = s.host;
    return id;
}

int vr_graph_node(vr_graph *g, vr_op op, vr_phase phase, const char *name)
{
    if (g->err)
        return -1;
    if ((unsigned)op >= VR_OP_COUNT)
        return vr_graph_fail(g, VR_ERR_INVALID, "node %s: op %d is not one of the %d ops (vr_op)", name ? name : "",
                             (int)op, VR_OP_COUNT);
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 256;
        vr_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n)
            return vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        g->nodes = n;
        g->cap_nodes = cap;
    }
    int id = g->n_nodes++;
    vr_node *n = &g->nodes[id];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->phase = phase;
    n->layer = -1;
    set_name(n->name, name);
    for (int i = 0; i < VR_NODE_MAX_IN; i++)
        n->in[i] = -1;
    for (int i = 0; i < VR_NODE_MAX_OUT; i++)
        n->out[i] = -1;
    for (int i = 0; i < VR_NODE_MAX_IN; i++)
        n->part[i] = -1;
    n->scratch = -1;
    n->src = -1;
    return id;
}

vr_status vr_graph_set_loss(vr_graph *g, int losses)
{
    if (g->err)
        return g->err;
    if (losses < 0 || losses >= g->n_tensors || g->tensors[losses].producer != g->n_nodes - 1)
        return vr_graph_fail(g, VR_ERR_INVALID, "loss: tensor %d is not made by the last node", losses), g->err;
    g->losses = losses;
    g->loss_node = g->n_nodes - 1;
    g->tensors[losses].output = true;
    g->n_forward = g->n_nodes;
    g->n_trainable = g->params >= 0 ? g->n_params : 0;
    return VR_OK;
}

/* One input tensor of a step for vr_graph_set_inputs (its storage, role inputs, of dtype dt unless dt < 0). */
static bool is_input(const vr_graph *g, int t, int dt)
{
    return t >= 0 && t < g->n_tensors && g->tensors[t].role == VR_ROLE_INPUT && g->tensors[t].view_of < 0 &&
           (dt < 0 || (int)g->tensors[t].dtype == dt);
}

vr_status vr_graph_set_inputs(vr_graph *g, int inputs, int targets)
{
    if (g->err)
        return g->err;
    if (!is_input(g, inputs, -1))
        return vr_graph_fail(g, VR_ERR_INVALID, "inputs: tensor %d is not an input (a tensor of role inputs, not a "
                             "view)", inputs), g->err;
    if (!is_input(g, targets, VR_I32) || targets == inputs)
        return vr_graph_fail(g, VR_ERR_INVALID, "targets: tensor %d is not a second input of dtype i32", targets),
               g->err;
    g->tokens = inputs;
    g->targets = targets;
    return VR_OK;
}

int vr_graph_param_buffer(vr_graph *g, int64_t n)
{
    if (g->params >= 0)
        return vr_graph_fail(g, VR_ERR_INVALID, "params: the graph already has a parameter buffer");
    int64_t shape[1] = {n};
    int id = vr_graph_tensor(g, "params", g->param_dtype, VR_ROLE_PARAM, 1, shape);
    g->params = id;
    g->n_params = n;
    return id;
}

int vr_graph_param(vr_graph *g, const char *name, int ndim, const int64_t *shape, int64_t offset,
                   vr_init init, float init_scale)
{
    int id = vr_graph_view(g, g->params, name, ndim, shape, offset);
    if (id < 0)
        return -1;
    vr_tensor *t = &g->tensors[id];
    t->param_offset = offset;
    t->init = init;
    t->init_scale = init_scale;
    return id;
}

void vr_graph_attach_scratch(vr_graph *g, int node)
{
    if (g->err || node < 0 || g->nodes[node].scratch >= 0)
        return;
    uint64_t bytes = vr_node_scratch_bytes(g, &g->nodes[node]);
    if (!bytes)
        return;
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%.50s.scratch", g->nodes[node].name);
    int64_t shape[1] = {(int64_t)((bytes + 3) / 4)};
    int id = vr_graph_tensor(g, name, VR_F32, VR_ROLE_TEMP, 1, shape);
    if (id >= 0) {
        g->nodes[node].scratch = id;
        g->tensors[id].producer = node;
    }
}

/* ------------------------------------------------------------------ queries */

int64_t vr_tensor_numel(const vr_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

uint64_t vr_tensor_bytes(const vr_tensor *t)
{
    return (uint64_t)vr_tensor_numel(t) * vr_dtype_size(t->dtype);
}

int64_t vr_tensor_lastdim(const vr_tensor *t) { return t->shape[t->ndim - 1]; }

int64_t vr_tensor_rows(const vr_tensor *t) { return vr_tensor_numel(t) / vr_tensor_lastdim(t); }

char *vr_tensor_shape_str(const vr_tensor *t, char *buf, size_t cap)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "(");
    for (int i = 0; i < t->ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, ")");
    return buf;
}

int vr_graph_storage(const vr_graph *g, int id)
{
    if (id < 0)
        return -1;
    return g->tensors[id].view_of >= 0 ? g->tensors[id].view_of : id;
}

int vr_graph_find(const vr_graph *g, const char *name)
{
    for (int i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name))
            return i;
    return -1;
}

bool vr_graph_is_saved(const vr_graph *g, int id)
{
    int s = vr_graph_storage(g, id);
    if (s < 0 || g->tensors[s].role != VR_ROLE_ACT)
        return false;
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->phase != VR_PHASE_BACKWARD && n->phase != VR_PHASE_RECOMPUTE)
            continue;
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (n->in[k] >= 0 && vr_graph_storage(g, n->in[k]) == s)
                return true;
    }
    return false;
}

int vr_graph_count_phase(const vr_graph *g, vr_phase p)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += g->nodes[i].phase == p;
    return c;
}

/* The sizes are the kernels' own functions (kernels/scratch.h), with the arguments the executor passes
 * them (src/exec/cpu_node.c, cuda_node_cuda.c). */
uint64_t vr_node_scratch_bytes_for(const vr_graph *g, const vr_node *n, vr_kernels k)
{
    bool cuda = k == VR_KERNELS_CUDA;
    const vr_tensor *in0 = n->in[0] >= 0 ? &g->tensors[n->in[0]] : NULL;
    switch (n->op) {
    case VR_OP_CLASSIFIER: { /* x (N,C), wte (Vw,C), targets (N) */
        int64_t N = vr_tensor_numel(&g->tensors[n->in[2]]);
        if (cuda)
            return vr_scratch_cuda_classifier(N, vr_tensor_rows(&g->tensors[n->in[1]]),
                                              (int64_t)vr_dtype_size(in0->dtype), g->step.classifier_rows);
        return vr_scratch_cpu_classifier(N, n->vocab);
    }
    case VR_OP_ATTENTION_BWD: { /* dout (B,T,NH hd), qkv (B,T,(NH+2NKV)hd) */
        const vr_tensor *q = &g->tensors[n->in[1]];
        int64_t nkv = n->nkv > 0 ? n->nkv : n->nh, W = n->nh + 2 * nkv;
        if (!cuda || n->nh < 1 || q->ndim != 3 || q->shape[2] % W)
            return 0; /* the CPU kernels: none (vr_cpu_attention_scratch_bytes) */
        return vr_scratch_cuda_attention_bwd_for(q->shape[0], q->shape[1], n->nh, nkv, q->shape[2] / W,
                                                 (int64_t)vr_dtype_size(in0->dtype), (int)g->step.attention);
    }
    case VR_OP_LAYERNORM_BWD: /* dout (N,C); dw and db partial sums when either is computed */
        if (!cuda || (n->out[1] < 0 && n->out[2] < 0))
            return 0;
        return vr_scratch_cuda_layernorm_bwd(vr_tensor_rows(in0), vr_tensor_lastdim(in0));
    case VR_OP_RMSNORM_BWD: /* dout (N,C); dw's partial sums */
        if (!cuda || n->out[1] < 0)
            return 0;
        return vr_scratch_cuda_rmsnorm_bwd(vr_tensor_rows(in0), vr_tensor_lastdim(in0));
    case VR_OP_EMBEDDING_BWD: { /* tokens (B,T); dwte's sort */
        const vr_tensor *tok = &g->tensors[n->in[1]];
        if (!cuda || n->out[0] < 0 || tok->ndim < 2)
            return 0;
        return vr_scratch_cuda_embedding_bwd(tok->shape[0], tok->shape[1]);
    }
    default:
        return 0;
    }
}

uint64_t vr_node_scratch_bytes(const vr_graph *g, const vr_node *n)
{
    return vr_node_scratch_bytes_for(g, n, g->step.kernels);
}

bool vr_glob_match(const char *glob, const char *name)
{
    const char *star = NULL, *resume = NULL;
    while (*name) {
        if (*glob == '*') {
            star = glob++;
            resume = name;
        } else if (*glob == '?' || *glob == *name) {
            glob++;
            name++;
        } else if (star) {
            glob = star + 1;
            name = ++resume;
        } else {
            return false;
        }
    }
    while (*glob == '*')
        glob++;
    return *glob == '\0';
}

void vr_graph_print(const vr_graph *g, FILE *f)
{
    char sh[64];
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        const vr_op_info *info = vr_op_get_info(n->op);
        fprintf(f, "%4d %-9s %-16s %-24s", i, vr_phase_name(n->phase), info->name, n->name);
        static const char *const from_out[VR_NODE_MAX_IN] = {"dout", "out", "w", "b", "rstd"}; /* norms' slots */
        for (int k = 0; k < VR_NODE_MAX_IN; k++)
            if (n->in[k] >= 0) {
                const char *slot = n->from_out && (k == 1 || (k == 3 && n->op == VR_OP_LAYERNORM_BWD)) ? from_out[k]
                                   : info->in[k]                                                     ? info->in[k]
                                                                                                     : "?";
                fprintf(f, " %s=%s%s", slot, g->tensors[n->in[k]].name,
                        vr_tensor_shape_str(&g->tensors[n->in[k]], sh, sizeof sh));
            }
        fprintf(f, " ->");
        for (int k = 0; k < VR_NODE_MAX_OUT; k++)
            if (n->out[k] >= 0)
                fprintf(f, " %s=%s%s%s", info->out[k] ? info->out[k] : "?", g->tensors[n->out[k]].name,
                        vr_tensor_shape_str(&g->tensors[n->out[k]], sh, sizeof sh),
                        n->acc[k] == VR_ACC_ADD ? "+=" : n->acc[k] == VR_ACC_MICRO ? "+=micro" : "");
        if (n->scratch >= 0)
            fprintf(f, " scratch=%s", vr_tensor_shape_str(&g->tensors[n->scratch], sh, sizeof sh));
        fputc('\n', f);
    }
}
