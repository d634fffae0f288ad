/* vram command: one function per subcommand, each in its own file. */
#ifndef VRAM_CLI_H
#define VRAM_CLI_H

#include <stddef.h>

/* Each returns the process exit status (0 ok, 1 failure, 2 usage error). */
typedef int (*vr_cli_fn)(int argc, char **argv);

typedef struct vr_cli_command {
    const char *name;
    const char *summary;
    vr_cli_fn run;
} vr_cli_command;

/* Prints "vram <cmd>: <message>" to stderr and returns the exit status. */
int vr_cli_fail(const char *cmd, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* For the commands that run kernels (train, eval): sets OMP_WAIT_POLICY=passive
 * when unset and re-executes the binary (threads.c). Call first in main. */
void vr_cli_prepare_env(int argc, char **argv);

/* Writes the HTML memory report (vram report's page) of the step configured in c
 * to path (NULL: $TMPDIR/vram-oom-<pid>.html) and its path to written; -1 when it
 * could not (vr_last_error says why). For vram train's out-of-memory errors. */
struct vr_train_config;
int vr_cli_oom_report(const struct vr_train_config *c, const char *path, char *written, size_t cap);

/* Subcommands (cmd_<name>.c). */
int vr_cmd_replay(int argc, char **argv);
int vr_cmd_info(int argc, char **argv);
int vr_cmd_plan(int argc, char **argv);
int vr_cmd_fit(int argc, char **argv);
int vr_cmd_train(int argc, char **argv);
int vr_cmd_eval(int argc, char **argv);
int vr_cmd_report(int argc, char **argv);

#endif
