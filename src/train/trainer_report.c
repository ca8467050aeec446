/* What the training loop reports (train/trainer.h): the metrics.jsonl line
 * and the progress line of each step, a skipped step's notice, and the stage
 * table at the end (stderr and OUTPUT/stages.json). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/progress.h"
#include "train/trainer_internal.h"

/* A number in JSON: null for NaN and infinities (JSON has no such numbers). */
static void put_number(FILE *fp, const char *format, double x) {
    if (isfinite(x)) fprintf(fp, format, x);
    else fputs("null", fp);
}

static void put_sample_ids(FILE *fp, const int64_t *samples, int n) {
    for (int i = 0; i < n; i++) fprintf(fp, "%s%lld", i ? ", " : "", (long long)samples[i]);
}

static double per_second(double x, double s) { return s > 0 ? x / s : 0.0; }

/* TFLOP/s per device. */
static double device_tflops(const Trainer *t, const StepResult *r, double wall_s) {
    return per_second(r->flops / t->world, wall_s) / 1e12;
}

int df_trainer_write_metrics(Trainer *t, int64_t epoch, const StepResult *r, const int64_t *samples,
                             const StepReport *rep, DfError *err) {
    const DfMetrics *m = &t->metrics;
    FILE *fp = t->metrics_fp;
    fprintf(fp, "{\"step\": %lld, \"epoch\": %lld, \"loss\": ", (long long)t->progress.step, (long long)epoch);
    put_number(fp, "%.17g", df_metrics_loss(m));
    fprintf(fp, ", \"train_tau\": %.17g, \"acc\": [", df_metrics_train_tau(m));
    for (int k = 1; k < t->dcfg.block_size; k++) fprintf(fp, "%s%.17g", k > 1 ? ", " : "", df_metrics_accuracy(m, k));
    fprintf(fp, "], \"lr\": %.17g, \"grad_norm\": ", r->lr);
    put_number(fp, "%.9g", (double)r->grad_norm);
    fprintf(fp, ", \"tokens\": %lld, \"samples\": %lld, ", (long long)r->tokens, (long long)r->samples);
    if (r->nonfinite) {
        fprintf(fp, "\"skipped_update\": true, \"nonfinite\": \"%s\", \"bad_steps\": %lld, \"sample_ids\": [",
                r->nonfinite, (long long)t->bad_total);
        put_sample_ids(fp, samples, (int)r->samples);
        fputs("], ", fp);
    }
    /* timing fields last (tests cut lines at "tokens_per_s" to compare runs) */
    double tflops = device_tflops(t, r, rep->wall_s);
    fprintf(fp, "\"tokens_per_s\": %.1f, \"seqs_per_s\": %.3f, \"step_s\": %.6f, ",
            per_second((double)r->tokens, rep->wall_s), per_second((double)r->samples, rep->wall_s), rep->wall_s);
    df_step_times_write_json(fp, &rep->times);
    fprintf(fp, ", \"busy\": %.4f, \"queue_depth\": %.3f, \"tflops\": %.4g, \"mfu\": ",
            per_second(df_step_device_s(&rep->times), rep->wall_s), rep->queue_depth, tflops);
    put_number(fp, "%.4f", t->peak_tflops > 0 ? tflops / t->peak_tflops : NAN);
    fprintf(fp, ", \"eta_s\": %.1f, \"elapsed_s\": %.3f}\n", rep->eta_s, rep->elapsed_s);
    if (fflush(fp) != 0 || ferror(fp)) return df_fail_errno(err, "writing %s", t->metrics_path);
    return t->tb ? df_trainer_tb_step(t, r, rep, err) : 0;
}

void df_trainer_end_progress_line(Trainer *t) {
    if (!t->progress_open) return;
    fputc('\n', stderr);
    t->progress_open = 0;
}

/* On a terminal: the figures a person watches, cut to the terminal's width
 * and redrawn in place (the full line goes to metrics.jsonl). */
static void print_short_progress(Trainer *t, const StepResult *r, const StepReport *rep, const char *eval,
                                 const char *mfu, const char *eta) {
    char line[512];
    int n = snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  tau %.3f%s  lr %.2e  |g| %.3f  %.0f tok/s%s%s  ETA %s",
                     (long long)t->progress.step, (long long)t->total_steps, df_metrics_loss(&t->metrics),
                     df_metrics_train_tau(&t->metrics), eval, r->lr, (double)r->grad_norm,
                     per_second((double)r->tokens, rep->wall_s), strcmp(mfu, "-") ? "  MFU " : "",
                     strcmp(mfu, "-") ? mfu : "", eta);
    int width = t->opt->progress_columns - 1; /* the last column would wrap on some terminals */
    fprintf(stderr, "\r%.*s\033[K", n < width ? n : width, line);
    fflush(stderr);
    t->progress_open = 1;
}

