/* vram graph — the optimizer step and frozen parameters.
 *
 * Optimizer state lives in flat buffers over the trainable parameters, in the parameter buffer's order
 * (llm.c's m_memory and v_memory), one view per parameter; under bf16/fp16 so does the fp32 master copy
 * (unless the step asks for none: bf16 weights updated with stochastic rounding). The state's format
 * (vr_step_config.optim_state) is its dtype:
 *   fp32   optim.m, optim.v (or optim.momentum): f32 over all trainable parameters;
 *   bf16   the same buffers in bf16 (the kernels round stochastically);
 *   8bit   optim.m, optim.v: u8 codes of the tensors that quantize (vram/optim_state.h), with
 *          optim.m.absmax, optim.v.absmax: one f32 per block of 256 of them; optim.m.f32, optim.v.f32:
 *          f32 state of the tensors too small to quantize. Each parameter's optim[i] is a view of the
 *          codes or of the f32 buffer, and absmax[i] a view of its blocks (-1 when f32).
 * After the backward, one update node per parameter with a gradient (preceded by the sumsq nodes of the
 * global norm with clipping, and under fp16 for its overflow check) reads the gradient, which therefore
 * dies at its update: the plan sees every gradient freed at the step.
 *
 * Offload (vr_step_config.offload): the master (fp32 for fp32 params too), the state and host_grads (the
 * gradients' host copy, in the params' dtype) are host tensors. Right after the last node that touches a
 * parameter or its gradient, a copy node sends the gradient down (so the device gradient dies at the next
 * copy, its fence: see VR_OP_COPY); then the host runs the sumsq nodes (in buffer order, as on the device)
 * and, in the order the gradients arrive, one update node per parameter, which reads the host copy and
 * overwrites it with the new weights in the params' dtype, and a copy node sends them back up.
 *
 * Data parallel (vr_step_config.world >= 1): right after the backward's last touch of each parameter, a
 * collective over its gradient (placed as offload places its copies, with the same fence): an all-reduce
 * to the mean (ZeRO 0 and 1), or a reduce to the parameter's owner (ZeRO 2; the other ranks' gradient dies
 * there; ZeRO 2 and 3). Under ZeRO >= 1 the trainable elements, in buffer order, are shared by the ranks in equal
 * contiguous ranges (vr_graph_assign_owners): a parameter a range boundary crosses is cut there into pieces
 * (new parameter tensors, views of the flat buffer over a range of its elements, at multiples of
 * VR_PIECE_ALIGN from its start; the parameter, marked split, stays what the forward and backward read), and
 * every other parameter and every piece has one owner. The optimizer sees pieces in place of split parameters
 * (vr_graph_param_order): a piece's gradient is the view of its parameter's at the same offset (which arrives
 * with the parameter's: one collective per piece, never in a bucket), it has master, state and an update of its
 * own, and decays as its parameter (a matrix's piece is a (1, n) matrix). Only the owner holds the master and
 * optimizer state (the flat buffers cover the rank's own parameters and pieces) and runs the update, after which
 * a broadcast from the owner brings every rank the new weights (ZeRO 1 and 2; ZeRO 3 gathers them where they are
 * used, a split parameter from its pieces' owners: zero3.c). Under ZeRO >= 2 the sumsq nodes cover the rank's own
 * gradients and the executor sums the squared norm over the ranks before the clipping factor.
 *
 * Both (offload with ranks): each gradient's collective, then the copy down of the gradients this rank updates
 * (all of them under ZeRO 0; its own under ZeRO >= 1, whose norm is then summed over the ranks too); the host
 * updates them and copies the new weights up; under ZeRO 1 and 2 the owners then broadcast them. Each rank's
 * host holds the master and state of its own share (ZeRO-Offload's layout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "vram/optim_state.h"

static int by_offset(const void *a, const void *b)
{
    const int64_t *x = a, *y = b; /* {param_offset, id} */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The parameter tensors among the first n (views of the flat buffer with an offset), in buffer order:
 * ids into out (capacity n), their count returned. They must tile the buffer without gaps; a gap is a
 * builder's error (recorded; -1 returned), never parameters silently left out of the step. */
