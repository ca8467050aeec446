/* dflash eval's results: the totals over the prompts, printed as the
 * report and written as the --json summary. */
#ifndef DF_CLI_EVAL_REPORT_H
#define DF_CLI_EVAL_REPORT_H

#include <stdint.h>

#include "base/error.h"

typedef struct DfEvalTotals {
    int64_t cycles, accepted_sum, tokens, spec_passes, greedy_passes, mismatches;
    double spec_s, greedy_s, tau_prompt_sum;
    int prompts_with_cycles;
    int64_t *hist; /* [block_size]: cycles that accepted n drafts */
} DfEvalTotals;

/* What was evaluated: named in the summary. */
typedef struct DfEvalInfo {
    const char *target, *draft, *input;
    int prompts, conversations, block_size, max_new_tokens;
} DfEvalInfo;

/* tau: mean over cycles of (accepted + 1); 0 without cycles. */
double df_eval_tau(const DfEvalTotals *t);

void df_eval_print_report(const DfEvalTotals *t, const DfEvalInfo *info);

/* The summary as one JSON object, written atomically: "tau",
 * "tau_prompt_mean", "prompts", "conversations", "new_tokens", "cycles",
 * "block_size", "accepted_hist" [B], "acceptance_by_position" [B-1]
 * (positions 1..B-1), "target_passes" {"speculative", "greedy"},
 * "tokens_per_s" {"speculative", "greedy"}, "speedup", "lossless",
 * "mismatches", and "target", "draft", "input", "max_new_tokens". */
int df_eval_write_json(const char *path, const DfEvalTotals *t, const DfEvalInfo *info, DfError *err);

#endif
