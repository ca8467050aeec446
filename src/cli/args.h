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

typedef struct DfOption {
    const char *name;    /* long name without dashes, e.g. "max-length" */
    DfOptionKind kind;
    void *dest;
    const char *metavar; /* shown in help, e.g. "N" */
    const char *help;    /* one line; mention the default */
    int required;
} DfOption;

typedef struct DfCommandSpec {
    const char *name;       /* "prepare" */
    const char *summary;    /* one line */
    const char *positional; /* e.g. "PATH", or NULL when none is taken */
    const char *details;    /* extra paragraph for --help, or NULL */
    const DfOption *options;
    int n_options;
} DfCommandSpec;

typedef struct DfParsedArgs {
    const char *positional[16];
    int n_positional;
    int help_shown; /* --help was asked for and printed: the command should exit 0 */
} DfParsedArgs;

/* Parses argv[1..argc-1] (argv[0] is the command name). Returns 0, or -1
 * with a message naming the bad option. */
int df_parse_args(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, DfError *err);
void df_print_command_help(const DfCommandSpec *spec);

/* The start of every command: parses argv, prints "dflash: MESSAGE" on a bad
 * command line. Returns 0 to go on, or 1 when the command must return
 * *exit_code at once (2 after a bad command line, 0 after --help). */
int df_parse_command_line(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, int *exit_code);

#define DF_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
