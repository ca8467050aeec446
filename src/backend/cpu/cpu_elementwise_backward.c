/* Backward of the element-wise ops: RoPE (the inverse rotation) and SwiGLU. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

/* The rotation of cpu_rope.c is orthogonal, so its transpose (the gradient
 * map) is the rotation by the opposite angle: sin -> -sin. */
void df_cpu_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                          int n_tokens, int heads, int head_dim) {
    float *xs = dx.ptr;
    const int32_t *pos = positions.ptr;
    const float *ct = cos_table.ptr, *st = sin_table.ptr;
    int half = head_dim / 2;
    long table_rows = (long)(cos_table.count / (size_t)half);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n_tokens; t++) {
        if (pos[t] < 0 || pos[t] >= table_rows) {
            df_cpu_record_failure(be, "rope_backward: position %d of row %d is outside the table (%ld rows)",
                                  (int)pos[t], t, table_rows);
            continue;
        }
        const float *c = ct + (size_t)pos[t] * half, *s = st + (size_t)pos[t] * half;
        for (int h = 0; h < heads; h++) {
            float *x1 = xs + ((size_t)t * heads + h) * head_dim, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i];
                x1[i] = a * c[i] + b * s[i];
                x2[i] = b * c[i] - a * s[i];
            }
        }
    }
}

/* silu(g) = g sigma(g); silu'(g) = sigma(g) (1 + g (1 - sigma(g))). */
void df_cpu_swiglu_backward(DfBackend *be, DfBuffer d_gate, DfBuffer d_up, DfBuffer d_out, DfBuffer gate, DfBuffer up) {
    (void)be;
    float *dg = d_gate.ptr, *du = d_up.ptr;
    const float *dout = d_out.ptr, *g = gate.ptr, *u = up.ptr;
    long n = (long)d_out.count;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float gi = g[i], ui = u[i], d = dout[i];
        float sig = 1.0f / (1.0f + expf(-gi));
        dg[i] = d * ui * sig * (1.0f + gi * (1.0f - sig));
        du[i] = d * gi * sig;
    }
}
