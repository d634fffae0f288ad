/* Every kernel's scratch is planned: for many shapes (B, T, C, NH, NKV, head size, V, Vp), precisions,
 * recompute policies and frozen parameters, each node of a GPT or Llama step whose kernel takes scratch
 * has a scratch tensor of exactly the kernels' size function (kernels/scratch.h, the functions the CUDA
 * and CPU kernels check their scratch with), computed here from the model's numbers rather than from the
 * node's tensors; no other node has one; the formulas give the figures worked out by hand for GPT-2; and a
 * planned step gives every such node a scratch tensor of role temp, live during its node, of at least the
 * need. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/scratch.h"
#include "vram/graph.h"
#include "vram/plan.h"

/* The numbers a model's kernels are called with. */
typedef struct shape {
    vr_model_kind kind;
    int B, T, C, NH, NKV, hd, V, Vp;
} shape;

static int64_t esize_of(vr_precision p) { return p == VR_PREC_FP32 ? 4 : 2; }

/* The scratch node n's kernel takes, from the model's numbers (N = B*T rows everywhere). */
static uint64_t expected(const vr_node *n, const shape *sh, vr_kernels k, vr_precision p, vr_attention a, int cls_rows)
{
    int64_t N = (int64_t)sh->B * sh->T, es = esize_of(p);
    bool cuda = k == VR_KERNELS_CUDA;
    switch (n->op) {
    case VR_OP_CLASSIFIER:
        return cuda ? vr_scratch_cuda_classifier(N, sh->Vp, es, cls_rows) : vr_scratch_cpu_classifier(N, sh->V);
    case VR_OP_ATTENTION_BWD: { /* vram's; cuDNN's (16 bits, head size a multiple of 8 up to 128) by the choice */
        if (!cuda)
            return 0;
        uint64_t ours = vr_scratch_cuda_attention_bwd(sh->B, sh->T, sh->NH, sh->hd, es);
        if (a == VR_ATTENTION_VRAM || es != 2 || sh->hd % 8 || sh->hd > 128)
            return ours;
        uint64_t theirs = vr_scratch_cudnn_attention_bwd(sh->B, sh->T, sh->NH, sh->NKV, sh->hd);
        return a == VR_ATTENTION_CUDNN || theirs > ours ? theirs : ours;
    }
    case VR_OP_LAYERNORM_BWD:
        return cuda && (n->out[1] >= 0 || n->out[2] >= 0) ? vr_scratch_cuda_layernorm_bwd(N, sh->C) : 0;
    case VR_OP_RMSNORM_BWD:
        return cuda && n->out[1] >= 0 ? vr_scratch_cuda_rmsnorm_bwd(N, sh->C) : 0;
    case VR_OP_EMBEDDING_BWD:
        return cuda && n->out[0] >= 0 ? vr_scratch_cuda_embedding_bwd(sh->B, sh->T) : 0;
    default:
        return 0;
    }
}

static vr_graph *build(const shape *sh, vr_step_config s)
{
    vr_model_config m = {.kind = sh->kind, .B = sh->B, .T = sh->T};
    if (sh->kind == VR_MODEL_GPT) {
        m.gpt = (vr_gpt_config){.L = 2, .C = sh->C, .NH = sh->NH, .V = sh->V, .Vp = sh->Vp, .maxT = sh->T + 3};
    } else {
        assert_int_equal(vr_llama_preset("tiny", &m.llama, NULL), VR_OK);
        m.llama.L = 2;
        m.llama.C = sh->C;
        m.llama.NH = sh->NH;
        m.llama.NKV = sh->NKV;
        m.llama.hd = sh->hd;
        m.llama.I = 2 * sh->C;
        m.llama.V = sh->V;
        m.llama.Vp = sh->Vp;
        m.llama.maxT = sh->T + 3;
    }
    vr_graph *g = NULL;
    if (vr_graph_build(&m, &s, &g))
        fail_msg("build B%d T%d C%d NH%d: %s", sh->B, sh->T, sh->C, sh->NH, vr_last_error());
    return g;
}

