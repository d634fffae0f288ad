/* The command's flag parser (src/cli/flags.c) on a table of every kind, and every subcommand's table against
 * its --help text. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <float.h>
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
#include "vram/util.h"

/* ------------------------------------------------------------------ a command of every kind of flag */

typedef struct opts {
    bool json, json_given;
    int tied;
    const char *name, *file, *mode;
    long long n, signed_n;
    double x, p;
    uint64_t bytes, nonzero;
    bool on;
} opts;

static void test_flags(vr_flagset *fs, void *p)
{
    opts *o = p;
    const vr_flag t[] = {
        VR_FLAG_HEADING_TEXT("numbers"),
        {"--n", VR_FLAG_INT, &o->n, "N", .help = "a count", .lo = 1, .hi = 100},
        {"--signed", VR_FLAG_INT, &o->signed_n, "N", .help = "-1 or a count", .lo = -1, .hi = 100},
        {"--x", VR_FLAG_DOUBLE, &o->x, "X", .help = "a fraction", .min = 0, .max = 1},
        {"--p", VR_FLAG_DOUBLE, &o->p, "X", .help = "a positive number\nof two lines", .min = 0, .max = DBL_MAX,
         .above = true},
        {"--bytes", VR_FLAG_SIZE, &o->bytes, "SIZE", .help = "some bytes"},
        {"--nonzero", VR_FLAG_SIZE, &o->nonzero, "SIZE", .help = "more than none", .lo = 1},
        VR_FLAG_HEADING_TEXT("others"),
        {"--json", VR_FLAG_SWITCH, &o->json, NULL, .help = "JSON", .given = &o->json_given},
        {"--tied", VR_FLAG_CONST, &o->tied, NULL, .help = "tied", .lo = 1},
        {"--untied", VR_FLAG_CONST, &o->tied, NULL, .help = "untied", .lo = -1},
        {"--name", VR_FLAG_STRING, &o->name, "TEXT", .help = "any text"},
        {"--output", VR_FLAG_STRING, &o->file, "FILE", .help = "a file", .nonempty = true, .alias = "-o"},
        {"--mode", VR_FLAG_CHOICE, &o->mode, NULL, .help = "a mode", .choices = "planned|dynamic"},
        {"--switch", VR_FLAG_CUSTOM, &o->on, "on|off", .help = "on or off", .parse = vr_flag_onoff},
    };
    VR_FLAGS_ADD(fs, t);
}

static int test_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static const vr_cli_command test_cmd = {"test", "a test", test_run, "[options] A B", "About it.", test_flags,
                                        sizeof(opts)};

