/* The split layout's target ranks (train/trainer.h, --layout split): each
 * step, for every drafter rank it serves in turn, the next batch from that
 * rank's loader, the target forward of its share, the drafter rank's credit,
 * and the features sent (dist/feature_link.h). The drafter ranks run the
 * ordinary loop (trainer.c) with the features received instead of a
 * forward. */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/signals.h"
#include "train/trainer_internal.h"

/* One share's forward: its tap features in *features (none for an empty share). */
static int target_share(Trainer *t, const DfStepBatch *b, DfBuffer *features, DfStepTimes *times, double *t0,
                        DfError *err) {
    size_t width = (size_t)t->dcfg.n_taps * t->dcfg.hidden_size;
    *features = df_buffer_view(t->buf.features, 0, (size_t)b->tokens * width);
    if (b->n_seqs == 0) return 0;
    DfDrafterBatch db;
    if (df_packed_batch_set(&t->packed, t->be, b->seq_starts, b->n_seqs, err)) return -1;
    return df_trainer_share_forward(t, b, &t->packed, &db, times, t0, err);
}

/* The drafter ranks this target rank serves (global ranks, in turn order). */
static int served_ranks(const Trainer *t, int *peers) {
    int n = 0, targets = t->opt->target_ranks;
    for (int r = targets; r < t->world; r++)
        if (df_feature_link_target_of(r, targets) == t->rank) peers[n++] = r;
    return n;
}

/* A target rank stopped by peers[-1]'s STOP: the others must stop at the same step. */
static int expect_stops(Trainer *t, const int *peers, int n, int64_t step, DfError *err) {
    for (int k = 0; k < n; k++) {
        int stopped;
        if (df_feature_link_await_credit(&t->split.links, peers[k], step, &stopped, err)) return -1;
        if (!stopped)
            return df_fail(err, "drafter ranks disagree on stopping before step %lld (rank %d granted it)",
                           (long long)step, peers[k]);
    }
    return 0;
}

/* One step for every drafter rank served: next batch, forward, credit, send.
 * *stopped when the drafter ranks stopped the run before this step. */
static int target_step(Trainer *t, DfStepLoader *loaders, const int *peers, int n, int64_t step, int *stopped,
                       DfError *err) {
    size_t width = (size_t)t->dcfg.n_taps * t->dcfg.hidden_size;
    for (int k = 0; k < n; k++) {
        DfStepTimes times = {0};
        double t0 = df_now_seconds();
        DfStepBatch *b;
        DfQueueResult q = df_step_loader_next(&loaders[k], &b, err);
        if (q == DF_QUEUE_CLOSED) return df_fail(err, "internal: the loader ended before step %lld", (long long)step);
        if (q != DF_QUEUE_OK) return df_context(err, "loading step %lld", (long long)step);
        DfBuffer features;
        int rc = b->step == step ? 0 : df_fail(err, "internal: the loader made step %lld for step %lld",
                                               (long long)b->step, (long long)step);
        if (rc == 0) rc = target_share(t, b, &features, &times, &t0, err);
        if (rc == 0) rc = df_feature_link_await_credit(&t->split.links, peers[k], step, stopped, err);
        if (rc == 0) {
            double waited = df_now_seconds() - t0;
            df_stage_record(&t->stages, DF_STEP_WAIT, waited);
            t0 += waited;
        }
        if (rc == 0 && *stopped) rc = expect_stops(t, peers + k + 1, n - k - 1, step, err);
        if (rc == 0 && !*stopped)
            rc = df_feature_link_send(&t->split.links, peers[k], step, features, (size_t)b->tokens * width,
                                      df_stop_requested(), err);
        if (rc == 0 && !*stopped) df_stage_record(&t->stages, DF_STEP_REDUCE, df_now_seconds() - t0);
        df_step_loader_release(&loaders[k], b);
        if (rc || *stopped) return rc;
    }
    return 0;
}

int df_trainer_run_target_loop(Trainer *t, DfTrainSummary *s, DfError *err) {
    double loop_start = df_now_seconds();
    s->first_step = t->progress.step + 1;
    int *peers = df_xmalloc((size_t)t->world * sizeof *peers, "served drafter ranks");
    int n = served_ranks(t, peers), started = 0, rc = 0, stopped = 0;
    DfStepLoader *loaders = df_xcalloc((size_t)(n > 0 ? n : 1), sizeof *loaders, "step loaders");
    for (int k = 0; k < n && rc == 0 && t->progress.step < t->stop_step; k++, started++) {
        DfStepLoaderConfig c = {.store = t->store, .batcher = &t->batcher, .num_anchors = t->opt->num_anchors,
                                .seed = t->opt->seed, .rank = peers[k] - t->opt->target_ranks,
                                .world = t->world - t->opt->target_ranks, .depth = t->opt->queue_depth,
                                .first_step = t->progress.step + 1, .last_step = t->stop_step,
                                .epoch = t->progress.epoch, .batch_in_epoch = t->progress.batch_in_epoch,
                                .stages = &t->stages, .load_stage = DF_STEP_LOAD};
        rc = df_step_loader_start(&loaders[k], &c, err);
    }
    int64_t steps_here = 0;
    for (int64_t step = t->progress.step + 1; rc == 0 && step <= t->stop_step; step++) {
        if ((rc = df_dist_poll_failure(t->group, err)) != 0) break;
        if ((rc = target_step(t, loaders, peers, n, step, &stopped, err)) != 0) {
            df_context(err, "step %lld", (long long)step);
            break;
        }
        if (stopped) {
            t->progress.step = t->split.links.stopped_after;
            break;
        }
        t->progress.step = step;
        steps_here++;
    }
    for (int k = 0; k < started; k++) df_step_loader_free(&loaders[k]);
    free(loaders);
    free(peers);
    s->last_step = t->progress.step;
    s->seconds = df_now_seconds() - loop_start;
    if (rc == 0) {
        DfStageSummary fwd, wait;
        df_stage_summary(&t->stages, DF_STEP_TARGET, s->seconds, &fwd);
        df_stage_summary(&t->stages, DF_STEP_WAIT, s->seconds, &wait);
        s->busy = s->seconds > 0 ? fwd.total_s / s->seconds : 0.0;
        fprintf(stderr, "train: target rank %d of %d: %lld steps for %d drafter rank(s)%s; target forward %.1f s "
                        "(%.0f%% of %.1f s), waiting for the drafter ranks %.1f s\n",
                t->rank, t->world, (long long)steps_here, n, stopped ? " (the drafter ranks stopped early)" : "",
                fwd.total_s, 100 * s->busy, s->seconds, wait.total_s);
    }
    return rc;
}
