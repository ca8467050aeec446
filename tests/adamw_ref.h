/* The host reference of the optimizer step the tests check against PyTorch
 * and the backends' adamw_step op against: AdamW over host arrays (the
 * formulas of train/optimizer.h, element by element with
 * df_adamw_update_element, the backends' own arithmetic) and torch's global
 * gradient-norm clipping. The trainer runs the same step on the backend
 * (df_op_adamw_step); only tests use these. */
#ifndef DF_TESTS_ADAMW_REF_H
#define DF_TESTS_ADAMW_REF_H

#include <math.h>
#include <stddef.h>

#include "backend/optim_math.h"
#include "train/optimizer.h"

/* Below this many elements a loop runs on one thread (the fork costs more). */
#define DF_TEST_OPT_PARALLEL_MIN 32768

/* One update of every tensor: params[i] and grads[i] have opt->sizes[i]
 * elements; the step count goes up by one. */
static inline void df_test_adamw_step(DfAdamW *opt, float *const *params, const float *const *grads, double lr) {
    opt->step++;
    DfAdamWScalars s = df_adamw_scalars(&opt->cfg, opt->step, lr);
    for (int i = 0; i < opt->n_tensors; i++) {
        size_t off = opt->offsets[i], n = opt->sizes[i];
        float *p = params[i], *m = opt->exp_avg + off, *v = opt->exp_avg_sq + off;
        const float *g = grads[i];
#pragma omp parallel for schedule(static) if (n >= DF_TEST_OPT_PARALLEL_MIN)
        for (size_t k = 0; k < n; k++) df_adamw_update_element(p + k, m + k, v + k, g[k], &s);
    }
}

/* Global L2 norm of all gradients: sqrt of the sum of squares, accumulated
 * in double in a fixed order (independent of the thread count), rounded to
 * float. */
static inline float df_test_grad_norm(const float *const *grads, const size_t *sizes, int n_tensors) {
    double total = 0.0;
    for (int i = 0; i < n_tensors; i++) total += df_sum_squares_host(grads[i], sizes[i]);
    return (float)sqrt(total);
}

/* torch.nn.utils.clip_grad_norm_: total = df_test_grad_norm, coef =
 * df_clip_coef(total, max_norm), every gradient multiplied by coef. Returns
 * the norm before clipping. */
static inline float df_test_clip_grad_norm(float *const *grads, const size_t *sizes, int n_tensors, float max_norm) {
    float norm = df_test_grad_norm((const float *const *)grads, sizes, n_tensors);
    float coef = df_clip_coef(norm, max_norm);
    if (coef == 1.0f) return norm; /* multiplying by 1 changes nothing */
    for (int t = 0; t < n_tensors; t++) {
        float *g = grads[t];
        size_t n = sizes[t];
#pragma omp parallel for schedule(static) if (n >= DF_TEST_OPT_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) g[i] *= coef;
    }
    return norm;
}

#endif
