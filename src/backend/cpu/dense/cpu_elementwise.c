/* Element-wise and data-movement ops: residual add, SwiGLU, embedding
 * gather, strided 2-D copy. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_add_inplace(DfBackend *be, DfBuffer y, DfBuffer x) {
    (void)be;
    float *ys = y.ptr;
    const float *xs = x.ptr;
    long n = (long)y.count;
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) ys[i] += xs[i];
}

void df_cpu_swiglu(DfBackend *be, DfBuffer out, DfBuffer gate, DfBuffer up) {
    (void)be;
    float *o = out.ptr;
    const float *g = gate.ptr, *u = up.ptr;
    long n = (long)out.count;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void df_cpu_swiglu_packed(DfBackend *be, DfBuffer out, DfBuffer gate_up, int rows, int inter) {
    (void)be;
    float *o = out.ptr;
    const float *gu = gate_up.ptr;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * inter, *u = g + inter;
        float *orow = o + (size_t)r * inter;
        for (int i = 0; i < inter; i++) orow[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void df_cpu_embedding(DfBackend *be, DfBuffer out, DfBuffer table, DfBuffer ids, int n_tokens, int dim) {
    const int32_t *id = ids.ptr;
    const float *tab = table.ptr;
    float *o = out.ptr;
    long vocab = (long)(table.count / (size_t)dim);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n_tokens; t++) {
        if (id[t] < 0 || id[t] >= vocab) {
            df_cpu_record_failure(be, "embedding: token %d at row %d is outside the vocabulary [0, %ld)", (int)id[t], t,
                                  vocab);
            memset(o + (size_t)t * dim, 0, (size_t)dim * sizeof *o);
            continue;
        }
        memcpy(o + (size_t)t * dim, tab + (size_t)id[t] * dim, (size_t)dim * sizeof *o);
    }
}

void df_cpu_copy2d(DfBackend *be, DfBuffer dst, int ld_dst, DfBuffer src, int ld_src, int rows, int cols) {
    (void)be;
    size_t es = (size_t)dst.elem_size;
    char *d = dst.ptr;
    const char *s = src.ptr;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) memcpy(d + (size_t)r * ld_dst * es, s + (size_t)r * ld_src * es, (size_t)cols * es);
}
