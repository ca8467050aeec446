/* What an export may replace. `export --output DIR` swaps a new drafter
 * directory in for DIR whole, so DIR must hold nothing else: it is absent,
 * empty, or a previous export, known by its exact set of files
 * (config.json, model.safetensors and dflash.py; an export made before
 * dflash.py was written has the first two). A run directory, a model
 * directory or any other folder is refused, naming what is in it. */
#ifndef DF_MODEL_EXPORT_DIR_H
#define DF_MODEL_EXPORT_DIR_H

#include "base/error.h"

/* 0 when dir may be replaced, else -1 with "DIR holds ..., not a drafter
 * export: ...; give an empty or new directory" (the caller exits 2). */
int df_export_dir_check(const char *dir, DfError *err);

#endif