int vr_graph_param_order(vr_graph *g, int n, int *out)
{
    int64_t (*key)[2] = malloc(sizeof *key * (size_t)(n + 1));
    if (!key)
        return vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
    int nk = 0;
    for (int t = 0; t < n; t++)
        if (g->tensors[t].view_of == g->params && g->tensors[t].param_offset >= 0 && g->tensors[t].ndim > 0 &&
            !g->tensors[t].split) { /* a split parameter: its pieces instead */
            key[nk][0] = g->tensors[t].param_offset;
            key[nk++][1] = t;
        }
    qsort(key, (size_t)nk, sizeof *key, by_offset);
    int no = 0;
    int64_t want = 0;
    for (int k = 0; k < nk && want < g->n_params; k++) {
        if (key[k][0] < want) /* a second tensor at an offset already covered (first one wins) */
            continue;
        if (key[k][0] > want)
            break;
        out[no++] = (int)key[k][1];
        want += vr_tensor_numel(&g->tensors[key[k][1]]);
    }
    free(key);
    if (want != g->n_params)
        return vr_graph_fail(g, VR_ERR_INVALID, "graph: the parameters cover elements [0, %lld) of the %lld-element "
                             "parameter buffer; no parameter starts at element %lld",
                             (long long)want, (long long)g->n_params, (long long)want);
    return no;
}

/* The parameter tensors of the whole graph in buffer order, allocated (caller frees; *no their count); NULL
 * after recording an error. */
static int *param_order(vr_graph *g, int *no)
{
    int *order = malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
    if (!order) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        return NULL;
    }
    *no = vr_graph_param_order(g, g->n_tensors, order);
    if (*no < 0) {
        free(order);
        return NULL;
    }
    return order;
}

/* The rank of trainable element i (counted over the trainable elements in buffer order) when N of them are
 * shared by W ranks: rank r holds [r*N/W, (r+1)*N/W). */
static int rank_of(int64_t i, int64_t N, int W)
{
    int64_t r = ((i + 1) * W - 1) / N;
    return r < W ? (int)r : W - 1;
}

/* One piece [a, b) of parameter p (elements of p), owned by `owner`: a view of the parameter buffer. */
static void add_piece(vr_graph *g, int p, int64_t a, int64_t b, int owner)
{
    vr_tensor pt = g->tensors[p];
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%.30s[%lld:%lld]", pt.name, (long long)a, (long long)b);
    int64_t shape[2] = {1, b - a};
    int ndim = pt.ndim >= 2 ? 2 : 1; /* a matrix's piece is a (1, n) matrix: weight decay goes by ndim */
    int v = vr_graph_param(g, name, ndim, ndim == 2 ? shape : shape + 1, pt.param_offset + a, VR_INIT_NONE, 0.0f);
    if (v < 0)
        return;
    g->tensors[v].view_offset = pt.view_offset + a; /* (param_offset is view_offset until ZeRO 3 cuts the buffer) */
    g->tensors[v].piece_of = p;
    g->tensors[v].owner = owner;
    g->tensors[p].split = true;
}

/* ZeRO >= 1: the trainable elements, in buffer order, are shared by the ranks in equal ranges; a parameter that
 * a range boundary crosses is cut there into pieces, each owned by its range's rank, the others are owned
 * whole by the rank whose range holds their middle element. A cut falls on a multiple of VR_PIECE_ALIGN
 * elements from the parameter's start (the nearest to the boundary; 8-bit state's blocks, and so each
 * element's rounding, stay those of the whole parameter) and leaves no piece under VR_PIECE_ALIGN elements
 * (else the boundary moves to the parameter's edge). Frozen parameters stay whole and unowned. */
void vr_graph_assign_owners(vr_graph *g, const vr_step_config *s)
{
    if (s->world < 1 || s->zero < 1 || g->n_trainable <= 0 || g->err)
        return;
    int no = 0;
    int *order = param_order(g, &no);
    if (!order)
        return;
    const int64_t N = g->n_trainable, A = VR_PIECE_ALIGN;
    const int W = s->world;
    int64_t off = 0; /* trainable elements before parameter order[k] */
    for (int k = 0; k < no && !g->err; k++) {
        int p = order[k];
        if (g->tensors[p].frozen)
            continue;
        int64_t n = vr_tensor_numel(&g->tensors[p]), start = 0;
        for (int r = rank_of(off, N, W) + 1; r < W && !g->err; r++) {
            int64_t b = (int64_t)r * N / W - off; /* rank r's first element, in p */
            if (b >= n)
                break;
            int64_t c = (b + A / 2) / A * A;
            if (c - start < A || n - c < A)
                continue;
            add_piece(g, p, start, c, rank_of(off + (start + c) / 2, N, W));
            start = c;
        }
        if (start > 0)
            add_piece(g, p, start, n, rank_of(off + (start + n) / 2, N, W));
        else
            g->tensors[p].owner = rank_of(off + n / 2, N, W);
        off += n;
    }
    free(order);
}

