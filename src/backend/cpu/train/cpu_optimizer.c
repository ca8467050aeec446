/* The optimizer ops on the CPU: the fixed-order sum of squares and the AdamW
 * step, both with the host optimizer's arithmetic (backend/optim_math.h). */
#include "backend/cpu/cpu_ops.h"

/* Below this many elements the step runs on one thread (the fork costs more). */
#define PARALLEL_MIN 32768

int df_cpu_sum_squares(DfBackend *be, DfBuffer x, double *result, DfError *err) {
    (void)be;
    (void)err;
    *result = df_sum_squares_host((const float *)x.ptr, x.count);
    return 0;
}

void df_cpu_adamw_step(DfBackend *be, const DfAdamWArgs *a) {
    (void)be;
    float *p = a->master.ptr, *m = a->exp_avg.ptr, *v = a->exp_avg_sq.ptr, *out = a->params.ptr;
    const float *g = a->grads.ptr;
    const float coef = a->clip_coef;
    const DfAdamWScalars s = a->s;
    size_t n = a->master.count;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        df_adamw_update_element(p + i, m + i, v + i, g[i] * coef, &s);
        out[i] = p[i];
    }
}
