/* A drafter from wherever a user names one: an exported drafter directory
 * (spec section 7: config.json + model.safetensors, ours or another
 * trainer's) or a training checkpoint file (OUTPUT/checkpoints/
 * step-N.safetensors). For eval, export and train --init-from. */
#ifndef DF_TRAIN_DRAFTER_SOURCE_H
#define DF_TRAIN_DRAFTER_SOURCE_H

#include <stdint.h>

#include "base/error.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

/* Loads the drafter at path: a regular file is read as a checkpoint
 * (df_checkpoint_read_drafter), anything else as a drafter directory
 * (df_drafter_load; its mask_token_id may be -1, see there). params: fp32,
 * caller frees; layout: free with df_drafter_layout_free. step (may be
 * NULL): the checkpoint's step, -1 for a directory. */
int df_drafter_source_load(const char *path, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params,
                           int64_t *step, DfError *err);

#endif
