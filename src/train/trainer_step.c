/* One training step of a colocated or drafter rank (train/trainer_internal.h):
 * this rank's share of the batch through the target forward (or, a split
 * layout's drafter rank, its features from its target rank), the drafter's
 * gradients summed over the ranks, and the optimizer on the backend; each
 * stage timed. The split layout's target ranks run the forward alone
 * (trainer_target_rank.c). */
#include <math.h>
#include <string.h>

#include "base/clock.h"
#include "base/signals.h"
#include "base/test_seam.h"
#include "train/trainer_internal.h"

/* The activations arena holds the largest batch the batcher makes. */
static int check_batch_fits(Trainer *t, size_t tokens, DfError *err) {
    if (tokens <= t->buf.dev_tokens_cap) return 0;
    return df_fail(err, "internal: a batch of %zu tokens exceeds the %zu the activations arena was sized for", tokens,
                   t->buf.dev_tokens_cap);
}

/* The guard after the update: finite loss and gradient can still give
 * non-finite weights (an extreme learning rate); such weights are never
 * checkpointed or exported, the run stops. */
static int check_weights_finite(Trainer *t, const StepResult *r, DfError *err) {
    double sum_sq;
    if (df_op_sum_squares(t->be, t->master, &sum_sq, err) || t->be->ops->sync(t->be, err)) return -1;
    if (isfinite(sum_sq)) return 0;
    return df_fail(err,
                   "stopping: the drafter's weights are not finite after the update of step %lld (lr %g, gradient "
                   "norm %g); nothing of this step is saved: the checkpoints in %s hold the last good weights",
                   (long long)t->progress.step + 1, r->lr, r->grad_norm, t->ckpt_dir);
}

/* Global gradient norm, clipping and AdamW, all on the backend: only the
 * norm comes back to the host (for the guard and the metrics). */
static int optimizer_step(Trainer *t, StepResult *r, DfError *err) {
    double sum_sq;
    if (df_op_sum_squares(t->be, t->drafter.grads, &sum_sq, err)) return -1;
    r->grad_norm = (float)sqrt(sum_sq);
    r->lr = df_lr_at(&t->schedule, t->progress.step);
    r->nonfinite = !isfinite(df_metrics_loss(&t->metrics)) ? "loss" : !isfinite(r->grad_norm) ? "grad_norm" : NULL;
    if (r->nonfinite) return 0; /* a non-finite step changes nothing: no optimizer step, the weights stay */
    t->adamw.step++;
    DfAdamWArgs a = {.master = t->master, .exp_avg = t->exp_avg, .exp_avg_sq = t->exp_avg_sq,
                     .grads = t->drafter.grads, .params = t->drafter.params,
                     .clip_coef = t->opt->max_grad_norm > 0 ? df_clip_coef(r->grad_norm, (float)t->opt->max_grad_norm)
                                                            : 1.0f,
                     .s = df_adamw_scalars(&t->adamw.cfg, t->adamw.step, r->lr)};
    df_op_adamw_step(t->be, &a);
    return check_weights_finite(t, r, err);
}

/* Ends a stage of the step: a device stage syncs first, so that the host
 * clock measures the device's work (train/step_timing.h). */
static int stage_done(Trainer *t, DfStepTimes *times, int stage, double *t0, DfError *err) {
    if (stage >= DF_STEP_UPLOAD && stage <= DF_STEP_OPTIMIZER && t->be->ops->sync(t->be, err)) return -1;
    double now = df_now_seconds();
    times->s[stage] += now - *t0;
    df_stage_record(&t->stages, stage, now - *t0);
    *t0 = now;
    return 0;
}

/* Spec section 8: the FLOPs of this rank's share (target forward to the
 * last tap layer, drafter forward and backward). */
static double share_flops(Trainer *t, const DfStepBatch *b, const DfDrafterBatch *db) {
    StepBuffers *sb = &t->buf;
    if (b->n_seqs > sb->seq_lens_cap) {
        sb->seq_lens_cap = b->n_seqs;
        sb->seq_lens = df_xrealloc(sb->seq_lens, (size_t)sb->seq_lens_cap * sizeof *sb->seq_lens, "sequence lengths");
    }
    for (int i = 0; i < b->n_seqs; i++) sb->seq_lens[i] = b->seq_starts[i + 1] - b->seq_starts[i];
    return df_target_forward_flops(&t->tcfg, sb->seq_lens, b->n_seqs, t->target_layers, 0) +
           df_drafter_step_flops(&t->dcfg, db);
}

/* The drafter's view of this rank's share: its host arrays, the features
 * on the device, and the block rows the loader built. */
static DfDrafterBatch drafter_batch_of(const DfStepBatch *b, DfBuffer features) {
    return (DfDrafterBatch){.n_seqs = b->n_seqs, .seq_starts = b->seq_starts, .ids = b->ids, .loss_mask = b->mask,
                            .features = features, .anchor_starts = b->anchor_starts, .anchors = b->anchors,
                            .rows = b->has_rows ? &b->rows : NULL};
}

int df_trainer_share_forward(Trainer *t, const DfStepBatch *b, DfPackedBatch *pb, DfDrafterBatch *db,
                             DfStepTimes *times, double *t0, DfError *err) {
    size_t width = (size_t)t->dcfg.n_taps * t->dcfg.hidden_size, tokens = (size_t)b->tokens;
    if (check_batch_fits(t, tokens, err)) return -1;
    DfBuffer ids = df_buffer_view(t->buf.dev_ids, 0, tokens);
    DfBuffer features = df_buffer_view(t->buf.features, 0, tokens * width);
    if (t->be->ops->upload_i32(t->be, ids, b->ids, err) || stage_done(t, times, DF_STEP_UPLOAD, t0, err)) return -1;
    if (df_target_forward_batch(&t->target, pb, ids, t->dcfg.target_layer_ids, t->dcfg.n_taps, features,
                                (DfBuffer){0}, err))
        return -1;
    DfTrainFeaturesSeam seam = {b->step, t->be, features};
    if (df_test_seam(DF_SEAM_TRAIN_FEATURES, &seam, err)) return df_context(err, "the test seam of the step's features");
    *db = drafter_batch_of(b, features);
    return stage_done(t, times, DF_STEP_TARGET, t0, err);
}

