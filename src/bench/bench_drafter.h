/* The drafter training step's speed on the CPU
 * (forward + backward), for the bench command. */
#ifndef DF_BENCH_BENCH_DRAFTER_H
#define DF_BENCH_BENCH_DRAFTER_H

#include <stdint.h>

#include "base/error.h"

/* A packed batch of n_seqs random sequences of seq_len tokens (a quarter
 * prompt, the rest response) with up to num_anchors anchors each, on the host:
 * the input of a benchmarked drafter step. */
typedef struct DfBenchHostBatch {
    int n_seqs;
    int32_t *starts, *ids;
    uint8_t *mask;
    int64_t *anchor_starts, *anchors;
} DfBenchHostBatch;

void df_bench_host_batch_init(DfBenchHostBatch *b, int vocab_size, int n_seqs, int seq_len, int num_anchors);
void df_bench_host_batch_free(DfBenchHostBatch *b);

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
