/* The drafter training step's speed on the CPU (forward + backward, the
 * issue's figure), for the bench command. */
#ifndef DF_CLI_BENCH_DRAFTER_H
#define DF_CLI_BENCH_DRAFTER_H

#include "base/error.h"

typedef struct DfDrafterBenchShape {
    int n_seqs, seq_len, num_anchors, block_size, layers, intermediate;
} DfDrafterBenchShape;

typedef struct DfDrafterBenchResult {
    double step_s;     /* best time of one forward + backward */
    double gflop;      /* per step, spec section 8 */
    double gflops;     /* achieved */
} DfDrafterBenchResult;

/* target_dir provides the drafter's hidden size and the frozen embedding /
 * lm head; features and weights are random. */
int df_bench_drafter_step(const char *target_dir, const DfDrafterBenchShape *shape, int repeat,
                          DfDrafterBenchResult *res, DfError *err);

#endif
