/* The trainer's loader stage: a thread that assembles the host inputs of
 * the coming steps ahead of the compute side and hands them over through a
 * bounded queue (pipeline/queue.h).
 *
 * A step batch holds everything of a step that needs no model: the global
 * batch's sample ids (from the epoch plan, train/batcher.h), this rank's
 * share of them (train/rank_share.h), packed back to back: token ids, loss
 * mask, sequence starts, and the anchors of each sample (model/anchors.h,
 * keyed by seed, epoch and sample index), and, given the drafter's config,
 * the share's block rows (model/drafter_rows.h), built here so that the
 * compute thread does not build them while the device waits. All of it is a
 * pure function of the options and the step number, so the steps train on
 * the same inputs whatever the queue depth.
 *
 * Depth: the loader owns `depth` step batches. It fills a free one, pushes
 * it to the ready queue (capacity depth) and takes the next free one; the
 * compute side pops a ready batch and gives it back with
 * df_step_loader_release when the step no longer needs it. So at most depth
 * steps are assembled ahead, counting the one being computed: depth 1 is
 * lock-step (step n+1 is assembled only after step n released its batch).
 *
 * Ending: after the last step the ready queue is closed. A failure of the
 * loader (a sample that cannot be read) aborts the ready queue with its
 * message, which the compute side gets from df_step_loader_next. The compute
 * side ends the loader early (an error, a signal) with df_step_loader_stop:
 * it aborts both queues, so the thread returns at once from any wait. */
#ifndef DF_TRAIN_STEP_LOADER_H
#define DF_TRAIN_STEP_LOADER_H

#include <pthread.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/token_store.h"
#include "model/drafter_rows.h"
#include "pipeline/queue.h"
#include "pipeline/stage_stats.h"
#include "train/batcher.h"

typedef struct DfStepBatch {
    int64_t step;           /* 1-based optimizer step this batch is for */
    int64_t epoch, batch_in_epoch;
    int64_t epoch_batches;  /* batches in this epoch's plan */
    double load_s;          /* seconds the loader took to assemble it */
    /* the global batch (every rank's samples) */
    int64_t *samples;       /* sample ids of the token store, batch order */
    int n_samples;
    int64_t global_tokens;
    /* this rank's share, packed without padding */
    int n_seqs;
    int64_t tokens;
    int32_t *ids, *seq_starts; /* [tokens], [n_seqs + 1] */
    uint8_t *mask;             /* [tokens] */
    int64_t *anchor_starts;    /* [n_seqs + 1] */
    int64_t *anchors;          /* [anchor_starts[n_seqs]] */
    DfDrafterRows rows;        /* the share's block rows, when has_rows */
    int has_rows;
    /* capacities and scratch (private) */
    int64_t tokens_cap, seqs_cap, samples_cap, longest_cap;
    int64_t *scratch, *lengths;
    int *share;
} DfStepBatch;

typedef struct DfStepLoaderConfig {
    const DfTokenStore *store; /* read only, by the loader thread */
    const DfBatcher *batcher;
    int64_t num_anchors;       /* per sample and epoch */
    const DfDrafterConfig *drafter; /* builds each share's block rows; NULL: none (a target rank's loader) */
    uint64_t seed;
    int rank, world;           /* data parallel: this rank's share of each batch */
    int depth;                 /* >= 1 (see above) */
    int64_t first_step;        /* 1-based step of the first batch */
    int64_t last_step;         /* the last step to assemble (inclusive) */
    int64_t epoch, batch_in_epoch; /* position of first_step's batch */
    DfStageTable *stages;      /* may be NULL: assembly time of each batch goes to stage load_stage */
    int load_stage;
} DfStepLoaderConfig;

typedef struct DfStepLoader {
    DfStepLoaderConfig cfg;
    DfStepBatch *pool; /* [depth] */
    DfQueue ready, free_batches;
    pthread_t thread;
    int started;
} DfStepLoader;

/* Starts the thread. */
int df_step_loader_start(DfStepLoader *l, const DfStepLoaderConfig *cfg, DfError *err);

/* The next step's batch (DF_QUEUE_OK); DF_QUEUE_CLOSED after the last step;
 * DF_QUEUE_ABORTED with the loader's failure in err. */
DfQueueResult df_step_loader_next(DfStepLoader *l, DfStepBatch **batch, DfError *err);

/* Gives a batch back to the loader for a later step. */
void df_step_loader_release(DfStepLoader *l, DfStepBatch *batch);

/* Stops the thread (aborting its waits) and waits for it; safe to call
 * more than once and after the thread ended by itself. */
void df_step_loader_stop(DfStepLoader *l);

/* Statistics of the ready queue (occupancy, who waited on whom). */
void df_step_loader_queue_stats(DfStepLoader *l, DfQueueStats *out);

/* Stops the thread if needed and frees everything. */
void df_step_loader_free(DfStepLoader *l);

/* Fills b with step's inputs (the same function the thread runs; exposed
 * for tests): the global batch samples[0..n-1] of epoch, rank's share. */
int df_step_batch_fill(DfStepBatch *b, const DfStepLoaderConfig *cfg, const int64_t *samples, int n, int64_t epoch,
                       DfError *err);
void df_step_batch_free(DfStepBatch *b);

#endif
