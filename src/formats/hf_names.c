/* The tensor names and PyTorch shapes of a Llama-family checkpoint, and the
 * check of an opened checkpoint against them. */
#include "vram/hf_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Llama/Mistral's attention_bias also puts a bias on o_proj; Qwen2's q/k/v biases are alone. */
static int o_bias(const vr_hf_config *c) { return c->attention_bias && strcmp(c->model_type, "qwen2") != 0; }

int vr_hf_tensor_count(const vr_hf_config *c)
{
    int per_layer = 9 + (c->attention_bias ? 3 : 0) + o_bias(c);
    return 2 + c->num_hidden_layers * per_layer + (c->tie_word_embeddings ? 0 : 1);
}

static void put(vr_hf_tensor *t, int *k, const char *name, int ndim, int64_t a, int64_t b)
{
    vr_hf_tensor *x = &t[(*k)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = ndim;
    x->shape[0] = a;
    x->shape[1] = ndim == 2 ? b : 0;
}

void vr_hf_tensors(const vr_hf_config *c, vr_hf_tensor *out)
{
    int k = 0;
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    int64_t Q = (int64_t)c->num_attention_heads * c->head_dim, KV = (int64_t)c->num_key_value_heads * c->head_dim;
    char n[96];
    put(out, &k, "model.embed_tokens.weight", 2, V, D);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        static const char *proj[] = {"q", "k", "v"};
        for (int p = 0; p < 3; p++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.weight", i, proj[p]);
            put(out, &k, n, 2, p == 0 ? Q : KV, D);
            if (c->attention_bias) {
                snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.bias", i, proj[p]);
                put(out, &k, n, 1, p == 0 ? Q : KV, 0);
            }
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
        put(out, &k, n, 2, D, Q);
        if (o_bias(c)) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.bias", i);
            put(out, &k, n, 1, D, 0);
        }
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", i);
        put(out, &k, n, 2, I, D);
        snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj.weight", i);
        put(out, &k, n, 2, I, D);
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", i);
        put(out, &k, n, 2, D, I);
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", i);
        put(out, &k, n, 1, D, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", i);
        put(out, &k, n, 1, D, 0);
    }
    put(out, &k, "model.norm.weight", 1, D, 0);
    if (!c->tie_word_embeddings) put(out, &k, "lm_head.weight", 2, V, D);
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, ")");
}

vr_status vr_hf_check(const vr_hf_config *cfg, const vr_safetensors *st, const char *label)
{
    int n = vr_hf_tensor_count(cfg);
    vr_hf_tensor all_small[64];
    vr_hf_tensor *all = all_small;
    vr_hf_tensor *heap = NULL;
    if (n > 64) {
        heap = malloc((size_t)n * sizeof *heap);
        if (!heap) return vr_error(VR_ERR_OOM, "%s: out of host memory", label);
        all = heap;
    }
    vr_hf_tensors(cfg, all);
    vr_status s = VR_OK;
    for (int i = 0; i < n && s == VR_OK; i++) {
        const vr_st_tensor *x = vr_st_find(st, all[i].name);
        char want[64], got[160];
        shape_str(want, sizeof want, all[i].ndim, all[i].shape);
        if (!x) {
            s = vr_error(VR_ERR_FORMAT, "%s: missing tensor \"%s\" (expected shape %s)", label, all[i].name, want);
            break;
        }
        int same = x->ndim == all[i].ndim;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == all[i].shape[d];
        if (!same) {
            shape_str(got, sizeof got, x->ndim, x->shape);
            s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, expected %s", x->file, all[i].name, got,
                         want);
        }
    }
    free(heap);
    return s;
}
