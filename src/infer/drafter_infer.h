/* The DFlash drafter's inference forward (spec sections 3 and 6): no
 * backward, one sequence's block at a time against cached context K/V.
 *
 * The context of a sequence is the target's tap features of its committed
 * positions. Each layer's keys/values of a context row depend only on that
 * row (k = k_norm(k_proj(hidden_norm(fc(F)))) at its position, v likewise),
 * so they are computed once when the row is committed and kept in a KV cache
 * slot. A proposal runs the B block tokens [last committed, MASK, ...] at
 * positions start .. start+B-1 (start = context rows cached): their K/V are
 * written past the context rows without growing the slot, and every block
 * row attends to all context rows and all block rows (bidirectional). */
#ifndef DF_INFER_DRAFTER_INFER_H
#define DF_INFER_DRAFTER_INFER_H

#include <stdint.h>

#include "target/decode_graphs.h"
#include "target/kv_cache.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

typedef struct DfDrafterRunner {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    DfBackend *be;
    DfBuffer params;           /* ACT [layout.total] */
    int params_borrowed;       /* params are the caller's (df_drafter_runner_init_on): not freed here */
    DfBuffer embed, lm_head;   /* the target's [V, H], not owned */
    DfKvCache ctx;             /* context K/V per layer */
    int ws_rows;
    DfBuffer ids, feat, x, h, q, k, v, attn, gate, up, logits;
    DfBuffer rope_cos, rope_sin; /* F32 [ctx.capacity, head_dim/2] */
    DfBuffer argmax;           /* I32 [block rows]: the proposal, chosen on the backend */
    DfKvBatch kb;              /* step layout, its storage reused by every call */
    DfKvBatch window_kb;       /* the sliding layers' view of a block step (drafter_infer.c) */
    int logits_rows;           /* rows of the last proposal's logits (0: none yet) */
    float *host_logits;        /* [logits rows, V]: filled by df_drafter_logits */
    unsigned long ws_generation; /* incremented whenever the workspace is reallocated */
    /* recorded proposals and context appends (target/decode_graphs.h), where the backend
     * records (on by default): a proposal's key changes only with its visible-key bucket,
     * an append's with its row count (the accepted length + 1), hence two sets */
    DfDecodeGraphs propose_graphs, append_graphs;
} DfDrafterRunner;

/* params: host fp32 in the layout df_drafter_layout_build gives for cfg.
 * embed / lm_head: the target's (vocab_size rows of hidden_size).
 * slot_capacity: context rows + one block per slot. */
int df_drafter_runner_init(DfDrafterRunner *r, DfBackend *be, const DfDrafterConfig *cfg, const float *params,
                           DfBuffer embed, DfBuffer lm_head, int n_slots, int slot_capacity, DfError *err);
/* The same over weights already on be (ACT [layout.total] in that layout,
 * e.g. a training run's drafter weights): neither copied nor owned, so the
 * runner proposes with them as they are at each call. */
int df_drafter_runner_init_on(DfDrafterRunner *r, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer params,
                              DfBuffer embed, DfBuffer lm_head, int n_slots, int slot_capacity, DfError *err);
void df_drafter_runner_free(DfDrafterRunner *r);

/* Recorded proposals and appends on or off (on after init where the backend records). */
void df_drafter_runner_set_graphs(DfDrafterRunner *r, int on);

/* Appends n committed context rows (features [n, n_taps * H], host fp32) to
 * slot, at positions continuing from its length. */
int df_drafter_append_context(DfDrafterRunner *r, int slot, const float *features, int n, DfError *err);
/* The same from features already on the runner's backend (ACT [n, n_taps *
 * H], e.g. df_target_features of the target decoder's last step): no
 * round trip through the host. */
int df_drafter_append_context_buffer(DfDrafterRunner *r, int slot, DfBuffer features, int n, DfError *err);

/* One block of block_size tokens (ids[0] the last committed token, the rest
 * the mask token) at positions len .. len+block_size-1 of slot; argmax[k]
 * receives the drafter's prediction at block position k (1.. are the draft). */
int df_drafter_propose(DfDrafterRunner *r, int slot, const int32_t *ids, int block_size, int32_t *argmax,
                       DfError *err);

/* The logits [block_size, V] of the last proposal, downloaded into
 * r->host_logits (a proposal itself downloads only its argmax); NULL with a
 * message on failure or before any proposal. */
const float *df_drafter_logits(DfDrafterRunner *r, DfError *err);

/* A drafter directory's config against the target it will serve: equal
 * hidden size and vocabulary (the embedding and lm head are shared), and
 * taps inside the target's layers; the attention shape is the drafter's own
 * and need not be the target's. A mask token id of -1 (not in config.json) becomes the
 * first id past the tokenizer's vocabulary (tokenizer_vocab) that the
 * embedding still has a row for (spec section 7). */
int df_drafter_fit_target(DfDrafterConfig *cfg, const DfModelConfig *target, int tokenizer_vocab, const char *dir,
                          DfError *err);

#endif
