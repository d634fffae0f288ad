/* What the executor asks of its kernels, checked without a GPU:
 * - the scratch each node is planned equals what the kernels' own size functions say (the compiled
 *   vr_cpu_*_scratch_bytes and, in a CUDA build, vr_cuda_*_scratch_bytes, called as the executor calls
 *   them), for many shapes of GPT and Llama steps in fp32, bf16 and fp16; and the CUDA classifier's chunk
 *   is all of its planned rows;
 * - CUDA graphs asked for but not run say why (vr_exec_cuda_graph_state), and the step still runs;
 * - the executor makes its device current (vr_device_use: a no-op on cpu and meta) without changing a step. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "exec/exec_test_util.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/scratch.h"
#include "vram/device.h"
#ifdef VRAM_HAVE_CUDA
#include "kernels/cuda/kernels_cuda.h"
#endif

#ifdef VRAM_HAVE_CUDA
static int64_t rows_of(const vr_tensor *t) { return vr_tensor_numel(t) / t->shape[t->ndim - 1]; }
static int64_t last_of(const vr_tensor *t) { return t->shape[t->ndim - 1]; }
#endif

/* The scratch the compiled kernels take for node n with the executor's arguments (cpu_node.c and
 * cuda_node_cuda.c); -1 where this build has no such kernel. */
static int64_t kernels_take(const vr_graph *g, const vr_node *n, vr_kernels k)
{
    const vr_tensor *in0 = n->in[0] >= 0 ? &g->tensors[n->in[0]] : NULL;
    if (k == VR_KERNELS_CPU)
        return n->op == VR_OP_CLASSIFIER
                   ? (int64_t)vr_cpu_classifier_scratch_bytes((int)vr_tensor_numel(&g->tensors[n->in[2]]), n->vocab)
                   : 0;
#ifdef VRAM_HAVE_CUDA
    vr_cuda_dtype dt = in0 && in0->dtype == VR_BF16 ? VR_CUDA_BF16 : in0 && in0->dtype == VR_F16 ? VR_CUDA_F16
                                                                                              : VR_CUDA_F32;
    switch (n->op) {
    case VR_OP_CLASSIFIER: {
        int N = (int)vr_tensor_numel(&g->tensors[n->in[2]]), Vw = (int)rows_of(&g->tensors[n->in[1]]);
        size_t b = vr_cuda_classifier_scratch_bytes(N, Vw, dt);
        /* the kernel runs chunks of as many rows as the planned scratch holds: every byte of it, at most N
         * rows (one at least) and at most VR_SCRATCH_CUDA_CLASSIFIER_ROWS */
        int r = vr_cuda_classifier_chunk_rows(b, Vw, dt);
        assert_true(r >= 1 && r <= (N > 0 ? N : 1) && r <= VR_SCRATCH_CUDA_CLASSIFIER_ROWS);
        assert_int_equal((uint64_t)r * vr_scratch_cuda_classifier_vp(Vw) * vr_cuda_dtype_size(dt), b);
        return (int64_t)b;
    }
    case VR_OP_ATTENTION_BWD: {
        const vr_tensor *q = &g->tensors[n->in[1]];
        int nkv = n->nkv > 0 ? n->nkv : n->nh, hd = (int)(q->shape[2] / (n->nh + 2 * nkv));
        int B = (int)q->shape[0], T = (int)q->shape[1];
        int64_t ours = (int64_t)(dt == VR_CUDA_F32 ? vr_cuda_attention_scratch_bytes(B, T, n->nh * hd, n->nh)
                                                   : vr_cuda_attention_scratch_fused_bytes(B, T, n->nh * hd, n->nh));
        /* attention auto (the default): either kernel may run, so the node holds the larger need */
        int64_t theirs = dt == VR_CUDA_F32 || hd % 8 || hd > 128
                             ? 0 : (int64_t)vr_cuda_attention_cudnn_scratch_bytes(B, T, n->nh, nkv, hd);
        return ours > theirs ? ours : theirs;
    }
    case VR_OP_LAYERNORM_BWD:
        return n->out[1] >= 0 || n->out[2] >= 0
                   ? (int64_t)vr_cuda_layernorm_bwd_scratch_bytes((int)rows_of(in0), (int)last_of(in0))
                   : 0;
    case VR_OP_RMSNORM_BWD:
        return n->out[1] >= 0 ? (int64_t)vr_cuda_rmsnorm_bwd_scratch_bytes((int)rows_of(in0), (int)last_of(in0)) : 0;
    case VR_OP_EMBEDDING_BWD: {
        const vr_tensor *tok = &g->tensors[n->in[1]];
        return n->out[0] >= 0 ? (int64_t)vr_cuda_embedding_bwd_scratch_bytes((int)tok->shape[0], (int)tok->shape[1],
                                                                              (int)rows_of(&g->tensors[n->out[0]]))
                              : 0;
    }
    default:
        return 0;
    }
#else
    (void)in0;
    return -1;
#endif
}

