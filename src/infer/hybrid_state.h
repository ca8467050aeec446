/* The recurrent state of a hybrid target's Gated DeltaNet layers for each
 * decoder slot (what the KV cache is for the full-attention layers): per
 * linear layer and slot, the last kernel-1 inputs of the causal convolution
 * and the delta rule's state [value_heads, key_dim, value_dim]. Host fp32:
 * hybrid targets run on the CPU backend.
 *
 * Rollback after a speculative step. A KV cache rolls back by forgetting
 * rows; a recurrent state has folded the rejected tokens in. Of the ways to
 * undo that, this keeps a snapshot and replays:
 *  - before a recorded step (at most record_rows new rows, e.g. one
 *    verification block), each linear layer's state of the slot is copied
 *    aside, and the step keeps its per-token inputs of the convolution (the
 *    in_proj_qkv rows) and of the recurrence (the convolution's output and
 *    the raw b, a rows);
 *  - rolling back to k of the step's rows restores the copy and reruns only
 *    the recurrence over the k kept tokens from those inputs (they do not
 *    depend on the state), and rebuilds the convolution window from them.
 * Cost per verification: one state copy per linear layer, and the
 * recurrence over the accepted tokens: no projection, no matrix product and
 * no attention is redone. The alternatives: rerunning the accepted tokens
 * through the whole target (another forward per cycle, about doubling the
 * target's cost), or keeping the state after every block position
 * (block_size states per layer: 16 x 3 MiB per layer per slot for a
 * Qwen3.6-27B-shaped target, against one copy here). */
#ifndef DF_INFER_HYBRID_STATE_H
#define DF_INFER_HYBRID_STATE_H

#include "formats/model_config.h"
#include "model/target.h"

typedef struct DfHybridState {
    int n_linear, n_slots, conv_dim, value_heads, kernel;
    size_t state_floats;            /* one layer's delta-rule state: value_heads * key_dim * value_dim */
    int record_rows;                /* longest step that can be rolled back (0: none) */
    int linear_index[DF_MAX_LAYERS]; /* of each decoder layer: its index among the linear ones, or -1 */
    float *conv, *rec;              /* [n_linear][n_slots]: [kernel-1, conv_dim] windows, states */
    float *saved_conv, *saved_rec;  /* the same, as they were before the slot's last recorded step */
    float *step_mixed, *step_qkv;   /* [n_linear][n_slots][record_rows, conv_dim] */
    float *step_b, *step_a;         /* [n_linear][n_slots][record_rows, value_heads] */
    int *step_start, *step_rows;    /* [n_slots]: length before the last step and its rows (rows -1: not recorded) */
} DfHybridState;

/* Zero state for n_slots slots of a hybrid config (cfg->is_hybrid). */
int df_hybrid_state_init(DfHybridState *s, const DfModelConfig *cfg, int n_slots, DfError *err);
void df_hybrid_state_free(DfHybridState *s);

/* Steps of up to `rows` new tokens become recordable (grows the records). */
int df_hybrid_state_set_record_rows(DfHybridState *s, int rows, DfError *err);

/* A new sequence in slot: zero state, nothing to roll back. */
void df_hybrid_state_reset(DfHybridState *s, int slot);

/* Before a step brings `rows` tokens to slot, which holds `start`: a step of
 * at most record_rows is recorded (snapshot taken), a longer one is not. */
void df_hybrid_state_begin_step(DfHybridState *s, int slot, int start, int rows);

/* The convolution and the recurrence of linear layer `layer` for n new rows
 * of slot: mixed [n, conv_dim] (in_proj_qkv), b, a [n, value_heads] in;
 * conv_out [n, conv_dim] and core [n, value_heads * value_dim] out; the
 * slot's state advances (and the step's inputs are recorded). */
void df_hybrid_state_run(DfHybridState *s, const DfTargetLayer *l, const DfLinearAttnConfig *la, int layer, int slot,
                         const float *mixed, const float *b, const float *a, float *conv_out, float *core, int n);

/* Leaves slot as if its last step had brought only its first len - start
 * tokens (start = its length before that step): start <= len <= start + its
 * rows, and the step must have been recorded. layers: the model's. */
int df_hybrid_state_rollback(DfHybridState *s, const DfTargetLayer *layers, const DfLinearAttnConfig *la, int slot,
                             int len, DfError *err);

#endif
