/* Anchors and blocks of one training sequence (DFLASH.md section 4, steps 1,
 * 2 and 4): which positions start a block, what the drafter sees in a block,
 * what it must predict there, and how much each prediction counts.
 *
 * Sequence: token ids x[0..S-1], loss mask m[0..S-1] (1 on response tokens).
 *
 * Candidates  C = { p : 1 <= p <= S-2, m[p+1] = 1 }, in increasing order.
 * Selection   N = min(num_anchors, |C|) distinct anchors, uniform over all
 *             N-subsets of C: a partial Fisher-Yates shuffle of C
 *             (for i = 0..N-1: j = i + below(|C| - i); swap C[i], C[j]) driven
 *             by df_rng_key(seed, df_rng_stream(DF_RNG_DOMAIN_ANCHORS, epoch),
 *             sample_index), then C[0..N-1] sorted ascending. So the anchors
 *             depend only on (seed, epoch, sample index, mask).
 * Block at a  ids [x[a], MASK, ..., MASK] (B ids), positions a, a+1, ..., a+B-1
 *             (positions may run past S-1; those slots carry no loss).
 * Targets     slot k predicts label x[a+k] (-1 where a+k >= S);
 *             valid(k)  = [k >= 1] * [a+k < S] * m[a+k]
 *             weight(k) = valid(k) * exp(-(k-1)/gamma)   (computed in double,
 *             stored as float). */
#ifndef DF_MODEL_ANCHORS_H
#define DF_MODEL_ANCHORS_H

#include <stdbool.h>
#include <stdint.h>

/* A sequence is trained on only if it has at least 2*B loss tokens
 * (sum of m >= 2 * block_size); skipped sequences are counted by the caller. */
bool df_sequence_trainable(const uint8_t *loss_mask, int64_t len, int block_size);

/* Writes the candidate positions C (ascending) to out (room for len entries)
 * and returns |C|. */
int64_t df_anchor_candidates(const uint8_t *loss_mask, int64_t len, int64_t *out);
/* |C| alone. */
int64_t df_anchor_candidate_count(const uint8_t *loss_mask, int64_t len);

/* Selects the anchors of sample `sample_index` in `epoch` (see above) into
 * anchors[0..N-1], ascending, and returns N. scratch must hold len entries
 * (the caller owns it so that the training loop does not allocate). */
int64_t df_select_anchors(const uint8_t *loss_mask, int64_t len, int64_t num_anchors, uint64_t seed,
                          uint32_t epoch, uint64_t sample_index, int64_t *anchors, int64_t *scratch);

/* Default loss decay gamma for a block size: 4 for B = 8, 5 for B = 10, 7 for
 * B = 16 (the published values); in between, linear interpolation between
 * these points (B = 12 gives 5 + 2/3); below 8 it stays 4, above 16 it stays 7. */
double df_default_gamma(int block_size);

/* Block drafter input: ids[k] = k == 0 ? x[a] : mask_id; pos[k] = a + k. */
void df_block_inputs(const int32_t *ids, int64_t anchor, int block_size, int32_t mask_id, int32_t *block_ids,
                     int32_t *block_pos);

/* The decay of each slot, decay[k] = exp(-(k-1)/gamma) for k >= 1 and 0 for
 * the anchor's slot (block_size entries): computed once for a batch, not an
 * exp per block row (a large part of the host's time in building the
 * hundred thousand rows of a recipe batch). */
void df_block_decay(double gamma, int block_size, float *decay);

/* Block targets (any output may be NULL): labels[k] = x[a+k] or -1 past the
 * end, valid[k] and weights[k] = valid[k] * decay[k] (decay from
 * df_block_decay). */
void df_block_targets(const int32_t *ids, const uint8_t *loss_mask, int64_t len, int64_t anchor, int block_size,
                      const float *decay, int32_t *labels, uint8_t *valid, float *weights);

#endif
