/* Incremental target inference: prefill and decode steps for a batch of
 * independent sequences, each in its own KV cache slot with its own length.
 * A step runs the new tokens of some sequences (a whole prompt, one token,
 * or a speculative block) at positions continuing from their cache lengths,
 * attending to the cached keys and causally among themselves, appends their
 * K/V to the cache, and returns logits (every new row or each sequence's
 * last), their argmax, and the tap features of the new rows (the outputs of
 * decoder layers `taps`, transformers' hidden_states[l + 1]).
 *
 * A hybrid target (Gated DeltaNet + gated attention) keeps, per
 * slot, the recurrent state of its linear layers (target/hybrid_state.h)
 * next to the KV cache of its attention layers (the cache's buffers of
 * linear layers stay empty). Slots are started with
 * df_target_decoder_reset_slot and shortened with df_target_decoder_rollback,
 * which for a hybrid needs the step to undo to have been recorded
 * (df_target_decoder_enable_rollback). */
#ifndef DF_TARGET_TARGET_DECODE_H
#define DF_TARGET_TARGET_DECODE_H

#include <stdint.h>

#include "target/decode_graphs.h"
#include "target/hybrid_state.h"
#include "target/kv_cache.h"
#include "target/target.h"

typedef enum DfLogitsRows {
    DF_LOGITS_NONE, /* only the cache (and features) */
    DF_LOGITS_LAST, /* one row per sequence: its last new token */
    DF_LOGITS_ALL,  /* one row per new token */
} DfLogitsRows;

typedef struct DfTargetDecoder {
    DfTargetModel *model; /* not owned; all layers and the head loaded */
    DfKvCache cache;
    int n_taps;
    int taps[DF_MAX_TAPS];
    int ws_rows; /* rows the workspace holds */
    unsigned long ws_generation; /* incremented whenever the workspace is reallocated */
    DfBuffer ids, x, h, q, k, v, attn, gate, up, last, logits, features;
    /* fused: every layer dense with fused weights (target/target_layer.h: DfTargetLayerActs); then the
     * workspace has qkv [rows, (heads + 2*kv_heads) * head_dim] and gate_up [rows, 2*inter]
     * (gate holds swiglu's output) and no k, v, up. */
    int fused;
    DfBuffer qkv, gate_up;
    DfBuffer rope_cos, rope_sin; /* F32 [cache.capacity, head_dim/2] */
    DfBuffer argmax;             /* I32 [logits rows]: greedy choices made on the backend */
    DfKvBatch kb;                /* the step layout, its storage reused by every step */
    int32_t *step_lens;          /* [cache.n_slots]: cache lengths of a step's sequences */
    DfHybridState hybrid;        /* hybrid targets only */
    DfDecodeGraphs graphs;       /* recorded steps, where the backend records (on by default) */
    int nonfinite_slot;          /* after a step refused for non-finite logits: the slot of the
                                    sequence named in the error; -1 otherwise */
} DfTargetDecoder;

/* n_slots sequences of up to slot_capacity tokens each (prompt + generated
 * + one speculative block); taps may be empty (n_taps = 0). */
int df_target_decoder_init(DfTargetDecoder *d, DfTargetModel *m, int n_slots, int slot_capacity, const int *taps,
                           int n_taps, DfError *err);
/* The same with a paged KV cache of n_pages pages of DF_KV_PAGE_ROWS rows
 * (target/kv_cache.h), shared by the slots as they grow: a step takes the
 * pages its sequences' new rows need and fails when the pool is short, so
 * that a caller with fewer pages than every slot's capacity holds each
 * sequence's pages first (df_target_decoder_hold). */
int df_target_decoder_init_paged(DfTargetDecoder *d, DfTargetModel *m, int n_slots, int slot_capacity, int n_pages,
                                 const int *taps, int n_taps, DfError *err);
void df_target_decoder_free(DfTargetDecoder *d);

typedef struct DfDecodeStep {
    int n_seqs;
    const int32_t *slots;      /* [n_seqs], distinct */
    const int32_t *ids;        /* [row_starts[n_seqs]] new tokens, packed */
    const int32_t *row_starts; /* [n_seqs + 1] */
    DfLogitsRows logits_rows;
    float *logits;    /* host [rows, V] or NULL; rows = new tokens (ALL) or n_seqs (LAST) */
    int32_t *argmax;  /* host [rows] or NULL: first maximum of each logits row (found on the
                         backend when logits is NULL: only the ids are downloaded) */
    float *features;  /* host [new tokens, n_taps * H] or NULL */
    int keep_features; /* nonzero: the tap features stay on the backend for df_target_features
                          (with or without the host copy) */
} DfDecodeStep;

/* Recorded steps on or off (target/decode_graphs.h; on after init where the
 * backend records). The results are the same
 * bits either way: a replay runs the same kernels on the same buffers. */
void df_target_decoder_set_graphs(DfTargetDecoder *d, int on);

/* Runs one step; the cache length of each slot grows by its new tokens.
 * Logits rows that hold a NaN, or an infinity at their top, fail the step
 * naming the target, the sequence's slot and the token's position (and
 * set nonfinite_slot): a broken target is never decoded into a text. The
 * check rides on the greedy choice (df_op_argmax_rows flags such rows),
 * or scans the rows the host downloads. */
int df_target_decode(DfTargetDecoder *d, const DfDecodeStep *step, DfError *err);

/* Empties slot for a new sequence (cache length 0, zero recurrent state;
 * a paged cache's pages back to the pool). */
void df_target_decoder_reset_slot(DfTargetDecoder *d, int slot);
/* The pages of a paged cache for the first `rows` tokens of slot: 0, or -1
 * (taking none) when the pool has too few free pages (df_kv_cache_hold). */
int df_target_decoder_hold(DfTargetDecoder *d, int slot, int rows);

/* Lets steps of up to `rows` new tokens per sequence be rolled back (a
 * hybrid target keeps what a rollback needs for them; a no-op otherwise). */
int df_target_decoder_enable_rollback(DfTargetDecoder *d, int rows, DfError *err);

/* Keeps the first len tokens of slot: any len <= its length for a dense
 * target; for a hybrid, len must lie within the slot's last step, which must
 * have brought at most the enabled rollback rows per sequence and, in one
 * sequence at least, 2 (speculative verification; target/hybrid_state.h). */
int df_target_decoder_rollback(DfTargetDecoder *d, int slot, int len, DfError *err);

/* Rows first .. first+n-1 of the last step's tap features (ACT [n, n_taps *
 * H] on the decoder's backend), valid until the next step; the step must
 * have asked for them (features or keep_features). */
DfBuffer df_target_features(const DfTargetDecoder *d, int first, int n);

/* Index of the first maximum of x[0..n-1], a NaN counting as larger than
 * any number (torch.argmax's choice on ties and NaN): x[result] is not
 * finite when x holds a NaN or +inf anywhere, or is -inf throughout. */
int32_t df_argmax_f32(const float *x, int n);

#endif
