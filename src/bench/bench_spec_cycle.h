/* The time of one speculative cycle (spec section 6: a drafter proposal of
 * a block, the target's verification of it, the rollback and the context
 * append) for the decode bench, against which a greedy step's time says
 * what tau a drafter needs to pay: speculative decoding is about
 * tau * step / cycle times as fast as greedy. */
#ifndef DF_BENCH_BENCH_SPEC_CYCLE_H
#define DF_BENCH_BENCH_SPEC_CYCLE_H

#include "target/target.h"

typedef struct DfSpecCycleResult {
    int block_size, draft_layers, cycles;
    double cycle_ms; /* wall clock per cycle, the prefill taken out */
} DfSpecCycleResult;

/* Greedy speculative decoding of one prompt of prompt_len pseudo-random
 * tokens with a drafter of draft_layers layers and random weights (its
 * drafts are almost never accepted: every cycle appends one context row),
 * new_tokens tokens, after a warm-up; cycle_ms = (time of that run - time
 * of a run of one token) / cycles. */
int df_bench_spec_cycle(DfTargetModel *m, int prompt_len, int new_tokens, int block_size, int draft_layers,
                        DfSpecCycleResult *r, DfError *err);

#endif
