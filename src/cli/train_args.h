/* The command line of `dflash train`: the options of train/train_options.def
 * parsed (after --config's, cli/config_args.h) into the run's options, the
 * regeneration's (--prompts) and the command's own, with the bundled
 * default applied and the checks across options made. cli/cmd_train.c runs
 * what it gives; tests/test_config_roundtrip.c reads a record back through
 * it. */
#ifndef DF_CLI_TRAIN_ARGS_H
#define DF_CLI_TRAIN_ARGS_H

#include "backend/kernel_variants.h"
#include "cli/args.h"
#include "cli/config_args.h"
#include "cli/train_prompts.h"
#include "train/trainer.h"

/* The bundled default run (paths relative to the current directory). */
#define DF_TRAIN_DEFAULT_TARGET "assets/coder-tiny"
/* the target's own responses to the prompts of assets/data/code-train.jsonl
 * (spec section 5's recipe; `make demo-data` remakes it with dflash generate) */
#define DF_TRAIN_DEFAULT_DATA "assets/data/code-train.regenerated.jsonl"
#define DF_TRAIN_DEFAULT_OUTPUT "runs/coder-tiny"

/* Where the options of train/train_options.def go, by their home column. */
typedef struct DfTrainArgs {
    DfTrainOptions run;     /* RUN */
    DfTrainPrompts prompts; /* PROMPTS */
    const char *config_path; /* COMMAND: --config (read by df_config_args_expand) */
    DfStringList kernel_variant;
    DfKernelVariants variants; /* kernel_variant parsed; run.kernel_variants points here when any */
} DfTrainArgs;

/* The field of a train_options.def row in the DfTrainArgs at a, by the
 * row's home column: DF_TRAIN_ARG(a, RUN, token_budget) is a->run.token_budget. */
#define DF_TRAIN_ARG(a, home, field) DF_TRAIN_ARG_##home(a, field)
#define DF_TRAIN_ARG_RUN(a, field) (a)->run.field
#define DF_TRAIN_ARG_PROMPTS(a, field) (a)->prompts.field
#define DF_TRAIN_ARG_COMMAND(a, field) (a)->field

/* Parses argv (expanded by --config into *config, which the caller frees
 * with df_config_args_free after it is done with a's strings) into a.
 * Returns 0 to go on, or 1 when the command must return *exit_code at once
 * (2 after a bad command line, with the message printed; 0 after --help). */
int df_train_args_parse(int argc, char **argv, DfTrainArgs *a, DfConfigArgs *config, int *exit_code);

#endif
