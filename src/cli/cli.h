/* vram command: one vr_cli_command per subcommand, each in its own file (cmd_<name>.c). */
#ifndef VRAM_CLI_H
#define VRAM_CLI_H

#include <stddef.h>

#include "cli/flags.h"

/* Each returns the process exit status (0 ok, 1 failure, 2 usage error). */
typedef int (*vr_cli_fn)(int argc, char **argv);

/* A subcommand: cmd_<name>.c defines one (vr_cli_<name>), commands.c lists them. */
typedef struct vr_cli_command {
    const char *name;
    const char *summary;    /* its line in 'vram help' */
    vr_cli_fn run;          /* run(argc, argv): argv[0] is the name */
    const char *synopsis;   /* what --help shows after "usage: vram <name> " (NULL: "[options]") */
    const char *about;      /* the paragraph under it, or NULL */
    void (*flags)(vr_flagset *fs, void *opts); /* its flag table over its options struct (flags.h) */
    size_t opts_size;       /* that struct's size: the table can be built over zeroed bytes (tests) */
} vr_cli_command;

/* The subcommands (cmd_<name>.c). */
extern const vr_cli_command vr_cli_info, vr_cli_replay, vr_cli_plan, vr_cli_fit, vr_cli_train, vr_cli_tokenize,
    vr_cli_report, vr_cli_watch, vr_cli_eval;

/* Every subcommand, in the order 'vram help' lists them. */
extern const vr_cli_command *const vr_cli_commands[];
extern const int vr_cli_ncommands;

/* Prints "vram <cmd>: <message>" to stderr, the library's field names in it shown as their flags
 * (vr_cli_map_fields), and returns the exit status (errors.c). */
int vr_cli_fail(const char *cmd, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A configuration field as the library names it in its messages ("vr_llama_config.NKV") and the flag that
 * sets it ("--kv-heads"). */
typedef struct vr_cli_field_flag {
    const char *field;
    const char *flag;
} vr_cli_field_flag;

/* The table of them (*n entries). */
const vr_cli_field_flag *vr_cli_field_flags(int *n);

/* msg with every field of the table that stands as a whole name replaced by its flag, into out (cap bytes,
 * cut short to fit). Returns the length of the whole result. */
size_t vr_cli_map_fields(const char *msg, char *out, size_t cap);

/* For the commands that run kernels (train, eval): sets OMP_WAIT_POLICY=passive
 * when unset and re-executes the binary (threads.c). Call first in main. */
void vr_cli_prepare_env(int argc, char **argv);

/* Writes the HTML memory report (vram report's page) of the step configured in c
 * to path (NULL: $TMPDIR/vram-oom-<pid>.html) and its path to written; -1 when it
 * could not (vr_last_error says why). For vram train's out-of-memory errors. */
struct vr_train_config;
int vr_cli_oom_report(const struct vr_train_config *c, const char *path, char *written, size_t cap);

/* vram train's status file for vram watch (status_file.c): the hook writes
 * /tmp/vram-<uid>/<pid>.json after each step and chains to trace when set. */
#include <stdint.h>
#include "vram/exec.h"
typedef struct vr_cli_status {
    struct vr_trace *trace;   /* vram/prof.h's writer, or NULL */
    const char *device;
    int64_t steps;
} vr_cli_status;
void vr_cli_status_hook(void *ctx, vr_exec *e, int node, uint64_t t0_ns, uint64_t t1_ns);
void vr_cli_status_path(char *buf, size_t cap);
/* Data parallel ranks (dist.c): --gpus N launches N ranks of the command, mpirun's are MPI's world. */
typedef struct vr_cli_dist {
    vr_comm *comm;       /* this rank's communicator */
    vr_comm *boot;       /* mpirun --device cuda: MPI's world, which carried NCCL's id (kept until the end) */
    vr_device *dev;      /* the rank's GPU, held while the communicator lives */
    bool launcher;       /* this process started the ranks and waited for them: exit with status */
    int status;
    char device[32];     /* "cuda:RANK" */
} vr_cli_dist;
/* For a command run with s->world >= 1 (--gpus), under mpirun, or as a rank started by --gpus: the launcher
 * (d->launcher, the ranks' status in d->status) or a rank with its communicator, s->world and s->rank set and
 * *device the rank's GPU. Returns 0 then; -1 when not distributed (nothing done); else the exit status of a
 * one-line error. */
int vr_cli_dist_setup(const char *cmd, int argc, char **argv, vr_step_config *s, const char **device,
                      vr_cli_dist *d);
void vr_cli_dist_end(vr_cli_dist *d);

/* Subcommands (cmd_<name>.c). */

#endif
