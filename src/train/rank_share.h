/* Data parallel: which samples of a step's global batch each rank trains on.
 *
 * Every rank builds the same global step plan (train/batcher.h) and takes
 * its share of each step's samples with df_rank_share: a pure function of
 * the samples' lengths and the world size, so the ranks agree without
 * talking. Balanced by tokens (the work of a sample grows with its length):
 * samples in decreasing length (ties: batch order) go one by one to the rank
 * with the fewest tokens so far (ties: the lowest rank). Inside a share the
 * samples keep their batch order. A batch with fewer samples than ranks
 * leaves some ranks with none: they still take part in every collective of
 * the step, with zero gradients and zero loss weight. */
#ifndef DF_TRAIN_RANK_SHARE_H
#define DF_TRAIN_RANK_SHARE_H

#include <stdint.h>

/* Writes the indices (into the batch, ascending) of rank's samples to
 * out[0..] (out holds n entries) and returns how many. lengths[n] >= 0,
 * 1 <= world, 0 <= rank < world. */
int df_rank_share(const int64_t *lengths, int n, int world, int rank, int *out);

#endif