/* Runs the parser over the arguments (NULL-terminated), its stderr into err and its stdout into out. */
static char err[1024], out[2048];
static void read_back(FILE *f, char *buf, size_t cap)
{
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

static int parse(opts *o, const char **pos, int max_pos, int *npos, ...)
{
    char *argv[32] = {"test"};
    int argc = 1;
    va_list ap;
    va_start(ap, npos);
    for (char *a; (a = va_arg(ap, char *));)
        argv[argc++] = a;
    va_end(ap);
    FILE *e = tmpfile(), *f = tmpfile();
    assert_true(e && f);
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    assert_true(saved_out >= 0 && saved_err >= 0 && dup2(fileno(f), 1) == 1 && dup2(fileno(e), 2) == 2);
    int rc = vr_flags_parse(&test_cmd, o, argc, argv, pos, max_pos, npos);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    read_back(e, err, sizeof err);
    read_back(f, out, sizeof out);
    return rc;
}

static void values_of_every_kind(void **state)
{
    (void)state;
    opts o = {0};
    const char *pos[2];
    int npos = -1;
    assert_int_equal(parse(&o, pos, 2, &npos, "--n", "7", "A", "--signed=-1", "--x=0.25", "--p", "3e5", "--bytes",
                           "16MiB", "--nonzero=1", "--json", "--untied", "--name", "", "-o", "out.html", "--mode",
                           "dynamic", "B", "--switch=on", NULL),
                     0);
    assert_string_equal(err, "");
    assert_int_equal(o.n, 7);
    assert_int_equal(o.signed_n, -1);
    assert_true(o.x == 0.25 && o.p == 3e5);
    assert_int_equal(o.bytes, 16 * VR_MiB);
    assert_int_equal(o.nonzero, 1);
    assert_true(o.json && o.json_given && o.on);
    assert_int_equal(o.tied, -1);
    assert_string_equal(o.name, "");
    assert_string_equal(o.file, "out.html");
    assert_string_equal(o.mode, "dynamic");
    assert_int_equal(npos, 2);
    assert_string_equal(pos[0], "A");
    assert_string_equal(pos[1], "B");
    /* the last of a repeated flag wins; a value may start with '-' */
    assert_int_equal(parse(&o, NULL, 0, NULL, "--n", "3", "--n", "4", "--name", "--n", "--tied", NULL), 0);
    assert_int_equal(o.n, 4);
    assert_string_equal(o.name, "--n");
    assert_int_equal(o.tied, 1);
}

/* Each refusal: exit status 2 and one line naming the flag. */
static void refusals_name_the_flag(void **state)
{
    (void)state;
    struct {
        const char *args[3];
        const char *line;
    } cases[] = {
        {{"--bogus"}, "vram test: unknown flag --bogus (see vram test --help)\n"},
        {{"--bogus=3"}, "vram test: unknown flag --bogus (see vram test --help)\n"},
        {{"-x"}, "vram test: unknown flag -x (see vram test --help)\n"},
        {{"--n"}, "vram test: --n: needs a value (N)\n"},
        {{"--mode"}, "vram test: --mode: needs a value (planned|dynamic)\n"},
        {{"--n", "0"}, "vram test: --n: 0 is out of range [1, 100]\n"},
        {{"--n=101"}, "vram test: --n: 101 is out of range [1, 100]\n"},
        {{"--n", "12x"}, "vram test: --n: '12x' is not an integer\n"},
        {{"--n", "99999999999999999999"}, "vram test: --n: '99999999999999999999' is not an integer\n"},
        {{"--n="}, "vram test: --n: missing value\n"},
        {{"--signed", "-2"}, "vram test: --signed: -2 is out of range [-1, 100]\n"},
        {{"--x", "1.5"}, "vram test: --x: '1.5' is not a number in [0, 1]\n"},
        {{"--x", "nan"}, "vram test: --x: 'nan' is not a number in [0, 1]\n"},
        {{"--p", "0"}, "vram test: --p: '0' is not a positive number\n"},
        {{"--p", "inf"}, "vram test: --p: 'inf' is not a positive number\n"},
        {{"--nonzero", "0"}, "vram test: --nonzero: must be more than 0\n"},
        {{"--json=1"}, "vram test: --json: takes no value (got '1')\n"},
        {{"--tied=yes"}, "vram test: --tied: takes no value (got 'yes')\n"},
        {{"--output="}, "vram test: --output: empty value\n"},
        {{"-o", ""}, "vram test: -o: empty value\n"},
        {{"--mode", "static"}, "vram test: --mode: 'static' is not one of planned|dynamic\n"},
        {{"--switch", "maybe"}, "vram test: --switch: 'maybe' is not one of on|off\n"},
        {{"A", "B"}, "vram test: unexpected argument 'B' (see vram test --help)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        opts o = {0};
        const char *pos[1];
        int rc = parse(&o, pos, 1, NULL, cases[i].args[0], cases[i].args[1], cases[i].args[2], NULL);
        if (rc != 2 || strcmp(err, cases[i].line))
            fail_msg("%s %s: exit %d, stderr '%s', not '%s'", cases[i].args[0],
                     cases[i].args[1] ? cases[i].args[1] : "", rc, err, cases[i].line);
    }
    /* --bytes with a value that is not a size names the flag */
    opts o = {0};
    assert_int_equal(parse(&o, NULL, 0, NULL, "--bytes", "lots", NULL), 2);
    assert_non_null(strstr(err, "vram test: --bytes: "));
}

/* Reads f's text into a string (free it). */
static char *usage_of(const vr_cli_command *cmd, const vr_flagset *fs)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    vr_flags_usage(f, cmd, fs);
    fclose(f);
    return text;
}

static void help_is_the_table(void **state)
{
    (void)state;
    opts o = {0};
    vr_flagset fs = {.n = 0};
    test_flags(&fs, &o);
    char *text = usage_of(&test_cmd, &fs);
    const char *want = "usage: vram test [options] A B\n"
                       "\n"
                       "About it.\n"
                       "\n"
                       "numbers\n"
                       "  --n N                    a count\n"
                       "  --signed N               -1 or a count\n"
                       "  --x X                    a fraction\n"
                       "  --p X                    a positive number\n"
                       "                           of two lines\n"
                       "  --bytes SIZE             some bytes\n"
                       "  --nonzero SIZE           more than none\n"
                       "others\n"
                       "  --json                   JSON\n"
                       "  --tied                   tied\n"
                       "  --untied                 untied\n"
                       "  --name TEXT              any text\n"
                       "  -o, --output FILE        a file\n"
                       "  --mode planned|dynamic   a mode\n"
                       "  --switch on|off          on or off\n";
    assert_string_equal(text, want);
    /* --help prints it and stops there (a bad flag after it is not read) */
    assert_int_equal(parse(&o, NULL, 0, NULL, "--n", "3", "--help", "--bogus", NULL), 1);
    assert_string_equal(err, "");
    assert_string_equal(out, want);
    assert_int_equal(parse(&o, NULL, 0, NULL, "-h", NULL), 1);
    assert_string_equal(out, want);
    free(text);
}

/* A whole word of text: not part of a longer flag ("--seq" in "--seq-len"). */
static bool has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        char before = p == text ? ' ' : p[-1], after = p[n];
        if ((before == ' ' || before == '\n' || before == '(' || before == '[') &&
            (after == ' ' || after == '\n' || after == ',' || after == ')' || after == ']' || after == '='))
            return true;
    }
    return false;
}