/* Split layout, a drafter rank: its share's tap features, from its target
 * rank. Waiting for them and their transfer count as the wait stage (a
 * wait for the producer, like waiting for the loader: not device work of
 * this rank, so not in its busy fraction). An empty share still gets its
 * message (the step and the target rank's stop signal). */
static int share_receive(Trainer *t, const DfStepBatch *b, DfDrafterBatch *db, DfStepTimes *times, double *t0,
                         DfError *err) {
    size_t width = (size_t)t->dcfg.n_taps * t->dcfg.hidden_size, tokens = (size_t)b->tokens;
    if (check_batch_fits(t, tokens, err)) return -1;
    DfBuffer features = df_buffer_view(t->buf.features, 0, tokens * width);
    if (df_feature_link_recv(&t->split.links, b->step, features, tokens * width, &t->split.peer_signal, err)) return -1;
    *db = drafter_batch_of(b, features);
    if (t->be->ops->sync(t->be, err)) return -1; /* NCCL: the receive is queued on the stream */
    return stage_done(t, times, DF_STEP_WAIT, t0, err);
}

/* Data parallel: the step's metrics, FLOPs and stop requests summed over the
 * ranks (one host all-reduce); with one process only the FLOPs. */
enum { EXTRA_FLOPS, EXTRA_STOPPING, EXTRA_SIGNALS, N_EXTRA };
static int reduce_step_facts(Trainer *t, double flops, StepResult *r, DfError *err) {
    r->flops = flops;
    if (t->world == 1) return 0;
    double v[DF_METRICS_COUNT + N_EXTRA];
    int sig = df_stop_requested();
    if (!sig) sig = t->split.peer_signal; /* split layout: a target rank's signal */
    memcpy(v, t->metrics.values, sizeof t->metrics.values);
    v[DF_METRICS_COUNT + EXTRA_FLOPS] = flops;
    v[DF_METRICS_COUNT + EXTRA_STOPPING] = sig != 0;
    v[DF_METRICS_COUNT + EXTRA_SIGNALS] = sig;
    if (df_comm_all_reduce_host(&t->comm, v, sizeof v / sizeof *v, err)) return df_context(err, "step metrics");
    memcpy(t->metrics.values, v, sizeof t->metrics.values);
    r->flops = v[DF_METRICS_COUNT + EXTRA_FLOPS];
    double stopping = v[DF_METRICS_COUNT + EXTRA_STOPPING];
    if (stopping > 0) r->stop_signal = sig ? sig : (int)(v[DF_METRICS_COUNT + EXTRA_SIGNALS] / stopping + 0.5);
    return 0;
}

/* One optimizer step on this rank's share of the batch b. A rank whose
 * share is empty (fewer samples than ranks) contributes zero gradients and
 * zero weight but takes part in every collective. */
int df_trainer_train_step(Trainer *t, const DfStepBatch *b, StepResult *r, DfStepTimes *times, DfError *err) {
    memset(r, 0, sizeof *r);
    double t0 = df_now_seconds();
    DfDrafterBatch db = {0};
    int rc = -1;
    double local_weight = 0, flops = 0;
    if (t->split.role == ROLE_DRAFTER) {
        if (share_receive(t, b, &db, times, &t0, err)) return -1;
    } else if (b->n_seqs > 0) {
        if (df_packed_batch_set(&t->packed, t->be, b->seq_starts, b->n_seqs, err) ||
            df_trainer_share_forward(t, b, &t->packed, &db, times, &t0, err))
            goto done;
    }
    if (b->n_seqs > 0) {
        local_weight = df_drafter_batch_weight_sum(&t->dcfg, &db);
        flops = share_flops(t, b, &db);
    }
    r->weight_sum = local_weight; /* spec section 4 step 5: the loss is normalized over the global batch */
    if (df_comm_all_reduce_host(&t->comm, &r->weight_sum, 1, err) ||
        stage_done(t, times, DF_STEP_REDUCE, &t0, err))
        goto done;
    if (!(r->weight_sum > 0)) {
        df_fail(err, "a batch of %d samples has no loss weight", b->n_samples);
        goto done;
    }
    df_metrics_reset(&t->metrics);
    if (b->n_seqs == 0) df_drafter_zero_grads(&t->drafter); /* an empty share adds zeros to the all-reduce */
    if (df_comm_grads_begin(&t->comm, t->drafter.grads, err)) goto done;
    if (b->n_seqs > 0 && df_drafter_compute_grads(&t->drafter, &db, 1.0 / r->weight_sum, &t->metrics, err))
        goto done;
    if (stage_done(t, times, DF_STEP_DRAFTER, &t0, err)) goto done;
    if (df_comm_all_reduce_grads(&t->comm, t->drafter.grads, err) || reduce_step_facts(t, flops, r, err) ||
        stage_done(t, times, DF_STEP_REDUCE, &t0, err))
        goto done;
    if (optimizer_step(t, r, err) || stage_done(t, times, DF_STEP_OPTIMIZER, &t0, err)) goto done;
    r->tokens = b->global_tokens;
    r->samples = b->n_samples;
    rc = 0;
done:
    return rc;
}
