/* A training run's curves, read from OUTPUT/metrics.jsonl (one line per
 * step: train/trainer.h) and, where it exists, OUTPUT/eval.jsonl (held-out
 * tau: {"step", "tau", ...}). A value that is not a number (null: a
 * non-finite loss) is NaN. */
#ifndef DF_PLOT_RUN_SERIES_H
#define DF_PLOT_RUN_SERIES_H

#include "base/error.h"

#define DF_PLOT_MAX_STAGES 16

typedef struct DfRunSeries {
    int n;                 /* steps read */
    double *step, *loss, *tau, *lr, *tokens_per_s;
    int n_stages;          /* metrics' stage_ms keys, in their order */
    char stage_names[DF_PLOT_MAX_STAGES][24];
    double *stage_ms[DF_PLOT_MAX_STAGES];
    int n_eval;            /* eval.jsonl records */
    double *eval_step, *eval_tau;
} DfRunSeries;

/* Reads run_dir/metrics.jsonl (required) and run_dir/eval.jsonl (optional).
 * A line that is not JSON fails naming file:line, except a torn last line
 * (a run writing it now), which is left out. On error nothing is kept. */
int df_run_series_read(const char *run_dir, DfRunSeries *s, DfError *err);
void df_run_series_free(DfRunSeries *s);

#endif
