/* Acceptance statistics of greedy speculative decoding over a set of
 * prompts (spec section 6): what `dflash eval` reports and `train
 * --eval-data` records; tau = mean over cycles of (accepted drafts + 1). */
#ifndef DF_INFER_SPEC_STATS_H
#define DF_INFER_SPEC_STATS_H

#include <stdint.h>

#include "infer/speculative.h"

typedef struct DfEvalTotals {
    int64_t cycles, accepted_sum, tokens, spec_passes, greedy_passes, mismatches;
    double spec_s, greedy_s, tau_prompt_sum;
    int prompts_with_cycles;
    int64_t *hist; /* [block_size]: cycles that accepted n drafts */
} DfEvalTotals;

/* Adds one prompt's result: its cycles into the histogram and the sums, its
 * tokens and target passes. */
void df_eval_totals_add(DfEvalTotals *t, const DfSpecResult *r);

/* tau: mean over cycles of (accepted + 1); 0 without cycles. */
double df_eval_tau(const DfEvalTotals *t);

/* The mean of the prompts' own tau (prompts with at least one cycle). */
double df_eval_tau_prompt_mean(const DfEvalTotals *t);

/* Cycles whose draft was right up to block position k (1..B-1), as a fraction. */
double df_eval_reach_fraction(const DfEvalTotals *t, int k);

#endif
