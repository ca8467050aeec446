#include "train/step_timing.h"

#include <string.h>

static const char *const NAMES[DF_STEP_STAGES] = {"load",    "wait",   "upload",    "target",
                                                   "drafter", "reduce", "optimizer", "host"};
static const char *const SHORT[DF_STEP_STAGES] = {"load", "wait", "up", "tgt", "dft", "red", "opt", "host"};
static const char *const LABELS[DF_STEP_STAGES] = {
    "load (loader thread)", "wait for batch", "upload", "target forward",
    "drafter fwd+bwd",      "reduce (dp)",    "optimizer", "host (log, ckpt)"};

const char *df_step_stage_name(int stage) { return stage >= 0 && stage < DF_STEP_STAGES ? NAMES[stage] : "?"; }
const char *df_step_stage_label(int stage) { return stage >= 0 && stage < DF_STEP_STAGES ? LABELS[stage] : "?"; }

double df_step_device_s(const DfStepTimes *t) {
    double s = 0;
    for (int i = DF_STEP_UPLOAD; i <= DF_STEP_OPTIMIZER; i++) s += t->s[i];
    return s;
}

void df_step_times_write_json(FILE *fp, const DfStepTimes *t) {
    fputs("\"stage_ms\": {", fp);
    for (int i = 0; i < DF_STEP_STAGES; i++) fprintf(fp, "%s\"%s\": %.3f", i ? ", " : "", NAMES[i], 1e3 * t->s[i]);
    fputc('}', fp);
}

void df_step_times_format(const DfStepTimes *t, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < DF_STEP_STAGES && at < cap; i++) {
        int n = snprintf(buf + at, cap - at, "%s%s %.1f", i ? " " : "", SHORT[i], 1e3 * t->s[i]);
        if (n < 0) break;
        at += (size_t)n;
    }
}

