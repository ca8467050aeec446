/* The hybrid targets' ops on the CPU: the host functions of
 * model/gated_deltanet.h (fp32, OpenMP) on the buffers' arrays, and partial
 * RoPE. ACT and F32 are both float here. */
#include "backend/cpu/cpu_ops.h"
#include "model/gated_deltanet.h"

void df_cpu_causal_conv_silu(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, const DfPackedBatch *batch,
                             int channels, int kernel) {
    (void)be;
    df_causal_conv_silu(out.ptr, x.ptr, w.ptr, batch->host_seq_starts, batch->n_seqs, channels, kernel);
}

void df_cpu_gated_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                             DfBuffer dt_bias, const DfPackedBatch *batch, const DfDeltaRuleShape *s) {
    (void)be;
    DfLinearAttnConfig la = {.num_key_heads = s->key_heads, .num_value_heads = s->value_heads,
                             .key_head_dim = s->key_dim, .value_head_dim = s->value_dim};
    df_gated_delta_rule(out.ptr, qkv.ptr, b.ptr, a.ptr, a_log.ptr, dt_bias.ptr, batch->host_seq_starts, batch->n_seqs,
                        &la);
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
    float *xs = x.ptr;
    const int32_t *pos = positions.ptr;
    const float *ct = cos_table.ptr, *st = sin_table.ptr;
    int half = rotary_dim / 2;
    long table_rows = (long)(cos_table.count / (size_t)half);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n_tokens; t++) {
        if (pos[t] < 0 || pos[t] >= table_rows) {
            df_cpu_record_failure(be, "rope_partial: position %d of row %d is outside the table (%ld rows)",
                                  (int)pos[t], t, table_rows);
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
