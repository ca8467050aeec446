/* The training state's round trips (train/trainer_internal.h): a fresh
 * start or a resume from the latest valid checkpoint, the state between the
 * host and the backend, the checkpoints (with curves.png), the best held-out
 * eval's drafter in best/ and the exported final/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "model/drafter_io.h"
#include "plot/plot_run.h"
#include "train/init_from.h"
#include "train/run_dir.h"
#include "train/run_options.h"
#include "train/trainer_internal.h"

/* Host -> backend: the master weights (and the drafter's copy in its dtype)
 * from params, the moments from the host AdamW state (resume) or zero. */
int df_trainer_upload_state(Trainer *t, int with_moments, DfError *err) {
    DfBackend *be = t->be;
    if (be->ops->upload_f32(be, t->master, t->params, err) ||
        be->ops->upload_f32(be, t->drafter.params, t->params, err))
        return -1;
    if (!with_moments) {
        df_op_fill_zero(be, t->exp_avg);
        df_op_fill_zero(be, t->exp_avg_sq);
        return be->ops->sync(be, err);
    }
    return be->ops->upload_f32(be, t->exp_avg, t->adamw.exp_avg, err) ||
           be->ops->upload_f32(be, t->exp_avg_sq, t->adamw.exp_avg_sq, err);
}

/* Backend -> host: master weights into params, moments into the host AdamW
 * state (for a checkpoint or the export). */
static int download_state(Trainer *t, DfError *err) {
    DfBackend *be = t->be;
    if (be->ops->sync(be, err)) return -1;
    return be->ops->download_f32(be, t->params, t->master, err) ||
           be->ops->download_f32(be, t->adamw.exp_avg, t->exp_avg, err) ||
           be->ops->download_f32(be, t->adamw.exp_avg_sq, t->exp_avg_sq, err);
}

int df_trainer_start_fresh(Trainer *t, DfError *err) {
    char *latest = df_checkpoint_latest(t->ckpt_dir, err);
    if (latest) {
        int rc = df_fail(err,
                         "%s already holds a training run (%s): pass --resume to continue it, or choose another "
                         "--output (or delete it)",
                         t->opt->output_dir, latest);
        free(latest);
        return rc;
    }
    if (err->msg[0]) return -1;
    if (t->opt->init_from) {
        if (df_init_from_drafter(t->opt->init_from, &t->dcfg, &t->drafter.layout, t->params, err)) return -1;
        if (t->rank == t->split.writer && !t->opt->quiet)
            fprintf(stderr, "train: starting from the weights of %s (a fresh optimizer)\n", t->opt->init_from);
    } else {
        df_drafter_init_params(&t->drafter.layout, t->params, t->opt->seed);
    }
    memset(&t->progress, 0, sizeof t->progress);
    t->progress.total_steps = t->total_steps;
    t->progress.seed = t->opt->seed;
    if (t->rank == t->split.writer && !(t->metrics_fp = fopen(t->metrics_path, "w")))
        return df_fail_errno(err, "cannot create %s", t->metrics_path);
    return 0;
}

int df_trainer_resume(Trainer *t, int *resumed, DfError *err) {
    float *loaded = NULL;
    char *stored = NULL, *path = NULL;
    int rc = df_checkpoint_latest_valid(t->ckpt_dir, &t->dcfg, &t->drafter.layout, &loaded, &t->adamw, &t->progress,
                                        &stored, &path, err);
    if (rc == 1) { /* killed before its first checkpoint, or a requeued job's first launch */
        if (!t->opt->quiet) fprintf(stderr, "train: --resume: no checkpoint in %s yet: starting from step 0\n", t->ckpt_dir);
        return df_trainer_start_fresh(t, err);
    }
    if (rc != 0) return df_context(err, "--resume");
    rc = df_run_options_compare(stored ? stored : "", t->options_json, path, err);
    if (rc == 0 && (t->progress.seed != t->opt->seed || t->progress.total_steps != t->total_steps))
        rc = df_fail(err, "--resume: %s is from a run with another seed or length", path);
    if (rc == 0 && t->progress.step > t->total_steps)
        rc = df_fail(err, "--resume: %s is at step %lld, past this run's %lld steps", path,
                     (long long)t->progress.step, (long long)t->total_steps);
    if (rc == 0) {
        memcpy(t->params, loaded, t->drafter.layout.total * sizeof *t->params);
        if (t->rank == t->split.writer)
            rc = df_run_dir_truncate_jsonl(t->metrics_path, t->progress.step, &t->elapsed_offset, err);
    }
    if (rc == 0 && t->rank == t->split.writer && !(t->metrics_fp = fopen(t->metrics_path, "a")))
        rc = df_fail_errno(err, "cannot open %s", t->metrics_path);
    *resumed = rc == 0;
    if (rc == 0 && !t->opt->quiet)
        fprintf(stderr, "train: resuming from %s (step %lld of %lld, epoch %lld)%s\n", path,
                (long long)t->progress.step, (long long)t->total_steps, (long long)t->progress.epoch,
                t->opt->init_from ? "; --init-from applies to a fresh start only" : "");
    free(loaded);
    free(stored);
    free(path);
    return rc;
}

