/* The block rows of a drafter batch (spec section 4, steps 2 and 4;
 * model/anchors.h): each block row's input id, rope position, label,
 * validity and loss weight; the context rows' positions; the rows that
 * carry a loss weight, which alone go through the lm head
 * (drafter_loss_rows.c); and the batch's loss weight sum.
 *
 * A pure function of the batch's host arrays and three fields of the
 * drafter's config (block size, mask token, gamma): no weights, no device.
 * So it can be built away from the step. Train's loader thread builds each
 * step's rows while the device runs the step before (train/step_loader.h):
 * built on the step's own thread, a hundred thousand rows of the recipe's
 * batches left the GPU idle for milliseconds a step. A batch without them
 * (DfDrafterBatch.rows NULL) has them built by the step itself. */
#ifndef DF_MODEL_DRAFTER_ROWS_H
#define DF_MODEL_DRAFTER_ROWS_H

#include <stdint.h>

#include "model/drafter.h"

struct DfDrafterRows {
    int n_ctx, n_blocks, n_q; /* context rows T, blocks, block rows Q = n_blocks * block size */
    int max_pos;              /* rope positions the batch needs: 0 .. max_pos - 1 */
    int32_t *block_ids;       /* [Q]: the anchor's token, then mask tokens */
    int32_t *labels;          /* [Q]: the token each row predicts, -1 past its sequence */
    float *weights;           /* [Q]: the loss weight, 0 on rows without loss */
    uint8_t *valid;           /* [Q]: the row carries a loss */
    int32_t *kpos;            /* [T + Q]: the context rows' positions, then the block rows' */
    int32_t *anchors;         /* [n_blocks]: each block's anchor inside its sequence */
    int32_t *block_starts;    /* [n_seqs + 1]: sequence s owns blocks block_starts[s] .. */
    /* the rows with a loss weight: n_loss of them, their row numbers,
     * labels and weights in row order; loss_slot[r] is row r's place among
     * them, n_loss for a row without weight */
    int n_loss;
    int32_t *loss_rows, *loss_labels; /* [n_loss] */
    float *loss_weights;              /* [n_loss] */
    int32_t *loss_slot;               /* [Q] */
    double weight_sum; /* the sum of weights in row order: df_drafter_batch_weight_sum's value, the metrics' weight */
    int cap_ctx, cap_q, cap_seqs; /* allocated sizes (private) */
};

/* Builds the rows of batch b (its anchors inside their sequences, as
 * df_drafter_forward_backward checks) into r, growing r's arrays (never
 * shrinking them: a loader slot stops allocating once the largest batch has
 * been seen). r starts zeroed. */
void df_drafter_rows_build(DfDrafterRows *r, const DfDrafterConfig *cfg, const DfDrafterBatch *b);
void df_drafter_rows_free(DfDrafterRows *r);

#endif
