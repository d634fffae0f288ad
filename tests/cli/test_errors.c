/* The command's errors: the library's field names shown as the flags that set them (src/cli/errors.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/cli.h"
#include "vram/alloc.h"
#include "vram/graph.h"
#include "vram/train.h"

static const char *mapped(const char *msg)
{
    static char out[1024];
    size_t n = vr_cli_map_fields(msg, out, sizeof out);
    assert_int_equal(n, strlen(out));
    return out;
}

static void a_field_that_leads_the_message(void **state)
{
    (void)state;
    assert_string_equal(mapped("vr_llama_config.NKV: 3 does not divide the 8 heads"),
                        "--kv-heads: 3 does not divide the 8 heads");
    assert_string_equal(mapped("vr_gpt_preset: unknown GPT preset 'gpt9'"), "--preset: unknown GPT preset 'gpt9'");
    assert_string_equal(mapped("vr_step_config.zero 2: rank 1 of 2 owns no parameter"),
                        "--zero 2: rank 1 of 2 owns no parameter");
}

static void fields_inside_the_text(void **state)
{
    (void)state;
    assert_string_equal(mapped("Try: a smaller vr_model_config.B with vr_step_config.accum N; "
                               "vr_step_config.precision bf16."),
                        "Try: a smaller --batch with --accum N; --precision bf16.");
    assert_string_equal(mapped("rank 1: (try vr_alloc_config.policy expandable)"), "rank 1: (try --policy expandable)");
    assert_string_equal(mapped("largest batch that fits: vr_model_config.B 37 (arena"),
                        "largest batch that fits: --batch 37 (arena");
    assert_string_equal(mapped("vr_train_config.warmup and vr_train_config.hp.lr: warmup 5 exceeds steps 3"),
                        "--warmup and --lr: warmup 5 exceeds steps 3");
}

static void the_longest_name_wins(void **state)
{
    (void)state;
    assert_string_equal(mapped("vr_train_run_opts.save_state"), "--save-state");
    assert_string_equal(mapped("vr_train_run_opts.save, vr_train_run_opts.save_init"), "--save, --save-init");
    assert_string_equal(mapped("vr_train_config.max_host_memory is 1 GiB"), "--max-host-memory is 1 GiB");
    assert_string_equal(mapped("vr_gpt_config.V and vr_gpt_config.Vp"), "--vocab and --padded-vocab");
}

static void only_whole_names(void **state)
{
    (void)state;
    const char *kept[] = {
        "/data/vr_train_config.data: cannot open",        /* a path */
        "run-vr_model_config.B",                          /* part of a word */
        "xvr_model_config.B",                             /* inside an identifier */
        "vr_model_config.Bx",                             /* a longer member */
        "vr_model_config.B.rows",                         /* a deeper member not in the table */
        "vr_step_config.rank 3",                          /* a field without a flag */
        "model.layers.0.mlp.up_proj.weight: wrong shape", /* a tensor name */
        "",
    };
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        assert_string_equal(mapped(kept[i]), kept[i]);
    /* punctuation after a name ends it */
    assert_string_equal(mapped("(vr_step_config.world)."), "(--gpus).");
    assert_string_equal(mapped("'vr_step_config.freeze'"), "'--freeze'");
}

static void cut_short_to_fit(void **state)
{
    (void)state;
    char out[8];
    size_t n = vr_cli_map_fields("vr_llama_config.NKV: x", out, sizeof out);
    assert_int_equal(n, strlen("--kv-heads: x"));
    assert_string_equal(out, "--kv-he"); /* 7 characters and the NUL */
    assert_int_equal(vr_cli_map_fields("vr_model_config.B", NULL, 0), strlen("--batch"));
}

/* Every field of the table is a real member of the public configuration (this list compiles only while it is)
 * or a function of vram/graph.h, and every flag is spelled as a flag. */
