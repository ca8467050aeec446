#include "train/step_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/anchors.h"
#include "train/rank_share.h"

static int64_t grown(int64_t cap, int64_t need) {
    int64_t c = cap ? cap : 1024;
    while (c < need) c *= 2;
    return c;
}

/* Grows the arrays (never shrinks them), so that a batch stops allocating
 * once the largest batch has been seen. */
static void reserve(DfStepBatch *b, int64_t tokens, int64_t samples, int64_t longest) {
    if (tokens > b->tokens_cap) {
        b->tokens_cap = grown(b->tokens_cap, tokens);
        b->ids = df_xrealloc(b->ids, (size_t)b->tokens_cap * sizeof *b->ids, "batch ids");
        b->mask = df_xrealloc(b->mask, (size_t)b->tokens_cap, "batch mask");
        b->anchors = df_xrealloc(b->anchors, (size_t)b->tokens_cap * sizeof *b->anchors, "anchors");
    }
    if (samples + 1 > b->samples_cap) {
        b->samples_cap = grown(b->samples_cap, samples + 1);
        size_t n = (size_t)b->samples_cap;
        b->samples = df_xrealloc(b->samples, n * sizeof *b->samples, "batch samples");
        b->lengths = df_xrealloc(b->lengths, n * sizeof *b->lengths, "batch sample lengths");
        b->share = df_xrealloc(b->share, n * sizeof *b->share, "batch share");
        b->seq_starts = df_xrealloc(b->seq_starts, n * sizeof *b->seq_starts, "sequence starts");
        b->anchor_starts = df_xrealloc(b->anchor_starts, n * sizeof *b->anchor_starts, "anchor starts");
    }
    if (longest > b->longest_cap) {
        b->longest_cap = grown(b->longest_cap, longest);
        b->scratch = df_xrealloc(b->scratch, (size_t)b->longest_cap * sizeof *b->scratch, "anchor scratch");
    }
}

int df_step_batch_fill(DfStepBatch *b, const DfStepLoaderConfig *cfg, const int64_t *samples, int n, int64_t epoch,
                       DfError *err) {
    int64_t global = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        int64_t len = df_token_store_sample_length(cfg->store, samples[i]);
        global += len;
        if (len > longest) longest = len;
    }
    if (global > INT32_MAX) return df_fail(err, "a batch of %lld tokens is too large", (long long)global);
    reserve(b, global, n, longest);
    memcpy(b->samples, samples, (size_t)n * sizeof *samples);
    b->n_samples = n;
    b->global_tokens = global;
    b->epoch = epoch;
    for (int i = 0; i < n; i++) b->lengths[i] = df_token_store_sample_length(cfg->store, samples[i]);
    b->n_seqs = df_rank_share(b->lengths, n, cfg->world, cfg->rank, b->share);
    int64_t at = 0, n_anchors = 0;
    b->seq_starts[0] = 0;
    b->anchor_starts[0] = 0;
    for (int k = 0; k < b->n_seqs; k++) {
        int64_t sample = samples[b->share[k]], len;
        const int32_t *ids;
        const uint8_t *mask;
        if (df_token_store_sample(cfg->store, sample, &ids, &mask, &len, err))
            return df_context(err, "step %lld, sample %lld", (long long)b->step, (long long)sample);
        memcpy(b->ids + at, ids, (size_t)len * sizeof *ids);
        memcpy(b->mask + at, mask, (size_t)len);
        n_anchors += df_select_anchors(mask, len, cfg->num_anchors, cfg->seed, (uint32_t)epoch, (uint64_t)sample,
                                       b->anchors + n_anchors, b->scratch);
        at += len;
        b->seq_starts[k + 1] = (int32_t)at;
        b->anchor_starts[k + 1] = n_anchors;
    }
    b->tokens = at;
    b->has_rows = cfg->drafter && b->n_seqs > 0;
    if (b->has_rows) {
        DfDrafterBatch share = {.n_seqs = b->n_seqs, .seq_starts = b->seq_starts, .ids = b->ids,
                                .loss_mask = b->mask, .anchor_starts = b->anchor_starts, .anchors = b->anchors};
        df_drafter_rows_build(&b->rows, cfg->drafter, &share);
    }
    return 0;
}

void df_step_batch_free(DfStepBatch *b) {
    free(b->samples), free(b->lengths), free(b->share), free(b->ids), free(b->mask);
    free(b->seq_starts), free(b->anchor_starts), free(b->anchors), free(b->scratch);
    df_drafter_rows_free(&b->rows);
    memset(b, 0, sizeof *b);
}