/* Whether this rank keeps state for (and updates) parameter tensor t. */
static bool updates_here(const vr_tensor *t, const vr_step_config *s)
{
    return !t->frozen && (t->owner < 0 || t->owner == s->rank);
}

static int state_count(vr_optim o) { return o == VR_OPTIM_MOMENTUM ? 1 : o == VR_OPTIM_ADAM || o == VR_OPTIM_ADAMW ? 2 : 0; }

/* One flat buffer (none when n is 0). */
static int flat(vr_graph *g, const char *name, vr_dtype dt, vr_role role, int64_t n)
{
    int64_t shape[1] = {n};
    return n > 0 ? vr_graph_tensor(g, name, dt, role, 1, shape) : -1;
}

/* Flat master and optimizer buffers over the trainable params (in parameter order), with a view per
 * parameter (see the file comment for the formats). */
void vr_optimizer_state(vr_graph *g, const vr_step_config *s)
{
    int n_state = state_count(s->optim);
    bool mixed = s->precision != VR_PREC_FP32 && !s->no_master;
    bool q8 = s->optim_state == VR_OSTATE_8BIT && n_state > 0;
    if (g->n_trainable == 0)
        return;
    vr_graph_assign_owners(g, s); /* (adds the pieces) */
    int no = 0;
    int *order = param_order(g, &no);
    if (!order)
        return;
    int64_t nq = 0, nblocks = 0, n32 = 0, nown = 0; /* quantized elements, their blocks, f32-state elements, all */
    for (int i = 0; i < no; i++) {
        int64_t numel = vr_tensor_numel(&g->tensors[order[i]]);
        if (!updates_here(&g->tensors[order[i]], s))
            continue;
        nown += numel;
        if (q8 && vr_q8_quantized(numel))
            nq += numel, nblocks += vr_q8_blocks(numel);
        else
            n32 += numel;
    }
    bool host = s->offload == VR_OFFLOAD_OPTIM;
    if (mixed || host)
        g->master = flat(g, "master", s->split_master && !host ? VR_U16 : VR_F32, VR_ROLE_MASTER, nown);
    if (host)
        g->host_grads = flat(g, "host_grads", g->param_dtype, VR_ROLE_GRAD, nown);
    static const char *names[2][2] = {{"optim.momentum", NULL}, {"optim.m", "optim.v"}};
    vr_dtype sdt = s->optim_state == VR_OSTATE_BF16 ? VR_BF16 : VR_F32;
    for (int i = 0; i < n_state; i++) {
        const char *nm = names[n_state - 1][i];
        char name[VR_NAME_MAX];
        if (q8) {
            g->optim[i] = flat(g, nm, VR_U8, VR_ROLE_OPTIM, nq);
            snprintf(name, sizeof name, "%s.absmax", nm);
            g->absmax[i] = flat(g, name, VR_F32, VR_ROLE_OPTIM, nblocks);
            snprintf(name, sizeof name, "%s.f32", nm);
            g->optim32[i] = flat(g, name, VR_F32, VR_ROLE_OPTIM, n32);
        } else {
            g->optim[i] = flat(g, nm, sdt, VR_ROLE_OPTIM, n32);
        }
    }
    int flats[] = {g->master, g->host_grads, g->optim[0], g->optim[1], g->absmax[0], g->absmax[1], g->optim32[0],
                   g->optim32[1]};
    for (size_t i = 0; host && !g->err && i < sizeof flats / sizeof flats[0]; i++)
        if (flats[i] >= 0)
            g->tensors[flats[i]].host = g->tensors[flats[i]].persistent = true;
    int64_t off = 0, qoff = 0, boff = 0, soff = 0;
    for (int k = 0; k < no; k++) {
        int p = order[k];
        vr_tensor pt = g->tensors[p];
        if (!updates_here(&pt, s))
            continue;
        int64_t numel = vr_tensor_numel(&pt);
        bool quant = q8 && vr_q8_quantized(numel);
        char name[VR_NAME_MAX];
        if (g->master >= 0) {
            snprintf(name, sizeof name, "master.%.56s", pt.name);
            int mv = vr_graph_view(g, g->master, name, pt.ndim, pt.shape, off); /* may move g->tensors */
            g->tensors[p].master = mv;
        }
        for (int i = 0; i < n_state; i++) {
            const char *nm = names[n_state - 1][i];
            snprintf(name, sizeof name, "%s.%.48s", nm, pt.name);
            int v = vr_graph_view(g, quant ? g->optim[i] : q8 ? g->optim32[i] : g->optim[i], name, pt.ndim, pt.shape,
                                  quant ? qoff : q8 ? soff : off);
            g->tensors[p].optim[i] = v; /* vr_graph_view may move g->tensors */
            if (quant) {
                int64_t nb[1] = {vr_q8_blocks(numel)};
                snprintf(name, sizeof name, "%s.absmax.%.40s", nm, pt.name);
                int a = vr_graph_view(g, g->absmax[i], name, 1, nb, boff);
                g->tensors[p].absmax[i] = a;
            }
        }
        off += numel;
        if (quant)
            qoff += numel, boff += vr_q8_blocks(numel);
        else
            soff += numel;
    }
    free(order);
}

