/* vram — Hugging Face config.json of Llama-family models (LlamaForCausalLM,
 * Qwen2ForCausalLM, MistralForCausalLM; SmolLM is llama), and the tensor names
 * and shapes such a checkpoint must hold. */
#ifndef VRAM_HF_CONFIG_H
#define VRAM_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "vram/safetensors.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

typedef struct vr_hf_config {
    char model_type[32];         /* "llama", "qwen2", "mistral" */
    char architecture[64];       /* architectures[0], e.g. "LlamaForCausalLM" ("" if absent) */
    char torch_dtype[16];        /* "bfloat16", "float16", "float32" ("" if absent) */
    int hidden_size;             /* d_model */
    int intermediate_size;       /* MLP width */
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;     /* default num_attention_heads */
    int head_dim;                /* default hidden_size / num_attention_heads */
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;         /* default 1e-6 */
    double rope_theta;           /* default 10000 */
    int rope_llama3;             /* 1: rope_scaling of type "llama3" (fields below) */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position;
    int tie_word_embeddings;     /* default 0 */
    int attention_bias;          /* q/k/v biases (+ o for llama/mistral); always 1 for qwen2, else default 0 */
    int mlp_bias;                /* default 0 (refused when 1: no such tensors mapped) */
} vr_hf_config;

/* Reads config.json at path (or path/config.json for a directory). */
vr_status vr_hf_config_load(const char *path, vr_hf_config *cfg);

/* Parses config JSON text of len bytes; label names it in errors. */
vr_status vr_hf_config_parse(const char *label, const char *json, size_t len, vr_hf_config *cfg);

/* One expected tensor of a checkpoint. */
typedef struct vr_hf_tensor {
    char name[96];               /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;                    /* 1 or 2 */
    int64_t shape[2];            /* PyTorch order: (out, in) for weights */
} vr_hf_tensor;

/* Number of tensors a checkpoint of cfg holds. */
int vr_hf_tensor_count(const vr_hf_config *cfg);

/* Fills out[0..vr_hf_tensor_count(cfg)) with the expected names and shapes:
 * embed_tokens (V,D); per layer q (H*hd,D), k/v (KV*hd,D), o (D,H*hd),
 * [+ q/k/v bias (H*hd), (KV*hd); + o bias (D) when attention_bias is set
 * for llama/mistral], gate/up (I,D), down (D,I), two norms (D); norm (D);
 * lm_head (V,D) when not tied. */
void vr_hf_tensors(const vr_hf_config *cfg, vr_hf_tensor *out);

/* Checks that st holds every expected tensor with its shape (extra tensors
 * such as rotary inv_freq are ignored); the error names the tensor, its file
 * (or the checkpoint) and the expected and found shapes. */
vr_status vr_hf_check(const vr_hf_config *cfg, const vr_safetensors *st, const char *label);

/* ---------------------------------------------------------------- model directories (hf_model.c) */

/* True when path is a directory holding config.json (a Hugging Face model directory). */
bool vr_hf_is_dir(const char *path);

/* The vram Llama of an HF config (llama, mistral, qwen2); errors name the field and label. */
vr_status vr_hf_to_llama(const vr_hf_config *h, const char *label, vr_llama_config *out);

/* The HF config of a vram Llama: qwen2 (Qwen2ForCausalLM) when it has q/k/v biases, else llama. */
void vr_hf_from_llama(const vr_llama_config *c, vr_hf_config *out);

/* Writes cfg as config.json text to path (atomically: temp file + rename). */
vr_status vr_hf_config_write(const char *path, const vr_hf_config *cfg);

/* Reads the parameters of Llama c from an HF checkpoint (a directory with model.safetensors or the
 * sharded index, or one .safetensors file) into params (fp32, vr_llama_tensors' layout; embedding rows
 * past the vocabulary 0): every tensor must be there with its shape (the error names it and the file). */
vr_status vr_hf_load_llama(const char *path, const vr_llama_config *c, float *params);

/* Writes dir/model.safetensors (HF names, dtype f32/bf16/f16) and dir/config.json for params of c, each
 * atomically; creates dir. transformers' from_pretrained(dir) loads it. */
vr_status vr_hf_save_llama(const char *dir, const vr_llama_config *c, const float *params, vr_dtype dtype);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
