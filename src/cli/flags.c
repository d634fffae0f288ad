/* vram command — the one flag parser of every subcommand (see flags.h).
 *
 * argv is read left to right: "--name value" and "--name=value" give a flag its value (the next argument is
 * the value whatever it looks like, so "--eval-every -1" works), a flag without a value takes none
 * ("--json=1" is refused), the last of a repeated flag wins, and an argument that does not start with '-' is
 * positional. Every refusal is one line that names the flag: unknown ("unknown flag --x (see vram plan
 * --help)"), without its value, or with a value of the wrong kind or out of its range. */
#include "cli/flags.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vram/util.h"

#define HELP_COLUMN 25 /* the help text starts 2 + 25 columns in */

void vr_flags_add(vr_flagset *fs, const vr_flag *t, int n)
{
    if (fs->n + n > VR_FLAGS_MAX) {
        fprintf(stderr, "vram: a flag table of more than %d entries (raise VR_FLAGS_MAX)\n", VR_FLAGS_MAX);
        abort();
    }
    memcpy(fs->flag + fs->n, t, sizeof *t * (size_t)n);
    fs->n += n;
}

const char *vr_flags_text(vr_flagset *fs, const char *fmt, ...)
{
    char *s = fs->text + fs->used;
    size_t room = sizeof fs->text - fs->used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        fprintf(stderr, "vram: a flag table's help texts need more than %zu bytes\n", sizeof fs->text);
        abort();
    }
    fs->used += (size_t)n + 1;
    return s;
}

const vr_flag *vr_flags_find(const vr_flagset *fs, const char *name)
{
    for (int i = 0; i < fs->n; i++) {
        const vr_flag *f = &fs->flag[i];
        if (f->kind != VR_FLAG_HEADING && (!strcmp(f->name, name) || (f->alias && !strcmp(f->alias, name))))
            return f;
    }
    return NULL;
}

/* ------------------------------------------------------------------ values */

