/* config.json of Llama-family models: fields and defaults, rope_scaling
 * llama3, refusals naming the field and file; the expected tensor list and the
 * check of a checkpoint against it. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "vram/hf_config.h"

static const char SMOL[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":576,"
    "\"intermediate_size\":1536,\"num_hidden_layers\":30,\"num_attention_heads\":9,\"num_key_value_heads\":3,"
    "\"vocab_size\":49152,\"max_position_embeddings\":8192,\"rms_norm_eps\":1e-05,\"rope_theta\":100000,"
    "\"rope_scaling\":null,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\"}";

static void parse_str(const char *json, vr_hf_config *c, vr_status want)
{
    assert_int_equal(vr_hf_config_parse("config.json", json, strlen(json), c), want);
}

static void smollm(void **state)
{
    (void)state;
    vr_hf_config c;
    parse_str(SMOL, &c, VR_OK);
    assert_string_equal(c.architecture, "LlamaForCausalLM");
    assert_string_equal(c.torch_dtype, "bfloat16");
    assert_int_equal(c.hidden_size, 576);
    assert_int_equal(c.num_key_value_heads, 3);
    assert_int_equal(c.head_dim, 64);
    assert_true(c.rms_norm_eps == 1e-5 && c.rope_theta == 100000);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.attention_bias, 0);
    assert_int_equal(c.rope_llama3, 0);
    /* 1 embedding + 30 x 9 + final norm, no lm_head */
    assert_int_equal(vr_hf_tensor_count(&c), 272);
    vr_hf_tensor *t = malloc(272 * sizeof *t);
    vr_hf_tensors(&c, t);
    assert_string_equal(t[0].name, "model.embed_tokens.weight");
    assert_true(t[0].shape[0] == 49152 && t[0].shape[1] == 576);
    assert_string_equal(t[2].name, "model.layers.0.self_attn.k_proj.weight");
    assert_true(t[2].shape[0] == 192 && t[2].shape[1] == 576);
    assert_string_equal(t[7].name, "model.layers.0.mlp.down_proj.weight");
    assert_true(t[7].shape[0] == 576 && t[7].shape[1] == 1536);
    assert_string_equal(t[271].name, "model.norm.weight");
    assert_int_equal(t[271].ndim, 1);
    free(t);
}

static void qwen2_defaults_and_llama3_rope(void **state)
{
    (void)state;
    vr_hf_config c;
    parse_str("{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":64,"
              "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
              "\"vocab_size\":100,\"tie_word_embeddings\":false}",
              &c, VR_OK);
    assert_int_equal(c.attention_bias, 1);
    assert_true(c.rope_theta == 10000 && c.rms_norm_eps == 1e-6);
    assert_int_equal(vr_hf_tensor_count(&c), 2 + 2 * 12 + 1);
    vr_hf_tensor t[32];
    vr_hf_tensors(&c, t);
    assert_string_equal(t[2].name, "model.layers.0.self_attn.q_proj.bias");
    assert_true(t[2].ndim == 1 && t[2].shape[0] == 64);
    assert_string_equal(t[26].name, "lm_head.weight");
    parse_str("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":4,\"head_dim\":32,\"vocab_size\":100,\"rope_theta\":500000.0,"
              "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
              "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}}",
              &c, VR_OK);
    assert_int_equal(c.rope_llama3, 1);
    assert_true(c.rope_factor == 32 && c.rope_low_freq_factor == 1 && c.rope_high_freq_factor == 4);
    assert_int_equal(c.rope_original_max_position, 8192);
    assert_int_equal(c.head_dim, 32);
    /* transformers 5: rope_parameters holds the theta and the scaling */
    parse_str("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":4,\"vocab_size\":100,\"rope_parameters\":{\"rope_theta\":500000.0,"
              "\"factor\":8.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
              "\"original_max_position_embeddings\":64,\"rope_type\":\"llama3\"}}",
              &c, VR_OK);
    assert_true(c.rope_llama3 == 1 && c.rope_theta == 500000 && c.rope_factor == 8);
    assert_int_equal(c.rope_original_max_position, 64);
    parse_str("{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":4,\"vocab_size\":100,\"rope_parameters\":{\"rope_theta\":1000000.0,"
              "\"rope_type\":\"default\"}}",
              &c, VR_OK);
    assert_true(c.rope_llama3 == 0 && c.rope_theta == 1000000);
    /* llama's attention_bias: q, k, v and o biases */
    parse_str("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
              "\"num_attention_heads\":4,\"vocab_size\":100,\"attention_bias\":true,\"tie_word_embeddings\":true}",
              &c, VR_OK);
    assert_int_equal(vr_hf_tensor_count(&c), 2 + 2 * 13);
    vr_hf_tensors(&c, t);
    assert_string_equal(t[8].name, "model.layers.0.self_attn.o_proj.bias");
}

