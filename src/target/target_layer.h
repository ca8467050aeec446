/* One target decoder layer over the op table, shared by the packed forward
 * (src/target/target_forward.c) and incremental decoding with a KV cache
 * (src/target/target_decode.c): they differ only in how attention finds its
 * keys and values, so a layer is split around that step. */
#ifndef DF_TARGET_TARGET_LAYER_H
#define DF_TARGET_TARGET_LAYER_H

#include "target/target.h"

/* Views of the activations of t rows: x is the residual stream (in and out). */
typedef struct DfTargetLayerActs {
    int n_rows;
    DfBuffer x, h, q, k, v, attn, gate, up;
} DfTargetLayerActs;

/* Views of the first n_rows rows of full-size activation buffers. */
DfTargetLayerActs df_target_layer_acts(const DfModelConfig *c, int n_rows, DfBuffer x, DfBuffer h, DfBuffer q,
                                       DfBuffer k, DfBuffer v, DfBuffer attn, DfBuffer gate, DfBuffer up);

/* h = input_norm(x); q, k, v projections; q/k norms (Qwen3); RoPE at
 * positions (I32 [t]) with the F32 tables. With q/k norms, the fused q/k/v
 * weight and intermediate_size >= (heads + 2 * kv_heads) * head_dim the
 * projections are one product into gate (free until the MLP writes it),
 * so gate's values are not kept across this call. */
void df_target_layer_qkv(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                         DfBuffer positions, DfBuffer rope_cos, DfBuffer rope_sin);

/* x += o_proj(attn); x += down(silu(gate(n)) * up(n)), n = post_norm(x). */
void df_target_layer_finish(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a);

/* The second half of finish: x += down(silu(gate(n)) * up(n)), n = post_norm(x). */
void df_target_layer_mlp(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a);

#endif
