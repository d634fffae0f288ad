/* config.json of Llama-family models: required fields checked by name,
 * defaults as in transformers (LlamaConfig / Qwen2Config / MistralConfig). */
#define _POSIX_C_SOURCE 200809L
#include "vram/hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An integer field: 1 if present and valid, 0 if absent; -1 with an error set. */
static int get_int(const cJSON *root, const char *label, const char *key, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    /* the range first: converting a double outside int's range is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1e9) ||
        v->valuedouble != (double)(int)v->valuedouble) {
        vr_error(VR_ERR_FORMAT, "%s: field \"%s\" is not a non-negative integer", label, key);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 1;
}

static int get_num(const cJSON *root, const char *label, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0)) {
        vr_error(VR_ERR_FORMAT, "%s: field \"%s\" is not a non-negative number", label, key);
        return -1;
    }
    *out = v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *root, const char *label, const char *key, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) {
        vr_error(VR_ERR_FORMAT, "%s: field \"%s\" is not true or false", label, key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

static int get_str(const cJSON *root, const char *label, const char *key, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap) {
        vr_error(VR_ERR_FORMAT, "%s: field \"%s\" is not a string of under %zu characters", label, key, cap);
        return -1;
    }
    strcpy(out, v->valuestring);
    return 1;
}

static vr_status required_int(const cJSON *root, const char *label, const char *key, int *out)
{
    int r = get_int(root, label, key, out);
    if (r < 0) return VR_ERR_FORMAT;
    if (r == 0) return vr_error(VR_ERR_FORMAT, "%s: missing required field \"%s\"", label, key);
    if (*out == 0) return vr_error(VR_ERR_FORMAT, "%s: field \"%s\" must be positive", label, key);
    return VR_OK;
}

static vr_status parse_rope_scaling(const cJSON *root, const char *label, vr_hf_config *c)
{
    /* transformers 5 writes "rope_parameters" (rope_type, rope_theta and the scaling fields), 4 "rope_scaling" */
    const char *key = "rope_scaling";
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!rs || cJSON_IsNull(rs)) rs = cJSON_GetObjectItemCaseSensitive(root, key = "rope_parameters");
    if (!rs || cJSON_IsNull(rs)) return VR_OK;
    if (!cJSON_IsObject(rs)) return vr_error(VR_ERR_FORMAT, "%s: field \"%s\" is not an object or null", label, key);
    if (get_num(rs, label, "rope_theta", &c->rope_theta) < 0) return VR_ERR_FORMAT;
    char type[32] = "";
    if (get_str(rs, label, "rope_type", type, sizeof type) < 0) return VR_ERR_FORMAT;
    if (!type[0] && get_str(rs, label, "type", type, sizeof type) < 0) return VR_ERR_FORMAT;
    if (!strcmp(type, "default")) return VR_OK;
    if (strcmp(type, "llama3"))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: %s type \"%s\" is not supported (only \"llama3\")", label, key,
                        type);
    c->rope_llama3 = 1;
    static const char *keys[] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *vals[] = {&c->rope_factor, &c->rope_low_freq_factor, &c->rope_high_freq_factor};
    for (int i = 0; i < 3; i++) {
        int r = get_num(rs, label, keys[i], vals[i]);
        if (r < 0) return VR_ERR_FORMAT;
        if (r == 0 || *vals[i] <= 0)
            return vr_error(VR_ERR_FORMAT, "%s: missing or zero field \"%s.%s\"", label, key, keys[i]);
    }
    int r = get_int(rs, label, "original_max_position_embeddings", &c->rope_original_max_position);
    if (r < 0) return VR_ERR_FORMAT;
    if (r == 0 || c->rope_original_max_position == 0)
        return vr_error(VR_ERR_FORMAT, "%s: missing field \"%s.original_max_position_embeddings\"", label, key);
    if (c->rope_high_freq_factor <= c->rope_low_freq_factor)
        return vr_error(VR_ERR_FORMAT, "%s: %s.high_freq_factor must exceed low_freq_factor", label, key);
    return VR_OK;
}

