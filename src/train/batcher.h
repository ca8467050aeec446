/* The batcher: which samples of the token store form each optimizer step
 * (DFLASH.md section 4; ARCHITECTURE.md "batcher").
 *
 * Everything here is a pure function of (store contents, seed, epoch, token
 * budget, block size, max length), so a resumed run rebuilds exactly the
 * batches of the uninterrupted one from (epoch, batch index) alone.
 *
 * Usable samples. A sample is skipped (and counted) when it has fewer than
 * 2*B loss tokens (df_sequence_trainable) or more than max_length tokens.
 *
 * Epoch order. A Fisher-Yates shuffle of 0..N-1 driven by
 * df_rng_key(seed, df_rng_stream(DF_RNG_DOMAIN_SHUFFLE, epoch), 0):
 * for i = N-1 down to 1: j = df_rng_below(i + 1); swap(order[i], order[j]).
 *
 * Length buckets and the token budget. Bucket of a sample of length L:
 * floor(log2(L)) (so a bucket's lengths are within a factor of 2, which keeps
 * the attention work of a batch's sequences alike). Samples are taken in the
 * epoch order, skipping unusable ones:
 *   - L > budget: the sample alone is emitted as a batch at once (the only
 *     way a batch exceeds the budget); its bucket is not touched;
 *   - else, when the bucket's tokens + L > budget, the bucket is emitted as a
 *     batch and emptied; then the sample joins the bucket.
 * At the end of the epoch the non-empty buckets are emitted in increasing
 * bucket order. Inside a batch, samples keep the order they joined in. Batches
 * of an epoch run in emission order. Every usable sample is in exactly one
 * batch per epoch; a batch is packed back to back without padding. */
#ifndef DF_TRAIN_BATCHER_H
#define DF_TRAIN_BATCHER_H

#include <stdint.h>

#include "base/error.h"
#include "formats/token_store.h"

typedef struct DfBatcher {
    const DfTokenStore *store; /* not owned */
    int64_t n_samples;
    uint8_t *usable;           /* [n_samples] 1 when the sample is trained on */
    int64_t *candidates;       /* [n_samples] anchor candidates |C| of a usable sample, 0 for the others */
    int64_t n_usable;
    int64_t n_few_loss_tokens; /* skipped: fewer than 2*B loss tokens */
    int64_t n_too_long;        /* skipped: longer than max_length */
    int64_t usable_tokens;     /* tokens of the usable samples (one epoch) */
    int64_t token_budget;
    uint64_t seed;
} DfBatcher;

/* One epoch's batches: batch b is samples[starts[b] .. starts[b+1]-1]. */
typedef struct DfEpochPlan {
    int64_t epoch;
    int64_t n_batches;
    int64_t *starts;  /* [n_batches + 1] */
    int64_t *samples; /* [n_usable] sample indices of the store */
} DfEpochPlan;

/* Scans the store once for the usable samples and their anchor candidates.
 * Fails when the budget is not positive or when no sample is usable (the
 * message gives the counts). */
int df_batcher_init(DfBatcher *b, const DfTokenStore *store, int block_size, int64_t max_length,
                    int64_t token_budget, uint64_t seed, DfError *err);
void df_batcher_free(DfBatcher *b);

/* The epoch order: a permutation of 0..n-1 (see above) into order[n]. */
void df_batcher_shuffle(int64_t n, uint64_t seed, int64_t epoch, int64_t *order);

/* Builds the batches of one epoch (plan is overwritten; free with
 * df_epoch_plan_free). */
void df_batcher_plan_epoch(const DfBatcher *b, int64_t epoch, DfEpochPlan *plan);
void df_epoch_plan_free(DfEpochPlan *plan);

/* Batches in epochs 0..epochs-1 together (epochs differ slightly because the
 * order changes how buckets fill): the step count of an --epochs run. */
int64_t df_batcher_total_batches(const DfBatcher *b, int64_t epochs);

/* The largest step of a run of `steps` steps from its start (epochs
 * 0, 1, ... in turn): the most context tokens, sequences and drafter block
 * rows (spec section 4: min(num_anchors, |C|) anchors a sequence, block_size
 * rows each) of any one step, and the longest sequence. For sizing memory
 * before the run (train/memory_plan.h). */
typedef struct DfStepPeaks {
    int64_t tokens, seqs, block_rows, max_len;
} DfStepPeaks;
void df_batcher_step_peaks(const DfBatcher *b, int64_t steps, int64_t num_anchors, int block_size, DfStepPeaks *out);

/* An epoch's anchors (spec section 4: min(num_anchors, |C|) a usable
 * sample): how many in all, on how many samples num_anchors is below |C|
 * (there an epoch draws a fresh subset), and the largest |C|. Where it is
 * below none, every candidate is an anchor and each epoch trains the same
 * blocks: the case of responses shorter than num_anchors tokens. */
typedef struct DfEpochAnchors {
    int64_t anchors, capped, max_candidates;
} DfEpochAnchors;
void df_batcher_epoch_anchors(const DfBatcher *b, int64_t num_anchors, DfEpochAnchors *out);

/* The bucket of a sample of len tokens (len >= 1): floor(log2(len)). */
int df_batcher_bucket(int64_t len);

#endif
