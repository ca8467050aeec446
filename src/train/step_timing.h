/* Where a training step's time goes (the trainer's instrumentation).
 *
 * Stages, in step order:
 *   load       the loader thread assembling the batch (train/step_loader.h):
 *              off the critical path unless the compute side waits for it
 *   wait       the compute thread waiting for that batch (the loader is late)
 *   upload     host-to-device copy of the token ids
 *   target     the target's forward to the last tap layer
 *   drafter    the drafter's forward, loss and backward
 *   reduce     data parallel: the global loss-weight sum, the gradient
 *              all-reduce and the metrics' sum (0 with one process)
 *   optimizer  gradient norm, clipping, AdamW
 *   host       the rest of the compute thread's step: metrics line, progress
 *              line, checkpoints
 * Device stages (upload .. optimizer) are timed with the host's monotonic
 * clock between backend syncs: each device stage ends with a sync, so its
 * time is the device's work plus launch gaps. On the CPU a sync costs
 * nothing. On CUDA the drafter step already syncs twice (its metrics come
 * back mid-step), so the extra syncs after the upload and the target
 * forward cost one launch gap each (tens of microseconds against steps of
 * tens to hundreds of milliseconds) and the backend's API stays as it is
 * (no event ops). busy = device stages / step wall time: the fraction of
 * the step the compute device had work queued (an upper bound of its true
 * utilisation by the launch gaps).
 *
 * FLOPs (spec section 8): the target forward over the step's sequences
 * (df_target_forward_flops, layers run) plus the drafter's forward and
 * backward (df_drafter_step_flops). MFU = FLOPs per second per device /
 * peak; the peak is --peak-tflops, else the GPU's nominal dense bf16 peak
 * (backend/gpu_peaks.h), else none (the CPU, an unknown GPU): no MFU. */
#ifndef DF_TRAIN_STEP_TIMING_H
#define DF_TRAIN_STEP_TIMING_H

#include <stddef.h>
#include <stdio.h>

enum {
    DF_STEP_LOAD,
    DF_STEP_WAIT,
    DF_STEP_UPLOAD,
    DF_STEP_TARGET,
    DF_STEP_DRAFTER,
    DF_STEP_REDUCE,
    DF_STEP_OPTIMIZER,
    DF_STEP_HOST,
    DF_STEP_STAGES
};

/* Seconds of one step per stage. */
typedef struct DfStepTimes {
    double s[DF_STEP_STAGES];
} DfStepTimes;

/* Short stage names ("load", "wait", ...), as in metrics.jsonl's stage_ms. */
const char *df_step_stage_name(int stage);
/* Names for the summary table ("load (loader thread)", ...). */
const char *df_step_stage_label(int stage);

/* upload + target + drafter + reduce + optimizer. */
double df_step_device_s(const DfStepTimes *t);

/* "stage_ms": {"load": 1.234, ...} (no leading or trailing comma). */
void df_step_times_write_json(FILE *fp, const DfStepTimes *t);

/* "load 1.2 wait 0.0 up 0.3 tgt 40.1 dft 80.2 red 0.0 opt 3.1 host 0.2" (ms). */
void df_step_times_format(const DfStepTimes *t, char *buf, size_t cap);

#endif
