/* AdamW over fp32 master weights with fp32 moments, and global gradient-norm
 * clipping, both computed exactly as PyTorch does (torch.optim.AdamW with its
 * default single-tensor CPU path, torch.nn.utils.clip_grad_norm_), so that a
 * run can be checked against a PyTorch reference step for step.
 *
 * One step at learning rate lr, step count t (1 for the first step), per
 * element, in fp32 arithmetic with the scalars below rounded to float:
 *   p = p * (1 - lr*wd)                                  decoupled weight decay
 *   m = lerp(m, g, 1-b1)                                 torch's lerp:
 *         weight w < 0.5: m + w*(g - m);  else g - (g - m)*(1 - w)
 *   v = v*b2 + (1-b2)*g*g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p = p + (-(lr / (1 - b1^t))) * m / denom
 * The bias corrections and the step size are computed in double, as Python
 * does, then used as float.
 *
 * State for resume: `step`, `exp_avg` (m) and `exp_avg_sq` (v) of every
 * tensor, laid out one tensor after another (tensor i at offsets[i], sizes[i]
 * elements). Saving these three and restoring them with df_adamw_set_state
 * makes the continued updates bit-identical. The step runs on the backend
 * that keeps the training state (its adamw_step op, df_op_adamw_step, with
 * the scalars of df_adamw_scalars and the clip coefficient of df_clip_coef);
 * the element update itself is df_adamw_update_element (backend/optim_math.h).
 * tests/adamw_ref.h holds the same step over host arrays, the reference the
 * tests compare with PyTorch and with the backends. */
#ifndef DF_TRAIN_OPTIMIZER_H
#define DF_TRAIN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "backend/optim_math.h"
#include "base/error.h"

typedef struct DfAdamWConfig {
    double beta1, beta2, eps, weight_decay;
} DfAdamWConfig;

typedef struct DfAdamW {
    DfAdamWConfig cfg;
    int n_tensors;
    size_t *sizes;     /* [n_tensors] elements of each tensor */
    size_t *offsets;   /* [n_tensors] start of each tensor in the moment buffers */
    size_t total;      /* sum of sizes */
    float *exp_avg;    /* [total] first moments */
    float *exp_avg_sq; /* [total] second moments */
    int64_t step;      /* steps taken so far */
} DfAdamW;

/* Zero moments, step 0. Fails on a bad configuration (betas outside [0, 1),
 * eps or weight decay negative) or a non-positive tensor count. */
int df_adamw_init(DfAdamW *opt, const DfAdamWConfig *cfg, const size_t *sizes, int n_tensors, DfError *err);
void df_adamw_free(DfAdamW *opt);

/* The scalars of step t (1 for the first) at learning rate lr. */
DfAdamWScalars df_adamw_scalars(const DfAdamWConfig *cfg, int64_t t, double lr);

/* Restores a saved state; `total` must equal opt->total and step be >= 0. */
int df_adamw_set_state(DfAdamW *opt, int64_t step, const float *exp_avg, const float *exp_avg_sq, size_t total,
                       DfError *err);

/* torch's clip coefficient for a global norm: (1 / (norm + 1e-6)) * max_norm
 * in float, clamped to at most 1 (1 also when norm is NaN). */
float df_clip_coef(float norm, float max_norm);

#endif
