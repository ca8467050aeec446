/* The recurrent state of a hybrid target's Gated DeltaNet layers for each
 * decoder slot (what the KV cache is for the full-attention layers): per
 * linear layer and slot, the last kernel-1 inputs of the causal convolution
 * and the delta rule's state [value_heads, key_dim, value_dim], both F32
 * buffers on the decoder's backend (GPU memory on CUDA, beside the KV
 * cache), advanced by the backend ops conv_step and delta_rule_step.
 *
 * Rollback after a speculative step. A KV cache rolls back by forgetting
 * rows; a recurrent state has folded the rejected tokens in. Of the ways to
 * undo that, this keeps a snapshot and replays:
 *  - in a recorded step (each sequence at most record_rows new rows, e.g.
 *    one verification block of B >= 2 tokens), the ops save each slot's state as it was
 *    before the step (they read it anyway: one extra write, no extra pass),
 *    and the step keeps its per-token inputs of the convolution (the
 *    in_proj_qkv rows) and of the recurrence (the convolution's output and
 *    the raw b, a rows) per layer and slot;
 *  - rolling back to k of the step's rows restores the snapshot and reruns
 *    only the recurrence over the k kept tokens from those inputs (they do
 *    not depend on the state), and rebuilds the convolution window from them.
 * Cost per verification: one state copy per linear layer, and the
 * recurrence over the accepted tokens: no projection, no matrix product and
 * no attention is redone. The alternatives: rerunning the accepted tokens
 * through the whole target (another forward per cycle, about doubling the
 * target's cost), or keeping the state after every block position
 * (block_size states per layer: 16 x 3 MiB per layer per slot for a
 * Qwen3.6-27B-shaped target, against one copy here). The replay runs the
 * same kernel over the same recorded inputs as the step did, so a rollback
 * leaves the state the step would have left after the kept tokens. */
#ifndef DF_TARGET_HYBRID_STATE_H
#define DF_TARGET_HYBRID_STATE_H

#include "target/model_config.h"
#include "target/target.h"

typedef struct DfHybridState {
    DfBackend *be;
    int n_linear, n_slots, conv_dim, value_heads, kernel;
    DfDeltaRuleShape shape;
    size_t window_floats, state_floats; /* one slot's, of one layer */
    int record_rows;                 /* longest step that can be rolled back (0: none) */
    int linear_index[DF_MAX_LAYERS]; /* of each decoder layer: its index among the linear ones, or -1 */
    /* F32 [n_linear][n_slots]: [kernel-1, conv_dim] windows, [value_heads, key_dim, value_dim] states */
    DfBuffer conv, rec;
    DfBuffer saved_conv, saved_rec; /* the same, as they were before the slot's last recorded step */
    /* ACT [n_linear][n_slots][record_rows, dim]: the recorded step's inputs */
    DfBuffer step_mixed, step_qkv; /* dim conv_dim */
    DfBuffer step_b, step_a;       /* dim value_heads */
    DfKvBatch record_kb; /* the recorded step's layout into the records: its slots, rows from 0 */
    DfKvBatch replay_kb; /* one slot's kept rows, for a rollback */
    int32_t *zeros;      /* [n_slots] */
    int recording;       /* the current step is recorded */
    int *step_start, *step_rows; /* [n_slots]: length before the last step and its rows (rows -1: not recorded) */
} DfHybridState;

/* Zero state for n_slots slots of a config of the hybrid family on be. */
int df_hybrid_state_init(DfHybridState *s, DfBackend *be, const DfModelConfig *cfg, int n_slots, DfError *err);
void df_hybrid_state_free(DfHybridState *s);

/* Steps of up to `rows` new tokens per sequence become recordable (grows the records). */
int df_hybrid_state_set_record_rows(DfHybridState *s, int rows, DfError *err);

/* A new sequence in slot: zero state, nothing to roll back (queued on the backend). */
void df_hybrid_state_reset(DfHybridState *s, int slot);

/* Before a step with layout kb (its cache lengths are the slots' lengths):
 * the step is recorded when every sequence brings at most record_rows rows
 * and one of them at least 2; the slots of another step cannot be rolled
 * back (a step of single tokens, plain decoding, has nothing to undo). */
int df_hybrid_state_begin_step(DfHybridState *s, const DfKvBatch *kb, DfError *err);

/* The convolution and the recurrence of linear layer `layer` for the step's
 * rows (kb): mixed [n_rows, conv_dim] (in_proj_qkv), b, a [n_rows,
 * value_heads] in; conv_out [n_rows, conv_dim] and core [n_rows, value_heads
 * * value_dim] out (ACT views); the slots' states advance (and a recorded
 * step keeps its inputs). */
void df_hybrid_state_layer(DfHybridState *s, const DfTargetLayer *l, int layer, const DfKvBatch *kb, DfBuffer mixed,
                           DfBuffer b, DfBuffer a, DfBuffer conv_out, DfBuffer core);

/* Leaves slot as if its last step had brought only its first len - start
 * tokens (start = its length before that step): start <= len <= start + its
 * rows, and the step must have been recorded. layers: the model's. */
int df_hybrid_state_rollback(DfHybridState *s, const DfTargetLayer *layers, int slot, int len, DfError *err);

#endif
