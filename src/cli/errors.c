/* vram command — one-line errors, and the library's field names shown as the flags that set them.
 *
 * The library names what is wrong by the configuration field (or the function argument) at fault, as its
 * C name: "vr_llama_config.NKV: 3 does not divide the 8 heads", "try vr_step_config.precision bf16",
 * "vr_gpt_preset: unknown GPT preset 'x'". The command shows every such name as the flag that sets it
 * ("--kv-heads: 3 does not divide the 8 heads"): field_flags below is the one table of them, and every
 * error the command prints goes through vr_cli_fail, which rewrites them. A name is replaced only as a whole
 * word (not inside a longer identifier, path or dotted name), so file names and tensor names in a message
 * are left alone; a field without a flag keeps its C name. A bool field that a flag's value sets shows as
 * both ("vr_step_config.no_master": "--master none"). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const vr_cli_field_flag field_flags[] = {
    /* the model (vram/graph.h) */
    {"vr_model_config.kind", "--model"},
    {"vr_model_config.B", "--batch"},
    {"vr_model_config.T", "--seq"},
    {"vr_gpt_preset", "--preset"},
    {"vr_llama_preset", "--preset"},
    {"vr_mlp_preset", "--preset"},
    {"vr_gpt_config.L", "--layers"},
    {"vr_gpt_config.C", "--channels"},
    {"vr_gpt_config.NH", "--heads"},
    {"vr_gpt_config.V", "--vocab"},
    {"vr_gpt_config.Vp", "--padded-vocab"},
    {"vr_gpt_config.maxT", "--max-seq"},
    {"vr_llama_config.L", "--layers"},
    {"vr_llama_config.C", "--channels"},
    {"vr_llama_config.NH", "--heads"},
    {"vr_llama_config.NKV", "--kv-heads"},
    {"vr_llama_config.hd", "--head-dim"},
    {"vr_llama_config.I", "--intermediate"},
    {"vr_llama_config.V", "--vocab"},
    {"vr_llama_config.Vp", "--padded-vocab"},
    {"vr_llama_config.maxT", "--max-seq"},
    {"vr_llama_config.rms_eps", "--rms-eps"},
    {"vr_llama_config.rope.theta", "--rope-theta"},
    {"vr_mlp_config.sizes", "--sizes"},
    {"vr_mlp_config.act", "--act"},
    /* the step (vram/graph.h) */
    {"vr_step_config.accum", "--accum"},
    {"vr_step_config.optim", "--optim"},
    {"vr_step_config.recompute", "--recompute"},
    {"vr_step_config.recompute_layers", "--recompute-layers"},
    {"vr_step_config.classifier_rows", "--classifier-rows"},
    {"vr_step_config.norm_from_out", "--norm-backward"},
    {"vr_step_config.precision", "--precision"},
    {"vr_step_config.optim_state", "--optim-state"},
    {"vr_step_config.no_master", "--master none"}, /* a bool: true is --master none */
    {"vr_step_config.split_master", "--master split"},
    {"vr_step_config.offload", "--offload"},
    {"vr_step_config.attention", "--attention"},
    {"vr_step_config.freeze", "--freeze"},
    {"vr_step_config.grad_clip", "--clip"},
    {"vr_step_config.world", "--gpus"},
    {"vr_step_config.zero", "--zero"},
    /* training (vram/train.h) */
    {"vr_train_config.hp.lr", "--lr"},
    {"vr_train_config.warmup", "--warmup"},
    {"vr_train_config.steps", "--steps"},
    {"vr_train_config.seed", "--seed"},
    {"vr_train_config.data", "--data"},
    {"vr_train_config.init", "--init"},
    {"vr_train_config.resume", "--resume"},
    {"vr_train_config.max_memory", "--max-memory"},
    {"vr_train_config.max_host_memory", "--max-host-memory"},
    {"vr_train_config.dump_batches", "--dump-batches"},
    {"vr_train_run_opts.save", "--save"},
    {"vr_train_run_opts.save_init", "--save-init"},
    {"vr_train_run_opts.save_state", "--save-state"},
    /* the caching allocator (vram/alloc.h) */
    {"vr_alloc_config.policy", "--policy"},
    {"vr_alloc_config.capacity", "--capacity"},
    {"vr_alloc_config.stitch_granule", "--stitch-granule"},
};

const vr_cli_field_flag *vr_cli_field_flags(int *n)
{
    *n = (int)(sizeof field_flags / sizeof *field_flags);
    return field_flags;
}

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The longest field of the table that starts at s as a whole name (the character after it neither continues
 * an identifier nor starts a further ".member"); NULL when none does. */
static const vr_cli_field_flag *field_at(const char *s)
{
    const vr_cli_field_flag *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < sizeof field_flags / sizeof *field_flags; i++) {
        size_t n = strlen(field_flags[i].field);
        if (n <= best_len || strncmp(s, field_flags[i].field, n))
            continue;
        char next = s[n];
        if (ident_char(next) || (next == '.' && ident_char(s[n + 1])))
            continue;
        best = &field_flags[i], best_len = n;
    }
    return best;
}

size_t vr_cli_map_fields(const char *msg, char *out, size_t cap)
{
    size_t n = 0; /* the length of the whole result, as snprintf counts */
    for (const char *p = msg; *p;) {
        bool starts = p == msg || !(ident_char(p[-1]) || p[-1] == '.' || p[-1] == '/' || p[-1] == '-');
        const vr_cli_field_flag *f = starts && !strncmp(p, "vr_", 3) ? field_at(p) : NULL;
        const char *piece = f ? f->flag : p;
        size_t len = f ? strlen(f->flag) : 1;
        for (size_t k = 0; k < len; k++, n++)
            if (cap && n < cap - 1)
                out[n] = piece[k];
        p += f ? strlen(f->field) : 1;
    }
    if (cap)
        out[n < cap - 1 ? n : cap - 1] = '\0';
    return n;
}

int vr_cli_fail(const char *cmd, int status, const char *fmt, ...)
{
    char msg[2048], shown[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vr_cli_map_fields(msg, shown, sizeof shown);
    fprintf(stderr, "vram %s: %s\n", cmd, shown);
    return status;
}