#define MEMBER(type, path) {#type "." #path, sizeof(((type *)0)->path)}
static const struct {
    const char *name;
    size_t size;
} real_fields[] = {
    MEMBER(vr_model_config, kind),   MEMBER(vr_model_config, B),       MEMBER(vr_model_config, T),
    MEMBER(vr_gpt_config, L),        MEMBER(vr_gpt_config, C),         MEMBER(vr_gpt_config, NH),
    MEMBER(vr_gpt_config, V),        MEMBER(vr_gpt_config, Vp),        MEMBER(vr_gpt_config, maxT),
    MEMBER(vr_llama_config, L),      MEMBER(vr_llama_config, C),       MEMBER(vr_llama_config, NH),
    MEMBER(vr_llama_config, NKV),    MEMBER(vr_llama_config, hd),      MEMBER(vr_llama_config, I),
    MEMBER(vr_llama_config, V),      MEMBER(vr_llama_config, Vp),      MEMBER(vr_llama_config, maxT),
    MEMBER(vr_llama_config, rms_eps), MEMBER(vr_llama_config, rope.theta), MEMBER(vr_mlp_config, sizes),
    MEMBER(vr_mlp_config, act),      MEMBER(vr_step_config, accum),    MEMBER(vr_step_config, optim),
    MEMBER(vr_step_config, recompute), MEMBER(vr_step_config, recompute_layers), MEMBER(vr_step_config, classifier_rows), MEMBER(vr_step_config, precision),
    MEMBER(vr_step_config, norm_from_out),
    MEMBER(vr_step_config, optim_state),
    MEMBER(vr_step_config, no_master), MEMBER(vr_step_config, split_master), MEMBER(vr_alloc_config, stitch_granule), MEMBER(vr_step_config, offload), MEMBER(vr_step_config, attention),
    MEMBER(vr_step_config, freeze),
    MEMBER(vr_step_config, grad_clip), MEMBER(vr_step_config, world), MEMBER(vr_step_config, zero),
    MEMBER(vr_train_config, hp.lr),  MEMBER(vr_train_config, warmup),  MEMBER(vr_train_config, steps),
    MEMBER(vr_train_config, seed),   MEMBER(vr_train_config, data),    MEMBER(vr_train_config, init),
    MEMBER(vr_train_config, resume), MEMBER(vr_train_config, max_memory), MEMBER(vr_train_config, max_host_memory),
    MEMBER(vr_train_config, dump_batches), MEMBER(vr_train_run_opts, save), MEMBER(vr_train_run_opts, save_init),
    MEMBER(vr_train_run_opts, save_state), MEMBER(vr_alloc_config, policy), MEMBER(vr_alloc_config, capacity),
};

static void the_table_names_real_fields_and_flags(void **state)
{
    (void)state;
    int n = 0;
    const vr_cli_field_flag *t = vr_cli_field_flags(&n);
    const char *functions[] = {"vr_gpt_preset", "vr_llama_preset", "vr_mlp_preset"}; /* vram/graph.h */
    assert_true(n > 40);
    for (int i = 0; i < n; i++) {
        bool real = false;
        for (size_t k = 0; k < sizeof real_fields / sizeof *real_fields; k++)
            real |= !strcmp(t[i].field, real_fields[k].name) && real_fields[k].size > 0;
        for (size_t k = 0; k < sizeof functions / sizeof *functions; k++)
            real |= !strcmp(t[i].field, functions[k]);
        if (!real)
            fail_msg("%s is neither a member of a public configuration nor a public function", t[i].field);
        assert_true(!strncmp(t[i].flag, "--", 2) && strlen(t[i].flag) > 2); /* "--flag" or "--flag value" */
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].field, t[j].field))
                fail_msg("%s twice", t[i].field);
    }
}

/* The library's own messages, as the command shows them. */
static void library_errors_as_the_command_shows_them(void **state)
{
    (void)state;
    vr_llama_config c;
    assert_int_equal(vr_llama_preset("tiny", &c, NULL), VR_OK);
    c.NH = 8;
    c.NKV = 3;
    assert_int_equal(vr_llama_config_check(&c), VR_ERR_INVALID);
    assert_string_equal(vr_last_error(), "vr_llama_config.NKV: 3 does not divide the 8 heads");
    assert_string_equal(mapped(vr_last_error()), "--kv-heads: 3 does not divide the 8 heads");

    vr_gpt_config g;
    assert_int_equal(vr_gpt_preset("gpt9", &g, NULL), VR_ERR_INVALID);
    assert_non_null(strstr(mapped(vr_last_error()), "--preset: unknown GPT preset 'gpt9'"));

    vr_step_config s = {.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .zero = 1};
    assert_int_equal(vr_step_config_check(&s), VR_ERR_INVALID);
    assert_string_equal(mapped(vr_last_error()), "--zero: stage 1 needs data parallel ranks (--gpus N, or mpirun)");

    s = (vr_step_config){.train = true, .accum = 1, .optim = VR_OPTIM_ADAMW, .no_master = true};
    assert_int_equal(vr_step_config_check(&s), VR_ERR_INVALID);
    assert_string_equal(mapped(vr_last_error()),
                        "--master none: needs bf16 precision (fp32 weights are their own fp32 master)");

    vr_train_config tc = vr_train_config_default();
    tc.steps = 0;
    vr_trainer *tr = NULL;
    assert_int_not_equal(vr_trainer_create(&tc, &tr), VR_OK);
    assert_string_equal(mapped(vr_last_error()), "--steps: must be >= 1 (got 0)");
}

static void fail_prints_one_mapped_line(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0 && dup2(fileno(f), 2) == 2);
    int rc = vr_cli_fail("plan", 2, "%s", "vr_gpt_config.L: must be >= 1 (got 0)");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    char text[256] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    assert_int_equal(rc, 2);
    assert_string_equal(text, "vram plan: --layers: must be >= 1 (got 0)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_field_that_leads_the_message),
        cmocka_unit_test(fields_inside_the_text),
        cmocka_unit_test(the_longest_name_wins),
        cmocka_unit_test(only_whole_names),
        cmocka_unit_test(cut_short_to_fit),
        cmocka_unit_test(the_table_names_real_fields_and_flags),
        cmocka_unit_test(library_errors_as_the_command_shows_them),
        cmocka_unit_test(fail_prints_one_mapped_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