/* The thread: steps first_step..last_step in plan order. */
static void *loader_main(void *arg) {
    DfStepLoader *l = arg;
    const DfStepLoaderConfig *c = &l->cfg;
    DfEpochPlan plan = {0};
    int have_plan = 0;
    int64_t epoch = c->epoch, bi = c->batch_in_epoch;
    DfError err = {{0}};
    for (int64_t step = c->first_step; step <= c->last_step; step++) {
        if (!have_plan || plan.epoch != epoch) {
            if (have_plan) df_epoch_plan_free(&plan);
            df_batcher_plan_epoch(c->batcher, epoch, &plan);
            have_plan = 1;
        }
        if (bi >= plan.n_batches) {
            df_fail(&err, "internal: batch %lld of epoch %lld does not exist", (long long)bi, (long long)epoch);
            df_queue_abort(&l->ready, err.msg);
            break;
        }
        void *item;
        if (df_queue_pop(&l->free_batches, &item, &err) != DF_QUEUE_OK) break; /* stopped */
        DfStepBatch *b = item;
        double t0 = df_stage_begin();
        b->step = step;
        b->batch_in_epoch = bi;
        b->epoch_batches = plan.n_batches;
        int n = (int)(plan.starts[bi + 1] - plan.starts[bi]);
        if (df_step_batch_fill(b, c, plan.samples + plan.starts[bi], n, epoch, &err)) {
            df_queue_abort(&l->ready, err.msg);
            break;
        }
        b->load_s = df_stage_begin() - t0;
        if (c->stages) df_stage_record(c->stages, c->load_stage, b->load_s);
        if (df_queue_push(&l->ready, b, &err) != DF_QUEUE_OK) break;
        if (++bi == plan.n_batches) epoch++, bi = 0;
    }
    df_queue_close(&l->ready);
    if (have_plan) df_epoch_plan_free(&plan);
    return NULL;
}

int df_step_loader_start(DfStepLoader *l, const DfStepLoaderConfig *cfg, DfError *err) {
    memset(l, 0, sizeof *l);
    if (cfg->depth < 1) return df_fail(err, "queue depth %d: must be at least 1", cfg->depth);
    l->cfg = *cfg;
    if (df_queue_init(&l->ready, "step batches", cfg->depth, err)) return -1;
    if (df_queue_init(&l->free_batches, "free step batches", cfg->depth, err)) {
        df_queue_destroy(&l->ready);
        return -1;
    }
    l->pool = df_xcalloc((size_t)cfg->depth, sizeof *l->pool, "step batches");
    for (int i = 0; i < cfg->depth; i++) df_queue_push(&l->free_batches, &l->pool[i], err);
    int rc = pthread_create(&l->thread, NULL, loader_main, l);
    if (rc != 0) {
        df_queue_destroy(&l->ready);
        df_queue_destroy(&l->free_batches);
        free(l->pool);
        l->pool = NULL;
        return df_fail(err, "cannot start the loader thread: %s", strerror(rc));
    }
    l->started = 1;
    return 0;
}

DfQueueResult df_step_loader_next(DfStepLoader *l, DfStepBatch **batch, DfError *err) {
    void *item = NULL;
    DfQueueResult r = df_queue_pop(&l->ready, &item, err);
    *batch = r == DF_QUEUE_OK ? item : NULL;
    return r;
}

void df_step_loader_release(DfStepLoader *l, DfStepBatch *batch) {
    DfError ignored = {{0}};
    df_queue_push(&l->free_batches, batch, &ignored); /* aborted: the loader is stopping, nothing to do */
}

void df_step_loader_stop(DfStepLoader *l) {
    if (!l->started) return;
    df_queue_abort(&l->free_batches, "the trainer stopped the loader");
    df_queue_abort(&l->ready, "the trainer stopped the loader");
    pthread_join(l->thread, NULL);
    l->started = 0;
}

void df_step_loader_queue_stats(DfStepLoader *l, DfQueueStats *out) { df_queue_stats(&l->ready, out); }

void df_step_loader_free(DfStepLoader *l) {
    if (!l->pool) return;
    df_step_loader_stop(l);
    df_queue_destroy(&l->ready);
    df_queue_destroy(&l->free_batches);
    for (int i = 0; i < l->cfg.depth; i++) df_step_batch_free(&l->pool[i]);
    free(l->pool);
    l->pool = NULL;
}