/* The progress line: short and in place on a terminal, whole in a log. */
void df_trainer_print_progress(Trainer *t, const StepResult *r, const StepReport *rep) {
    if (t->opt->quiet) return;
    char eta[32], el[32], stages[256], mfu[32] = "-";
    df_format_duration(rep->eta_s, eta, sizeof eta);
    df_format_duration(rep->elapsed_s, el, sizeof el);
    df_step_times_format(&rep->times, stages, sizeof stages);
    double tflops = device_tflops(t, r, rep->wall_s);
    if (t->peak_tflops > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * tflops / t->peak_tflops);
    char eval[64] = "";
    if (t->eval_here && t->eval.evals)
        snprintf(eval, sizeof eval, "  eval tau %.3f@%lld", t->eval.last_tau, (long long)t->eval.last_step);
    if (t->opt->progress_columns > 0) {
        print_short_progress(t, r, rep, eval, mfu, eta);
        return;
    }
    fprintf(stderr,
            "step %lld/%lld  loss %.4f  tau %.3f%s  lr %.2e  |g| %.3f | %.0f tok/s %.2f seq/s %.3g TFLOP/s MFU %s "
            "busy %.0f%% q %.1f/%d | ms: %s | %s ETA %s\n",
            (long long)t->progress.step, (long long)t->total_steps, df_metrics_loss(&t->metrics),
            df_metrics_train_tau(&t->metrics), eval, r->lr, (double)r->grad_norm,
            per_second((double)r->tokens, rep->wall_s), per_second((double)r->samples, rep->wall_s), tflops, mfu,
            100 * per_second(df_step_device_s(&rep->times), rep->wall_s), rep->queue_depth, t->opt->queue_depth,
            stages, el, eta);
}

/* Writes the checkpoint of the current step; its path goes to s->last_checkpoint. */

/* Counts and reports a step whose update was skipped. */
void df_trainer_report_bad_step(Trainer *t, const StepResult *r, const int64_t *samples, DfTrainSummary *s) {
    t->bad_in_row++;
    t->bad_total++;
    s->bad_steps++;
    if (t->rank != t->split.writer) return;
    df_trainer_end_progress_line(t);
    fprintf(stderr, "train: step %lld: non-finite %s (loss %g, |g| %g): update skipped (%lld in a row, %lld in all); "
                    "batch sample ids [",
            (long long)t->progress.step, r->nonfinite, df_metrics_loss(&t->metrics), (double)r->grad_norm,
            (long long)t->bad_in_row, (long long)t->bad_total);
    put_sample_ids(stderr, samples, (int)r->samples);
    fputs("]\n", stderr);
}

/* The stage table on stderr and in OUTPUT/stages.json (rank 0). first: the
 * first step's wall and device time (warm-up: plans, workspaces), kept out
 * of the steady-state busy fraction with the checkpoint writes. */
int df_trainer_report_stages(Trainer *t, DfTrainSummary *s, double wall_s, const DfStepTimes *first,
                             double first_wall_s, DfError *err) {
    DfQueueStats q;
    df_step_loader_queue_stats(&t->loader, &q);
    double device = 0;
    for (int i = DF_STEP_UPLOAD; i <= DF_STEP_OPTIMIZER; i++) {
        DfStageSummary st;
        df_stage_summary(&t->stages, i, wall_s, &st);
        device += st.total_s;
    }
    s->busy = per_second(device, wall_s);
    s->busy_steady = per_second(device - df_step_device_s(first), wall_s - first_wall_s - s->checkpoint_s - s->eval_s);
    s->wait_s = q.consumer_wait_s;
    if (t->rank != t->split.writer) return 0;
    snprintf(s->stages_path, sizeof s->stages_path, "%s/stages.json", t->opt->output_dir);
    if (t->opt->quiet) return df_stage_report_write_json(s->stages_path, &t->stages, wall_s, &q, 1, err);
    char evals[96] = "";
    if (s->evals) snprintf(evals, sizeof evals, ", and %lld held-out eval(s), %.1f s", (long long)s->evals, s->eval_s);
    fprintf(stderr,
            "train: where the time went (queue depth %d; device busy %.1f%% of the wall time, %.1f%% without the "
            "first step and %d checkpoint write(s), %.1f s%s):\n",
            t->opt->queue_depth, 100 * s->busy, 100 * s->busy_steady, s->checkpoints, s->checkpoint_s, evals);
    df_stage_report_print(stderr, &t->stages, wall_s, &q, 1);
    return df_stage_report_write_json(s->stages_path, &t->stages, wall_s, &q, 1, err);
}
