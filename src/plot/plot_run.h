/* The picture of a training run (dflash plot, OUTPUT/curves.png): loss and
 * train-tau (raw and smoothed), held-out tau where OUTPUT/eval.jsonl
 * exists, the learning rate, tokens/s and the per-stage step times, over
 * the steps, in one PNG of DF_PLOT_WIDTH x DF_PLOT_HEIGHT pixels. */
#ifndef DF_PLOT_PLOT_RUN_H
#define DF_PLOT_PLOT_RUN_H

#include "base/error.h"

#define DF_PLOT_WIDTH 1800
#define DF_PLOT_HEIGHT 1000

/* Reads run_dir's metrics (plot/run_series.h) and writes the PNG to
 * out_path atomically. */
int df_plot_run(const char *run_dir, const char *out_path, DfError *err);

#endif
