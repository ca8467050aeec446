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

/* The compute ops of backend_ops.def, one df_cpu_<op> each (one file per op
 * family, in folders by the families of tests/backend_ops/: dense/cpu_matmul.c,
 * dense/cpu_rope.c, train/cpu_block_attention.c, infer/cpu_kv_attention.c,
 * hybrid/cpu_hybrid.c, ...). */
#define DF_OP(ret, op, params, need)
#define DF_COMPUTE_OP(ret, op, params, need) ret df_cpu_##op params;
#include "backend/backend_ops.def"

/* The rotation behind rope, rope_backward (sin_sign -1) and rope_partial
 * (rotary_dim < head_dim); op names the caller in errors (dense/cpu_rope.c). */
void df_cpu_rope_rotate(DfBackend *be, const char *op, DfBuffer x, DfBuffer positions, DfBuffer cos_table,
                        DfBuffer sin_table, int n_tokens, int heads, int head_dim, int rotary_dim, float sin_sign);

/* memory and device queries (cpu_memory.c, cpu_memory_info.c, cpu_backend.c) */
int df_cpu_download_i32(DfBackend *be, int32_t *dst, DfBuffer src, DfError *err);
void df_cpu_memory_info(DfBackend *be, DfMemoryInfo *info);
void df_cpu_describe(DfBackend *be, char *buf, size_t cap);

/* In place on s [rows, cols]: row r keeps its first min(cols, visible0 +
 * grow * r) entries as their softmax, the rest become 0; lse_out (or NULL)
 * receives each row's log-sum-exp. */
void df_cpu_softmax_prefix_rows(float *s, int rows, int cols, int visible0, int grow, float *lse_out);

#endif
