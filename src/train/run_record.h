/* OUTPUT/args.json: the run's record, every option of `dflash train` as it
 * was resolved (defaults included, the drafter's shape as the target made
 * it), keyed by the flag names without dashes ("draft-layers": 5), so that
 * `train --config OUTPUT/args.json` (cli/config_args.h) makes the same run;
 * null where the option keeps its machine-dependent default (e.g.
 * "max-drafter-tokens": sized by the memory plan). "dflash_version" and
 * "backends" name the build that ran it (--config ignores them). */
#ifndef DF_TRAIN_RUN_RECORD_H
#define DF_TRAIN_RUN_RECORD_H

#include "base/error.h"
#include "model/drafter_config.h"
#include "train/trainer.h"

/* The record's JSON text (caller frees with cJSON_free). */
char *df_run_record_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg);

/* Writes the record to path atomically. */
int df_run_record_write(const char *path, const DfTrainOptions *o, const DfDrafterConfig *dcfg, DfError *err);

#endif
