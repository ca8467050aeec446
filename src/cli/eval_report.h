/* dflash eval's results: the totals over the prompts, printed as the
 * report and written as the --json summary. */
#ifndef DF_CLI_EVAL_REPORT_H
#define DF_CLI_EVAL_REPORT_H

#include <stdint.h>

#include "base/error.h"
#include "infer/spec_stats.h"

/* What was evaluated: named in the summary. */
typedef struct DfEvalInfo {
    const char *target, *draft, *input;
    int prompts, conversations, block_size, max_new_tokens;
} DfEvalInfo;

void df_eval_print_report(const DfEvalTotals *t, const DfEvalInfo *info);

/* The summary as one JSON object, written atomically: "tau",
 * "tau_prompt_mean", "prompts", "conversations", "new_tokens", "cycles",
 * "block_size", "accepted_hist" [B], "acceptance_by_position" [B-1]
 * (positions 1..B-1), "target_passes" {"speculative", "greedy"},
 * "tokens_per_s" {"speculative", "greedy"}, "speedup", "lossless",
 * "mismatches", and "target", "draft", "input", "max_new_tokens". */
int df_eval_write_json(const char *path, const DfEvalTotals *t, const DfEvalInfo *info, DfError *err);

#endif
