/* Learning-rate schedule: linear warmup, then cosine decay to 0
 * (DFLASH.md section 4, step 7).
 *
 * For total steps T, warmup fraction f and peak rate lr:
 *   W = max(1, round(f * T))   (round half away from zero), at most T
 *   lr(s) = lr * (s + 1) / W                                  for 0 <= s < W
 *   lr(s) = lr * 0.5 * (1 + cos(pi * (s - W) / (T - W)))      for W <= s < T
 *   lr(s) = 0                                                 for s >= T
 * So the first step already trains (lr/W), the last warmup step reaches the
 * peak, the first step after warmup is at the peak, and the rate falls towards
 * 0 without reaching it inside the run. Steps s < 0 are treated as 0. */
#ifndef DF_TRAIN_SCHEDULE_H
#define DF_TRAIN_SCHEDULE_H

#include <stdint.h>

typedef struct DfLrSchedule {
    double peak_lr;
    int64_t total_steps;
    int64_t warmup_steps;
} DfLrSchedule;

DfLrSchedule df_lr_schedule(double peak_lr, int64_t total_steps, double warmup_fraction);
double df_lr_at(const DfLrSchedule *s, int64_t step);

#endif
