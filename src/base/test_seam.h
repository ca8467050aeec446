/* The one seam through which tests reach inside the program to simulate
 * faults or steer it (in the manner of SQLite's fault simulation): the code
 * calls df_test_seam at a few named points; it does nothing unless a test
 * installed a callback, which then sees the point's data and may change it
 * or fail. No option struct carries a test hook: a new point is a new name
 * below, with its data declared beside the code that raises it.
 *
 * Points and their data (what `data` points to):
 *   DF_SEAM_TRAIN_FEATURES  DfTrainFeaturesSeam (train/trainer.h): each
 *       training step's tap features, after the target forward and before
 *       the drafter sees them; a failure fails the step.
 *   DF_SEAM_SPEC_DRAFT      DfSpecDraftSeam (infer/speculative.h): each
 *       block of speculative decoding once the drafter filled it, before the
 *       target verifies it; the callback may overwrite the draft.
 *   DF_SEAM_CUDA_DEVICE     DfGpuFacts (backend/gpu_tier.h): what the CUDA
 *       backend learned of its GPU, before it chooses the kernel tier; a
 *       test may make a Hopper GPU look like another (less shared memory,
 *       no sm_90a code, an older compute capability).
 *
 * The callback is process-wide state, set only by tests (df_test_seam_set,
 * and df_test_seam_set(NULL, NULL) to remove it); it is called on the thread
 * that reaches the point. */
#ifndef DF_BASE_TEST_SEAM_H
#define DF_BASE_TEST_SEAM_H

#include "base/error.h"

typedef enum DfSeamPoint { DF_SEAM_TRAIN_FEATURES, DF_SEAM_SPEC_DRAFT, DF_SEAM_CUDA_DEVICE } DfSeamPoint;

/* Returns 0 to go on, or -1 with err set to make the point fail. */
typedef int (*DfSeamCallback)(void *ctx, DfSeamPoint point, void *data, DfError *err);

/* Installs cb (NULL: none) with its ctx. */
void df_test_seam_set(DfSeamCallback cb, void *ctx);

/* At a seam point: 0 without a callback, else the callback's result. */
int df_test_seam(DfSeamPoint point, void *data, DfError *err);

#endif
