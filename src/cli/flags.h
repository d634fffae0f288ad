/* vram command — the one flag parser of every subcommand.
 *
 * A command describes its flags as a table (vr_flag entries: the name, the kind of value and its range or
 * choices, where the value goes, a metavar and the help text), built by its flags function over its options
 * struct. The same table parses argv (--flag value and --flag=value), refuses unknown flags and bad values
 * with one line naming the flag, and prints the command's --help: flags, help text and errors cannot drift
 * apart. The model and step flags that plan, train, fit and report share are one fragment of such tables
 * (model_flags.h). */
#ifndef VRAM_CLI_FLAGS_H
#define VRAM_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum vr_flag_kind {
    VR_FLAG_HEADING, /* not a flag: a heading of the --help text (help is its text) */
    VR_FLAG_SWITCH,  /* no value: *(bool *)dst = true */
    VR_FLAG_CONST,   /* no value: *(int *)dst = lo */
    VR_FLAG_STRING,  /* *(const char **)dst = the value (nonempty: "" refused) */
    VR_FLAG_CHOICE,  /* *(const char **)dst = the value, one of choices ("planned|dynamic") */
    VR_FLAG_INT,     /* *(long long *)dst, in [lo, hi] */
    VR_FLAG_DOUBLE,  /* *(double *)dst, in [min, max] (above: more than min) */
    VR_FLAG_SIZE,    /* *(uint64_t *)dst, bytes ("16GiB", "512MiB", "1e9"; vram/util.h), at least lo */
    VR_FLAG_CUSTOM,  /* parse(cmd, name, value, dst) reads it */
} vr_flag_kind;

typedef struct vr_flag {
    const char *name;    /* "--batch" */
    vr_flag_kind kind;
    void *dst;           /* where the value goes (see the kinds) */
    const char *metavar; /* the value in the --help text ("N", "SIZE"); CHOICE: NULL shows the choices */
    const char *help;    /* the --help text; '\n' starts another line */
    long long lo, hi;    /* INT: the range; SIZE: the least value; CONST: the value */
    double min, max;     /* DOUBLE: the range */
    bool above;          /* DOUBLE: min itself is refused */
    bool nonempty;       /* STRING: an empty value is refused */
    const char *choices; /* CHOICE: the values, '|' between */
    bool *given;         /* set when the flag is given (NULL: none) */
    const char *alias;   /* another spelling ("-o" for "--output"), or NULL */
    /* CUSTOM: reads value into dst; 0, or prints the one-line error "vram <cmd>: <name>: ..." and returns 2 */
    int (*parse)(const char *cmd, const char *name, const char *value, void *dst);
} vr_flag;

/* A heading of the --help text in a table. */
#define VR_FLAG_HEADING_TEXT(text) {.name = "", .kind = VR_FLAG_HEADING, .help = (text)}

/* A command's table, and the text its entries point into when a command formats them (vr_flags_text). */
#define VR_FLAGS_MAX 96
typedef struct vr_flagset {
    vr_flag flag[VR_FLAGS_MAX];
    int n;
    char text[4096];
    size_t used;
} vr_flagset;

/* Appends the n entries of t (a table, or a fragment of one). A table larger than VR_FLAGS_MAX is a bug of
 * the command: it aborts. */
void vr_flags_add(vr_flagset *fs, const vr_flag *t, int n);
#define VR_FLAGS_ADD(fs, table) vr_flags_add((fs), (table), (int)(sizeof(table) / sizeof *(table)))

/* printf into the set's own text, for help texts with figures in them ("micro-batch rows (16)"). */
const char *vr_flags_text(vr_flagset *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The entry that name (a flag's spelling or alias, without "=value") is, or NULL. */
const vr_flag *vr_flags_find(const vr_flagset *fs, const char *name);

struct vr_cli_command;

/* Parses argv[1..argc) of command cmd against its table (cmd->flags over opts), in order; every argument
 * that does not start with '-' (and "-" itself) is a positional one, stored in pos while there is room
 * (max_pos; *npos counts them all). --help and -h print the usage (vr_flags_usage) to stdout and return 1.
 * Returns 0 when every argument was read; otherwise prints one line "vram <cmd>: ..." naming the flag or
 * argument at fault and returns 2. */
int vr_flags_parse(const struct vr_cli_command *cmd, void *opts, int argc, char **argv, const char **pos,
                   int max_pos, int *npos);

/* The --help text of cmd with table fs: "usage: vram <name> <synopsis>", the about paragraph, then the
 * table in order: one line per flag (name, metavar, help; more lines where the help has them) and the
 * headings. */
void vr_flags_usage(FILE *f, const struct vr_cli_command *cmd, const vr_flagset *fs);

/* CUSTOM parsers shared by the commands. */
int vr_flag_onoff(const char *cmd, const char *name, const char *value, void *dst); /* bool: on|1 or off|0 */

#endif
