/* The whole training step's speed: a target and a drafter
 * of a named shape with random weights on one backend, on a given batch
 * (random sequences, or real records: bench/bench_recipe.h), one step = target
 * forward to the deepest tap, drafter forward + backward, the optimizer
 * (gradient norm, clipping, AdamW on the device, as the trainer does); timed
 * whole, then phase by phase. Works on any backend (the figures that matter
 * are the GPU's). */
#ifndef DF_BENCH_BENCH_TRAIN_STEP_H
#define DF_BENCH_BENCH_TRAIN_STEP_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/kernel_variants.h"
#include "bench/bench_drafter.h"
#include "model/drafter_config.h"
#include "target/model_config.h"

typedef struct DfTrainStepShape {
    DfModelConfig target;             /* random weights of this shape */
    DfDrafterConfig drafter;          /* a drafter of that target (random weights) */
    DfBenchHostBatch batch;           /* the step's packed sequences, loss mask and anchors (not owned) */
    int repeat;                       /* timed steps after one warm-up step */
    const DfKernelVariants *variants; /* NULL: every kernel variant at its default */
} DfTrainStepShape;

/* A step of random sequences (df_bench_host_batch_init): n_seqs of seq_len
 * tokens with num_anchors anchors each, and a drafter of drafter_layers and
 * block_size, the rest the target's defaults. */
typedef struct DfRandomStepSize {
    int drafter_layers, block_size, num_anchors, seq_len, n_seqs;
} DfRandomStepSize;

/* s's target, drafter and batch for that size; the batch is made in host,
 * which the caller frees (df_bench_host_batch_free) after the step. */
int df_train_step_shape_random(DfTrainStepShape *s, DfBenchHostBatch *host, const DfModelConfig *target,
                               const DfRandomStepSize *size, DfError *err);

enum { DF_STEP_PHASE_TARGET, DF_STEP_PHASE_DRAFTER, DF_STEP_PHASE_OPTIMIZER, DF_STEP_PHASES };

typedef struct DfTrainStepResult {
    double step_s;                       /* median whole step, no syncs between phases */
    double step_min_s, step_max_s;       /* the fastest and the slowest of the timed steps */
    int timed_steps;                     /* how many (the shape's repeat) */
    double phase_s[DF_STEP_PHASES];      /* one more step, synced after each phase */
    double seqs_per_s, tokens_per_s, tflop_per_step, tflops;
    double target_tflop, drafter_tflop;  /* spec section 8 split of tflop_per_step */
    long long drafter_params;
    int target_layers_run;
    size_t peak_bytes;                   /* the backend's memory_info peak, 0 where not tracked */
    /* One more step with every op timed by the device's events (where the
     * backend has a profile): ms per op kind and phase, indexed by DfOpId.
     * What a phase's synced time has beyond its ops' sum is launch gaps
     * and host work; before_ms is the device time between consecutive timed
     * ops, by the kind of the op that came after it (idle, or copies). */
    double op_ms[DF_STEP_PHASES][DF_OP_COUNT];
    double before_ms[DF_STEP_PHASES][DF_OP_COUNT];
    int profiled;
    char variants[512];                  /* the kernel variants it ran with (df_backend_variants) */
} DfTrainStepResult;

const char *df_step_phase_name(int phase);

/* Every kernel variant goes back to its default first (a benchmark before it
 * may have chosen others: the training step is measured as training runs),
 * then shape->variants, if any, are set; a name the backend does not know
 * fails the bench. */
int df_bench_train_step(DfBackend *be, const DfTrainStepShape *shape, DfTrainStepResult *res, DfError *err);

/* What a report line names: head, the step's shape in words, is followed by
 * the drafter's layers and parameters; key prefixes the JSON names;
 * seqs_name is what a sequence of the batch is ("sequences", "records"). */
typedef struct DfTrainStepLabel {
    const char *head, *key, *seqs_name;
} DfTrainStepLabel;

/* Prints the result (MFU against the measured GEMM peak and the nominal rate)
 * and adds its figures to json as KEY_step_ms, KEY_seqs_per_s, ... */
void df_bench_train_step_report(const DfTrainStepLabel *label, const DfTrainStepShape *shape,
                                const DfTrainStepResult *res, double peak_tflops, double nominal_tflops, cJSON *json);

#endif
