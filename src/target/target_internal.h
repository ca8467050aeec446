/* Shared by the target's loaders (target_load.c, hybrid_load.c). */
#ifndef DF_TARGET_TARGET_INTERNAL_H
#define DF_TARGET_TARGET_INTERNAL_H

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

/* A dense layer's fused owners qkv_proj and gate_up_proj (target/target.h),
 * with q_proj, k_proj, v_proj, gate_proj, up_proj set to views into them. */
int df_target_layer_alloc_fused(DfTargetModel *m, DfTargetLayer *l, DfError *err);

/* Frees a layer's buffers: the fused owners (their views are cleared, never
 * freed) and every buffer that owns its memory. */
void df_target_layer_free(DfBackend *be, DfTargetLayer *l);

/* "model." or "model.language_model." (cfg->weight_prefix; "model." when unset). */
const char *df_target_weight_prefix(const DfModelConfig *c);

#endif
