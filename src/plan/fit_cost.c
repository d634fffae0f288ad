/* vram fit — the cost model of one optimizer step (stated in vram/fit.h):
 * matmul-class FLOPs / throughput + other kernels' bytes / bandwidth + launches. */
#include "vram/fit.h"

vr_fit_cost_model vr_fit_cost_h100(void)
{
    return (vr_fit_cost_model){.tflops = {150.0, 400.0, 400.0}, .bandwidth_gbs = 2500.0, .launch_us = 5.0,
                               .host_elems_per_s = 2.2e9, .link_gbs = 50.0, .comm_gbs = 300.0};
}

static double numel(const vr_graph *g, int id) { return id >= 0 ? (double)vr_tensor_numel(&g->tensors[id]) : 0; }

static double dim(const vr_graph *g, int id, int d) { return id >= 0 ? (double)g->tensors[id].shape[d] : 0; }

double vr_fit_node_flops(const vr_graph *g, const vr_node *n)
{
    switch (n->op) {
    case VR_OP_MATMUL: { /* x (N,C), w (OC,C) -> y (N,OC) */
        return 2.0 * numel(g, n->in[0]) * dim(g, n->in[1], 0); /* 2 · (N·C) · OC */
    }
    case VR_OP_MATMUL_BWD: { /* dy (N,OC), x, w (OC,C) -> dx, dw, db */
        double OC = dim(g, n->in[2], 0), C = dim(g, n->in[2], 1);
        double N = OC > 0 ? numel(g, n->in[0]) / OC : 0;
        return 2.0 * N * C * OC * ((n->out[0] >= 0) + (n->out[1] >= 0));
    }
    case VR_OP_ATTENTION: { /* qkv (B,T,3C), causal */
        double B = dim(g, n->in[0], 0), T = dim(g, n->in[0], 1), C = dim(g, n->in[0], 2) / 3;
        return 2.0 * B * T * T * C;
    }
    case VR_OP_ATTENTION_BWD: { /* dy, qkv (B,T,3C), ... */
        double B = dim(g, n->in[1], 0), T = dim(g, n->in[1], 1), C = dim(g, n->in[1], 2) / 3;
        return 5.0 * B * T * T * C;
    }
    case VR_OP_CLASSIFIER: { /* x (N,C), wte (Vp,C): logits, then dx and dwte when computed */
        double C = dim(g, n->in[1], 1);
        double N = C > 0 ? numel(g, n->in[0]) / C : 0;
        return 2.0 * N * C * n->vocab * (1 + (n->out[1] >= 0) + (n->out[2] >= 0));
    }
    default:
        return 0;
    }
}

static double node_bytes(const vr_graph *g, const vr_node *n)
{
    double b = 0;
    for (int k = 0; k < VR_NODE_MAX_IN; k++)
        if (n->in[k] >= 0)
            b += (double)vr_tensor_bytes(&g->tensors[n->in[k]]);
    for (int k = 0; k < VR_NODE_MAX_OUT; k++)
        if (n->out[k] >= 0)
            b += (double)vr_tensor_bytes(&g->tensors[n->out[k]]);
    return b;
}

vr_fit_cost vr_fit_step_cost(const vr_graph *g, const vr_fit_cost_model *cm)
{
    vr_fit_cost c = {0};
    int accum = g->step.train && g->step.accum > 1 ? g->step.accum : 1;
    unsigned p = (unsigned)g->step.precision < 3 ? (unsigned)g->step.precision : 0;
    double tf = cm->tflops[p] > 0 ? cm->tflops[p] : 1.0;
    double bw = cm->bandwidth_gbs > 0 ? cm->bandwidth_gbs : 1.0;
    double host = cm->host_elems_per_s > 0 ? cm->host_elems_per_s : 1e9;
    double link = cm->link_gbs > 0 ? cm->link_gbs : 25.0;
    double comm = cm->comm_gbs > 0 ? cm->comm_gbs : 100.0;
    double bwd = 0, up = 0; /* one micro-batch's backward on the device; the copies up */
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (!vr_op_get_info(n->op)->kernel)
            continue; /* a view: no kernel */
        if (n->host) {
            c.host_seconds += numel(g, n->in[0]) / host;
            continue;
        }
        if (n->op == VR_OP_ALLREDUCE || n->op == VR_OP_REDUCE || n->op == VR_OP_BROADCAST || n->op == VR_OP_GATHER) {
            int w = g->step.world > 1 ? g->step.world : 1;
            int buf = n->op == VR_OP_GATHER ? n->out[0] : n->in[0];
            double b = (double)vr_tensor_bytes(&g->tensors[buf]) * (w - 1) / w * (n->op == VR_OP_ALLREDUCE ? 2 : 1);
            c.comm_seconds += (n->op == VR_OP_GATHER ? accum : 1) * b / (comm * 1e9);
            continue;
        }
        if (n->op == VR_OP_COPY) {
            double s = (double)vr_tensor_bytes(&g->tensors[n->out[0]]) / (link * 1e9);
            c.copy_seconds += s;
            up += n->phase == VR_PHASE_OPTIMIZER ? s : 0;
            continue;
        }
        int times = n->phase == VR_PHASE_OPTIMIZER ? 1 : accum;
        double f = vr_fit_node_flops(g, n);
        double s = f / (tf * 1e12) + (f == 0 ? node_bytes(g, n) / (bw * 1e9) : 0) + cm->launch_us * 1e-6;
        c.flops += times * f;
        if (f == 0)
            c.bytes += times * node_bytes(g, n);
        c.launches += times;
        bwd += n->phase == VR_PHASE_BACKWARD || n->phase == VR_PHASE_RECOMPUTE ? s : 0;
    }
    c.seconds = c.flops / (tf * 1e12) + c.bytes / (bw * 1e9) + (double)c.launches * cm->launch_us * 1e-6 + c.comm_seconds;
    double hidden = c.host_seconds + up - bwd;
    if (c.host_seconds > 0 && hidden > 0)
        c.seconds += hidden;
    return c;
}
