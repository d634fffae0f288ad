/* vram — entry point: dispatches to the subcommands listed below. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

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
        printf("vram 0.1.0\n");
        return 0;
    }
    for (int i = 0; i < ncommands; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "vram: unknown command '%s' (try 'vram help')\n", argv[1]);
    return 2;
}