/* Checks every node of g; counts the nodes with scratch per op into seen. */
static void check_graph(const vr_graph *g, const shape *sh, vr_kernels k, vr_precision p, int seen[VR_OP_COUNT])
{
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        uint64_t want = expected(n, sh, k, p, g->step.attention, g->step.classifier_rows);
        uint64_t have = n->scratch >= 0 ? vr_tensor_bytes(&g->tensors[n->scratch]) : 0;
        if (have != want || vr_node_scratch_bytes_for(g, n, k) != want)
            fail_msg("%s %s B%d T%d C%d NH%d NKV%d hd%d V%d Vp%d %s %s: node %s (%s) scratch %llu, the kernels "
                     "take %llu", vr_model_kind_name(sh->kind), vr_precision_name(p), sh->B, sh->T, sh->C, sh->NH,
                     sh->NKV, sh->hd, sh->V, sh->Vp, k == VR_KERNELS_CUDA ? "cuda" : "cpu",
                     vr_recompute_name(g->step.recompute), n->name, vr_op_name(n->op), (unsigned long long)have,
                     (unsigned long long)want);
        if (want) {
            seen[n->op]++;
            assert_int_equal(g->tensors[n->scratch].role, VR_ROLE_TEMP);
        }
    }
}

static void scratch_by_shape(void **state)
{
    (void)state;
    /* head sizes 64 (the fused backward in 16 bits) and others; rows from 1 to past 128 slices of 128 rows;
     * vocabularies padded or not */
    static const shape shapes[] = {
        {VR_MODEL_GPT, 1, 1, 64, 1, 0, 0, 50, 64},       {VR_MODEL_GPT, 2, 7, 64, 4, 0, 0, 257, 320},
        {VR_MODEL_GPT, 3, 64, 128, 2, 0, 0, 1000, 1024}, {VR_MODEL_GPT, 4, 100, 192, 3, 0, 0, 300, 300},
        {VR_MODEL_GPT, 2, 129, 96, 4, 0, 0, 65, 128},    {VR_MODEL_GPT, 20, 1000, 64, 1, 0, 0, 512, 512},
        {VR_MODEL_LLAMA, 1, 5, 64, 4, 2, 16, 300, 384},  {VR_MODEL_LLAMA, 2, 130, 256, 4, 1, 64, 1000, 1024},
        {VR_MODEL_LLAMA, 3, 33, 96, 6, 3, 16, 77, 128},  {VR_MODEL_LLAMA, 2, 300, 128, 2, 2, 64, 500, 512},
    };
    static const vr_precision precs[] = {VR_PREC_FP32, VR_PREC_BF16, VR_PREC_FP16};
    static const vr_recompute recs[] = {VR_RECOMPUTE_NONE, VR_RECOMPUTE_BLOCK};
    int seen[2][VR_OP_COUNT];
    memset(seen, 0, sizeof seen);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        shape sh = shapes[i];
        if (sh.kind == VR_MODEL_GPT)
            sh.NKV = sh.NH, sh.hd = sh.C / sh.NH;
        for (int pk = 0; pk < 3; pk++)
            for (int k = 0; k < 2; k++)
                for (int r = 0; r < 2; r++)
                    for (int at = 0; at < 3; at++) {
                        vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .precision = precs[pk],
                                            .recompute = recs[r], .kernels = (vr_kernels)k,
                                            .attention = (vr_attention)at,
                                            .classifier_rows = at == 1 && k == VR_KERNELS_CUDA ? 3 : 0};
                        vr_graph *g = build(&sh, s);
                        check_graph(g, &sh, (vr_kernels)k, precs[pk], seen[k]);
                        vr_graph_free(g);
                    }
    }
    /* classifier rows asked for with the CPU kernels (whose chunk is their own): refused, naming the field */
    vr_model_config m = {.kind = VR_MODEL_GPT, .B = 2, .T = 8,
                         .gpt = {.L = 1, .C = 64, .NH = 1, .V = 50, .Vp = 64, .maxT = 8}};
    vr_step_config sc = {.train = true, .optim = VR_OPTIM_ADAMW, .classifier_rows = 4};
    vr_graph *g = NULL;
    assert_int_equal(vr_graph_build(&m, &sc, &g), VR_ERR_INVALID);
    assert_null(g);
    assert_non_null(strstr(vr_last_error(), "vr_step_config.classifier_rows"));
    /* every op that takes scratch was met (else the loop above checked nothing of it) */
    assert_true(seen[VR_KERNELS_CPU][VR_OP_CLASSIFIER] > 0);
    for (int op = 0; op < VR_OP_COUNT; op++)
        if (op != VR_OP_CLASSIFIER)
            assert_int_equal(seen[VR_KERNELS_CPU][op], 0);
    const vr_op cuda_ops[] = {VR_OP_CLASSIFIER, VR_OP_ATTENTION_BWD, VR_OP_LAYERNORM_BWD, VR_OP_RMSNORM_BWD,
                              VR_OP_EMBEDDING_BWD};
    for (size_t i = 0; i < sizeof cuda_ops / sizeof *cuda_ops; i++)
        if (!seen[VR_KERNELS_CUDA][cuda_ops[i]])
            fail_msg("no %s node with CUDA scratch", vr_op_name(cuda_ops[i]));
}