static void planned_scratch_is_the_kernels(void **state)
{
    (void)state;
    /* kind, B, T, C, NH, NKV, hd, V, Vp */
    static const int shapes[][9] = {
        {VR_MODEL_GPT, 1, 1, 64, 1, 0, 0, 50, 64},      {VR_MODEL_GPT, 3, 129, 128, 2, 0, 0, 1000, 1024},
        {VR_MODEL_GPT, 2, 40, 96, 4, 0, 0, 257, 320},   {VR_MODEL_GPT, 16, 1024, 64, 1, 0, 0, 300, 384},
        {VR_MODEL_LLAMA, 2, 130, 256, 4, 1, 64, 999, 1024}, {VR_MODEL_LLAMA, 1, 5, 64, 4, 2, 16, 300, 384},
    };
    static const vr_precision precs[] = {VR_PREC_FP32, VR_PREC_BF16, VR_PREC_FP16};
    int checked = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int pk = 0; pk < 3; pk++)
            for (int k = VR_KERNELS_CPU; k <= VR_KERNELS_CUDA; k++) {
                const int *sh = shapes[i];
                vr_model_config m = {.kind = (vr_model_kind)sh[0], .B = sh[1], .T = sh[2]};
                if (m.kind == VR_MODEL_GPT) {
                    m.gpt = (vr_gpt_config){.L = 1, .C = sh[3], .NH = sh[4], .V = sh[7], .Vp = sh[8],
                                            .maxT = sh[2]};
                } else {
                    assert_int_equal(vr_llama_preset("tiny", &m.llama, NULL), VR_OK);
                    m.llama.L = 1, m.llama.C = sh[3], m.llama.NH = sh[4], m.llama.NKV = sh[5];
                    m.llama.hd = sh[6], m.llama.I = 2 * sh[3], m.llama.V = sh[7], m.llama.Vp = sh[8];
                    m.llama.maxT = sh[2];
                }
                vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW, .precision = precs[pk],
                                    .kernels = (vr_kernels)k};
                vr_graph *g = NULL;
                if (vr_graph_build(&m, &s, &g))
                    fail_msg("build: %s", vr_last_error());
                for (int j = 0; j < g->n_nodes; j++) {
                    const vr_node *n = &g->nodes[j];
                    int64_t take = kernels_take(g, n, (vr_kernels)k);
                    if (take < 0)
                        continue; /* no CUDA kernels in this build */
                    uint64_t have = n->scratch >= 0 ? vr_tensor_bytes(&g->tensors[n->scratch]) : 0;
                    if (have != (uint64_t)take)
                        fail_msg("%s %s %s: node %s (%s): planned %llu bytes of scratch, the kernel takes %lld",
                                 vr_model_kind_name(m.kind), vr_precision_name(precs[pk]), k ? "cuda" : "cpu",
                                 n->name, vr_op_name(n->op), (unsigned long long)have, (long long)take);
                    checked += take > 0;
                }
                vr_graph_free(g);
            }
    assert_true(checked > 0);
#ifdef VRAM_HAVE_CUDA
    /* the exported functions are the header's, shape by shape (the kernels check their scratch with them) */
    for (int B = 1; B <= 64; B *= 4)
        for (int T = 1; T <= 4096; T *= 8)
            for (int C = 64; C <= 1600; C += 384) {
                int N = B * T;
                assert_int_equal(vr_cuda_layernorm_bwd_scratch_bytes(N, C), vr_scratch_cuda_layernorm_bwd(N, C));
                assert_int_equal(vr_cuda_rmsnorm_bwd_scratch_bytes(N, C), vr_scratch_cuda_rmsnorm_bwd(N, C));
                assert_int_equal(vr_cuda_embedding_bwd_scratch_bytes(B, T, C * 31), vr_scratch_cuda_embedding_bwd(B, T));
                assert_int_equal(vr_cuda_classifier_scratch_bytes(N, C * 31, VR_CUDA_BF16),
                                 vr_scratch_cuda_classifier(N, C * 31, 2, 0));
                for (int NH = 1; NH <= 25; NH += 8) {
                    assert_int_equal(vr_cuda_attention_scratch_bytes(B, T, NH * 64, NH),
                                     vr_scratch_cuda_attention_delta(B, T, NH));
                    assert_int_equal(vr_cuda_attention_scratch_fused_bytes(B, T, NH * 64, NH),
                                     vr_scratch_cuda_attention_fused(B, T, NH, 64));
                    assert_int_equal(vr_cuda_attention_scratch_fused_bytes(B, T, NH * 80, NH),
                                     vr_scratch_cuda_attention_delta(B, T, NH));
                }
            }
