/* vram graph — the op table and the forward op builders (with their shape checks).
 * Each op maps onto one kernel of src/kernels/cpu/kernels_cpu.h; slots follow
 * the kernel's argument order where it can. */
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"

static const vr_op_info op_table[VR_OP_COUNT] = {
    [VR_OP_EMBEDDING] = {"embedding", "vr_cpu_embedding_fwd", {"tok", "wte", "wpe"}, {"out"}},
    [VR_OP_EMBEDDING_BWD] = {"embedding_bwd", "vr_cpu_embedding_bwd", {"dout", "tok"}, {"dwte", "dwpe"}},
    [VR_OP_LAYERNORM] = {"layernorm", "vr_cpu_layernorm_fwd", {"inp", "w", "b"}, {"out", "mean", "rstd"}},
    [VR_OP_LAYERNORM_BWD] = {"layernorm_bwd", "vr_cpu_layernorm_bwd", {"dout", "inp", "w", "mean", "rstd"},
                             {"dinp", "dw", "db"}},
    [VR_OP_MATMUL] = {"matmul", "vr_cpu_matmul_fwd", {"inp", "w", "bias"}, {"out"}},
    [VR_OP_MATMUL_BWD] = {"matmul_bwd", "vr_cpu_matmul_bwd", {"dout", "inp", "w"}, {"dinp", "dw", "dbias"}},
    [VR_OP_ATTENTION] = {"attention", "vr_cpu_attention_fwd", {"qkv"}, {"out", "lse"}},
    [VR_OP_ATTENTION_BWD] = {"attention_bwd", "vr_cpu_attention_bwd", {"dout", "qkv", "out", "lse"}, {"dqkv"}},
    [VR_OP_GELU] = {"gelu", "vr_cpu_gelu_fwd", {"inp"}, {"out"}},
    [VR_OP_GELU_BWD] = {"gelu_bwd", "vr_cpu_gelu_bwd", {"dout", "inp"}, {"dinp"}},
    [VR_OP_RELU] = {"relu", "vr_cpu_relu_fwd", {"inp"}, {"out"}},
    [VR_OP_RELU_BWD] = {"relu_bwd", "vr_cpu_relu_bwd", {"dout", "out"}, {"dinp"}},
    [VR_OP_ADD] = {"add", "vr_cpu_add_fwd", {"a", "b"}, {"out"}},
    [VR_OP_ACC] = {"acc", "vr_cpu_acc", {"src"}, {"dst"}},
    [VR_OP_RESHAPE] = {"reshape", NULL, {"inp"}, {"out"}},
    [VR_OP_CLASSIFIER] = {"classifier", "vr_cpu_classifier", {"x", "wte", "targets"}, {"losses", "dx", "dwte"}},
    [VR_OP_SOFTMAX_XENT] = {"softmax_xent", "vr_cpu_softmax_xent_fwd", {"logits", "targets"}, {"losses", "probs"}},
    [VR_OP_SOFTMAX_XENT_BWD] = {"softmax_xent_bwd", "vr_cpu_softmax_xent_bwd", {"probs", "targets"}, {"dlogits"}},
    [VR_OP_SUMSQ] = {"sumsq", "vr_cpu_sumsq", {"x"}, {"normsq"}},
    [VR_OP_SGD] = {"sgd", "vr_cpu_sgd", {"grad", "normsq"}, {"param", "master"}},
    [VR_OP_SGD_MOMENTUM] = {"sgd_momentum", "vr_cpu_sgd_momentum", {"grad", "normsq"}, {"param", "master", "mom"}},
    [VR_OP_ADAM] = {"adam", "vr_cpu_adam", {"grad", "normsq"}, {"param", "master", "m", "v"}},
    [VR_OP_ADAMW] = {"adamw", "vr_cpu_adamw", {"grad", "normsq"}, {"param", "master", "m", "v"}},
    [VR_OP_RMSNORM] = {"rmsnorm", "vr_cpu_rmsnorm_fwd", {"inp", "w"}, {"out", "rstd"}},
    [VR_OP_RMSNORM_BWD] = {"rmsnorm_bwd", "vr_cpu_rmsnorm_bwd", {"dout", "inp", "w", "rstd"}, {"dinp", "dw"}},
    [VR_OP_ROPE] = {"rope", "vr_cpu_rope_fwd", {"inp"}, {"out"}},
    [VR_OP_ROPE_BWD] = {"rope_bwd", "vr_cpu_rope_bwd", {"dout"}, {"dinp"}},
    [VR_OP_SWIGLU] = {"swiglu", "vr_cpu_swiglu_fwd", {"inp"}, {"out"}},
    [VR_OP_SWIGLU_BWD] = {"swiglu_bwd", "vr_cpu_swiglu_bwd", {"dout", "inp"}, {"dinp"}},
    [VR_OP_COPY] = {"copy", "memcpy", {"src", "fence"}, {"dst"}},
    [VR_OP_ALLREDUCE] = {"allreduce", "vr_comm_allreduce", {"x", "fence"}, {NULL}},
    [VR_OP_REDUCE] = {"reduce", "vr_comm_reduce", {"x", "fence"}, {NULL}},
    [VR_OP_BROADCAST] = {"broadcast", "vr_comm_broadcast", {"x"}, {NULL}},
    [VR_OP_GATHER] = {"gather", "vr_comm_broadcast", {"w0", "w1", "w2", "w3", "w4", "w5"}, {"out"}},
};

