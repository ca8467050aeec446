/* --report-to tensorboard: each step's scalars and each held-out eval's in
 * OUTPUT/tb/, with the values metrics.jsonl and eval.jsonl hold (the timing
 * figures as rounded there), so that the two sinks agree. Tags:
 *   train/loss, train/tau, train/acc_pos_K (K = 1..B-1), train/lr,
 *   train/grad_norm, perf/tokens_per_s, perf/seqs_per_s, perf/tflops,
 *   perf/busy, perf/mfu (with a device peak), stage_ms/STAGE (per stage of
 *   train/step_timing.h); eval/tau, eval/tau_prompt_mean,
 *   eval/accept_pos_K. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "train/trainer_internal.h"

#define MAX_SCALARS (16 + 2 * DF_TRAIN_EVAL_MAX_POSITIONS + DF_STEP_STAGES)

typedef struct Scalars {
    char names[MAX_SCALARS][48];
    const char *tags[MAX_SCALARS];
    double values[MAX_SCALARS];
    int n;
} Scalars;

static void add(Scalars *s, const char *name, int index, double value) {
    if (s->n >= MAX_SCALARS || !isfinite(value)) return; /* a non-finite value is null in the JSON: none here */
    if (index > 0) snprintf(s->names[s->n], sizeof s->names[0], "%s%d", name, index);
    else snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    s->tags[s->n] = s->names[s->n];
    s->values[s->n++] = value;
}

/* v as metrics.jsonl prints it with fmt, read back. */
static double as_printed(const char *fmt, double v) {
    char text[64];
    snprintf(text, sizeof text, fmt, v);
    return strtod(text, NULL);
}

static double per_second(double x, double s) { return s > 0 ? x / s : 0.0; }

static double wall_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int df_trainer_tb_step(Trainer *t, const StepResult *r, const StepReport *rep, DfError *err) {
    Scalars s; /* about 10 KB */
    s.n = 0;
    const DfMetrics *m = &t->metrics;
    add(&s, "train/loss", 0, df_metrics_loss(m));
    add(&s, "train/tau", 0, df_metrics_train_tau(m));
    for (int k = 1; k < t->dcfg.block_size && k <= DF_TRAIN_EVAL_MAX_POSITIONS; k++)
        add(&s, "train/acc_pos_", k, df_metrics_accuracy(m, k));
    add(&s, "train/lr", 0, r->lr);
    add(&s, "train/grad_norm", 0, (double)r->grad_norm);
    double tflops = per_second(r->flops / t->world, rep->wall_s) / 1e12;
    add(&s, "perf/tokens_per_s", 0, as_printed("%.1f", per_second((double)r->tokens, rep->wall_s)));
    add(&s, "perf/seqs_per_s", 0, as_printed("%.3f", per_second((double)r->samples, rep->wall_s)));
    add(&s, "perf/tflops", 0, as_printed("%.4g", tflops));
    add(&s, "perf/busy", 0, as_printed("%.4f", per_second(df_step_device_s(&rep->times), rep->wall_s)));
    if (t->peak_tflops > 0) add(&s, "perf/mfu", 0, as_printed("%.4f", tflops / t->peak_tflops));
    for (int i = 0; i < DF_STEP_STAGES; i++) {
        char name[48];
        snprintf(name, sizeof name, "stage_ms/%s", df_step_stage_name(i));
        add(&s, name, 0, as_printed("%.3f", 1e3 * rep->times.s[i]));
    }
    return df_tb_write_scalars(t->tb, t->progress.step, wall_clock(), s.tags, s.values, s.n, err);
}

int df_trainer_tb_eval(Trainer *t, const DfTrainEvalResult *e, DfError *err) {
    Scalars s;
    s.n = 0;
    add(&s, "eval/tau", 0, e->tau);
    add(&s, "eval/tau_prompt_mean", 0, e->tau_prompt_mean);
    for (int k = 1; k <= e->n_positions; k++) add(&s, "eval/accept_pos_", k, e->accept_by_position[k - 1]);
    return df_tb_write_scalars(t->tb, t->progress.step, wall_clock(), s.tags, s.values, s.n, err);
}
