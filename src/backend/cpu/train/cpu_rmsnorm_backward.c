/* Backward of RMSNorm over the rows of [rows, dim]. With r = rsqrt(mean(x^2)
 * + eps), xh = x r and g = dy w: dx = r (g - xh mean(g xh)) and
 * dw = sum over rows of dy xh. Rows are split over OpenMP threads; each
 * thread sums its share of dw in a private fp32 row, and the rows are added
 * in thread order at the end (deterministic for a given thread count). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_rmsnorm_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w, int rows,
                             int dim, float eps, int accumulate) {
    const float *xs = x.ptr, *ws = w.ptr, *dys = dy.ptr;
    float *dxs = dx.ptr, *dws = dw.ptr;
    int threads = omp_get_max_threads();
    if (threads > rows) threads = rows;
    float *partial = calloc((size_t)threads * dim, sizeof *partial);
    if (!partial) {
        df_cpu_record_failure(be, "rmsnorm_backward: out of memory for %d x %d partial sums", threads, dim);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        float *pw = partial + (size_t)omp_get_thread_num() * dim;
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            const float *xr = xs + (size_t)r * dim, *dyr = dys + (size_t)r * dim;
            float *dxr = dxs + (size_t)r * dim;
            float ss = 0.0f, gx = 0.0f;
#pragma omp simd reduction(+ : ss, gx)
            for (int i = 0; i < dim; i++) {
                ss += xr[i] * xr[i];
                gx += dyr[i] * ws[i] * xr[i];
            }
            float inv = 1.0f / sqrtf(ss / (float)dim + eps);
            float mean_gxh = gx * inv / (float)dim; /* mean(g * xh) */
            for (int i = 0; i < dim; i++) {
                float xh = xr[i] * inv, g = dyr[i] * ws[i];
                pw[i] += dyr[i] * xh;
                float v = inv * (g - xh * mean_gxh);
                dxr[i] = accumulate ? dxr[i] + v : v;
            }
        }
    }
    for (int t = 0; t < threads; t++)
        for (int i = 0; i < dim; i++) dws[i] += partial[(size_t)t * dim + i];
    free(partial);
}