const vr_op_info *vr_op_get_info(vr_op op)
{
    static const vr_op_info unknown = {"?", NULL, {NULL}, {NULL}};
    return (unsigned)op < VR_OP_COUNT ? &op_table[op] : &unknown;
}

const char *vr_op_name(vr_op op) { return vr_op_get_info(op)->name; }

/* ------------------------------------------------------------------ helpers */

static const char *shp(const vr_graph *g, int id, char *buf)
{
    return vr_tensor_shape_str(&g->tensors[id], buf, 64);
}

/* Checks that every id is a tensor of the graph. */
static bool valid_ids(vr_graph *g, const char *name, int n, const int *ids)
{
    if (g->err)
        return false;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g->n_tensors) {
            vr_graph_fail(g, VR_ERR_INVALID, "%s: input %d is not a tensor (id %d)", name, i, ids[i]);
            return false;
        }
    return true;
}

/* A forward node with its inputs; outputs are set by the caller. */
static int fwd_node(vr_graph *g, vr_op op, const char *name, int n_in, const int *in)
{
    int id = vr_graph_node(g, op, VR_PHASE_FORWARD, name);
    if (id < 0)
        return -1;
    for (int i = 0; i < n_in; i++)
        g->nodes[id].in[i] = in[i];
    return id;
}

/* An output tensor of node `node`, produced there. */
static int out_tensor(vr_graph *g, int node, int slot, const char *name, vr_dtype dt, vr_role role, int ndim,
                      const int64_t *shape)
{
    int id = vr_graph_tensor(g, name, dt, role, ndim, shape);
    if (id < 0 || node < 0)
        return -1;
    g->tensors[id].producer = node;
    g->nodes[node].out[slot] = id;
    return id;
}

static int out_like(vr_graph *g, int node, int slot, const char *name, int like, vr_dtype dt)
{
    if (g->err)
        return -1;
    vr_tensor t = g->tensors[like];
    return out_tensor(g, node, slot, name, dt, VR_ROLE_ACT, t.ndim, t.shape);
}

static void suffixed(char *dst, const char *name, const char *suffix)
{
    snprintf(dst, VR_NAME_MAX, "%.*s%s", (int)(VR_NAME_MAX - 1 - strlen(suffix)), name, suffix);
}

