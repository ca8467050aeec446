#include "train/schedule.h"

#include <math.h>

DfLrSchedule df_lr_schedule(double peak_lr, int64_t total_steps, double warmup_fraction) {
    if (total_steps < 1) total_steps = 1;
    double w = round(warmup_fraction * (double)total_steps);
    int64_t warmup = w < 1.0 ? 1 : (int64_t)w;
    if (warmup > total_steps) warmup = total_steps;
    DfLrSchedule s = {.peak_lr = peak_lr, .total_steps = total_steps, .warmup_steps = warmup};
    return s;
}

double df_lr_at(const DfLrSchedule *s, int64_t step) {
    if (step < 0) step = 0;
    if (step >= s->total_steps) return 0.0;
    if (step < s->warmup_steps) return s->peak_lr * (double)(step + 1) / (double)s->warmup_steps;
    double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    return s->peak_lr * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}