/* The formulas, worked out by hand for GPT-2 124M at B 4, T 256 (N 1024 rows, C 768, NH 12 of 64). */
static void gpt2_figures(void **state)
{
    (void)state;
    /* the classifier: 1024 rows of 50304 (a multiple of 64) bf16 logits; CPU: 128 rows of 50257 fp32 */
    assert_int_equal(vr_scratch_cuda_classifier(1024, 50304, 2, 0), 1024ull * 50304 * 2);
    assert_int_equal(vr_scratch_cuda_classifier(1024, 50257, 2, 0), 1024ull * 50304 * 2);
    assert_int_equal(vr_scratch_cuda_classifier(16384, 50257, 2, 0), 4096ull * 50304 * 2);   /* 393 MiB */
    assert_int_equal(vr_scratch_cuda_classifier(16384, 50257, 4, 0), 2668ull * 50304 * 4);   /* the 512 MiB cap */
    assert_int_equal(vr_scratch_cuda_classifier(16384, 128256, 4, 0), 1046ull * 128256 * 4);
    assert_int_equal(vr_scratch_cuda_classifier(16384, 300032, 4, 0), 1024ull * 300032 * 4); /* at least 1024 */
    assert_int_equal(vr_scratch_cuda_classifier(5, 50257, 4, 0), 5ull * 50304 * 4);
    /* rows asked for (vr_step_config.classifier_rows): that many, N at most, below the default's 1024 too */
    assert_int_equal(vr_scratch_cuda_classifier(16384, 50257, 2, 2048), 2048ull * 50304 * 2); /* 196.5 MiB */
    assert_int_equal(vr_scratch_cuda_classifier(16384, 50257, 4, 8192), 8192ull * 50304 * 4); /* above the cap */
    assert_int_equal(vr_scratch_cuda_classifier(16384, 300032, 4, 100), 100ull * 300032 * 4);
    assert_int_equal(vr_scratch_cuda_classifier(5, 50257, 4, 2048), 5ull * 50304 * 4);
    assert_int_equal(vr_scratch_cpu_classifier(1024, 50257), 128ull * 50257 * 4);
    assert_int_equal(vr_scratch_cpu_classifier(0, 50257), 50257ull * 4); /* one row at least */
    /* attention: delta (4,12,256) fp32 = 49152 bytes; bf16 adds every head's fp32 dQ (4*12*256*64*4) */
    assert_int_equal(vr_scratch_cuda_attention_bwd(4, 256, 12, 64, 4), 49152);
    assert_int_equal(vr_scratch_cuda_attention_bwd(4, 256, 12, 64, 2), 49152 + 3145728);
    assert_int_equal(vr_scratch_cuda_attention_bwd(4, 256, 12, 32, 2), 49152); /* no fused kernel */
    assert_int_equal(vr_scratch_cuda_attention_bwd(1, 3, 1, 64, 2), 256 + 3 * 64 * 4); /* delta 256-aligned */
    /* cuDNN's backward: the fp32 dQ accumulator (4,12,256,64), then softmax_sum (4,12,256) fp32: at head size
     * 64 as much as vram's fused backward; at 128 twice the dQ, where vram's (scalar) takes delta only; auto
     * plans the larger, vram and cudnn their own; fp32 and head sizes cuDNN does not take: vram's */
    assert_int_equal(vr_scratch_cudnn_attention_bwd(4, 256, 12, 12, 64), 3145728 + 49152);
    assert_int_equal(vr_scratch_cudnn_attention_bwd(4, 256, 12, 12, 128), 6291456 + 49152);
    assert_int_equal(vr_scratch_cudnn_attention_bwd(1, 3, 1, 1, 64), 768 + 12);
    /* grouped-query attention: the plan's workspace of dK, dV over every query head (+256), after softmax_sum
     * (sizes measured on an H100: 409,856 and 67,109,120 bytes) */
    assert_int_equal(vr_scratch_cudnn_attention_plan_ws(2, 200, 4, 1, 64), 409856);
    assert_int_equal(vr_scratch_cudnn_attention_plan_ws(4, 2048, 32, 8, 64), 67109120);
    assert_int_equal(vr_scratch_cudnn_attention_plan_ws(4, 2048, 32, 32, 64), 0);
    assert_int_equal(vr_scratch_cudnn_attention_bwd(2, 200, 4, 1, 64), 409600 + 6400 + 409856);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(4, 256, 12, 12, 128, 2, VR_SCRATCH_ATTN_AUTO), 6291456 + 49152);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(4, 256, 12, 12, 128, 2, VR_SCRATCH_ATTN_VRAM), 49152);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(4, 256, 12, 12, 128, 2, VR_SCRATCH_ATTN_CUDNN), 6291456 + 49152);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(1, 3, 1, 1, 64, 2, VR_SCRATCH_ATTN_AUTO), 1024);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(1, 3, 1, 1, 64, 2, VR_SCRATCH_ATTN_CUDNN), 780);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(4, 256, 12, 12, 64, 4, VR_SCRATCH_ATTN_CUDNN), 49152);
    assert_int_equal(vr_scratch_cuda_attention_bwd_for(4, 256, 12, 12, 36, 2, VR_SCRATCH_ATTN_CUDNN), 49152);
    /* LayerNorm: 64 slices of 16 rows, dw, db and the next Linear's bias gradient of 768 fp32 each, at most 256
     * slices; RMSNorm the same slices, dw only */
    assert_int_equal(vr_scratch_cuda_layernorm_bwd(1024, 768), 64ull * 3 * 768 * 4);
    assert_int_equal(vr_scratch_cuda_layernorm_bwd(8192, 1024), 256ull * 3 * 1024 * 4);
    assert_int_equal(vr_scratch_cuda_rmsnorm_bwd(1024, 768), 64ull * 768 * 4);
    assert_int_equal(vr_scratch_cuda_layernorm_bwd(1, 768), 1ull * 3 * 768 * 4);
    assert_int_equal(vr_scratch_cuda_rmsnorm_bwd(1 << 20, 768), 256ull * 768 * 4);
    assert_int_equal(vr_scratch_cuda_rmsnorm_bwd(1, 2048), 1ull * 2048 * 4);
    /* the embedding's sort: 4 arrays of 1024 int32, then 1 MiB + 8 bytes a row for CUB */
    assert_int_equal(vr_scratch_cuda_embedding_bwd(4, 256), 4ull * 4096 + (1ull << 20) + 8192);
    assert_int_equal(vr_scratch_cuda_embedding_bwd(1, 3), 4ull * 256 + (1ull << 20) + 256);
    assert_int_equal(vr_scratch_cuda_embedding_bwd(0, 256), 0);
}

