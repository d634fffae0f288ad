/* vram command: the model and step flags shared by the commands that build a step graph (plan, train, fit,
 * report), as one fragment of their flag tables (flags.h): --model --preset --hf --layers --channels --heads
 * --vocab --padded-vocab --max-seq --kv-heads --head-dim --intermediate --rope-theta --rms-eps --tied
 * --untied --qkv-bias --sizes --act --batch --seq --accum --optim --recompute --recompute-layers --norm-backward
 * --freeze --precision --optim-state --master --offload --attention --clip --gpus --zero and --eval. */
#ifndef VRAM_CLI_MODEL_FLAGS_H
#define VRAM_CLI_MODEL_FLAGS_H

#include <stdbool.h>
#include <stdio.h>

#include "cli/flags.h"
#include "vram/graph.h"

typedef struct vr_model_flags {
    const char *model, *preset, *sizes, *act, *optim, *recompute, *freeze, *precision, *optim_state, *master;
    const char *offload;     /* NULL: not given */
    const char *norm_backward; /* --norm-backward input|output; NULL: not given */
    const char *attention;   /* --attention auto|cudnn|vram|v2|v1|v1-fwd|v1-bwd (v*: vram's kernels); NULL: not given */
    long long layers, channels, heads, vocab, padded_vocab, max_seq, seq, batch, accum; /* 0: not given */
    double clip;     /* 0: not given */
    bool eval;       /* --eval: the no-grad graph */
    long long kv_heads, head_dim, intermediate;  /* llama; 0: not given */
    double rope_theta, rms_eps;                  /* llama; 0: not given */
    const char *hf;  /* --hf DIR|config.json: a Llama-family model's shape from its Hugging Face config */
    int tied;        /* llama: 1 --tied, -1 --untied, 0 not given */
    bool qkv_bias;   /* llama: --qkv-bias */
    long long gpus;  /* --gpus N: data-parallel ranks (0: not given) */
    long long zero;  /* --zero S */
    long long recompute_layers;  /* --recompute-layers N (0: not given) */
    long long classifier_rows;   /* --classifier-rows N (0: not given) */
    bool zero_given;
} vr_model_flags;

/* What a command uses when a flag is not given. */
typedef struct vr_model_defaults {
    const char *gpt_preset;  /* "gpt2" for plan */
    const char *mlp_preset;  /* "mnist" */
    int batch;               /* 8 */
    int seq;                 /* 0: the preset's */
    vr_optim optim;          /* VR_OPTIM_ADAMW */
    bool eval;               /* the command has --eval (the no-grad graph) */
    const char *step_heading; /* the heading of the step flags in --help (NULL: "step") */
} vr_model_defaults;

/* The model flags (under the heading "model") and the step flags into fs, over f, with d's defaults in
 * their help. */
void vr_model_flags_add(vr_flagset *fs, vr_model_flags *f, const vr_model_defaults *d);

/* The master when --master is not given: split for a bf16 training step whose update runs on the device,
 * else none asked for (a full fp32 master where the precision keeps one). */
bool vr_model_flags_default_split(const vr_step_config *s);

/* Fills the model and step configs from the flags and defaults. Returns 0, or
 * prints a one-line error naming the flag and returns 2. */
int vr_model_flags_configure(const char *cmd, const vr_model_flags *f, const vr_model_defaults *d,
                             vr_model_config *m, vr_step_config *s);

/* --init DIR (a directory with config.json: a Hugging Face checkpoint) without --hf or shape flags: the
 * shape comes from DIR/config.json (sets f->hf). */
void vr_model_flags_hf_from_init(vr_model_flags *f, const char *init);

/* True when any flag that sets the model's shape was given. */
bool vr_model_flags_shape_given(const vr_model_flags *f);

#endif
