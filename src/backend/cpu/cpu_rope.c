/* Rotary position embedding, rotate_half convention, in place. */
#include "backend/cpu/cpu_ops.h"

void df_cpu_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                 int heads, int head_dim) {
    float *xs = x.ptr;
    const int32_t *pos = positions.ptr;
    const float *ct = cos_table.ptr, *st = sin_table.ptr;
    int half = head_dim / 2;
    long table_rows = (long)(cos_table.count / (size_t)half);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n_tokens; t++) {
        if (pos[t] < 0 || pos[t] >= table_rows) {
            df_cpu_record_failure(be, "rope: position %d of row %d is outside the table (%ld rows)", (int)pos[t], t,
                                  table_rows);
            continue;
        }
        const float *c = ct + (size_t)pos[t] * half, *s = st + (size_t)pos[t] * half;
        for (int h = 0; h < heads; h++) {
            float *x1 = xs + ((size_t)t * heads + h) * head_dim, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i];
                x1[i] = a * c[i] - b * s[i];
                x2[i] = b * c[i] + a * s[i];
            }
        }
    }
}
