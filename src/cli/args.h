/* Table-driven command-line options: each command declares its options once,
 * and the same table parses argv and prints --help.
 *
 * Declaring a command's options once (an X-macro list, as
 * backend/backend_ops.def lists the ops): the options are rows of a .def
 * file, one macro per option,
 *
 *   DF_OPTION(name, KIND, field, default, metavar, help, extras...)
 *
 * e.g. DF_OPTION("max-new-tokens", INT, max_new_tokens, 256, "N",
 * "tokens to generate at most per prompt", DF_RANGE(1, 1 << 20)), where
 * KIND is a DfOptionKind without its DF_OPT_ prefix, field a member of the
 * command's argument struct, and extras DfOption's designated fields (a
 * DF_RANGE, .alias, .required = 1, .default_text). The command includes the
 * file twice with DF_OPTION defined:
 *   - as `a->field = default;` in the function that fills its defaults;
 *   - as DF_OPTION_ENTRY(a->field, defaults->field, name, KIND, metavar,
 *     help, __VA_ARGS__) inside `const DfOption options[] = { ... };`
 *     (a: the struct parsed into, defaults: one holding the defaults),
 * and --help prints each default from its value (help strings do not say
 * it). A command with more to generate gives its rows more columns (the
 * run record and resume identity of train: train/train_options.def).
 * cli/eval_options.def is the small example. */
#ifndef DF_CLI_ARGS_H
#define DF_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum {
    DF_OPT_FLAG,        /* int*: set to 1 when present */
    DF_OPT_INT,         /* int* */
    DF_OPT_DOUBLE,      /* double* */
    DF_OPT_STRING,      /* const char** */
    DF_OPT_STRING_LIST, /* DfStringList*: the option may repeat */
    DF_OPT_INT64,       /* int64_t* */
    DF_OPT_UINT64,      /* uint64_t* (ranged: the range's values only) */
    DF_OPT_PATH,        /* const char**: a file or directory (a record writes it absolute) */
    DF_OPT_JSON,        /* const char**: JSON text (checked by the command) */
    DF_OPT_CHOICE,      /* int*: one of the names of metavar ("colocated|split", base/choice_names.h),
                           stored as its value (0, 1, ...) */
} DfOptionKind;

/* Whether the kind takes its value as text as given (STRING, PATH, JSON). */
int df_option_kind_is_text(DfOptionKind kind);
/* Whether the kind takes an integer (INT, INT64, UINT64). */
int df_option_kind_is_integer(DfOptionKind kind);

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
    /* --help's "(default ...)": default_text when set ("" for none, e.g.
     * where the unset state means "not at all"), else the value at
     * default_value (of dest's type), else nothing. */
    const void *default_value;
    const char *default_text;
} DfOption;

/* One DfOption of a .def row (see the top of this file). */
#define DF_OPTION_ENTRY(dest, default_of, name, kind, metavar, help, ...) \
    {(name), DF_OPT_##kind, &(dest), (metavar), (help), .default_value = &(default_of), __VA_ARGS__}

/* The C type each kind writes, and a compile-time check that a row's field
 * has it (at file scope: DF_OPTION_TYPE_CHECK(((Args *)0)->field, KIND, name);). */
#define DF_OPTION_CTYPE_FLAG int
#define DF_OPTION_CTYPE_INT int
#define DF_OPTION_CTYPE_INT64 int64_t
#define DF_OPTION_CTYPE_UINT64 uint64_t
#define DF_OPTION_CTYPE_DOUBLE double
#define DF_OPTION_CTYPE_STRING const char *
#define DF_OPTION_CTYPE_PATH const char *
#define DF_OPTION_CTYPE_JSON const char *
#define DF_OPTION_CTYPE_CHOICE int
#define DF_OPTION_CTYPE_STRING_LIST DfStringList
#define DF_OPTION_TYPE_CHECK(field_lvalue, kind, name) \
    _Static_assert(_Generic((field_lvalue), DF_OPTION_CTYPE_##kind: 1, default: 0), \
                   "--" name ": the field's type is not its kind's")

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

/* Stores value into the option `name` as the command line would (same
 * checks), without marking it given: a default a command applies itself
 * (train's bundled default run). */
int df_option_set(const DfCommandSpec *spec, const char *name, const char *value, DfError *err);

/* "1..4096", "(0, 10]": the range as messages write it. */
void df_range_text(const DfRange *r, int integer, char *out, size_t cap);

/* The start of every command: parses argv, prints "dflash: MESSAGE" on a bad
 * command line. Returns 0 to go on, or 1 when the command must return
 * *exit_code at once (2 after a bad command line, 0 after --help). */
int df_parse_command_line(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, int *exit_code);

#define DF_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
