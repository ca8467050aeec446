/* The training step of the recipe: what `dflash train --target DIR --data
 * FILE` trains at its defaults (train/train_options.def), for the bench's
 * training-step figure (bench/bench_train_step.h).
 *
 *   - the drafter: train's, at its default options (df_train_options_default,
 *     df_train_drafter_config), the mask token resolved as train resolves it;
 *   - the data: FILE as `train --data` takes it: a token store as it is, a
 *     JSONL file prepared as train prepares it (df_train_resolve_data) into
 *     a temporary directory that is removed before this returns;
 *   - the batch: of epoch 0's plan (train/batcher.h) at the default token
 *     budget, block size, max length and seed, the one with the most tokens
 *     among its first DF_BENCH_RECIPE_CANDIDATES batches (the first of
 *     equals), filled as the trainer's loader fills it (df_step_batch_fill:
 *     packing, loss mask, anchors; one rank).
 * The target's weights play no part here: the bench gives it random ones. */
#ifndef DF_BENCH_BENCH_RECIPE_H
#define DF_BENCH_BENCH_RECIPE_H

#include <stdint.h>

#include "base/error.h"
#include "formats/token_store.h"
#include "model/drafter_config.h"
#include "train/batcher.h"
#include "train/step_loader.h"
#include "train/trainer.h"

/* A full budget is the steady state of a run: the batches that fill it
 * (a bucket emitted when the next sample would overflow it) come early in
 * an epoch, the partial ones (the buckets left at the end) last. Among the
 * first few batches the fullest one is a steady-state step. */
#define DF_BENCH_RECIPE_CANDIDATES 16

typedef struct DfBenchRecipe {
    DfTrainOptions opt;      /* train's defaults, with target_dir, data_source and the mask token */
    DfModelConfig target;    /* the target's config.json */
    DfDrafterConfig drafter; /* the drafter train builds at those options */
    DfStepBatch batch;       /* epoch 0's chosen batch (batch.batch_in_epoch), as the loader fills it */
    int64_t anchors;         /* anchors of the batch (batch.anchor_starts[batch.n_seqs]) */
} DfBenchRecipe;

/* Builds r for the target directory and the data file (a JSONL file or a
 * token store); errors name the file at fault. Free with
 * df_bench_recipe_free, also after a failure. */
int df_bench_recipe_load(DfBenchRecipe *r, const char *target_dir, const char *data, DfError *err);
void df_bench_recipe_free(DfBenchRecipe *r);

/* The batch of plan with the most tokens among its first
 * DF_BENCH_RECIPE_CANDIDATES (the first of equals). */
int64_t df_bench_recipe_pick(const DfEpochPlan *plan, const DfTokenStore *store);

#endif
