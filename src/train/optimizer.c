#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int df_adamw_init(DfAdamW *opt, const DfAdamWConfig *cfg, const size_t *sizes, int n_tensors, DfError *err) {
    memset(opt, 0, sizeof *opt);
    if (n_tensors <= 0) return df_fail(err, "adamw: %d parameter tensors", n_tensors);
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1))
        return df_fail(err, "adamw: betas (%g, %g) must lie in [0, 1)", cfg->beta1, cfg->beta2);
    if (!(cfg->eps >= 0) || !(cfg->weight_decay >= 0))
        return df_fail(err, "adamw: eps %g and weight decay %g must be >= 0", cfg->eps, cfg->weight_decay);
    opt->cfg = *cfg;
    opt->n_tensors = n_tensors;
    opt->sizes = df_xmalloc(sizeof *opt->sizes * (size_t)n_tensors, "adamw tensor sizes");
    opt->offsets = df_xmalloc(sizeof *opt->offsets * (size_t)n_tensors, "adamw tensor offsets");
    size_t total = 0;
    for (int i = 0; i < n_tensors; i++) {
        opt->sizes[i] = sizes[i];
        opt->offsets[i] = total;
        total += sizes[i];
    }
    opt->total = total;
    opt->exp_avg = df_xcalloc(total ? total : 1, sizeof(float), "adamw first moments");
    opt->exp_avg_sq = df_xcalloc(total ? total : 1, sizeof(float), "adamw second moments");
    opt->step = 0;
    return 0;
}

void df_adamw_free(DfAdamW *opt) {
    if (!opt) return;
    free(opt->sizes);
    free(opt->offsets);
    free(opt->exp_avg);
    free(opt->exp_avg_sq);
    memset(opt, 0, sizeof *opt);
}

DfAdamWScalars df_adamw_scalars(const DfAdamWConfig *c, int64_t t, double lr) {
    double bc1 = 1.0 - pow(c->beta1, (double)t);
    double bc2 = 1.0 - pow(c->beta2, (double)t);
    DfAdamWScalars s = {
        .decay = (float)(1.0 - lr * c->weight_decay),
        .lerp_weight = (float)(1.0 - c->beta1),
        .beta2 = (float)c->beta2,
        .one_minus_beta2 = (float)(1.0 - c->beta2),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = (float)c->eps,
        .neg_step_size = (float)(-(lr / bc1)),
        .apply_decay = c->weight_decay != 0,
    };
    return s;
}

int df_adamw_set_state(DfAdamW *opt, int64_t step, const float *exp_avg, const float *exp_avg_sq, size_t total,
                       DfError *err) {
    if (total != opt->total)
        return df_fail(err, "adamw state: %zu moment values saved, the parameters have %zu", total, opt->total);
    if (step < 0) return df_fail(err, "adamw state: negative step count %lld", (long long)step);
    memcpy(opt->exp_avg, exp_avg, total * sizeof(float));
    memcpy(opt->exp_avg_sq, exp_avg_sq, total * sizeof(float));
    opt->step = step;
    return 0;
}

float df_clip_coef(float norm, float max_norm) {
    /* torch: max_norm / (total + 1e-6) is evaluated as reciprocal(total + 1e-6) * max_norm */
    float coef = (1.0f / (norm + 1e-6f)) * max_norm;
    return coef < 1.0f ? coef : 1.0f;
}