/* ------------------------------------------------------------------ builders */

int vr_graph_embedding(vr_graph *g, const char *name, int tok, int wte, int wpe)
{
    int in[3] = {tok, wte, wpe}; /* wpe -1: no position table */
    if (!valid_ids(g, name, wpe >= 0 ? 3 : 2, in))
        return -1;
    const vr_tensor *tk = &g->tensors[tok], *we = &g->tensors[wte], *wp = wpe >= 0 ? &g->tensors[wpe] : NULL;
    char a[64], b[64], c[64] = "none";
    if (wp)
        shp(g, wpe, c);
    if (tk->dtype != VR_I32 || tk->ndim != 2 || we->ndim != 2 ||
        (wp && (wp->ndim != 2 || we->shape[1] != wp->shape[1] || tk->shape[1] > wp->shape[0])))
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: embedding wants tok (B,T) i32, wte (V,C), wpe (maxT>=T,C); "
                             "got %s %s, %s, %s", name, vr_dtype_name(tk->dtype), shp(g, tok, a), shp(g, wte, b), c);
    int64_t shape[3] = {tk->shape[0], tk->shape[1], we->shape[1]};
    int n = fwd_node(g, VR_OP_EMBEDDING, name, 3, in);
    return out_tensor(g, n, 0, name, g->act_dtype, VR_ROLE_ACT, 3, shape);
}

int vr_graph_layernorm(vr_graph *g, const char *name, int x, int w, int b, int *mean, int *rstd)
{
    int in[3] = {x, w, b};
    if (!valid_ids(g, name, 3, in))
        return -1;
    const vr_tensor *xt = &g->tensors[x], *wt = &g->tensors[w], *bt = &g->tensors[b];
    int64_t C = vr_tensor_lastdim(xt);
    char s1[64], s2[64], s3[64];
    if (wt->ndim != 1 || bt->ndim != 1 || wt->shape[0] != C || bt->shape[0] != C)
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: layernorm wants inp (...,C), w (C), b (C); got %s, %s, %s",
                             name, shp(g, x, s1), shp(g, w, s2), shp(g, b, s3));
    int64_t rows_shape[VR_MAX_DIMS]; /* mean and rstd: x's shape without the last dimension */
    int rd = xt->ndim > 1 ? xt->ndim - 1 : 1;
    for (int i = 0; i < rd; i++)
        rows_shape[i] = xt->ndim > 1 ? xt->shape[i] : 1;
    int n = fwd_node(g, VR_OP_LAYERNORM, name, 3, in);
    int y = out_like(g, n, 0, name, x, g->act_dtype);
    char nm[VR_NAME_MAX];
    suffixed(nm, name, ".mean");
    int m = out_tensor(g, n, 1, nm, VR_F32, VR_ROLE_ACT, rd, rows_shape);
    suffixed(nm, name, ".rstd");
    int r = out_tensor(g, n, 2, nm, VR_F32, VR_ROLE_ACT, rd, rows_shape);
    if (mean)
        *mean = m;
    if (rstd)
        *rstd = r;
    return y;
}

int vr_graph_linear(vr_graph *g, const char *name, int x, int w, int b)
{
    int in[3] = {x, w, b};
    if (!valid_ids(g, name, b >= 0 ? 3 : 2, in))
        return -1;
    const vr_tensor *xt = &g->tensors[x], *wt = &g->tensors[w];
    char s1[64], s2[64], s3[64] = "none";
    if (b >= 0)
        shp(g, b, s3);
    if (wt->ndim != 2 || wt->shape[1] != vr_tensor_lastdim(xt) ||
        (b >= 0 && (g->tensors[b].ndim != 1 || g->tensors[b].shape[0] != wt->shape[0])))
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: linear wants inp (...,C), w (OC,C), bias (OC); got %s, %s, %s",
                             name, shp(g, x, s1), shp(g, w, s2), s3);
    int64_t shape[VR_MAX_DIMS];
    memcpy(shape, xt->shape, sizeof shape);
    int nd = xt->ndim;
    shape[nd - 1] = wt->shape[0];
    int n = fwd_node(g, VR_OP_MATMUL, name, 3, in);
    return out_tensor(g, n, 0, name, g->act_dtype, VR_ROLE_ACT, nd, shape);
}

