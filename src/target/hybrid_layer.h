/* One decoder layer of a hybrid Qwen3.5 / Qwen3.6 target (dense) over a
 * packed batch, as transformers defines the family:
 *
 *   h = rmsnorm(x) (weights stored as 1 + w)
 *   full_attention (gated):
 *     [q | gate] per head = h Wq^T; k, v = h Wk^T, h Wv^T; q, k = q_norm, k_norm
 *     per head; RoPE on the first rotary_dim values of each head (partial);
 *     x += (attention(q, k, v) * sigmoid(gate)) Wo^T
 *   linear_attention (Gated DeltaNet, backend/gated_deltanet.h):
 *     qkv = silu(causal_conv(h Wqkv^T)); z = h Wz^T; b = h Wb^T; a = h Wa^T
 *     o = gated_delta_rule(q, k, v, a, b); x += gated_rmsnorm(o, z) Wout^T
 *   x += MLP(post_norm(x)) (SwiGLU)
 *
 * Everything runs through the backend op table (the DeltaNet's pieces are
 * the table's hybrid ops), so the same code serves the CPU and CUDA.
 *
 * Small parameters are F32 buffers on every backend: the (1 + w) norm
 * weights (bf16's 8 bits would round (1 + w) to steps of 1/128, wiping out a w
 * of ~1e-2, where transformers adds 1 in fp32), A_log and dt_bias (they go
 * through exp and softplus into the decay, where a bf16 rounding of A_log
 * changes exp(A_log) by up to ~0.5% on every token and compounds over the
 * recurrence), the conv1d weights and the gated norm's weight. */
#ifndef DF_TARGET_HYBRID_LAYER_H
#define DF_TARGET_HYBRID_LAYER_H

#include "target/target.h"
#include "target/target_layer.h"

/* The hybrid layers' steps around those that need the whole sequence
 * (attention, the convolution and the recurrence: DfSequenceSteps), for the
 * layer builder (target_layer.c). All work on the first a->n_rows rows,
 * a->h = input_norm(x) already; extra activations in m->hws
 * (df_hybrid_workspace_ensure, target_workspace.h, for n_rows first).
 *
 * Gated attention: a->q, a->k (normed, rotated at positions), a->v, and the
 * output gate into hws.attn_gate; then, with a->attn computed,
 * x += (attn * sigmoid(gate)) Wo^T. */
void df_hybrid_attention_qkv(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                             DfBuffer positions, DfBuffer rope_cos, DfBuffer rope_sin);
void df_hybrid_attention_out(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a);

/* Gated DeltaNet: the projections hws.mixed (in_proj_qkv), z, beta (raw b),
 * decay (raw a); then, with hws.core = the recurrence's output,
 * x += gated_rmsnorm(core, z) Wout^T. */
void df_hybrid_deltanet_in(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a);
void df_hybrid_deltanet_out(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a);

#endif
