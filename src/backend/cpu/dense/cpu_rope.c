/* Rotary position embedding, rotate_half convention, in place: the forward,
 * its backward (the opposite angle) and the partial form (the first
 * rotary_dim values of each head) are one rotation. The q/k norm fused with
 * it (rmsnorm_rope and its backward) are, on the CPU, the ops themselves. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_rope_rotate(DfBackend *be, const char *op, DfBuffer x, DfBuffer positions, DfBuffer cos_table,
                        DfBuffer sin_table, int n_tokens, int heads, int head_dim, int rotary_dim, float sin_sign) {
    float *xs = x.ptr;
    const int32_t *pos = positions.ptr;
    const float *ct = cos_table.ptr, *st = sin_table.ptr;
    int half = rotary_dim / 2;
    long table_rows = (long)(cos_table.count / (size_t)half);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n_tokens; t++) {
        if (pos[t] < 0 || pos[t] >= table_rows) {
            df_cpu_record_failure(be, "%s: position %d of row %d is outside the table (%ld rows)", op, (int)pos[t], t,
                                  table_rows);
            continue;
        }
        const float *c = ct + (size_t)pos[t] * half, *s = st + (size_t)pos[t] * half;
        for (int h = 0; h < heads; h++) {
            float *x1 = xs + ((size_t)t * heads + h) * head_dim, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i], si = sin_sign * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
    }
}

void df_cpu_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                 int heads, int head_dim) {
    df_cpu_rope_rotate(be, "rope", x, positions, cos_table, sin_table, n_tokens, heads, head_dim, head_dim, 1.0f);
}

/* The rotation is orthogonal, so its transpose (the gradient map) is the
 * rotation by the opposite angle: sin -> -sin. */
void df_cpu_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                          int n_tokens, int heads, int head_dim) {
    df_cpu_rope_rotate(be, "rope_backward", dx, positions, cos_table, sin_table, n_tokens, heads, head_dim, head_dim,
                       -1.0f);
}

/* The q/k norm and rope in one op: on the CPU the ops themselves, one
 * after the other (the composition the op is defined as). */
void df_cpu_rmsnorm_rope(DfBackend *be, DfBuffer out, DfBuffer x, int x_ld, DfBuffer w, DfBuffer positions,
                         DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads, int head_dim, float eps) {
    df_backend_rmsnorm_rope_composed(be, out, x, x_ld, w, positions, cos_table, sin_table, n_tokens, heads, head_dim,
                                     eps);
}

/* Its backward: on the CPU rope_backward and rmsnorm_backward themselves,
 * dy copied into dx first where they differ. */
void df_cpu_qk_norm_rope(DfBackend *be, DfBuffer q_out, DfBuffer k_out, DfBuffer x, int x_ld, DfBuffer q_w,
                         DfBuffer k_w, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                         int q_heads, int k_heads, int head_dim, float eps) {
    df_backend_qk_norm_rope_composed(be, q_out, k_out, x, x_ld, q_w, k_w, positions, cos_table, sin_table, n_tokens,
                                     q_heads, k_heads, head_dim, eps);
}

void df_cpu_rmsnorm_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w,
                                  DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads,
                                  int head_dim, float eps) {
    if (dx.ptr != dy.ptr) memcpy(dx.ptr, dy.ptr, (size_t)n_tokens * heads * head_dim * sizeof(float));
    df_cpu_rope_backward(be, dx, positions, cos_table, sin_table, n_tokens, heads, head_dim);
    df_cpu_rmsnorm_backward(be, dx, dw, dx, x, w, n_tokens * heads, head_dim, eps, 0);
}
