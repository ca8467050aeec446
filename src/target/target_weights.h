/* Reading a checkpoint's tensors into a target's buffers, shared by the
 * layer loaders of every family (dense_load.c, hybrid_load.c) and the
 * model's own tensors (target_load.c). */
#ifndef DF_TARGET_TARGET_WEIGHTS_H
#define DF_TARGET_TARGET_WEIGHTS_H

#include "formats/safetensors.h"
#include "target/target.h"

/* Reads tensor `name` of the given shape (ndim <= 3) as fp32, adds `add` to
 * every value (1 for a (1 + w) norm), and uploads it into a new buffer of
 * the given kind. Errors name the tensor. */
int df_target_load_weight(DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                          DfBufKind kind, float add, DfBuffer *out, DfError *err);

/* Uploads tensor `name` of the given shape (as df_target_load_weight, no
 * offset) into an existing ACT buffer or view of exactly that many values. */
int df_target_load_weight_into(const DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim,
                               const int64_t *shape, DfBuffer dst, DfError *err);

/* The tensor is in the file with the shape config.json implies, else an
 * error naming the tensor and both shapes: checked before anything is
 * allocated for it. */
int df_target_check_weight_shape(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                                 DfError *err);

/* "model." or "model.language_model." (cfg->weight_prefix; "model." when unset). */
const char *df_target_weight_prefix(const DfModelConfig *c);

#endif
