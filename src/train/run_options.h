/* The options that define a training run (what a checkpoint records): the
 * target and data (resolved paths, the store's size and tokenizer), the
 * drafter's resolved shape, the schedule and the data plan. A resume must
 * name the same; the device, logging and the pipeline's settings are not
 * part of it (a checkpoint resumes anywhere). */
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
