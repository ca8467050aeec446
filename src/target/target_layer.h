/* One target decoder layer of any kind (target_family.h), written once for
 * the packed forward (target_forward.c) and the KV-cache decode
 * (target_decode.c). The two differ only in the steps that need more of a
 * sequence than the rows at hand (attention, the Gated DeltaNet's
 * convolution and recurrence): the caller gives those as DfSequenceSteps,
 * over the whole packed batch or over its cache and recurrent state. Every
 * other op (norms, projections, gates, rope, MLP) is the builder's, so both
 * paths run the same ops on the same values.
 *
 *   attention (dense):  h = input_norm(x); q, k, v = projections, q/k norms
 *                       (Qwen3), rope; attend; x += o_proj(attn);
 *                       x += down(silu(gate(n)) * up(n)), n = post_norm(x)
 *   gated attention and Gated DeltaNet (hybrid): target/hybrid_layer.h */
#ifndef DF_TARGET_TARGET_LAYER_H
#define DF_TARGET_TARGET_LAYER_H

#include "target/target.h"

/* Views of the activations of n_rows rows: x is the residual stream (in and out). */
typedef struct DfTargetLayerActs {
    int n_rows;
    DfBuffer x, h, q, k, v, attn, gate, up;
    /* Decoding a dense model with fused weights: the one q|k|v product [rows, (heads + 2 *
     * kv_heads) * head_dim] and the one gate|up product [rows, 2 * intermediate] (gate then holds
     * swiglu's output); k, v and up are then empty. Empty otherwise. */
    DfBuffer qkv, gate_up;
} DfTargetLayerActs;

/* Full-size activation buffers, of which DfTargetLayerActs views the first rows. */
typedef struct DfTargetLayerBuffers {
    DfBuffer x, h, q, k, v, attn, gate, up, qkv, gate_up;
} DfTargetLayerBuffers;

/* Views of the first n_rows rows of each non-empty buffer of b. */
DfTargetLayerActs df_target_layer_acts(const DfModelConfig *c, int n_rows, const DfTargetLayerBuffers *b);

/* The steps of a layer that see the sequence beyond its new rows. */
typedef struct DfSequenceSteps {
    void *self;
    DfBuffer positions;          /* I32 [rows]: each row's position in its sequence */
    DfBuffer rope_cos, rope_sin; /* F32 [positions, rope_dim / 2] */
    /* a->attn = attention of the rows' queries a->q over the keys and values of their sequence:
     * a->k, a->v of these rows (and, decoding, the slot's cached ones, which they join). */
    void (*attend)(void *self, int layer, const DfTargetLayerActs *a);
    /* Decoding with fused weights only: from the raw q|k|v product in a->qkv, the q/k norms,
     * rope, the cache writes and attention into a->attn. */
    void (*attend_qkv)(void *self, int layer, const DfTargetLayerActs *a);
    /* The Gated DeltaNet's causal convolution and recurrence over the rows: m->hws.mixed, beta,
     * decay in; m->hws.conv and core out (target/hybrid_layer.h). */
    void (*recur)(void *self, int layer, int n_rows);
} DfSequenceSteps;

/* Runs decoder layer `layer` of m on a's rows (x in and out). */
void df_target_layer(DfTargetModel *m, int layer, const DfTargetLayerActs *a, const DfSequenceSteps *s);

/* x += down(silu(gate(n)) * up(n)), n = post_norm(x): the MLP every layer kind ends with. */
void df_target_layer_mlp(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a);

#endif
