/* Resumable training states under OUTPUT/checkpoints/: the flat fp32 master
 * weights, the AdamW moments and step, the drafter config, the data/RNG
 * position and the run's options, in one safetensors file per checkpoint
 * (step-NNNNNNNN.safetensors), written atomically and verified on load. */
#ifndef DF_TRAIN_CHECKPOINT_H
#define DF_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "base/error.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"
#include "train/optimizer.h"

typedef struct DfTrainProgress {
    int64_t step;        /* optimizer steps completed */
    int64_t total_steps; /* of the whole run (the schedule's length) */
    int64_t epoch;       /* epoch of the next batch */
    int64_t batch_in_epoch; /* index of the next batch inside its epoch */
    uint64_t seed;
    int64_t tokens_seen;
} DfTrainProgress;

/* Writes checkpoints_dir/step-NNNNNNNN.safetensors (creating the directory)
 * and removes the oldest checkpoints beyond keep_last (0 keeps all).
 * options_json: the run's options, stored as metadata so that --resume can
 * refuse a run whose options changed. */
int df_checkpoint_save(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                       const float *params, const DfAdamW *opt, const DfTrainProgress *progress,
                       const char *options_json, int keep_last, DfError *err);

/* Path of the newest checkpoint in the directory (caller frees), NULL with
 * err->msg empty when there is none, NULL with a message on error. */
char *df_checkpoint_latest(const char *checkpoints_dir, DfError *err);

/* Loads a checkpoint written by df_checkpoint_save: params (allocated,
 * caller frees), the optimizer state into opt (already initialised for the
 * layout), progress, and the options JSON (caller frees). cfg must equal the
 * stored config, else an error says which field differs. */
int df_checkpoint_load(const char *path, const DfDrafterConfig *cfg, const DfDrafterLayout *layout, float **params,
                       DfAdamW *opt, DfTrainProgress *progress, char **options_json, DfError *err);

#endif