static void expect_msg(const char *json, const char *want)
{
    vr_hf_config c;
    assert_int_not_equal(vr_hf_config_parse("dir/config.json", json, strlen(json), &c), VR_OK);
    const char *e = vr_last_error();
    if (!strstr(e, want) || !strstr(e, "dir/config.json")) fail_msg("\"%s\" lacks \"%s\" or the file", e, want);
}

static void refusals(void **state)
{
    (void)state;
    expect_msg("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
               "\"vocab_size\":100}",
               "\"intermediate_size\"");
    expect_msg("{\"hidden_size\":64}", "\"model_type\"");
    expect_msg("{\"model_type\":\"gpt2\"}", "model_type \"gpt2\"");
    expect_msg("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":4,\"vocab_size\":100,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}",
               "rope_scaling type \"yarn\"");
    expect_msg("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"vocab_size\":100}",
               "\"num_key_value_heads\"");
    expect_msg("{\"model_type\":\"llama\",\"hidden_size\":\"64\"}", "\"hidden_size\"");
    expect_msg("not json", "not valid JSON");
}

static void check_checkpoint(void **state)
{
    (void)state;
    vr_hf_config c;
    parse_str("{\"model_type\":\"llama\",\"hidden_size\":8,\"intermediate_size\":16,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"vocab_size\":10,\"tie_word_embeddings\":true}",
              &c, VR_OK);
    int n = vr_hf_tensor_count(&c);
    vr_hf_tensor t[16];
    vr_hf_tensors(&c, t);
    static float zeros[256];
    vr_st_write_tensor w[16];
    for (int i = 0; i < n; i++) {
        w[i] = (vr_st_write_tensor){t[i].name, VR_F32, t[i].ndim, {t[i].shape[0], t[i].shape[1]}, zeros};
    }
    char dir[] = "/tmp/vram_hfc_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(vr_st_write(path, w, n, NULL, NULL, 0), VR_OK);
    vr_safetensors *st;
    assert_int_equal(vr_st_open(dir, &st), VR_OK);
    assert_int_equal(vr_hf_check(&c, st, dir), VR_OK);
    vr_st_close(st);
    /* v_proj (4, 8) written as (8, 4) */
    w[3].shape[0] = 8;
    w[3].shape[1] = 4;
    assert_int_equal(vr_st_write(path, w, n, NULL, NULL, 0), VR_OK);
    assert_int_equal(vr_st_open(dir, &st), VR_OK);
    assert_int_equal(vr_hf_check(&c, st, dir), VR_ERR_FORMAT);
    const char *e = vr_last_error();
    assert_non_null(strstr(e, "model.layers.0.self_attn.v_proj.weight"));
    assert_non_null(strstr(e, "shape (8, 4), expected (4, 8)"));
    assert_non_null(strstr(e, "model.safetensors"));
    vr_st_close(st);
    /* the final norm missing (v_proj right again) */
    w[3].shape[0] = 4;
    w[3].shape[1] = 8;
    assert_int_equal(vr_st_write(path, w, n - 1, NULL, NULL, 0), VR_OK);
    assert_int_equal(vr_st_open(dir, &st), VR_OK);
    assert_int_equal(vr_hf_check(&c, st, dir), VR_ERR_FORMAT);
    if (!strstr(vr_last_error(), "missing tensor \"model.norm.weight\" (expected shape (8))")) fail_msg("%s", vr_last_error());
    vr_st_close(st);
    remove(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm),
        cmocka_unit_test(qwen2_defaults_and_llama3_rope),
        cmocka_unit_test(refusals),
        cmocka_unit_test(check_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