static int by_key(const void *a, const void *b)
{
    const int *x = a, *y = b; /* {key, index} */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

static bool node_touches(const vr_node *n, int a, int b)
{
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        if (n->in[k] >= 0 && (n->in[k] == a || n->in[k] == b))
            return true;
    for (int k = 0; k < VR_NODE_MAX_OUT; k++)
        if (n->out[k] >= 0 && (n->out[k] == a || n->out[k] == b))
            return true;
    return false;
}

/* Moves the nodes [first, n_nodes) (offload's copies, data parallel's collectives, ZeRO-3's gathers: one per
 * entry of after[], in that order) to right after node after[k] each (-1: before node 0); node ids held by tensors (producer) and the graph follow. */
void vr_graph_place_after(vr_graph *g, int first, const int *after)
{
    int N = g->n_nodes;
    int *newid = malloc(sizeof(int) * (size_t)(N + 1));
    vr_node *nodes = malloc(sizeof(vr_node) * (size_t)(N + 1));
    if (!newid || !nodes) {
        free(newid);
        free(nodes);
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        return;
    }
    int at = 0, c = first;
    for (; c < N && after[c - first] < 0; c++) /* before the first node */
        newid[c] = at++;
    for (int i = 0; i < first; i++) {
        newid[i] = at++;
        for (; c < N && after[c - first] == i; c++) /* after[] is sorted */
            newid[c] = at++;
    }
    for (int i = 0; i < N; i++)
        nodes[newid[i]] = g->nodes[i];
    memcpy(g->nodes, nodes, sizeof(vr_node) * (size_t)N);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].producer >= 0)
            g->tensors[t].producer = newid[g->tensors[t].producer];
    if (g->loss_node >= 0)
        g->loss_node = newid[g->loss_node];
    free(newid);
    free(nodes);
}

/* The gradients' arrival order: key[k] = {the last node that touches parameter order[i] or its gradient, i},
 * sorted by that node (a piece's: its parameter's, whose gradient the backward writes). */
static void arrival(const vr_graph *g, const int *order, int no, int (*key)[2])
{
    for (int i = 0; i < no; i++) {
        int p = g->tensors[order[i]].piece_of >= 0 ? g->tensors[order[i]].piece_of : order[i], last = -1;
        for (int n = g->n_nodes - 1; n >= 0 && last < 0; n--)
            if (node_touches(&g->nodes[n], p, g->tensors[p].grad))
                last = n;
        key[i][0] = last;
        key[i][1] = i;
    }
    qsort(key, (size_t)no, sizeof *key, by_key);
}

/* The global norm: for clipping, and under fp16 for the loss scaling's overflow check; sumsq nodes over
 * grads[0..n) into one f32 (on the host when offloading). Returns the norm's tensor, -1 none. */