/* Every subcommand's table: each flag once, spelled as a flag, in its --help text with its help; the field
 * names of the library's errors (errors.c) each the flag of some command. */
static void every_command_help_lists_its_table(void **state)
{
    (void)state;
    int tables = 0;
    char seen[4096] = " ";
    for (int c = 0; c < vr_cli_ncommands; c++) {
        const vr_cli_command *cmd = vr_cli_commands[c];
        if (!cmd->flags)
            continue;
        tables++;
        void *o = calloc(1, cmd->opts_size);
        vr_flagset *fs = calloc(1, sizeof *fs);
        assert_true(o && fs);
        cmd->flags(fs, o);
        char *text = usage_of(cmd, fs);
        int nflags = 0;
        for (int i = 0; i < fs->n; i++) {
            const vr_flag *f = &fs->flag[i];
            if (f->kind == VR_FLAG_HEADING)
                continue;
            nflags++;
            if (strncmp(f->name, "--", 2) || strlen(f->name) < 3 || strchr(f->name, ' ') || strchr(f->name, '='))
                fail_msg("vram %s: '%s' is not spelled as a flag", cmd->name, f->name);
            if (!f->help || !*f->help)
                fail_msg("vram %s %s: no help text", cmd->name, f->name);
            if (!f->dst)
                fail_msg("vram %s %s: no destination", cmd->name, f->name);
            if (f->kind == VR_FLAG_CHOICE && !f->choices)
                fail_msg("vram %s %s: no choices", cmd->name, f->name);
            if (f->kind == VR_FLAG_CUSTOM && !f->parse)
                fail_msg("vram %s %s: no parser", cmd->name, f->name);
            if (!has_word(text, f->name) || (f->alias && !has_word(text, f->alias)))
                fail_msg("vram %s --help does not show %s:\n%s", cmd->name, f->name, text);
            for (int j = 0; j < i; j++)
                if (fs->flag[j].kind != VR_FLAG_HEADING &&
                    (!strcmp(fs->flag[j].name, f->name) || (f->alias && fs->flag[j].alias &&
                                                             !strcmp(fs->flag[j].alias, f->alias))))
                    fail_msg("vram %s: %s twice in the table", cmd->name, f->name);
            if (strlen(seen) + strlen(f->name) + 2 < sizeof seen && !strstr(seen, f->name))
                strcat(strcat(seen, f->name), " ");
        }
        if (!nflags)
            fail_msg("vram %s: a table without flags", cmd->name);
        free(text);
        free(fs);
        free(o);
    }
    assert_int_equal(tables, vr_cli_ncommands - 1); /* every subcommand but help */
    int n = 0;
    const vr_cli_field_flag *ff = vr_cli_field_flags(&n);
    for (int i = 0; i < n; i++) {
        char word[64]; /* the flag of "--flag" or "--flag value" */
        snprintf(word, sizeof word, " %.*s ", (int)strcspn(ff[i].flag, " "), ff[i].flag);
        if (!strstr(seen, word))
            fail_msg("errors.c maps %s to %s, which no command has", ff[i].field, ff[i].flag);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_of_every_kind),
        cmocka_unit_test(refusals_name_the_flag),
        cmocka_unit_test(help_is_the_table),
        cmocka_unit_test(every_command_help_lists_its_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
