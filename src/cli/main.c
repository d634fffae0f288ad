/* vram — entry point: dispatches to the subcommands (commands.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/version.h"

int main(int argc, char **argv)
{
    vr_cli_prepare_env(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("vram %s\n", vr_version());
        return 0;
    }
    bool help = argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
    const char *name = help ? "help" : argv[1];
    for (int i = 0; i < vr_cli_ncommands; i++)
        if (!strcmp(name, vr_cli_commands[i]->name))
            return vr_cli_commands[i]->run(argc - 1, argv + 1);
    fprintf(stderr, "vram: unknown command '%s' (try 'vram help')\n", name);
    return 2;
}
