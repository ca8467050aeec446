/* RMSNorm over the rows of a [rows, dim] matrix, one row per iteration. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_rmsnorm(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps) {
    (void)be;
    const float *xs = x.ptr, *ws = w.ptr;
    float *os = out.ptr;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = xs + (size_t)r * dim;
        float *orow = os + (size_t)r * dim;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) orow[i] = xr[i] * inv * ws[i];
    }
}

/* F32 and ACT are the same floats here. */
void df_cpu_rmsnorm_f32_weight(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps) {
    df_cpu_rmsnorm(be, out, x, w, rows, dim, eps);
}
