/* train --init-from: a fresh run that starts from an existing drafter's
 * weights (an exported directory, ours or another trainer's, or a training
 * checkpoint) instead of the random init, with a fresh optimizer. */
#ifndef DF_TRAIN_INIT_FROM_H
#define DF_TRAIN_INIT_FROM_H

#include "base/error.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

/* Loads the drafter at source (train/drafter_source.h) into params (laid
 * out as `layout`, the run's). Its config must describe the run's drafter
 * (run): every field but the loss gamma, which no drafter file holds for
 * training; a config.json without a mask token takes the run's. A
 * difference fails naming the field, both values and the option that sets
 * it. */
int df_init_from_drafter(const char *source, const DfDrafterConfig *run, const DfDrafterLayout *layout, float *params,
                         DfError *err);

#endif
