/* Hugging Face model directories of Llama-family models: config.json <-> vr_llama_config, and the
 * parameters (safetensors, HF names) in and out of vram's flat fp32 buffer (vr_llama_tensors' layout). */
#define _POSIX_C_SOURCE 200809L
#include "vram/hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vram/atomic_file.h"

bool vr_hf_is_dir(const char *path)
{
    struct stat sb;
    char cfg[4096];
    if (!path || stat(path, &sb) || !S_ISDIR(sb.st_mode))
        return false;
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    return !stat(cfg, &sb) && S_ISREG(sb.st_mode);
}

vr_status vr_hf_to_llama(const vr_hf_config *h, const char *label, vr_llama_config *out)
{
    memset(out, 0, sizeof *out);
    if (h->attention_bias && strcmp(h->model_type, "qwen2"))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: field \"attention_bias\" true (an o_proj bias) is not supported",
                        label);
    *out = (vr_llama_config){.L = h->num_hidden_layers,
                             .C = h->hidden_size,
                             .NH = h->num_attention_heads,
                             .NKV = h->num_key_value_heads,
                             .hd = h->head_dim,
                             .I = h->intermediate_size,
                             .V = h->vocab_size,
                             .maxT = h->max_position_embeddings,
                             .rms_eps = (float)h->rms_norm_eps,
                             .rope = {h->rope_theta, h->rope_llama3, h->rope_factor, h->rope_low_freq_factor,
                                      h->rope_high_freq_factor, (double)h->rope_original_max_position},
                             .tied = h->tie_word_embeddings != 0,
                             .qkv_bias = h->attention_bias != 0};
    vr_status st = vr_llama_config_check(out);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", vr_last_error());
        return vr_error(st, "%s: %s", label, why);
    }
    return VR_OK;
}

void vr_hf_from_llama(const vr_llama_config *c, vr_hf_config *h)
{
    memset(h, 0, sizeof *h);
    bool qwen = c->qkv_bias;
    snprintf(h->model_type, sizeof h->model_type, "%s", qwen ? "qwen2" : "llama");
    snprintf(h->architecture, sizeof h->architecture, "%s", qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    snprintf(h->torch_dtype, sizeof h->torch_dtype, "float32");
    h->hidden_size = c->C;
    h->intermediate_size = c->I;
    h->num_hidden_layers = c->L;
    h->num_attention_heads = c->NH;
    h->num_key_value_heads = c->NKV;
    h->head_dim = c->hd ? c->hd : c->C / c->NH;
    h->vocab_size = c->V;
    h->max_position_embeddings = c->maxT;
    char eps[32]; /* the float's shortest decimal form (1e-05, not 9.99999974737875e-06) */
    snprintf(eps, sizeof eps, "%.7g", (double)c->rms_eps);
    h->rms_norm_eps = strtod(eps, NULL);
    h->rope_theta = c->rope.theta;
    h->rope_llama3 = c->rope.scaling == 1;
    h->rope_factor = c->rope.factor;
    h->rope_low_freq_factor = c->rope.low_freq;
    h->rope_high_freq_factor = c->rope.high_freq;
    h->rope_original_max_position = (int)c->rope.orig_max_t;
    h->tie_word_embeddings = c->tied;
    h->attention_bias = c->qkv_bias;
}

vr_status vr_hf_config_write(const char *path, const vr_hf_config *h)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(h->architecture));
    cJSON_AddStringToObject(r, "model_type", h->model_type);
    cJSON_AddStringToObject(r, "torch_dtype", h->torch_dtype);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    cJSON_AddNumberToObject(r, "hidden_size", h->hidden_size);
    cJSON_AddNumberToObject(r, "intermediate_size", h->intermediate_size);
    cJSON_AddNumberToObject(r, "num_hidden_layers", h->num_hidden_layers);
    cJSON_AddNumberToObject(r, "num_attention_heads", h->num_attention_heads);
    cJSON_AddNumberToObject(r, "num_key_value_heads", h->num_key_value_heads);
    cJSON_AddNumberToObject(r, "head_dim", h->head_dim);
    cJSON_AddNumberToObject(r, "vocab_size", h->vocab_size);
    cJSON_AddNumberToObject(r, "max_position_embeddings", h->max_position_embeddings);
    cJSON_AddNumberToObject(r, "rms_norm_eps", h->rms_norm_eps);
    cJSON_AddNumberToObject(r, "rope_theta", h->rope_theta);
    if (h->rope_llama3) {
        cJSON *s = cJSON_AddObjectToObject(r, "rope_scaling");
        cJSON_AddStringToObject(s, "rope_type", "llama3");
        cJSON_AddNumberToObject(s, "factor", h->rope_factor);
        cJSON_AddNumberToObject(s, "low_freq_factor", h->rope_low_freq_factor);
        cJSON_AddNumberToObject(s, "high_freq_factor", h->rope_high_freq_factor);
        cJSON_AddNumberToObject(s, "original_max_position_embeddings", h->rope_original_max_position);
    } else {
        cJSON_AddNullToObject(r, "rope_scaling");
    }
    cJSON_AddBoolToObject(r, "tie_word_embeddings", h->tie_word_embeddings);
    if (strcmp(h->model_type, "qwen2"))
        cJSON_AddBoolToObject(r, "attention_bias", h->attention_bias);
    cJSON_AddBoolToObject(r, "mlp_bias", 0);
    cJSON_AddBoolToObject(r, "use_cache", 1);
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (!text)
        return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    size_t n = strlen(text);
    vr_status st = vr_atomic_write_file(path, text, n);
    free(text);
    return st;
}

