/* Backward of SwiGLU (rope_backward, the inverse rotation, is cpu_rope.c's). */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

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