static vr_status parse_root(const cJSON *root, const char *label, vr_hf_config *c)
{
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(root)) return vr_error(VR_ERR_FORMAT, "%s: not a JSON object", label);
    int r = get_str(root, label, "model_type", c->model_type, sizeof c->model_type);
    if (r < 0) return VR_ERR_FORMAT;
    if (r == 0) return vr_error(VR_ERR_FORMAT, "%s: missing required field \"model_type\"", label);
    if (strcmp(c->model_type, "llama") && strcmp(c->model_type, "qwen2") && strcmp(c->model_type, "mistral"))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not supported (llama, qwen2, mistral)", label,
                        c->model_type);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(arch) && cJSON_IsString(arch->child) &&
        strlen(arch->child->valuestring) < sizeof c->architecture)
        strcpy(c->architecture, arch->child->valuestring);
    if (c->architecture[0] && strcmp(c->architecture, "LlamaForCausalLM") &&
        strcmp(c->architecture, "Qwen2ForCausalLM") && strcmp(c->architecture, "MistralForCausalLM"))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: architectures[0] \"%s\" is not supported", label, c->architecture);
    if (get_str(root, label, "torch_dtype", c->torch_dtype, sizeof c->torch_dtype) < 0) return VR_ERR_FORMAT;
    static const char *req[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                "vocab_size"};
    int *reqv[] = {&c->hidden_size, &c->intermediate_size, &c->num_hidden_layers, &c->num_attention_heads,
                   &c->vocab_size};
    for (int i = 0; i < 5; i++) {
        vr_status s = required_int(root, label, req[i], reqv[i]);
        if (s != VR_OK) return s;
    }
    c->max_position_embeddings = 2048;
    c->num_key_value_heads = c->num_attention_heads;
    c->head_dim = c->hidden_size / c->num_attention_heads;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    c->attention_bias = !strcmp(c->model_type, "qwen2");
    if (get_int(root, label, "max_position_embeddings", &c->max_position_embeddings) < 0 ||
        get_int(root, label, "num_key_value_heads", &c->num_key_value_heads) < 0 ||
        get_int(root, label, "head_dim", &c->head_dim) < 0 ||
        get_num(root, label, "rms_norm_eps", &c->rms_norm_eps) < 0 ||
        get_num(root, label, "rope_theta", &c->rope_theta) < 0 ||
        get_bool(root, label, "tie_word_embeddings", &c->tie_word_embeddings) < 0 ||
        get_bool(root, label, "mlp_bias", &c->mlp_bias) < 0)
        return VR_ERR_FORMAT;
    if (strcmp(c->model_type, "qwen2") && get_bool(root, label, "attention_bias", &c->attention_bias) < 0)
        return VR_ERR_FORMAT;
    if (c->num_key_value_heads == 0 || c->num_attention_heads % c->num_key_value_heads)
        return vr_error(VR_ERR_FORMAT, "%s: field \"num_key_value_heads\" (%d) must divide num_attention_heads (%d)",
                        label, c->num_key_value_heads, c->num_attention_heads);
    if (c->num_hidden_layers > 100000)
        return vr_error(VR_ERR_FORMAT, "%s: field \"num_hidden_layers\" (%d) is not plausible (max 100000)", label,
                        c->num_hidden_layers);
    if (c->head_dim == 0) return vr_error(VR_ERR_FORMAT, "%s: field \"head_dim\" must be positive", label);
    if (c->mlp_bias) return vr_error(VR_ERR_UNSUPPORTED, "%s: field \"mlp_bias\" true is not supported", label);
    return parse_rope_scaling(root, label, c);
}

vr_status vr_hf_config_parse(const char *label, const char *json, size_t len, vr_hf_config *cfg)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        memset(cfg, 0, sizeof *cfg);
        return vr_error(VR_ERR_FORMAT, "%s: not valid JSON", label);
    }
    vr_status s = parse_root(root, label, cfg);
    cJSON_Delete(root);
    return s;
}

vr_status vr_hf_config_load(const char *path, vr_hf_config *cfg)
{
    char p[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(p, sizeof p, "%s/config.json", path);
    else snprintf(p, sizeof p, "%s", path);
    FILE *f = fopen(p, "rb");
    if (!f) return vr_error(VR_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 24)) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: a config of %ld bytes is not accepted", p, n);
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: cannot read", p);
    }
    fclose(f);
    vr_status s = vr_hf_config_parse(p, buf, (size_t)n, cfg);
    free(buf);
    return s;
}