static int norm_nodes(vr_graph *g, const vr_step_config *s, const int *params, const int *grads, int n, bool host)
{
    if (!(s->grad_clip > 0 || s->precision == VR_PREC_FP16) || n == 0)
        return -1;
    int64_t one[1] = {1};
    int normsq = vr_graph_tensor(g, "grad.normsq", VR_F32, VR_ROLE_TEMP, 1, one);
    if (normsq >= 0 && host)
        g->tensors[normsq].host = g->tensors[normsq].persistent = true;
    for (int i = 0; i < n; i++) {
        char name[VR_NAME_MAX];
        snprintf(name, sizeof name, "sumsq.%.50s", g->tensors[params[i]].name);
        int id = vr_graph_node(g, VR_OP_SUMSQ, VR_PHASE_OPTIMIZER, name);
        if (id < 0)
            break;
        g->nodes[id].in[0] = grads[i];
        g->nodes[id].out[0] = normsq;
        g->nodes[id].acc[0] = i ? VR_ACC_ADD : VR_ACC_OVERWRITE;
        g->nodes[id].host = host;
    }
    return normsq;
}

/* One update node of parameter p reading gradient grad and writing the weights into out. */
static int update_node(vr_graph *g, const vr_step_config *s, int p, int grad, int normsq, int out)
{
    static const vr_op ops[] = {VR_OP_SGD, VR_OP_SGD, VR_OP_SGD_MOMENTUM, VR_OP_ADAM, VR_OP_ADAMW};
    vr_tensor pt = g->tensors[p];
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%s.%.50s", vr_optim_name(s->optim), pt.name);
    int id = vr_graph_node(g, ops[s->optim], VR_PHASE_OPTIMIZER, name);
    if (id < 0)
        return -1;
    vr_node *n = &g->nodes[id];
    n->in[0] = grad;
    n->in[1] = normsq;
    n->out[0] = out;
    n->out[1] = pt.master;
    n->out[2] = pt.optim[0];
    n->out[3] = pt.optim[1];
    n->out[4] = pt.absmax[0];
    n->out[5] = pt.absmax[1];
    return id;
}

static int copy_node(vr_graph *g, const char *what, const char *pname, vr_phase ph, int src, int fence, int dst)
{
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "%s.%.48s", what, pname);
    int id = vr_graph_node(g, VR_OP_COPY, ph, name);
    if (id >= 0) {
        g->nodes[id].in[0] = src;
        g->nodes[id].in[1] = fence;
        g->nodes[id].out[0] = dst;
    }
    return id;
}

/* Whether gradient x may join a bucket: a tensor of its own storage (not a view), on the device. */
static bool bucketable(const vr_tensor *x) { return x->view_of < 0 && !x->host && !x->persistent; }

/* The gradients in arrival order key[a..b) become views of one flat tensor (a bucket); returns it. */
static int make_bucket(vr_graph *g, const int *grads, int (*key)[2], int a, int b, int nb)
{
    int64_t n = 0;
    for (int k = a; k < b; k++)
        n += vr_tensor_numel(&g->tensors[grads[key[k][1]]]);
    char name[VR_NAME_MAX];
    snprintf(name, sizeof name, "grad_bucket.%d", nb);
    int64_t shape[1] = {n};
    int bt = vr_graph_tensor(g, name, g->tensors[grads[key[a][1]]].dtype, VR_ROLE_GRAD, 1, shape);
    if (bt < 0)
        return -1;
    g->tensors[bt].persistent = false;
    int64_t off = 0;
    for (int k = a; k < b; k++) {
        vr_tensor *x = &g->tensors[grads[key[k][1]]];
        x->view_of = bt;
        x->view_offset = off;
        off += vr_tensor_numel(x);
    }
    return bt;
}

/* Offload and data parallel: in the gradients' arrival order, data parallel's collectives and offload's copies
 * down, each placed right after the arrival (a gradient's copy after its collective); then the norm and the
 * updates of this rank's parameters (on the host when offloading, in arrival order, each followed by its copy
 * up; on the device in buffer order), and under ZeRO 1 and 2 the owners' broadcasts of the new weights (see the
 * file comment). Consecutive gradients in arrival order share one collective (a bucket: about
 * VR_DIST_BUCKET_BYTES, one dtype, under ZeRO >= 2 one owner), made views of one flat tensor, placed after the
 * last one's arrival: fewer, larger NCCL calls, as DDP's buckets. */
