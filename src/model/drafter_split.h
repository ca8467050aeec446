/* Micro-batches of a drafter batch: the blocks of one optimizer step cut
 * into pieces of at most max_blocks blocks each, so that the drafter's
 * activations (which grow with the block rows, anchors x block size) stay
 * within what the device holds while the step's batch stays what the user
 * asked for. Blocks are independent given the target's features (spec
 * section 4 step 3: a block sees the context before its anchor and itself),
 * so a sequence's anchors may be spread over several micro-batches; each
 * micro-batch that holds some of a sequence's blocks carries that sequence's
 * whole context (its features, ids and mask are views into the step's). */
#ifndef DF_MODEL_DRAFTER_SPLIT_H
#define DF_MODEL_DRAFTER_SPLIT_H

#include <stdint.h>

#include "model/drafter.h"

typedef struct DfDrafterSplit {
    int n_parts;
    int64_t blocks;           /* blocks of the whole batch */
    int64_t *block_starts;    /* [n_parts + 1]: part p holds blocks [block_starts[p], block_starts[p + 1]) */
    /* the current part's arrays (df_drafter_split_part) */
    int32_t *seq_starts;      /* [n_seqs + 1] */
    int64_t *anchor_starts;   /* [n_seqs + 1] */
    int cap_seqs;
} DfDrafterSplit;

/* Cuts the batch's blocks into the fewest parts of at most max_blocks
 * blocks (max_blocks <= 0: one part), as even as they can be (part sizes
 * differ by at most one block, so that the products of every part have
 * nearly the same shape). */
void df_drafter_split_plan(DfDrafterSplit *s, const DfDrafterBatch *batch, int64_t max_blocks);

/* Part p as a batch of its own: the sequences from the one of its first
 * block to the one of its last, their contexts whole, and of their anchors
 * only those of the part. Its arrays are views into batch and s (valid
 * until the next call). width: the features' row width (n_taps * hidden). */
void df_drafter_split_part(DfDrafterSplit *s, const DfDrafterBatch *batch, int p, size_t width, DfDrafterBatch *out);

void df_drafter_split_free(DfDrafterSplit *s);

#endif