/* Frozen parameters: the kernels take scratch only for the outputs a node computes. */
static void scratch_when_frozen(void **state)
{
    (void)state;
    shape sh = {VR_MODEL_GPT, 2, 16, 64, 1, 1, 64, 100, 128};
    /* ln_1's weight frozen: its bias's gradient still needs the partial sums; wte frozen: no sort */
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .precision = VR_PREC_BF16, .kernels = VR_KERNELS_CUDA,
                        .freeze = "h.*.ln_1.w,wte"};
    vr_graph *g = build(&sh, s);
    int seen[VR_OP_COUNT] = {0}, ln1 = 0, emb = 0;
    check_graph(g, &sh, VR_KERNELS_CUDA, VR_PREC_BF16, seen);
    for (int i = 0; i < g->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        if (n->op == VR_OP_LAYERNORM_BWD && strstr(n->name, "ln1") && n->out[1] < 0 && n->out[2] >= 0) {
            ln1++;
            assert_true(n->scratch >= 0);
        }
        if (n->op == VR_OP_EMBEDDING_BWD) {
            emb++;
            assert_true(n->out[0] < 0 && n->scratch < 0);
        }
    }
    assert_int_equal(ln1, 2);
    assert_int_equal(emb, 1);
    vr_graph_free(g);
    /* everything but the final norm frozen: its bias and weight, in one node */
    s.freeze = "wte,wpe,h.*";
    g = build(&sh, s);
    memset(seen, 0, sizeof seen);
    check_graph(g, &sh, VR_KERNELS_CUDA, VR_PREC_BF16, seen);
    assert_int_equal(seen[VR_OP_LAYERNORM_BWD], 1);
    assert_int_equal(seen[VR_OP_ATTENTION_BWD], 0); /* no gradient reaches the blocks' inputs */
    vr_graph_free(g);
}