static bool is_choice(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

/* "a positive number", "a number in [0, 1]": what a DOUBLE flag takes. */
static const char *double_range(const vr_flag *f, char *buf, size_t cap)
{
    bool unbounded = f->max >= DBL_MAX;
    if (f->min == 0 && unbounded)
        snprintf(buf, cap, "a %s number", f->above ? "positive" : "non-negative");
    else if (unbounded)
        snprintf(buf, cap, "a number %s %g", f->above ? "above" : "of at least", f->min);
    else
        snprintf(buf, cap, "a number in %c%g, %g]", f->above ? '(' : '[', f->min, f->max);
    return buf;
}

/* Stores value into f's destination; 0, or prints the error and returns 2. */
static int set_value(const char *cmd, const vr_flag *f, const char *name, const char *value)
{
    switch (f->kind) {
    case VR_FLAG_STRING:
        if (f->nonempty && !*value)
            return vr_cli_fail(cmd, 2, "%s: empty value", name);
        *(const char **)f->dst = value;
        return 0;
    case VR_FLAG_CHOICE:
        if (!is_choice(f->choices, value))
            return vr_cli_fail(cmd, 2, "%s: '%s' is not one of %s", name, value, f->choices);
        *(const char **)f->dst = value;
        return 0;
    case VR_FLAG_INT: {
        long long v;
        if (vr_parse_int(value, name, f->lo, f->hi, &v) != VR_OK)
            return vr_cli_fail(cmd, 2, "%s", vr_last_error());
        *(long long *)f->dst = v;
        return 0;
    }
    case VR_FLAG_DOUBLE: {
        char *end, what[96];
        double v = strtod(value, &end);
        if (end == value || *end || !isfinite(v) || !(f->above ? v > f->min : v >= f->min) || v > f->max)
            return vr_cli_fail(cmd, 2, "%s: '%s' is not %s", name, value, double_range(f, what, sizeof what));
        *(double *)f->dst = v;
        return 0;
    }
    case VR_FLAG_SIZE: {
        uint64_t v;
        if (vr_parse_size(value, name, &v) != VR_OK)
            return vr_cli_fail(cmd, 2, "%s", vr_last_error());
        if (v < (uint64_t)f->lo) {
            char a[32];
            return f->lo == 1 ? vr_cli_fail(cmd, 2, "%s: must be more than 0", name)
                              : vr_cli_fail(cmd, 2, "%s: %s is less than %s", name, value,
                                            vr_format_size((uint64_t)f->lo, a, sizeof a));
        }
        *(uint64_t *)f->dst = v;
        return 0;
    }
    case VR_FLAG_CUSTOM:
        return f->parse(cmd, name, value, f->dst);
    default:
        return vr_cli_fail(cmd, 2, "%s: takes no value", name);
    }
}

int vr_flag_onoff(const char *cmd, const char *name, const char *value, void *dst)
{
    if (!strcmp(value, "on") || !strcmp(value, "1"))
        *(bool *)dst = true;
    else if (!strcmp(value, "off") || !strcmp(value, "0"))
        *(bool *)dst = false;
    else
        return vr_cli_fail(cmd, 2, "%s: '%s' is not one of on|off", name, value);
    return 0;
}

/* ------------------------------------------------------------------ argv */

int vr_flags_parse(const vr_cli_command *cmd, void *opts, int argc, char **argv, const char **pos, int max_pos,
                   int *npos)
{
    vr_flagset *fs = malloc(sizeof *fs);
    if (!fs)
        return vr_cli_fail(cmd->name, 1, "out of host memory");
    fs->n = 0;
    fs->used = 0;
    cmd->flags(fs, opts);
    int n = 0, rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            vr_flags_usage(stdout, cmd, fs);
            rc = 1;
            break;
        }
        if (a[0] != '-' || !a[1]) {
            if (n < max_pos)
                pos[n++] = a;
            else
                rc = vr_cli_fail(cmd->name, 2, "unexpected argument '%s' (see vram %s --help)", a, cmd->name);
            continue;
        }
        char name[128];
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), a);
        const vr_flag *f = vr_flags_find(fs, name);
        if (!f) {
            rc = vr_cli_fail(cmd->name, 2, "unknown flag %s (see vram %s --help)", name, cmd->name);
        } else if (f->kind == VR_FLAG_SWITCH || f->kind == VR_FLAG_CONST) {
            if (eq)
                rc = vr_cli_fail(cmd->name, 2, "%s: takes no value (got '%s')", name, eq + 1);
            else if (f->kind == VR_FLAG_SWITCH)
                *(bool *)f->dst = true;
            else
                *(int *)f->dst = (int)f->lo;
        } else if (!eq && i + 1 >= argc) {
            const char *mv = f->metavar ? f->metavar : f->choices;
            rc = vr_cli_fail(cmd->name, 2, "%s: needs a value%s%s%s", name, mv ? " (" : "", mv ? mv : "",
                             mv ? ")" : "");
        } else {
            rc = set_value(cmd->name, f, name, eq ? eq + 1 : argv[++i]);
        }
        if (!rc && f && f->given)
            *f->given = true;
    }
    free(fs);
    if (npos)
        *npos = n;
    return rc;
}

/* ------------------------------------------------------------------ --help */

void vr_flags_usage(FILE *out, const vr_cli_command *cmd, const vr_flagset *fs)
{
    fprintf(out, "usage: vram %s %s\n", cmd->name, cmd->synopsis ? cmd->synopsis : "[options]");
    if (cmd->about)
        fprintf(out, "\n%s\n", cmd->about);
    fprintf(out, "\n");
    for (int i = 0; i < fs->n; i++) {
        const vr_flag *f = &fs->flag[i];
        if (f->kind == VR_FLAG_HEADING) {
            fprintf(out, "%s\n", f->help);
            continue;
        }
        const char *mv = f->metavar ? f->metavar : f->kind == VR_FLAG_CHOICE ? f->choices : NULL;
        char left[256];
        snprintf(left, sizeof left, "%s%s%s%s%s", f->alias ? f->alias : "", f->alias ? ", " : "", f->name,
                 mv ? " " : "", mv ? mv : "");
        const char *help = f->help ? f->help : "";
        int pad = (int)strlen(left) + 2 <= HELP_COLUMN ? HELP_COLUMN - (int)strlen(left) : 2;
        fprintf(out, "  %s", left);
        for (const char *line = help; *help;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            fprintf(out, "%*s%.*s\n", line == help ? pad : 2 + HELP_COLUMN, "", len, line);
            if (!nl || !nl[1])
                break;
            line = nl + 1;
        }
        if (!*help)
            fprintf(out, "\n");
    }
}
