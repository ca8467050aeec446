/* --config FILE.json: a command's options from a JSON object whose keys are
 * the option names without dashes ({"lr": 6e-4, "draft-layers": 5,
 * "resume": true}); a null value, or false for a flag, gives nothing. The
 * object becomes command-line tokens put before the real ones, so that the
 * same parsing and checks apply and a flag on the command line wins (the
 * last occurrence of an option counts). */
#ifndef DF_CLI_CONFIG_ARGS_H
#define DF_CLI_CONFIG_ARGS_H

#include "base/error.h"
#include "cli/args.h"

typedef struct DfConfigArgs {
    char **argv; /* argv[0] (the command), the file's tokens, then the command line's argv[1..] */
    int argc;
    char **owned; /* the tokens made from the file (freed by df_config_args_free) */
    int n_owned;
} DfConfigArgs;

/* Finds "--config FILE" (or --config=FILE) in argv; without one, out holds
 * argv as it is. Keys the spec has no option for fail naming the file and
 * the key, except those in `ignored` (NULL-terminated, e.g. a record's
 * "dflash_version"); so do values of the wrong JSON type. */
int df_config_args_expand(const DfCommandSpec *spec, int argc, char **argv, const char *const *ignored,
                          DfConfigArgs *out, DfError *err);
void df_config_args_free(DfConfigArgs *a);

#endif
