/* The CPU backend's op implementations (one file per op family) and its
 * private state. fp32 everywhere: DF_BUF_ACT is float on this backend. */
#ifndef DF_BACKEND_CPU_CPU_OPS_H
#define DF_BACKEND_CPU_CPU_OPS_H

#include "backend/backend.h"

typedef struct DfCpuState {
    int failed;          /* a compute op met bad data since the last sync */
    DfError first_error; /* its message */
    /* Bytes of the live buffers, count * elem_size as the CUDA backend counts
     * them (aligned_alloc's rounding to 64 bytes not included), and the most
     * they have been: see cpu_memory.h. */
    size_t bytes_in_use, peak_bytes;
} DfCpuState;

/* Records the first failure of a compute op (thread-safe); reported by sync. */
void df_cpu_record_failure(DfBackend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void df_cpu_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                   float beta);
void df_cpu_rmsnorm(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps);
void df_cpu_add_inplace(DfBackend *be, DfBuffer y, DfBuffer x);
void df_cpu_embedding(DfBackend *be, DfBuffer out, DfBuffer table, DfBuffer ids, int n_tokens, int dim);
/* The rotation behind rope, rope_backward (sin_sign -1) and rope_partial
 * (rotary_dim < head_dim); op names the caller in errors (cpu_rope.c). */
void df_cpu_rope_rotate(DfBackend *be, const char *op, DfBuffer x, DfBuffer positions, DfBuffer cos_table,
                        DfBuffer sin_table, int n_tokens, int heads, int head_dim, int rotary_dim, float sin_sign);
void df_cpu_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                 int heads, int head_dim);
void df_cpu_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                      const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale);
void df_cpu_swiglu(DfBackend *be, DfBuffer out, DfBuffer gate, DfBuffer up);
void df_cpu_copy2d(DfBackend *be, DfBuffer dst, int ld_dst, DfBuffer src, int ld_src, int rows, int cols);


/* training (cpu_memory.c, cpu_weight_grad.c, cpu_rmsnorm_backward.c,
 * cpu_elementwise_backward.c, cpu_block_attention.c, cpu_lm_head_ce.c) */
int df_cpu_download_i32(DfBackend *be, int32_t *dst, DfBuffer src, DfError *err);
void df_cpu_fill_zero(DfBackend *be, DfBuffer buf);
void df_cpu_memory_info(DfBackend *be, DfMemoryInfo *info);
void df_cpu_linear_weight_grad(DfBackend *be, DfBuffer dw, DfBuffer dy, DfBuffer x, int m, int n, int k);
void df_cpu_rmsnorm_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w, int rows,
                             int dim, float eps, int accumulate);
void df_cpu_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                          int n_tokens, int heads, int head_dim);
void df_cpu_swiglu_backward(DfBackend *be, DfBuffer d_gate, DfBuffer d_up, DfBuffer d_out, DfBuffer gate, DfBuffer up);
void df_cpu_block_attention(DfBackend *be, const DfBlockAttnArgs *a);
void df_cpu_block_attention_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);
void df_cpu_lm_head_ce(DfBackend *be, const DfLmHeadCeArgs *a);

/* inference against KV caches (cpu_kv_cache_write.c, cpu_kv_attention.c) */
void df_cpu_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim);
void df_cpu_kv_attention(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                         const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale, int causal);

/* a dense decoder layer's fused steps (cpu_qkv_rope_cache.c, cpu_elementwise.c) */
void df_cpu_qkv_rope_cache(DfBackend *be, const DfQkvRopeCacheArgs *a);
void df_cpu_swiglu_packed(DfBackend *be, DfBuffer out, DfBuffer gate_up, int rows, int inter);

/* greedy choice (cpu_argmax.c) */
void df_cpu_argmax_rows(DfBackend *be, DfBuffer index, DfBuffer value, DfBuffer x, int rows, int cols);

/* optimizer (cpu_optimizer.c) */
int df_cpu_sum_squares(DfBackend *be, DfBuffer x, double *result, DfError *err);
void df_cpu_adamw_step(DfBackend *be, const DfAdamWArgs *a);

/* hybrid targets' layers (cpu_hybrid.c; rmsnorm_f32_weight is df_cpu_rmsnorm) */
void df_cpu_causal_conv_silu(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, const DfPackedBatch *batch,
                             int channels, int kernel);
void df_cpu_gated_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                             DfBuffer dt_bias, const DfPackedBatch *batch, const DfDeltaRuleShape *shape);
void df_cpu_gated_rmsnorm(DfBackend *be, DfBuffer x, DfBuffer z, DfBuffer w, int rows, int dim, float eps);
void df_cpu_sigmoid_gate(DfBackend *be, DfBuffer x, DfBuffer gate);
/* hybrid targets' decode steps against per-slot states (cpu_hybrid_step.c) */
void df_cpu_conv_step(DfBackend *be, const DfConvStepArgs *a);
void df_cpu_delta_rule_step(DfBackend *be, const DfDeltaStepArgs *a);
void df_cpu_rope_partial(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                         int n_tokens, int heads, int head_dim, int rotary_dim);

/* In place on s [rows, cols]: row r keeps its first min(cols, visible0 +
 * grow * r) entries as their softmax, the rest become 0; lse_out (or NULL)
 * receives each row's log-sum-exp. */
void df_cpu_softmax_prefix_rows(float *s, int rows, int cols, int visible0, int grow, float *lse_out);

#endif