int vr_graph_attention(vr_graph *g, const char *name, int qkv, int NH, int *lse)
{
    if (!valid_ids(g, name, 1, &qkv))
        return -1;
    const vr_tensor *q = &g->tensors[qkv];
    char s1[64];
    if (q->ndim != 3 || q->shape[2] % 3 || NH < 1 || (q->shape[2] / 3) % NH)
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: attention wants qkv (B,T,3C) with C %% NH == 0; got %s, NH=%d",
                             name, shp(g, qkv, s1), NH);
    int64_t B = q->shape[0], T = q->shape[1], C = q->shape[2] / 3;
    int n = fwd_node(g, VR_OP_ATTENTION, name, 1, &qkv);
    if (n >= 0)
        g->nodes[n].nh = NH;
    int64_t ys[3] = {B, T, C}, ls[3] = {B, NH, T};
    int y = out_tensor(g, n, 0, name, g->act_dtype, VR_ROLE_ACT, 3, ys);
    char nm[VR_NAME_MAX];
    suffixed(nm, name, ".lse");
    int l = out_tensor(g, n, 1, nm, VR_F32, VR_ROLE_ACT, 3, ls);
    if (lse)
        *lse = l;
    vr_graph_attach_scratch(g, n);
    return y;
}

int vr_graph_attention_gqa(vr_graph *g, const char *name, int qkv, int NH, int NKV, int *lse)
{
    if (!valid_ids(g, name, 1, &qkv))
        return -1;
    const vr_tensor *q = &g->tensors[qkv];
    char s1[64];
    if (q->ndim != 3 || NH < 1 || NKV < 1 || NH % NKV || q->shape[2] % (NH + 2 * NKV))
        return vr_graph_fail(g, VR_ERR_INVALID,
                             "%s: attention wants qkv (B,T,(NH+2*NKV)*hd) with NH %% NKV == 0; got %s, NH=%d, NKV=%d",
                             name, shp(g, qkv, s1), NH, NKV);
    int64_t B = q->shape[0], T = q->shape[1], hd = q->shape[2] / (NH + 2 * NKV);
    int n = fwd_node(g, VR_OP_ATTENTION, name, 1, &qkv);
    if (n >= 0)
        g->nodes[n].nh = NH, g->nodes[n].nkv = NKV;
    int64_t ys[3] = {B, T, NH * hd}, ls[3] = {B, NH, T};
    int y = out_tensor(g, n, 0, name, g->act_dtype, VR_ROLE_ACT, 3, ys);
    char nm[VR_NAME_MAX];
    suffixed(nm, name, ".lse");
    int l = out_tensor(g, n, 1, nm, VR_F32, VR_ROLE_ACT, 3, ls);
    if (lse)
        *lse = l;
    vr_graph_attach_scratch(g, n);
    return y;
}

