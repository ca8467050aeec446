/* Drafter directories in the format serving stacks load (spec section 7):
 * config.json + bf16 model.safetensors with unprefixed tensor names. */
#ifndef DF_MODEL_DRAFTER_IO_H
#define DF_MODEL_DRAFTER_IO_H

#include "base/error.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

/* Writes dir/config.json and dir/model.safetensors (bf16) from flat fp32
 * params. The directory appears whole or not at all: files are written into
 * a temporary sibling directory which is then renamed over dir. */
int df_drafter_export(const char *dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout, const float *params,
                      DfError *err);

/* Reads any drafter directory in the section 7 format (ours or another
 * trainer's): config.json into cfg (the target-derived fields from the file
 * itself), checks every tensor's presence, shape and float dtype against the
 * layout, and returns the flat fp32 params (caller frees). */
int df_drafter_load(const char *dir, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params, DfError *err);

/* config.json text for cfg (caller frees). */
char *df_drafter_config_json(const DfDrafterConfig *cfg);

#endif
