/* vram graph — the MLP builder.
 *
 * sizes d0, d1, ..., dn: features (B,d0) -> [linear, act] x (n-1) hidden -> linear -> logits (B,dn),
 * then softmax cross-entropy against labels (B) gives losses (B).
 * Parameters, one flat buffer in PyTorch state_dict order: fc0.w (d1,d0), fc0.b (d1), fc1.w, ...
 * Initialisation hint: PyTorch's nn.Linear default, uniform(-1/sqrt(d_in), 1/sqrt(d_in)). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"

const char *vr_mlp_preset_names(void) { return "mnist, tiny"; }

vr_status vr_mlp_preset(const char *name, vr_mlp_config *out)
{
    memset(out, 0, sizeof *out);
    out->act = VR_OP_RELU;
    if (name && !strcmp(name, "mnist")) {
        int s[] = {784, 256, 256, 10};
        out->n_sizes = 4;
        memcpy(out->sizes, s, sizeof s);
        return VR_OK;
    }
    if (name && !strcmp(name, "tiny")) {
        int s[] = {16, 32, 32, 4};
        out->n_sizes = 4;
        memcpy(out->sizes, s, sizeof s);
        return VR_OK;
    }
    return vr_error(VR_ERR_INVALID, "vr_mlp_preset: unknown MLP preset '%s' (one of %s)", name ? name : "",
                    vr_mlp_preset_names());
}

int64_t vr_mlp_num_params(const vr_mlp_config *c)
{
    int64_t n = 0;
    for (int i = 0; i + 1 < c->n_sizes; i++)
        n += (int64_t)c->sizes[i + 1] * c->sizes[i] + c->sizes[i + 1];
    return n;
}

vr_status vr_mlp_forward(vr_graph *g, const vr_mlp_config *c, int B)
{
    if (c->n_sizes < 2 || c->n_sizes > VR_MLP_MAX_SIZES)
        return g->err = vr_error(VR_ERR_INVALID, "vr_mlp_config.sizes: an MLP needs 2..%d sizes (got %d)",
                                 VR_MLP_MAX_SIZES, c->n_sizes);
    for (int i = 0; i < c->n_sizes; i++)
        if (c->sizes[i] < 1)
            return g->err = vr_error(VR_ERR_INVALID, "vr_mlp_config.sizes: size %d is %d", i, c->sizes[i]);
    if (c->act != VR_OP_RELU && c->act != VR_OP_GELU)
        return g->err = vr_error(VR_ERR_INVALID, "vr_mlp_config.act: an MLP activation is relu or gelu");
    if (B < 1)
        return g->err = vr_error(VR_ERR_INVALID, "vr_model_config.B: must be >= 1 (got %d)", B);
    g->model.kind = VR_MODEL_MLP;
    g->model.mlp = *c;
    g->model.B = B;
    g->model.T = 1;

    vr_graph_param_buffer(g, vr_mlp_num_params(c));
    int64_t fs[2] = {B, c->sizes[0]}, ls[1] = {B};
    g->tokens = vr_graph_tensor(g, "features", g->act_dtype, VR_ROLE_INPUT, 2, fs);
    g->targets = vr_graph_tensor(g, "labels", VR_I32, VR_ROLE_INPUT, 1, ls);

    int x = g->tokens;
    int64_t off = 0;
    char nm[VR_NAME_MAX];
    int nl = c->n_sizes - 1;
    for (int i = 0; i < nl; i++) {
        int64_t din = c->sizes[i], dout = c->sizes[i + 1];
        float bound = 1.0f / sqrtf((float)din);
        int64_t ws[2] = {dout, din}, bs[1] = {dout};
        snprintf(nm, sizeof nm, "fc%d.w", i);
        int w = vr_graph_param(g, nm, 2, ws, off, VR_INIT_UNIFORM, bound);
        off += dout * din;
        snprintf(nm, sizeof nm, "fc%d.b", i);
        int b = vr_graph_param(g, nm, 1, bs, off, VR_INIT_UNIFORM, bound);
        off += dout;
        int n0 = g->n_nodes;
        snprintf(nm, sizeof nm, i + 1 < nl ? "fc%d" : "logits", i);
        x = vr_graph_linear(g, nm, x, w, b);
        if (i + 1 < nl) {
            snprintf(nm, sizeof nm, "fc%d.%s", i, c->act == VR_OP_GELU ? "gelu" : "relu");
            x = c->act == VR_OP_GELU ? vr_graph_gelu(g, nm, x) : vr_graph_relu(g, nm, x);
        }
        for (int n = n0; n < g->n_nodes; n++)
            g->nodes[n].layer = i;
    }
    g->losses = vr_graph_softmax_xent(g, "losses", x, g->targets, NULL);
    return vr_graph_set_loss(g, g->losses);
}