/* A planned step gives every node whose CUDA kernel takes scratch a temp tensor, live during the node, of
 * at least the need; in 16 bits the attention backward's is the fused one. */
static void planned_step_holds_the_need(void **state)
{
    (void)state;
    static const shape shapes[] = {
        {VR_MODEL_GPT, 4, 256, 768, 12, 12, 64, 50257, 50304},
        {VR_MODEL_LLAMA, 2, 128, 256, 4, 2, 64, 1000, 1024},
    };
    static const vr_precision precs[] = {VR_PREC_FP32, VR_PREC_BF16};
    static const vr_memory_mode modes[] = {VR_MEMORY_PLANNED, VR_MEMORY_DYNAMIC};
    for (int i = 0; i < 2; i++)
        for (int pk = 0; pk < 2; pk++)
            for (int md = 0; md < 2; md++) {
                shape sh = shapes[i];
                vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .precision = precs[pk],
                                    .kernels = VR_KERNELS_CUDA, .workspace_bytes = (uint64_t)32 << 20};
                vr_model_config m = {.kind = sh.kind, .B = sh.B, .T = sh.T};
                vr_graph *g = NULL;
                if (sh.kind == VR_MODEL_GPT) {
                    assert_int_equal(vr_gpt_preset("gpt2", &m.gpt, NULL), VR_OK);
                    m.gpt.L = 2;
                    assert_int_equal(vr_graph_build(&m, &s, &g), VR_OK);
                } else {
                    g = build(&sh, s);
                }
                vr_plan_config pc = {.memory = modes[md]};
                vr_plan *p = NULL;
                if (vr_plan_create(g, &pc, &p))
                    fail_msg("plan: %s", vr_last_error());
                int with = 0;
                uint64_t temp_need = 0;
                for (int j = 0; j < g->n_nodes; j++) {
                    const vr_node *n = &g->nodes[j];
                    uint64_t need = expected(n, &sh, VR_KERNELS_CUDA, precs[pk], g->step.attention, 0);
                    if (!need)
                        continue;
                    with++;
                    assert_true(n->scratch >= 0);
                    const vr_plan_tensor *t = &p->tensors[n->scratch];
                    assert_int_equal(t->role, VR_ROLE_TEMP);
                    assert_true(t->bytes >= need);
                    assert_true(t->first <= j && j <= t->last);
                    if (n->op == VR_OP_ATTENTION_BWD && precs[pk] == VR_PREC_BF16)
                        assert_true(t->bytes > vr_scratch_cuda_attention_delta(sh.B, sh.T, sh.NH));
                    /* the temp bytes live during the node include it */
                    assert_true(vr_plan_live(p, j, VR_ROLE_TEMP) >= need);
                    if (need > temp_need)
                        temp_need = need;
                }
                /* 2 layers: 2 attention and 4 (GPT: 5 with ln_f) norm backwards, the classifier, the embedding */
                assert_true(with >= 8);
                assert_true(p->max_live[VR_ROLE_TEMP] >= temp_need + ((uint64_t)32 << 20));
                vr_plan_free(p);
                vr_graph_free(g);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scratch_by_shape),
        cmocka_unit_test(gpt2_figures),
        cmocka_unit_test(scratch_when_frozen),
        cmocka_unit_test(planned_step_holds_the_need),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
