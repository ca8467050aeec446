#include "model/metrics.h"

#include <stdbool.h>
#include <string.h>

int df_metrics_init(DfMetrics *m, int block_size, DfError *err) {
    if (block_size < 1 || block_size > DF_METRICS_MAX_BLOCK)
        return df_fail(err, "metrics: block size %d outside [1, %d]", block_size, DF_METRICS_MAX_BLOCK);
    m->block_size = block_size;
    df_metrics_reset(m);
    return 0;
}

void df_metrics_reset(DfMetrics *m) {
    memset(m->values, 0, sizeof m->values);
}

void df_metrics_add_block(DfMetrics *m, const int32_t *labels, const int32_t *argmax, const uint8_t *valid) {
    double *v = m->values;
    int run = 0;
    bool still_running = true;
    for (int k = 1; k < m->block_size; k++) {
        int hit = valid[k] && argmax[k] == labels[k];
        v[DF_METRICS_VALID + k] += valid[k] != 0;
        v[DF_METRICS_CORRECT + k] += hit;
        if (still_running && hit)
            run++;
        else
            still_running = false;
    }
    v[DF_METRICS_RUN_SUM] += run;
    v[DF_METRICS_BLOCKS] += 1;
}

void df_metrics_add_loss(DfMetrics *m, double weighted_loss_sum, double weight_sum) {
    m->values[DF_METRICS_LOSS_SUM] += weighted_loss_sum;
    m->values[DF_METRICS_WEIGHT_SUM] += weight_sum;
}

int df_metrics_merge(DfMetrics *dst, const DfMetrics *src, DfError *err) {
    if (dst->block_size != src->block_size)
        return df_fail(err, "metrics: cannot merge block size %d into block size %d", src->block_size,
                       dst->block_size);
    for (int i = 0; i < DF_METRICS_COUNT; i++) dst->values[i] += src->values[i];
    return 0;
}

double df_metrics_accuracy(const DfMetrics *m, int k) {
    if (k < 1 || k >= m->block_size) return 0.0;
    double valid = m->values[DF_METRICS_VALID + k];
    return valid > 0 ? m->values[DF_METRICS_CORRECT + k] / valid : 0.0;
}

double df_metrics_train_tau(const DfMetrics *m) {
    double blocks = m->values[DF_METRICS_BLOCKS];
    return blocks > 0 ? 1.0 + m->values[DF_METRICS_RUN_SUM] / blocks : 1.0;
}

double df_metrics_loss(const DfMetrics *m) {
    double w = m->values[DF_METRICS_WEIGHT_SUM];
    return w > 0 ? m->values[DF_METRICS_LOSS_SUM] / w : 0.0;
}
