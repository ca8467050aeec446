/* The hybrid targets' ops on the CPU: the host functions of
 * backend/gated_deltanet.h (fp32, OpenMP) on the buffers' arrays, and partial
 * RoPE. ACT and F32 are both float here. */
#include "backend/cpu/cpu_ops.h"
#include "backend/gated_deltanet.h"

void df_cpu_causal_conv_silu(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, const DfPackedBatch *batch,
                             int channels, int kernel) {
    (void)be;
    df_causal_conv_silu(out.ptr, x.ptr, w.ptr, batch->host_seq_starts, batch->n_seqs, channels, kernel);
}

void df_cpu_gated_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                             DfBuffer dt_bias, const DfPackedBatch *batch, const DfDeltaRuleShape *s) {
    (void)be;
    df_gated_delta_rule(out.ptr, qkv.ptr, b.ptr, a.ptr, a_log.ptr, dt_bias.ptr, batch->host_seq_starts, batch->n_seqs,
                        s);
}

void df_cpu_gated_rmsnorm(DfBackend *be, DfBuffer x, DfBuffer z, DfBuffer w, int rows, int dim, float eps) {
    (void)be;
    df_gated_rmsnorm(x.ptr, z.ptr, w.ptr, rows, dim, eps);
}

void df_cpu_sigmoid_gate(DfBackend *be, DfBuffer x, DfBuffer gate) {
    (void)be;
    df_sigmoid_gate(x.ptr, gate.ptr, x.count);
}

/* df_cpu_rope's rotation on the first rotary_dim values of heads head_dim apart. */
void df_cpu_rope_partial(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                         int n_tokens, int heads, int head_dim, int rotary_dim) {
    df_cpu_rope_rotate(be, "rope_partial", x, positions, cos_table, sin_table, n_tokens, heads, head_dim, rotary_dim,
                       1.0f);
}