static void step_nodes(vr_graph *g, const vr_step_config *s, const int *order, const int *grads, int no)
{
    bool host = s->offload == VR_OFFLOAD_OPTIM, dist = s->world >= 1;
    int (*key)[2] = calloc((size_t)no + 1, sizeof *key);
    int *after = calloc(2 * (size_t)no + 1, sizeof(int)), *own = calloc((size_t)no + 1, sizeof(int));
    int *owng = calloc((size_t)no + 1, sizeof(int)), *hv = calloc((size_t)no + 1, sizeof(int));
    if (!key || !after || !own || !owng || !hv) {
        vr_graph_fail(g, VR_ERR_OOM, "graph: out of host memory");
        goto out;
    }
    arrival(g, order, no, key);
    for (int i = 0; i < no && !g->err; i++) {
        vr_tensor pt = g->tensors[order[i]];
        hv[i] = -1;
        if (host && updates_here(&pt, s)) {
            char name[VR_NAME_MAX];
            snprintf(name, sizeof name, "host_grads.%.48s", pt.name);
            hv[i] = vr_graph_view(g, g->host_grads, name, pt.ndim, pt.shape, g->tensors[pt.master].view_offset);
        }
    }
    int first = g->n_nodes, fence = -1, cfence = -1, nc = 0, na = 0;
    for (int a = 0, b = 1; a < no && !g->err; a = b) {
        if (dist) {
            const vr_tensor *pa = &g->tensors[order[key[a][1]]], *ga = &g->tensors[grads[key[a][1]]];
            int64_t bytes = (int64_t)vr_tensor_bytes(ga);
            for (b = a + 1; b < no && bucketable(ga); b++) {
                const vr_tensor *pb = &g->tensors[order[key[b][1]]], *gb = &g->tensors[grads[key[b][1]]];
                if (!bucketable(gb) || gb->dtype != ga->dtype || (s->zero >= 2 && pb->owner != pa->owner) ||
                    bytes + (int64_t)vr_tensor_bytes(gb) > VR_DIST_BUCKET_BYTES)
                    break;
                bytes += (int64_t)vr_tensor_bytes(gb);
            }
            int buf = b - a > 1 ? make_bucket(g, grads, key, a, b, nc) : grads[key[a][1]];
            char name[VR_NAME_MAX];
            if (b - a > 1)
                snprintf(name, sizeof name, "%s.grad_bucket.%d", s->zero >= 2 ? "reduce" : "allreduce", nc);
            else
                snprintf(name, sizeof name, "%s.%.48s", s->zero >= 2 ? "reduce" : "allreduce", pa->name);
            int root = pa->owner > 0 ? pa->owner : 0;
            int id = vr_graph_node(g, s->zero >= 2 ? VR_OP_REDUCE : VR_OP_ALLREDUCE, VR_PHASE_BACKWARD, name);
            if (buf < 0 || id < 0)
                break;
            g->nodes[id].in[0] = buf;
            g->nodes[id].in[1] = fence;
            g->nodes[id].root = root;
            g->nodes[id].layer = g->nodes[key[b - 1][0]].layer;
            after[na++] = key[b - 1][0];
            fence = buf;
            nc++;
        } else {
            b = a + 1;
        }
        for (int k = a; k < b && host && !g->err; k++) { /* the copies down of this rank's gradients */
            int i = key[k][1];
            if (hv[i] < 0)
                continue;
            int id = copy_node(g, "down", g->tensors[order[i]].name, VR_PHASE_BACKWARD, grads[i], cfence, hv[i]);
            if (id >= 0)
                g->nodes[id].layer = g->nodes[key[b - 1][0]].layer;
            after[na++] = key[b - 1][0];
            cfence = grads[i];
        }
    }
    if (!g->err)
        vr_graph_place_after(g, first, after);
    int nown = 0;
    for (int i = 0; i < no; i++)
        if (host ? hv[i] >= 0 : s->zero < 2 || updates_here(&g->tensors[order[i]], s)) {
            own[nown] = order[i];
            owng[nown++] = host ? hv[i] : grads[i];
        }
    if (!g->err && (s->zero >= 2 || (host && s->zero >= 1)) && !nown && (s->grad_clip > 0 || s->precision == VR_PREC_FP16)) {
        vr_graph_fail(g, VR_ERR_INVALID, "vr_step_config.zero %d: rank %d of %d owns no parameter, so it has no part "
                      "of the global norm to give; use fewer ranks%s", s->zero, s->rank, s->world,
                      host ? "" : " or ZeRO 1");
        goto out;
    }
    int normsq = norm_nodes(g, s, own, owng, nown, host);
    for (int k = 0; k < no && !g->err; k++) {
        int i = host ? key[k][1] : k;
        if (!updates_here(&g->tensors[order[i]], s))
            continue;
        int id = update_node(g, s, order[i], host ? hv[i] : grads[i], normsq, host ? hv[i] : order[i]);
        if (host && id >= 0) {
            g->nodes[id].host = true;
            copy_node(g, "up", g->tensors[order[i]].name, VR_PHASE_OPTIMIZER, hv[i], -1, order[i]);
        }
    }
    for (int i = 0; i < no && (s->zero == 1 || s->zero == 2) && !g->err; i++) { /* ZeRO-3 gathers at use */
        const vr_tensor *pt = &g->tensors[order[i]];
        char name[VR_NAME_MAX];
        snprintf(name, sizeof name, "broadcast.%.48s", pt->name);
        int id = vr_graph_node(g, VR_OP_BROADCAST, VR_PHASE_OPTIMIZER, name);
        if (id >= 0) {
            g->nodes[id].in[0] = order[i];
            g->nodes[id].root = pt->owner;
        }
    }
out:
    free(key);
    free(after);
    free(own);
    free(owng);
    free(hv);
}

