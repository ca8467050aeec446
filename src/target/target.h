/* The target model (Qwen3 / Llama-3 decoder, or the hybrid Qwen3.5 / Qwen3.6
 * decoder, see target/hybrid_layer.h) over the backend op table: a forward
 * pass over a packed batch of variable-length sequences that returns the tap
 * features (output of chosen decoder layers) and optionally logits. */
#ifndef DF_TARGET_TARGET_H
#define DF_TARGET_TARGET_H

#include <stdint.h>

#include "backend/backend.h"
#include "target/model_config.h"

typedef struct DfTargetLayer {
    /* Attention layers; a hybrid target's gated q_proj is [2 * heads * head_dim, H]. Norm weights of a
     * (1 + w) family are stored as 1 + w, so that the plain rmsnorm op applies them. */
    DfBuffer input_norm, q_proj, k_proj, v_proj, o_proj, q_norm, k_norm, post_norm, gate_proj, up_proj, down_proj;
    /* A dense layer's fused projections, which OWN the memory of the views above: qkv_proj
     * [(heads + 2 * kv_heads) * head_dim, H] holds q_proj, k_proj, v_proj as consecutive row ranges;
     * gate_up_proj [2 * intermediate, H] holds gate_proj then up_proj. One product each serves the
     * decoder; qkv_proj's serves the prefill too, where it can (target/target_layer.c). Empty in a hybrid layer, whose q/k/v/gate/up own
     * themselves; df_target_free frees an owner, never its views. */
    DfBuffer qkv_proj, gate_up_proj;
    /* A hybrid target's linear_attention (Gated DeltaNet) layers instead of q/k/v/o and q/k norms:
     * in_proj_qkv [2*key_dim + value_dim, H], in_proj_z [value_dim, H], in_proj_b / in_proj_a
     * [value_heads, H], out_proj [H, value_dim]; F32: conv1d [conv_dim, kernel], dt_bias, a_log
     * [value_heads], linear_norm [value_head_dim] (the gated norm, plain weight). */
    DfBuffer in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj, conv1d, dt_bias, a_log, linear_norm;
} DfTargetLayer;

/* Activations of one forward, sized for up to `capacity` tokens; kept in the
 * model between calls and grown when a larger batch comes. */
typedef struct DfTargetWorkspace {
    int capacity;
    DfBuffer ids, x, h, q, k, v, attn, gate, up;
} DfTargetWorkspace;

void df_target_workspace_free(DfBackend *be, DfTargetWorkspace *ws);

/* The hybrid layers' extra activations (target/hybrid_layer.c), same capacity rule. */
typedef struct DfHybridWorkspace {
    int capacity;
    DfBuffer qg, attn_gate;               /* gated attention: q_proj output, gate */
    DfBuffer mixed, conv, z, beta, decay, core; /* DeltaNet: in_proj_qkv, its convolution, z, b, a, output */
} DfHybridWorkspace;

typedef struct DfTargetModel {
    DfModelConfig cfg;
    const struct DfTargetFamily *family; /* cfg's (target/target_family.h), set by the load or the random init */
    char *dir; /* the directory df_target_load read (owned), named in errors; NULL otherwise */
    DfBackend *be;
    int n_layers_loaded; /* layers 0 .. n_layers_loaded-1 are in memory */
    int has_head;        /* final norm and lm_head loaded: logits possible */
    int layers_run;      /* decoder layers the last forward ran */
    DfBuffer embed;      /* [V, H] */
    DfTargetLayer *layers;
    DfBuffer final_norm; /* [H] */
    DfBuffer lm_head;    /* [V, H]; the embedding itself when tied */
    int lm_head_tied;
    DfBuffer rope_cos, rope_sin; /* F32 [rope_positions, head_dim/2] */
    int rope_positions;
    DfTargetWorkspace ws;
    DfHybridWorkspace hws;
} DfTargetModel;

/* Layers a forward needs: all of them when logits are asked for, else
 * 0 .. max(tap_layer_ids). */
int df_target_layers_needed(const DfModelConfig *cfg, const int *tap_layer_ids, int n_taps, int with_logits);

/* Loads config.json and weights from a Hugging Face directory: the embedding,
 * decoder layers 0..n_layers-1, and with_head: the final norm and lm_head
 * (also with fewer layers: drafter training needs the lm head, not the last
 * layers; logits then need all layers and are refused).
 * n_layers must be in 0..num_layers (0: the embedding and head alone, what
 * a drafter needs when another process runs the target's layers). Weights of any float dtype become the
 * backend's activation dtype, except a hybrid target's small parameters
 * (its (1 + w) norms and the DeltaNet's conv1d, A_log, dt_bias, gated norm),
 * which stay F32 (see target/hybrid_layer.h). */
int df_target_load(DfTargetModel *m, DfBackend *be, const char *dir, int n_layers, int with_head, DfError *err);
void df_target_free(DfTargetModel *m);

/* Forward over a packed batch already on the backend. ids: I32 [T] checked
 * by the caller to be < vocab_size (df_target_forward does it). Runs layers
 * 0..max tap, or all layers and the head when logits is non-empty.
 * features: empty, or ACT [T, n_taps*H]: tap j in columns j*H .. (j+1)*H-1.
 * logits: empty, or ACT [T, V]. */
int df_target_forward_batch(DfTargetModel *m, const DfPackedBatch *batch, DfBuffer ids, const int *tap_layer_ids,
                            int n_taps, DfBuffer features, DfBuffer logits, DfError *err);

/* Host-side convenience: ids[T] with T = seq_starts[n_seqs]; positions
 * restart at 0 in each sequence. features_out [T, n_taps*H] and logits_out
 * [T, V] are fp32 host arrays, each may be NULL. */
int df_target_forward(DfTargetModel *m, const int32_t *ids, const int32_t *seq_starts, int n_seqs,
                      const int *tap_layer_ids, int n_taps, float *features_out, float *logits_out, DfError *err);

/* Spec section 8: sum over sequences of 2*K*P_layer*S + 2*K*S^2*nh*hd, with
 * P_layer the q,k,v,o,gate,up,down weights and K the layers run; plus
 * 2*S*H*V per sequence for the lm head when with_logits. A hybrid target
 * counts each layer's own weights (gated q_proj twice the width; a DeltaNet
 * layer's in/out projections) and, for a DeltaNet layer, 6*value_heads*
 * key_head_dim*value_head_dim per token for the recurrence instead of the
 * attention term. */
double df_target_forward_flops(const DfModelConfig *cfg, const int *seq_lens, int n_seqs, int n_layers,
                               int with_logits);

/* One decode step's FLOPs, as spec section 8 counts them: n_seqs sequences
 * of one new token each, attending to `keys` cached rows on average (the new
 * one included). Per token 2*P over every layer's weights and the lm head
 * (2*H*V), plus per attention layer 4*keys*nh*hd (q.k and p.v over the
 * keys), or per DeltaNet layer the recurrence's 6*value_heads*key_head_dim*
 * value_head_dim. */
double df_target_decode_flops(const DfModelConfig *cfg, int n_seqs, double keys);

#endif