#endif
}

/* One AdamW step of the tiny GPT on cpu with cfg; returns the executor (the caller frees it, g and p). */
static vr_exec *step_with(vr_exec_config ec, vr_step_config s, vr_graph **g, vr_plan **p, vr_device *dev)
{
    vr_model_config m = et_gpt(2, 8);
    assert_int_equal(vr_graph_build(&m, &s, g), VR_OK);
    vr_plan_config pc = {.memory = ec.memory};
    assert_int_equal(vr_plan_create(*g, &pc, p), VR_OK);
    vr_exec *e = NULL;
    if (vr_exec_create(*p, dev, &ec, &e))
        fail_msg("exec: %s", vr_last_error());
    float *init = et_params(*g, 3);
    assert_int_equal(vr_exec_write(e, (*g)->params, init, (uint64_t)(*g)->n_params * 4), VR_OK);
    free(init);
    int accum = s.accum > 1 ? s.accum : 1;
    vr_exec_batch b[4];
    void *in[4];
    int32_t *tg[4];
    for (int i = 0; i < accum; i++) {
        et_batch(*g, (uint64_t)i + 1, &in[i], &tg[i]);
        b[i] = (vr_exec_batch){in[i], tg[i]};
    }
    vr_optim_hparams h = vr_optim_hparams_default(VR_OPTIM_ADAMW);
    vr_exec_result r;
    for (int k = 0; k < 2; k++) /* a second step: where CUDA graphs run, the one that is captured */
        if (vr_exec_step(e, b, &h, &r))
            fail_msg("step: %s", vr_last_error());
    assert_true(isfinite(r.loss));
    for (int i = 0; i < accum; i++)
        free(in[i]), free(tg[i]);
    return e;
}

static void cuda_graph_state_says_why(void **state)
{
    (void)state;
    vr_device *dev = NULL;
    assert_int_equal(vr_device_open("cpu", &dev), VR_OK);
    vr_step_config s = {.train = true, .optim = VR_OPTIM_ADAMW};
    struct {
        vr_exec_config ec;
        int accum;
        bool asked;
        const char *why;
    } cases[] = {
        {{.memory = VR_MEMORY_PLANNED}, 1, false, ""},
        {{.memory = VR_MEMORY_PLANNED, .cuda_graph = true}, 1, true, "on a device without CUDA graphs"},
        {{.memory = VR_MEMORY_DYNAMIC, .cuda_graph = true}, 1, true, "with dynamic memory (vr_exec_config.memory)"},
        {{.memory = VR_MEMORY_PLANNED, .cuda_graph = true, .poison = true}, 1, true, "with vr_exec_config.poison"},
        {{.memory = VR_MEMORY_PLANNED, .cuda_graph = true}, 2, true,
         "with more than one micro-batch per step (vr_step_config.accum)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        s.accum = cases[i].accum;
        vr_graph *g = NULL;
        vr_plan *p = NULL;
        vr_exec *e = step_with(cases[i].ec, s, &g, &p, dev);
        bool on = true;
        const char *why = NULL;
        assert_int_equal(vr_exec_cuda_graph_state(e, &on, &why), cases[i].asked);
        assert_false(on);
        assert_string_equal(why, cases[i].why);
        assert_int_equal(vr_exec_cuda_graph_state(e, NULL, NULL), cases[i].asked);
        vr_exec_free(e);
        vr_plan_free(p);
        vr_graph_free(g);
    }
    vr_device_close(dev);
}

/* vr_device_use, which the executor calls at create and every step, is a no-op on the host devices: the
 * device's memory and a step's results are as without it. */
static void device_use_is_a_noop_on_host_devices(void **state)
{
    (void)state;
    const char *specs[] = {"cpu", "cpu:64MiB", "meta:1GiB"};
    for (int i = 0; i < 3; i++) {
        vr_device *dev = NULL;
        assert_int_equal(vr_device_open(specs[i], &dev), VR_OK);
        void *p = NULL;
        assert_int_equal(vr_device_malloc(dev, 4096, &p), VR_OK);
        vr_device_mem before, after;
        assert_int_equal(vr_device_mem_info(dev, &before), VR_OK);
        assert_int_equal(vr_device_use(dev), VR_OK);
        assert_int_equal(vr_device_use(dev), VR_OK);
        assert_int_equal(vr_device_mem_info(dev, &after), VR_OK);
        assert_int_equal(after.used_by_us, before.used_by_us);
        assert_int_equal(vr_device_index(dev), -1);
        vr_device_free(dev, p, 4096);
        vr_device_close(dev);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(planned_scratch_is_the_kernels),
        cmocka_unit_test(cuda_graph_state_says_why),
        cmocka_unit_test(device_use_is_a_noop_on_host_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
