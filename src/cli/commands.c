/* vram command — the list of subcommands, and 'vram help'. */
#include <stdio.h>

#include "cli/cli.h"

static int cmd_help(int argc, char **argv);

static const vr_cli_command help = {"help", "show this help", cmd_help, NULL, NULL, NULL, 0};

const vr_cli_command *const vr_cli_commands[] = {&help,        &vr_cli_info,     &vr_cli_replay, &vr_cli_plan,
                                                 &vr_cli_fit,  &vr_cli_train,    &vr_cli_tokenize,
                                                 &vr_cli_report, &vr_cli_watch,  &vr_cli_eval};
const int vr_cli_ncommands = (int)(sizeof vr_cli_commands / sizeof *vr_cli_commands);

static int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("usage: vram <command> [options]   (vram <command> --help for its options)\n\ncommands:\n");
    for (int i = 0; i < vr_cli_ncommands; i++)
        printf("  %-10s %s\n", vr_cli_commands[i]->name, vr_cli_commands[i]->summary);
    return 0;
}
