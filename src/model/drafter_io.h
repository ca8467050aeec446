/* Drafter directories in the format serving stacks load (spec section 7):
 * config.json + bf16 model.safetensors with unprefixed tensor names. */
#ifndef DF_MODEL_DRAFTER_IO_H
#define DF_MODEL_DRAFTER_IO_H

#include <stddef.h>

#include "base/error.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

/* Writes dir/config.json, dir/model.safetensors (bf16) from flat fp32
 * params, and dir/dflash.py (model/dflash_py.h: the module config.json's
 * auto_map names, for transformers' trust_remote_code). The directory appears whole or not at all: files are written into
 * a temporary sibling directory (dir.tmp-PID) which is then renamed over dir
 * (an existing dir is replaced whole, its old contents removed). A failure
 * leaves a previous dir untouched and no temporary behind. */
int df_drafter_export(const char *dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout, const float *params,
                      DfError *err);

/* Reads any drafter directory in the section 7 format (ours or another
 * trainer's): config.json into cfg (the target-derived fields from the file
 * itself), checks every tensor's presence, shape and float dtype against the
 * layout, and returns the flat fp32 params (caller frees). Extra tensors are
 * refused by name, except embed_tokens / lm_head (some exporters include the
 * frozen shared ones), which are skipped. When config.json gives no
 * dflash_config.mask_token_id, cfg->mask_token_id is -1 and the caller must
 * derive it from the target's tokenizer (spec section 7: the first id past
 * the tokenizer's vocabulary that the embedding has a row for). On success
 * layout is built (caller frees with df_drafter_layout_free). */
int df_drafter_load(const char *dir, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params, DfError *err);

/* config.json text for cfg (caller frees). */
char *df_drafter_config_json(const DfDrafterConfig *cfg);

/* Parses config.json text (ours or another trainer's) into cfg; `source`
 * names the text in errors (a path, or a path plus a metadata key). The loss
 * gamma, which config.json does not hold, is set to the block size's default. */
int df_drafter_config_parse(const char *json_text, const char *source, DfDrafterConfig *cfg, DfError *err);

/* 0 when a and b describe the same drafter (every field, gamma included,
 * compared exactly); else 1 with "field: a-value vs b-value" written to
 * what[0..cap-1], the field named as in config.json. */
int df_drafter_config_differs(const DfDrafterConfig *a, const DfDrafterConfig *b, char *what, size_t cap);

#endif
