#include "model/drafter_config.h"

#include <string.h>

#include "train/anchors.h"

int df_drafter_config_from_target(DfDrafterConfig *c, const DfModelConfig *t, int num_layers, int intermediate_size,
                                  int block_size, int n_taps, int mask_token_id, DfError *err) {
    memset(c, 0, sizeof *c);
    if (num_layers < 1 || num_layers > 64) return df_fail(err, "drafter: --draft-layers must be in 1..64, got %d", num_layers);
    if (block_size < 2 || block_size > 64) return df_fail(err, "drafter: --block-size must be in 2..64, got %d", block_size);
    if (intermediate_size < 0) return df_fail(err, "drafter: --intermediate-size must be positive, got %d", intermediate_size);
    if (n_taps == 0) n_taps = num_layers;
    if (n_taps > t->num_layers - 1) n_taps = t->num_layers > 1 ? t->num_layers - 1 : 1;
    if (n_taps < 1 || n_taps > DF_MAX_TAPS) return df_fail(err, "drafter: number of target taps must be in 1..%d, got %d", DF_MAX_TAPS, n_taps);
    if (mask_token_id < 0 || mask_token_id >= t->vocab_size)
        return df_fail(err, "drafter: mask token id %d is outside the target's embedding (%d rows)", mask_token_id, t->vocab_size);
    c->hidden_size = t->hidden_size;
    c->num_heads = t->num_heads;
    c->num_kv_heads = t->num_kv_heads;
    c->head_dim = t->head_dim;
    c->intermediate_size = intermediate_size ? intermediate_size : t->intermediate_size;
    c->num_layers = num_layers;
    c->vocab_size = t->vocab_size;
    c->block_size = block_size;
    c->mask_token_id = mask_token_id;
    c->num_target_layers = t->num_layers;
    c->n_taps = n_taps;
    df_default_target_layer_ids(t->num_layers, n_taps, c->target_layer_ids);
    c->rms_norm_eps = t->rms_norm_eps;
    c->rope = t->rope;
    c->max_position_embeddings = t->max_position_embeddings;
    c->gamma = df_default_gamma(block_size);
    return 0;
}
