/* The options that define a training run (what a checkpoint records, its
 * resume identity): those that train/train_options.def marks ID_YES (or
 * ID_UNLESS_DEFAULT), as resolved (train/run_record.h: the drafter's shape
 * as the target made it), keyed by the option's name as args.json is
 * ("token-budget"), and what the options name: the store's size and
 * tokenizer ("data_samples", "data_tokens", "tokenizer_fingerprint"), the
 * tapped layers ("target_layer_ids"), random target weights
 * ("target_weights"). A resume must name the same; the device, logging and
 * the pipeline's settings are not part of it (a checkpoint resumes
 * anywhere). Checkpoints whose identity spells the option keys with
 * underscores ("token_budget") are read as the same keys. */
#ifndef DF_TRAIN_RUN_OPTIONS_H
#define DF_TRAIN_RUN_OPTIONS_H

#include <stdint.h>

#include "base/error.h"
#include "formats/token_store.h"
#include "model/drafter_config.h"
#include "train/trainer.h"

/* The options as one JSON object's text (caller frees with cJSON_free). */
char *df_run_options_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg, const DfTokenStore *store,
                          int64_t total_steps);

/* 0 when `current` (this run's) equals `stored` (the checkpoint at path's);
 * else fails naming the first option that differs. */
int df_run_options_compare(const char *stored, const char *current, const char *path, DfError *err);

#endif