int vr_graph_rmsnorm(vr_graph *g, const char *name, int x, int w, float eps, int *rstd)
{
    int in[2] = {x, w};
    if (!valid_ids(g, name, 2, in))
        return -1;
    const vr_tensor *xt = &g->tensors[x], *wt = &g->tensors[w];
    char s1[64], s2[64];
    if (wt->ndim != 1 || wt->shape[0] != vr_tensor_lastdim(xt) || !(eps > 0.0f))
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: rmsnorm wants inp (...,C), w (C), eps > 0; got %s, %s, eps %g",
                             name, shp(g, x, s1), shp(g, w, s2), (double)eps);
    int64_t rows_shape[VR_MAX_DIMS]; /* rstd: x's shape without the last dimension */
    int rd = xt->ndim > 1 ? xt->ndim - 1 : 1;
    for (int i = 0; i < rd; i++)
        rows_shape[i] = xt->ndim > 1 ? xt->shape[i] : 1;
    int n = fwd_node(g, VR_OP_RMSNORM, name, 2, in);
    if (n >= 0)
        g->nodes[n].eps = eps;
    int y = out_like(g, n, 0, name, x, g->act_dtype);
    char nm[VR_NAME_MAX];
    suffixed(nm, name, ".rstd");
    int r = out_tensor(g, n, 1, nm, VR_F32, VR_ROLE_ACT, rd, rows_shape);
    if (rstd)
        *rstd = r;
    return y;
}

int vr_graph_rope(vr_graph *g, const char *name, int qkv, int NH, int NKV, const vr_rope_config *rope)
{
    if (!valid_ids(g, name, 1, &qkv))
        return -1;
    const vr_tensor *q = &g->tensors[qkv];
    char s1[64];
    int64_t hd = q->ndim == 3 && NH >= 1 && NKV >= 1 ? q->shape[2] / (NH + 2 * NKV) : 0;
    if (q->ndim != 3 || NH < 1 || NKV < 1 || NH % NKV || q->shape[2] % (NH + 2 * NKV) || hd % 2 ||
        hd > 1024 || !(rope->theta > 0.0))
        return vr_graph_fail(g, VR_ERR_INVALID,
                             "%s: rope wants qkv (B,T,(NH+2*NKV)*hd), hd even <= 1024, theta > 0; got %s, NH=%d, "
                             "NKV=%d, theta %g",
                             name, shp(g, qkv, s1), NH, NKV, rope->theta);
    if (rope->scaling == 1 && !(rope->factor > 0 && rope->high_freq > rope->low_freq && rope->orig_max_t > 0))
        return vr_graph_fail(g, VR_ERR_INVALID,
                             "%s: llama3 rope scaling wants factor > 0, high_freq_factor > low_freq_factor, "
                             "original_max_position_embeddings > 0",
                             name);
    int n = fwd_node(g, VR_OP_ROPE, name, 1, &qkv);
    if (n >= 0) {
        g->nodes[n].nh = NH, g->nodes[n].nkv = NKV;
        g->nodes[n].rope = *rope;
    }
    return out_like(g, n, 0, name, qkv, g->tensors[qkv].dtype);
}

int vr_graph_swiglu(vr_graph *g, const char *name, int x)
{
    if (!valid_ids(g, name, 1, &x))
        return -1;
    const vr_tensor *xt = &g->tensors[x];
    char s1[64];
    if (vr_tensor_lastdim(xt) % 2)
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: swiglu wants inp (...,2I); got %s", name, shp(g, x, s1));
    int64_t shape[VR_MAX_DIMS];
    memcpy(shape, xt->shape, sizeof shape);
    shape[xt->ndim - 1] /= 2;
    int n = fwd_node(g, VR_OP_SWIGLU, name, 1, &x);
    return out_tensor(g, n, 0, name, g->act_dtype, VR_ROLE_ACT, xt->ndim, shape);
}

static int unary(vr_graph *g, vr_op op, const char *name, int x)
{
    if (!valid_ids(g, name, 1, &x))
        return -1;
    int n = fwd_node(g, op, name, 1, &x);
    return out_like(g, n, 0, name, x, g->tensors[x].dtype);
}

int vr_graph_gelu(vr_graph *g, const char *name, int x) { return unary(g, VR_OP_GELU, name, x); }
int vr_graph_relu(vr_graph *g, const char *name, int x) { return unary(g, VR_OP_RELU, name, x); }

