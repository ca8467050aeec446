/* The data a run trains on: --data as it is when it is a token store, or a
 * JSONL file prepared once into OUTPUT/data.store (kept, with the key of
 * what it was made from in OUTPUT/data.store.source.json, while that key is
 * current); and the mask token when none was given. */
#ifndef DF_TRAIN_TRAIN_DATA_H
#define DF_TRAIN_TRAIN_DATA_H

#include <stddef.h>

#include "base/error.h"
#include "train/trainer.h"

/* Creates OUTPUT, writes the token store's path to store_path (cap bytes)
 * and, when o->mask_token_id < 0, sets it to the first id past the
 * tokenizer's vocabulary. A token store must be of the target's tokenizer;
 * a JSONL file is prepared as `dflash prepare` would, unless the cache is
 * current, and never over the checkpoints of a --resume that it would
 * break. Errors name the option at fault ("--data X: ..."). */
int df_train_resolve_data(DfTrainOptions *o, char *store_path, size_t cap, DfError *err);

#endif
