/* A target layer's weight storage (target_layer_storage.c): a dense layer's
 * q/k/v and gate/up projections live in two fused owners, with the separate
 * projections as views into them; freeing knows which buffers own memory. */
#ifndef DF_TARGET_TARGET_LAYER_STORAGE_H
#define DF_TARGET_TARGET_LAYER_STORAGE_H

#include "target/target.h"

/* A dense layer's fused owners qkv_proj and gate_up_proj (target/target.h),
 * with q_proj, k_proj, v_proj, gate_proj, up_proj set to views into them. */
int df_target_layer_alloc_fused(DfTargetModel *m, DfTargetLayer *l, DfError *err);

/* Frees a layer's buffers: the fused owners (their views are cleared, never
 * freed) and every buffer that owns its memory. */
void df_target_layer_free(DfBackend *be, DfTargetLayer *l);

#endif
