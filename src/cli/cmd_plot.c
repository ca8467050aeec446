/* dflash plot: a training run's curves as one PNG. */
#include <stdio.h>

#include "base/paths_apart.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "plot/plot_run.h"

int df_cmd_plot(int argc, char **argv) {
    const char *output = NULL;
    const DfOption options[] = {
        {"output", DF_OPT_STRING, &output, "FILE", "the PNG to write (default RUN_DIR/curves.png)", 0},
    };
    const DfCommandSpec spec = {
        "plot", "a training run's curves as one PNG", "RUN_DIR",
        "Reads RUN_DIR/metrics.jsonl (and RUN_DIR/eval.jsonl where it exists) and draws, over the steps:\n"
        "the loss and train-tau (per step and their moving average), held-out tau, the learning rate,\n"
        "tokens/s, and the time of each stage of a step. train refreshes RUN_DIR/curves.png itself at\n"
        "each checkpoint and at the end.",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err = {{0}};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    if (args.n_positional != 1) {
        fprintf(stderr, "dflash plot: give one RUN_DIR (see 'dflash plot --help')\n");
        return 2;
    }
    char path[4200];
    if (!output) snprintf(path, sizeof path, "%s/curves.png", args.positional[0]);
    else snprintf(path, sizeof path, "%s", output);
    char metrics[4200], evals[4200];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", args.positional[0]);
    snprintf(evals, sizeof evals, "%s/eval.jsonl", args.positional[0]);
    const DfPathArg ins[] = {{"RUN_DIR/metrics.jsonl", metrics}, {"RUN_DIR/eval.jsonl", evals}};
    const DfPathArg outs[] = {{"--output", path}};
    if ((exit_code = df_paths_apart_or_usage("plot", ins, 2, outs, 1)) != 0) return exit_code;
    if (df_plot_run(args.positional[0], path, &err)) {
        fprintf(stderr, "dflash plot: %s\n", err.msg);
        return 1;
    }
    printf("plot: %s (%dx%d)\n", path, DF_PLOT_WIDTH, DF_PLOT_HEIGHT);
    return 0;
}
