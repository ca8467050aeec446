/* The two target families' tables (target/target_family.h). */
#include "target/target_family.h"

#include "target/dense_config.h"
#include "target/hybrid_config.h"

static DfTargetLayerKind dense_layer_kind(const DfModelConfig *cfg, int layer) {
    (void)cfg, (void)layer;
    return DF_LAYER_ATTENTION;
}

static DfTargetLayerKind hybrid_layer_kind(const DfModelConfig *cfg, int layer) {
    return cfg->layer_is_linear[layer] ? DF_LAYER_GATED_DELTANET : DF_LAYER_GATED_ATTENTION;
}

const DfTargetFamily df_dense_family = {
    .name = "dense",
    .read_config = df_dense_config_read,
    .layer_kind = dense_layer_kind,
    .load_layer = df_dense_load_layer,
};

/* The drafter default: 32 query heads of 128 and 8 KV heads, as the published
 * drafters of these targets have (model/drafter_config.h). */
const DfTargetFamily df_hybrid_family = {
    .name = "hybrid",
    .read_config = df_hybrid_config_read,
    .layer_kind = hybrid_layer_kind,
    .load_layer = df_hybrid_load_layer,
    .partial_rotary = 1,
    .hybrid_layers = 1,
    .extra_tensor_prefix = "mtp.",
    .drafter_heads = 32,
    .drafter_kv_heads = 8,
    .drafter_head_dim = 128,
};

const DfTargetFamily *df_target_family(const DfModelConfig *cfg) {
    return cfg->is_hybrid ? &df_hybrid_family : &df_dense_family;
}

DfTargetLayerKind df_target_layer_kind(const DfModelConfig *cfg, int layer) {
    return df_target_family(cfg)->layer_kind(cfg, layer);
}