int vr_graph_add(vr_graph *g, const char *name, int a, int b)
{
    int in[2] = {a, b};
    if (!valid_ids(g, name, 2, in))
        return -1;
    char s1[64], s2[64];
    const vr_tensor *at = &g->tensors[a], *bt = &g->tensors[b];
    if (a == b || at->ndim != bt->ndim || memcmp(at->shape, bt->shape, sizeof(int64_t) * (size_t)at->ndim) ||
        at->dtype != bt->dtype)
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: add wants two distinct tensors of one shape and dtype; got %s, %s",
                             name, shp(g, a, s1), shp(g, b, s2));
    int n = fwd_node(g, VR_OP_ADD, name, 2, in);
    return out_like(g, n, 0, name, a, at->dtype);
}

int vr_graph_reshape(vr_graph *g, const char *name, int x, int ndim, const int64_t *shape)
{
    if (!valid_ids(g, name, 1, &x))
        return -1;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    char s1[64];
    if (ndim < 1 || ndim > VR_MAX_DIMS || numel != vr_tensor_numel(&g->tensors[x]))
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: reshape of %s to %lld elements", name, shp(g, x, s1),
                             (long long)numel);
    int n = fwd_node(g, VR_OP_RESHAPE, name, 1, &x);
    int v = vr_graph_view(g, x, name, ndim, shape, 0);
    if (v >= 0 && n >= 0) {
        g->nodes[n].out[0] = v;
        g->tensors[v].producer = n;
        g->tensors[v].role = g->tensors[x].role;
    }
    return v;
}

int vr_graph_classifier(vr_graph *g, const char *name, int x, int wte, int targets, int V)
{
    int in[3] = {x, wte, targets};
    if (!valid_ids(g, name, 3, in))
        return -1;
    const vr_tensor *xt = &g->tensors[x], *wt = &g->tensors[wte], *tt = &g->tensors[targets];
    char s1[64], s2[64], s3[64];
    if (wt->ndim != 2 || wt->shape[1] != vr_tensor_lastdim(xt) || tt->dtype != VR_I32 ||
        vr_tensor_numel(tt) != vr_tensor_rows(xt) || V < 1 || V > wt->shape[0])
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: classifier wants x (...,C), wte (Vp,C), targets (...) i32 with "
                             "one target per row and V <= Vp; got %s, %s, %s, V=%d", name, shp(g, x, s1),
                             shp(g, wte, s2), shp(g, targets, s3), V);
    int n = fwd_node(g, VR_OP_CLASSIFIER, name, 3, in);
    if (n >= 0)
        g->nodes[n].vocab = V;
    int l = out_tensor(g, n, 0, name, VR_F32, VR_ROLE_TEMP, tt->ndim, g->tensors[targets].shape);
    vr_graph_attach_scratch(g, n);
    return l;
}

int vr_graph_softmax_xent(vr_graph *g, const char *name, int logits, int targets, int *probs)
{
    int in[2] = {logits, targets};
    if (!valid_ids(g, name, 2, in))
        return -1;
    const vr_tensor *lt = &g->tensors[logits], *tt = &g->tensors[targets];
    char s1[64], s2[64];
    if (tt->dtype != VR_I32 || vr_tensor_numel(tt) != vr_tensor_rows(lt))
        return vr_graph_fail(g, VR_ERR_INVALID, "%s: softmax_xent wants logits (...,V), targets (...) i32; got %s, %s",
                             name, shp(g, logits, s1), shp(g, targets, s2));
    int n = fwd_node(g, VR_OP_SOFTMAX_XENT, name, 2, in);
    if (n >= 0)
        g->nodes[n].vocab = (int)vr_tensor_lastdim(lt);
    int l = out_tensor(g, n, 0, name, VR_F32, VR_ROLE_TEMP, tt->ndim, g->tensors[targets].shape);
    char nm[VR_NAME_MAX];
    suffixed(nm, name, ".probs");
    int p = out_like(g, n, 1, nm, logits, VR_F32);
    if (probs)
        *probs = p;
    return l;
}
