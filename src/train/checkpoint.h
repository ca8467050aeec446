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

/* File layout: tensors "params", "adam.exp_avg", "adam.exp_avg_sq" (F32
 * [total]), "adam.step" and "progress.<field>" (I64 [1]; the seed's 64 bits
 * stored as I64); "__metadata__" holds "format" ("dflash-checkpoint"),
 * "version", "drafter_config" (the config.json text), "loss_gamma",
 * "options" and "checksum" (16 hex digits, see df_checkpoint_checksum).
 *
 * Writes checkpoints_dir/step-NNNNNNNN.safetensors (NNNNNNNN =
 * progress->step; creating the directory), atomically and fsynced, then,
 * once it is durable, removes the oldest checkpoints beyond keep_last (0
 * keeps all); the new one is never removed, even when older-numbered steps
 * from an abandoned run are around. options_json: the run's options, stored
 * as metadata so that --resume can refuse a run whose options changed (NULL
 * stores "{}"). */
int df_checkpoint_save(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                       const float *params, const DfAdamW *opt, const DfTrainProgress *progress,
                       const char *options_json, int keep_last, DfError *err);

/* df_checkpoint_save, where rotation also keeps the checkpoint of step
 * keep_also (when there is one; -1: none) besides the keep_last newest: the
 * step with the best held-out eval. */
int df_checkpoint_save_keeping(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                               const float *params, const DfAdamW *opt, const DfTrainProgress *progress,
                               const char *options_json, int keep_last, int64_t keep_also, DfError *err);

/* Path of the newest checkpoint in the directory (caller frees), NULL with
 * err->msg empty when there is none, NULL with a message on error. */
char *df_checkpoint_latest(const char *checkpoints_dir, DfError *err);

/* Loads a checkpoint written by df_checkpoint_save: params (allocated,
 * caller frees), the optimizer state into opt (already initialised for the
 * layout), progress, and the options JSON (caller frees). cfg must equal the
 * stored config, else an error says which field differs. */
int df_checkpoint_load(const char *path, const DfDrafterConfig *cfg, const DfDrafterLayout *layout, float **params,
                       DfAdamW *opt, DfTrainProgress *progress, char **options_json, DfError *err);

/* Loads the newest checkpoint of the directory that passes its checks,
 * walking from the newest to the oldest and skipping corrupt or unreadable
 * ones with a warning on stderr. A config mismatch is not skipped (older
 * checkpoints of the same run would differ the same way): it is an error.
 * Returns 0 with *loaded_path (caller frees) naming the file loaded, 1 when
 * the directory holds no checkpoint (or does not exist), -1 on error (every
 * checkpoint corrupt: the message names the newest one and its fault). */
int df_checkpoint_latest_valid(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                               float **params, DfAdamW *opt, DfTrainProgress *progress, char **options_json,
                               char **loaded_path, DfError *err);

/* The drafter of a checkpoint alone (no optimizer state, no run to match):
 * the file is verified (format, checksum) as for a resume, its config comes
 * from the metadata (drafter_config, loss_gamma), and the fp32 params are
 * returned (caller frees; layout built, free with df_drafter_layout_free).
 * step (may be NULL): the optimizer steps the checkpoint is at. For export
 * and eval of a checkpoint. */
int df_checkpoint_read_drafter(const char *path, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params,
                               int64_t *step, DfError *err);

/* The train option that sets the drafter config field a
 * df_drafter_config_differs message starts with ("" when none does: the
 * field comes from the target). */
const char *df_train_option_of_field(const char *what);

/* The checkpoint checksum (metadata "version" "2"): XXH3-64 (seed 0,
 * src/base/checksum.h) of, concatenated: each tensor in name order (its name
 * bytes, then its data bytes), then the metadata strings drafter_config,
 * loss_gamma and options. Version "1" checkpoints, which folded
 * df_hash64_chunked (src/base/hash64.h) of the same byte ranges with
 * df_hash64_mix, are still read. */

#endif
