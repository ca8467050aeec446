/* Training metrics of the drafter (DFLASH.md section 4, step 6), kept as sums
 * so that they merge by addition: over blocks, sequences, steps and GPUs.
 *
 * Per block of B slots, with valid(k) = [k >= 1] * [a+k < S] * m[a+k] and
 * correct(k) = [argmax(k) == label(k)]:
 *   correct_sum[k] += valid(k) * correct(k)      valid_sum[k] += valid(k)
 *   run_sum        += length of the leading run of k = 1, 2, ... with
 *                     valid(k) * correct(k) = 1 (the run stops at the first
 *                     slot that is invalid or wrong)
 *   blocks         += 1
 * and the weighted loss as loss_sum = sum w * CE, weight_sum = sum w.
 *
 * Results:
 *   accuracy(k) = correct_sum[k] / valid_sum[k]  (0 where valid_sum[k] = 0;
 *                 always 0 for k = 0)
 *   train_tau   = 1 + run_sum / blocks          (1 when there are no blocks)
 *   loss        = loss_sum / weight_sum          (0 when weight_sum = 0)
 * These are exactly what tests/ref/drafter_ref.py computes (its run length is
 * torch.cumprod(corr[:, 1:] * valid[:, 1:], dim=1).sum(dim=1)).
 *
 * All fields are doubles in one flat array (counts stay exact up to 2^53), so
 * that a data-parallel run can all-reduce (sum) DfMetrics.values directly. */
#ifndef DF_MODEL_METRICS_H
#define DF_MODEL_METRICS_H

#include <stdint.h>

#include "base/error.h"

#define DF_METRICS_MAX_BLOCK 64

/* Layout of DfMetrics.values. */
enum {
    DF_METRICS_BLOCKS = 0,
    DF_METRICS_RUN_SUM = 1,
    DF_METRICS_LOSS_SUM = 2,
    DF_METRICS_WEIGHT_SUM = 3,
    DF_METRICS_CORRECT = 4,                                  /* [B] */
    DF_METRICS_VALID = DF_METRICS_CORRECT + DF_METRICS_MAX_BLOCK, /* [B] */
    DF_METRICS_COUNT = DF_METRICS_VALID + DF_METRICS_MAX_BLOCK,
};

typedef struct DfMetrics {
    int block_size;
    double values[DF_METRICS_COUNT];
} DfMetrics;

/* Zeroed accumulator; fails when block_size is not in [1, DF_METRICS_MAX_BLOCK]. */
int df_metrics_init(DfMetrics *m, int block_size, DfError *err);
void df_metrics_reset(DfMetrics *m);

/* Adds one block: labels, argmax and valid have block_size entries. */
void df_metrics_add_block(DfMetrics *m, const int32_t *labels, const int32_t *argmax, const uint8_t *valid);

/* Adds a weighted loss contribution: sum over slots of w * CE, and sum of w. */
void df_metrics_add_loss(DfMetrics *m, double weighted_loss_sum, double weight_sum);

/* dst += src; fails when the block sizes differ. */
int df_metrics_merge(DfMetrics *dst, const DfMetrics *src, DfError *err);

double df_metrics_accuracy(const DfMetrics *m, int k);
double df_metrics_train_tau(const DfMetrics *m);
double df_metrics_loss(const DfMetrics *m);

#endif