/* OUTPUT/curves.png from the metrics so far (plot/plot_run.h); a picture
 * that cannot be drawn is a warning, never the end of a run. */
void df_trainer_refresh_curves(const Trainer *t) {
    if (t->metrics_fp) fflush(t->metrics_fp);
    char path[4200];
    snprintf(path, sizeof path, "%s/curves.png", t->opt->output_dir);
    DfError err = {{0}};
    if (df_plot_run(t->opt->output_dir, path, &err)) fprintf(stderr, "train: warning: no curves.png: %s\n", err.msg);
}

static int write_checkpoint(Trainer *t, DfTrainSummary *s, DfError *err) {
    if (download_state(t, err)) return df_context(err, "the checkpoint of step %lld", (long long)t->progress.step);
    int64_t best = t->eval_here ? t->eval.best_step : -1; /* its checkpoint outlives --keep-checkpoints */
    if (df_checkpoint_save_keeping(t->ckpt_dir, &t->dcfg, &t->drafter.layout, t->params, &t->adamw, &t->progress,
                                   t->options_json, t->opt->keep_checkpoints, best, err)) {
        if (s->last_checkpoint[0])
            return df_context(err, "writing the checkpoint of step %lld (the previous checkpoint %s is intact)",
                              (long long)t->progress.step, s->last_checkpoint);
        return df_context(err, "writing the checkpoint of step %lld (earlier checkpoints are intact)",
                          (long long)t->progress.step);
    }
    snprintf(s->last_checkpoint, sizeof s->last_checkpoint, "%s/step-%08lld.safetensors", t->ckpt_dir,
             (long long)t->progress.step);
    df_trainer_refresh_curves(t);
    return 0;
}

/* Rank 0 writes; the time it takes is kept apart from the steps' (summary). */
int df_trainer_save_checkpoint(Trainer *t, DfTrainSummary *s, DfError *err) {
    if (t->rank != t->split.writer) return 0; /* the state is replicated: one rank writes it */
    double t0 = df_now_seconds();
    int rc = write_checkpoint(t, s, err);
    s->checkpoint_s += df_now_seconds() - t0;
    s->checkpoints += rc == 0;
    return rc;
}

/* A new best held-out tau: the drafter of this step goes to OUTPUT/best/
 * at once (and its checkpoint, when the step writes one, is kept). */
int df_trainer_keep_best(Trainer *t, DfError *err) {
    if (t->eval.best_step != t->progress.step) return 0;
    if (download_state(t, err) || df_drafter_export(t->best_dir, &t->dcfg, &t->drafter.layout, t->params, err))
        return df_context(err, "the best drafter so far (step %lld)", (long long)t->progress.step);
    return 0;
}

/* Whether best/ holds a drafter (a run resumed from a version that kept
 * none has an eval log but no best/). */
int df_trainer_have_best_dir(const Trainer *t) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", t->best_dir);
    return t->eval_here && t->eval.best_step >= 0 && access(path, F_OK) == 0;
}

/* Whether final/ is to hold the best held-out eval's drafter (best/). */
static int final_is_best(const Trainer *t, int at_end) {
    const DfTrainOptions *o = t->opt;
    int by_tau = o->select_by == DF_SELECT_TAU || (o->select_by == DF_SELECT_AUTO && o->eval_data);
    if (!(by_tau && at_end && t->eval_here && t->eval.best_step >= 0 && t->eval.best_step != t->progress.step))
        return 0;
    if (df_trainer_have_best_dir(t)) return 1;
    fprintf(stderr, "train: warning: %s holds no drafter (the best eval, step %lld, predates it): final/ is the last "
                    "step's\n", t->best_dir, (long long)t->eval.best_step);
    return 0;
}

/* final/: the drafter of the step reached, or (final_is_best) best/'s,
 * read back whole (bf16, as exported) and written again. */
int df_trainer_export_final(Trainer *t, int at_end, DfTrainSummary *s, DfError *err) {
    if (!final_is_best(t, at_end)) {
        s->final_step = t->progress.step;
        return download_state(t, err) || df_drafter_export(t->final_dir, &t->dcfg, &t->drafter.layout, t->params, err);
    }
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params = NULL;
    if (df_drafter_load(t->best_dir, &cfg, &layout, &params, err))
        return df_context(err, "final/ as the best held-out eval's drafter (step %lld)", (long long)t->eval.best_step);
    int rc = layout.total == t->drafter.layout.total
                 ? df_drafter_export(t->final_dir, &t->dcfg, &t->drafter.layout, params, err)
                 : df_fail(err, "%s: %zu parameters, this run's drafter %zu", t->best_dir, layout.total,
                           t->drafter.layout.total);
    free(params);
    df_drafter_layout_free(&layout);
    s->final_step = t->eval.best_step;
    return rc;
}
