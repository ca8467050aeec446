/* Table-driven command-line options: each command declares its options once,
 * and the same table parses argv and prints --help. */
#ifndef DF_CLI_ARGS_H
#define DF_CLI_ARGS_H

#include "base/error.h"

typedef enum {
    DF_OPT_FLAG,        /* int*: set to 1 when present */
    DF_OPT_INT,         /* int* */
    DF_OPT_DOUBLE,      /* double* */
    DF_OPT_STRING,      /* const char** */
    DF_OPT_STRING_LIST, /* DfStringList*: the option may repeat */
} DfOptionKind;

typedef struct DfStringList {
    const char *items[64];
    int count;
} DfStringList;

/* The values an INT or DOUBLE option accepts: min..max, each end open when
 * its flag is set (e.g. --lr in (0, 10]). A DOUBLE option never accepts NaN
 * or an infinity, ranged or not. */
typedef struct DfRange {
    int set;
    double min, max;
    int min_open, max_open;
} DfRange;

#define DF_RANGE(lo, hi) .range = {1, (lo), (hi), 0, 0}
#define DF_RANGE_POSITIVE(hi) .range = {1, 0, (hi), 1, 0} /* (0, hi] */

typedef struct DfOption {
    const char *name;    /* long name without dashes, e.g. "max-length" */
    DfOptionKind kind;
    void *dest;          /* written only when the option is given: "unset" leaves it as it was */
    const char *metavar; /* shown in help, e.g. "N" */
    const char *help;    /* one line; mention the default */
    int required;
    DfRange range;       /* INT and DOUBLE: refused outside it, naming the option and the range */
    const char *alias;   /* an older name still accepted (.alias = "tokenizer"), or NULL */
} DfOption;

typedef struct DfCommandSpec {
    const char *name;       /* "prepare" */
    const char *summary;    /* one line */
    const char *positional; /* e.g. "PATH", or NULL when none is taken */
    const char *details;    /* extra paragraph for --help, or NULL */
    const DfOption *options;
    int n_options;
    /* Names of other tools' options that mean something else here, each
     * with what to give instead: pairs {name, advice}, ending with NULL (or
     * NULL: none). An unknown option of these names gets its advice. */
    const char *const *other_tools_options;
} DfCommandSpec;

#define DF_MAX_OPTIONS 128

typedef struct DfParsedArgs {
    const char *positional[16];
    int n_positional;
    int help_shown; /* --help was asked for and printed: the command should exit 0 */
    int quiet;      /* --quiet (every command takes it): no progress or notes, only errors and the result */
    unsigned char given[DF_MAX_OPTIONS]; /* per option of the spec, in its order: given on the command line */
} DfParsedArgs;

/* Parses argv[1..argc-1] (argv[0] is the command name). Returns 0, or -1
 * with a message naming the bad option. Besides the spec's options, every
 * command takes --help and --quiet (out->quiet). An option's alias is
 * accepted as its name. */
int df_parse_args(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, DfError *err);
void df_print_command_help(const DfCommandSpec *spec);

/* Whether the option `name` of spec was given (the unset state of every
 * option, whatever its value). Aborts on a name the spec does not have. */
int df_option_given(const DfCommandSpec *spec, const DfParsedArgs *parsed, const char *name);

/* "1..4096", "(0, 10]": the range as messages write it. */
void df_range_text(const DfRange *r, int integer, char *out, size_t cap);

/* The start of every command: parses argv, prints "dflash: MESSAGE" on a bad
 * command line. Returns 0 to go on, or 1 when the command must return
 * *exit_code at once (2 after a bad command line, 0 after --help). */
int df_parse_command_line(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, int *exit_code);

#define DF_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
