/* OUTPUT/args.json: the run's record, every option of `dflash train` that
 * train/train_options.def marks for it, as it was resolved (defaults
 * included, the drafter's shape as the target made it), keyed by the
 * option's name ("draft-layers": 5), so that `train --config
 * OUTPUT/args.json` (cli/config_args.h) makes the same run; null where the
 * option keeps its unset state (ARGS_NULL_IF_0: e.g. "max-drafter-tokens",
 * sized by the memory plan; strings without a value). "dflash_version" and
 * "backends" name the build that ran it (--config ignores them). */
#ifndef DF_TRAIN_RUN_RECORD_H
#define DF_TRAIN_RUN_RECORD_H

#include <stddef.h>

#include "base/error.h"
#include "model/drafter_config.h"
#include "train/trainer.h"

/* The options as a run records them (args.json and the resume identity,
 * train/run_options.h): o with what the run resolved put in: the data as
 * named (data_source, else data_store), the device ("cpu" for none), the
 * drafter's shape, taps, mask token and gamma from dcfg, the sliding layers
 * as indices ("0,1,3"; "none"; NULL without a window, written into
 * sliding[cap]), epochs 0 when steps are given, and 0 (unset) for the
 * options that go with others not given (the eval's without eval_data,
 * target_ranks without the split layout). */
void df_run_record_resolve(const DfTrainOptions *o, const DfDrafterConfig *dcfg, DfTrainOptions *resolved,
                           char *sliding, size_t cap);

/* The record's JSON text (caller frees with cJSON_free); device_description
 * (the backend's, e.g. the GPU and its kernel tier; NULL: none) is recorded
 * beside the options as "device_description". */
char *df_run_record_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg, const char *device_description);

/* Writes the record to path atomically. */
int df_run_record_write(const char *path, const DfTrainOptions *o, const DfDrafterConfig *dcfg,
                        const char *device_description, DfError *err);

#endif
