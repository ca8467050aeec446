/* Shared by the target's loaders (target_load.c, hybrid_load.c). */
#ifndef DF_MODEL_TARGET_INTERNAL_H
#define DF_MODEL_TARGET_INTERNAL_H

#include "formats/safetensors.h"
#include "model/target.h"

/* Reads tensor `name` of the given shape (ndim <= 3) as fp32, adds `add` to
 * every value (1 for a (1 + w) norm), and uploads it into a new buffer of
 * the given kind. Errors name the tensor. */
int df_target_load_weight(DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                          DfBufKind kind, float add, DfBuffer *out, DfError *err);

/* "model." or "model.language_model." (cfg->weight_prefix; "model." when unset). */
const char *df_target_weight_prefix(const DfModelConfig *c);

#endif
