/* vram — entry point: dispatches to the subcommands listed below. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/version.h"

static int cmd_help(int argc, char **argv);

static const vr_cli_command commands[] = {
    {"help", "show this help", cmd_help},
    {"info", "list devices: GPUs (memory, CUDA context cost, versions), cpu, meta", vr_cmd_info},
    {"replay", "replay an allocator trace through a policy and compare with PyTorch", vr_cmd_replay},
    {"plan", "where every byte of a training step goes, before it runs (bytes per role, peak, fit)", vr_cmd_plan},
    {"fit", "the largest batch that fits a device, and the fastest configuration that fits", vr_cmd_fit},
    {"train", "train a model (a small GPT on a built-in corpus by default) in the memory the plan says", vr_cmd_train},
    {"tokenize", "encode a text file into a token file with a Hugging Face tokenizer.json", vr_cmd_tokenize},
    {"report", "a self-contained HTML page of where a step's memory goes (roles over time, peak, what-if)", vr_cmd_report},
    {"watch", "live view of every GPU (memory, processes, utilisation) and of running vram trainings", vr_cmd_watch},
    {"eval", "mean held-out loss of a checkpoint with the no-grad graph", vr_cmd_eval},
};
static const int ncommands = (int)(sizeof commands / sizeof commands[0]);

/* The library names the fields of its configurations; a message that starts with one is shown with the
 * flag that sets it. */
static const char *field_flags[][2] = {
    {"optim_state", "--optim-state"},
    {"master", "--master"},
    {"offload", "--offload"},
};

int vr_cli_fail(const char *cmd, int status, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *text = msg, *flag = NULL;
    for (size_t i = 0; i < sizeof field_flags / sizeof *field_flags; i++) {
        size_t n = strlen(field_flags[i][0]);
        if (!strncmp(msg, field_flags[i][0], n) && msg[n] == ':')
            flag = field_flags[i][1], text = msg + n;
    }
    fprintf(stderr, "vram %s: %s%s\n", cmd, flag ? flag : "", text);
    return status;
}

static int cmd_help(int argc, char **argv)
{
    (void)argc; (void)argv;
    printf("usage: vram <command> [options]   (vram <command> --help for its options)\n\ncommands:\n");
    for (int i = 0; i < ncommands; i++)
        printf("  %-10s %s\n", commands[i].name, commands[i].summary);
    return 0;
}

int main(int argc, char **argv)
{
    vr_cli_prepare_env(argc, argv);
    if (argc < 2)
        return cmd_help(0, NULL);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return cmd_help(0, NULL);
    if (!strcmp(argv[1], "--version")) {
        printf("vram %s\n", vr_version());
        return 0;
    }
    for (int i = 0; i < ncommands; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "vram: unknown command '%s' (try 'vram help')\n", argv[1]);
    return 2;
}