/* Clipping (sumsq) and one update node per parameter with a gradient, in buffer order. */
void vr_optimizer_nodes(vr_graph *g, const vr_step_config *s, int n0)
{
    int *order = malloc(sizeof(int) * (size_t)(n0 + 1));
    int *grads = calloc((size_t)n0 + 1, sizeof(int));
    if (!order || !grads) {
        free(order);
        free(grads);
        vr_graph_fail(g, VR_ERR_OOM, "autodiff: out of host memory");
        return;
    }
    int np = vr_graph_param_order(g, n0, order), no = 0;
    for (int i = 0; i < np && !g->err; i++) { /* a piece's gradient: the view of its parameter's */
        vr_tensor pt = g->tensors[order[i]];
        int pg = pt.piece_of >= 0 ? g->tensors[pt.piece_of].grad : -1;
        if (pg >= 0) {
            char name[VR_NAME_MAX];
            snprintf(name, sizeof name, "grad.%.56s", pt.name);
            int v = vr_graph_view(g, pg, name, pt.ndim, pt.shape, pt.param_offset - g->tensors[pt.piece_of].param_offset);
            g->tensors[order[i]].grad = v;
        }
    }
    for (int i = 0; i < np; i++)
        if (g->tensors[order[i]].grad >= 0) {
            grads[no] = g->tensors[order[i]].grad;
            order[no++] = order[i];
        }
    if ((s->offload == VR_OFFLOAD_OPTIM || s->world >= 1) && s->optim != VR_OPTIM_NONE) {
        step_nodes(g, s, order, grads, no);
        free(order);
        free(grads);
        return;
    }
    int normsq = norm_nodes(g, s, order, grads, no, false);
    for (int i = 0; i < no && s->optim != VR_OPTIM_NONE; i++)
        update_node(g, s, order[i], grads[i], normsq, order[i]);
    if (s->optim == VR_OPTIM_NONE) /* backward only: the gradients are the step's result (a piece's: its parameter's) */
        for (int i = 0; i < no; i++) {
            int p = g->tensors[order[i]].piece_of >= 0 ? g->tensors[order[i]].piece_of : order[i];
            g->tensors[g->tensors[p].grad].output = true;
        }
    free(order);
    free(grads);
}

vr_status vr_graph_freeze(vr_graph *g, const char *patterns)
{
    if (g->err || !patterns || !*patterns)
        return g->err;
    for (const char *p = patterns; *p;) {
        char glob[VR_NAME_MAX];
        size_t len = strcspn(p, ",");
        snprintf(glob, sizeof glob, "%.*s", (int)(len < sizeof glob ? len : sizeof glob - 1), p);
        p += len + (p[len] == ',');
        if (!*glob)
            continue;
        int hits = 0;
        for (int t = 0; t < g->n_tensors; t++) {
            vr_tensor *x = &g->tensors[t];
            if (x->view_of == g->params && x->param_offset >= 0 && vr_glob_match(glob, x->name)) {
                if (!x->frozen)
                    g->n_trainable -= vr_tensor_numel(x);
                x->frozen = true;
                hits++;
            }
        }
        if (!hits)
            return vr_graph_fail(g, VR_ERR_INVALID, "vr_step_config.freeze: '%s' matches no parameter (names look "
                                 "like 'wte', 'h.0.attn.c_attn.w', 'fc0.w')", glob), g->err;
    }
    return VR_OK;
}