/* The HF name of a vr_llama_tensors entry ("model." + name, but lm_head). */
static void hf_name(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s%s", strcmp(name, "lm_head.weight") ? "model." : "", name);
}

/* vr_llama_tensors of c (caller frees), c's hd and Vp filled. */
static vr_llama_tensor *tensors_of(vr_llama_config *c, int *n)
{
    if (!c->hd && c->NH > 0)
        c->hd = c->C / c->NH;
    if (!c->Vp)
        c->Vp = (c->V + 127) / 128 * 128;
    *n = vr_llama_tensors(c, NULL);
    vr_llama_tensor *t = calloc((size_t)*n, sizeof *t);
    if (t)
        vr_llama_tensors(c, t);
    return t;
}

vr_status vr_hf_load_llama(const char *path, const vr_llama_config *cfg, float *params)
{
    vr_llama_config c = *cfg;
    vr_hf_config h;
    vr_hf_from_llama(&c, &h);
    vr_safetensors *st = NULL;
    vr_status s = vr_st_open(path, &st);
    if (s)
        return s;
    if ((s = vr_hf_check(&h, st, path))) {
        vr_st_close(st);
        return s;
    }
    int n = 0;
    vr_llama_tensor *t = tensors_of(&c, &n);
    if (!t) {
        vr_st_close(st);
        return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    }
    for (int i = 0; i < n && !s; i++) {
        char nm[96];
        hf_name(nm, sizeof nm, t[i].name);
        float *dst = params + t[i].offset;
        const vr_st_tensor *x = vr_st_find(st, nm); /* vr_hf_check found it, with HF's V rows */
        s = vr_st_read(st, nm, VR_F32, dst, (size_t)x->numel * sizeof(float));
        uint64_t have = x->numel, want = (uint64_t)(t[i].rows * t[i].cols);
        if (!s && have < want) /* embed_tokens / lm_head rows V..Vp-1: vocabulary padding */
            memset(dst + have, 0, (size_t)(want - have) * sizeof(float));
    }
    free(t);
    vr_st_close(st);
    return s;
}

vr_status vr_hf_save_llama(const char *dir, const vr_llama_config *cfg, const float *params, vr_dtype dtype)
{
    if (dtype != VR_F32 && dtype != VR_BF16 && dtype != VR_F16)
        return vr_error(VR_ERR_INVALID, "%s: safetensors dtype must be f32, bf16 or f16", dir);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return vr_error(VR_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return vr_error(VR_ERR_IO, "%s: is not a directory", dir);
    vr_llama_config c = *cfg;
    int n = 0;
    vr_llama_tensor *t = tensors_of(&c, &n);
    vr_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    char(*names)[96] = calloc((size_t)n, sizeof *names);
    void *conv = NULL;
    int64_t total = t ? t[n - 1].offset + t[n - 1].rows * t[n - 1].cols : 0;
    if (t && dtype != VR_F32)
        conv = malloc((size_t)total * vr_dtype_size(dtype));
    vr_status s = VR_OK;
    if (!t || !w || !names || (dtype != VR_F32 && !conv))
        s = vr_error(VR_ERR_OOM, "%s: out of host memory", dir);
    if (!s && conv)
        vr_convert(dtype, conv, VR_F32, params, (size_t)total);
    for (int i = 0; i < n && !s; i++) {
        bool vocab_rows = !strcmp(t[i].name, "embed_tokens.weight") || !strcmp(t[i].name, "lm_head.weight");
        hf_name(names[i], sizeof names[i], t[i].name);
        w[i].name = names[i];
        w[i].dtype = dtype;
        w[i].ndim = t[i].cols > 1 ? 2 : 1;
        w[i].shape[0] = vocab_rows ? c.V : t[i].rows; /* HF holds V rows, not the padded Vp */
        w[i].shape[1] = t[i].cols;
        w[i].data = conv ? (const void *)((const char *)conv + (size_t)t[i].offset * vr_dtype_size(dtype))
                         : (const void *)(params + t[i].offset);
    }
    char path[4096];
    if (!s) {
        static const char *const keys[] = {"format"}, *const vals[] = {"pt"};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = vr_st_write(path, w, n, keys, vals, 1);
    }
    if (!s) {
        vr_hf_config h;
        vr_hf_from_llama(&c, &h);
        snprintf(h.torch_dtype, sizeof h.torch_dtype, "%s",
                 dtype == VR_F32 ? "float32" : dtype == VR_BF16 ? "bfloat16" : "float16");
        snprintf(path, sizeof path, "%s/config.json", dir);
        s = vr_hf_config_write(path, &h);
    }
    free(conv);
    free(names);
    free(w);
    free(t);
    return s;
}
