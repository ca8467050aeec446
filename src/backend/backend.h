/* The compute backend op table: the model graphs (src/model/) are written
 * once over these ops and never learn which backend runs them.
 *
 * Design:
 *
 * - Buffers. A DfBuffer is a plain value: an opaque pointer into the
 *   backend's memory (host memory on CPU, device memory on CUDA), an element
 *   count, and a kind. The kind says what an element is:
 *     DF_BUF_ACT  activations AND weights, in the backend's own dtype
 *                 (fp32 on CPU; bf16 on CUDA, where every op accumulates in
 *                 fp32). Model code never reads these bytes directly.
 *     DF_BUF_F32  always fp32 (rope tables, softmax statistics for the
 *                 attention backward, later optimizer state/master weights).
 *     DF_BUF_I32  always int32 (token ids, sequence starts, positions).
 *   The element size is stored in the buffer, so df_buffer_view() can cut a
 *   sub-range (rows of a matrix, one sequence of a packed batch) without
 *   asking the backend: a view is pointer arithmetic and owns nothing. Only
 *   buffers returned by alloc are freed.
 *
 * - Weights are uploaded from fp32 host arrays (what df_safetensors_load_f32
 *   returns) with upload_f32 into DF_BUF_ACT buffers: the backend converts to
 *   its dtype on the way in (bf16 rounding on CUDA) and back on the way out
 *   (download_f32). Integer data goes through upload_i32.
 *
 * - Packed batches. Sequences of different lengths are packed back to back
 *   into T token rows with no padding. A DfPackedBatch describes them the
 *   way varlen flash attention does: int32 seq_starts[nseq + 1] (cu_seqlens:
 *   sequence s owns rows seq_starts[s] .. seq_starts[s+1]-1) and int32
 *   positions[T] (position of each token inside its sequence, restarting at
 *   0), both in backend memory, plus host copies of the starts so that a
 *   backend can size its launches and workspaces without a download.
 *
 * - Matrices are row-major. The one matrix product, matmul, takes transpose
 *   flags and a beta (0: overwrite, 1: accumulate) so that the backward of a
 *   linear layer (dX = dY W, dW += dY^T X) is the same op; linear() is the
 *   forward convenience y = x W^T. rmsnorm works on any [rows, dim] view, so
 *   per-head q_norm / k_norm is rmsnorm over rows = T * heads, dim = head_dim.
 *   The attention op can return per-row softmax log-sum-exp for a later
 *   backward; backward ops (rmsnorm_backward, attention_backward, swiglu
 *   backward, rope with inverse rotation, ...) are added as new table entries
 *   without changing the existing ones.
 *
 * - Errors. Allocation and transfers return -1 with a message. Compute ops
 *   return nothing: they are queued (CUDA) or run at once (CPU); a backend
 *   keeps the first failure and reports it from sync(). Shape mismatches are
 *   programming errors and abort with a message in the df_op_* wrappers.
 */
#ifndef DF_BACKEND_BACKEND_H
#define DF_BACKEND_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/optim_math.h"
#include "base/error.h"

typedef enum DfBufKind {
    DF_BUF_ACT, /* backend activation/weight dtype: fp32 on CPU, bf16 on CUDA */
    DF_BUF_F32,
    DF_BUF_I32,
} DfBufKind;

typedef struct DfBuffer {
    void *ptr;        /* backend memory; NULL for an empty buffer */
    size_t count;     /* elements */
    DfBufKind kind;
    int elem_size;    /* bytes per element, set by the backend at alloc */
} DfBuffer;

/* Elements offset .. offset+count-1 of b; aborts when out of range. */
DfBuffer df_buffer_view(DfBuffer b, size_t offset, size_t count);

typedef struct DfBackend DfBackend;
typedef struct DfGraph DfGraph; /* a recorded sequence of ops (record_begin) */

typedef struct DfPackedBatch {
    int n_tokens;
    int n_seqs;
    int max_seq_len;
    const int32_t *host_seq_starts; /* [n_seqs + 1], owned by the batch */
    DfBuffer seq_starts;            /* I32 [n_seqs + 1] (a view of its storage) */
    DfBuffer positions;             /* I32 [n_tokens] (a view of its storage) */
    DfBuffer seq_starts_store, positions_store; /* grown by df_packed_batch_set, kept for the next batch */
} DfPackedBatch;

/* DFlash block attention (spec section 4 step 3) over a packed batch.
 * Queries are the blocks: block j owns query rows j*B .. j*B+B-1 (B =
 * block_size). Keys/values come in two parts: the context rows of every
 * sequence (computed once per sequence, shared by all its blocks) and the
 * block rows (one per query row). Block j of sequence s sees context rows
 * ctx_starts[s] .. ctx_starts[s] + anchors[j] - 1 (positions < its anchor)
 * and the B rows of its own block, nothing else. Sequence s owns blocks
 * block_starts[s] .. block_starts[s+1]-1. A sliding-window layer (window
 * W > 0 in DfBlockAttnArgs) sees only the last W of those context rows:
 * ctx_starts[s] + max(0, anchors[j] - W) .. ctx_starts[s] + anchors[j] - 1. */
typedef struct DfBlockAttnLayout {
    int n_seqs, n_blocks, block_size;
    int n_ctx_rows;                   /* context rows of all sequences */
    int max_visible;                  /* max over blocks of anchors[j] + block_size */
    const int32_t *host_ctx_starts;   /* [n_seqs + 1], owned */
    const int32_t *host_block_starts; /* [n_seqs + 1], owned */
    const int32_t *host_anchors;      /* [n_blocks], owned */
    DfBuffer ctx_starts, block_starts, anchors; /* I32 copies on the backend (views of their storage) */
    DfBuffer ctx_starts_store, block_starts_store, anchors_store; /* grown by _set, kept for the next layout */
} DfBlockAttnLayout;

/* Buffers of one block attention: q, out [Q, heads*hd]; k_ctx, v_ctx
 * [n_ctx_rows, kv_heads*hd]; k_blk, v_blk [Q, kv_heads*hd]; lse F32
 * [heads, Q] (written by the forward, read by the backward). */
typedef struct DfBlockAttnArgs {
    const DfBlockAttnLayout *layout;
    DfBuffer q, k_ctx, v_ctx, k_blk, v_blk, out, lse;
    int heads, kv_heads, head_dim;
    float scale;
    int window; /* sliding window over the context rows; 0 = unlimited */
} DfBlockAttnArgs;

/* Gradients of a block attention: d_out in; dq written; dk_*, dv_* added to. */
typedef struct DfBlockAttnGrads {
    DfBuffer d_out, dq, dk_ctx, dv_ctx, dk_blk, dv_blk;
} DfBlockAttnGrads;

/* Fused frozen lm head + weighted cross-entropy over `rows` hidden rows x
 * [rows, hidden] with head [vocab, hidden]: per row, logits = head x_r (never
 * more than a chunk of rows x vocab at once), ce[r] = logsumexp - logit[label]
 * (0 where label < 0), argmax[r] (first maximum); when d_x is non-empty,
 * d_x[r] = grad_scale * w[r] * (softmax - onehot(label)) head. No gradient
 * for the head. labels I32 [rows], weights F32 [rows], ce F32 [rows],
 * argmax I32 [rows]. */
typedef struct DfLmHeadCeArgs {
    DfBuffer x, head, labels, weights, ce, argmax, d_x;
    int rows, hidden, vocab;
    float grad_scale;
} DfLmHeadCeArgs;

/* A paged KV cache's rows a page: a multiple of the CUDA attention's 32-key
 * tiles, which start at multiples of 32, so that a tile lies in one page. */
#define DF_KV_PAGE_ROWS 64
static inline int df_kv_pages_for(int rows) {
    return (rows + DF_KV_PAGE_ROWS - 1) / DF_KV_PAGE_ROWS;
}

/* Inference against per-sequence KV caches. A cache buffer (one per layer,
 * one for K and one for V) holds n_slots slots of slot_capacity rows of
 * kv_heads*head_dim values: row r of slot s is at (s * slot_capacity + r);
 * or, paged (as a serving engine keeps it, so that memory goes to the rows
 * that exist), pages of DF_KV_PAGE_ROWS rows handed to the slots as they
 * grow, each slot's pages named by its page table.
 * A step brings new rows for some sequences: sequence i owns the packed new
 * rows row_starts[i] .. row_starts[i+1]-1 of q/k/v, lives in cache slot
 * slots[i], and already has cache_lens[i] rows cached (positions 0 ..
 * cache_lens[i]-1), so its new rows sit at positions cache_lens[i] + j. */
typedef struct DfKvBatch {
    int n_seqs, n_rows, slot_capacity, n_slots;
    int max_new, max_visible;         /* max over sequences of new rows, of cache_len + new rows */
    const int32_t *host_slots;        /* [n_seqs], in host_pack */
    const int32_t *host_cache_lens;   /* [n_seqs], in host_pack */
    const int32_t *host_row_starts;   /* [n_seqs + 1], in host_pack */
    DfBuffer slots, cache_lens, row_starts; /* I32 copies on the backend: views of pack */
    DfBuffer positions;               /* I32 [n_rows]: cache_lens[i] + j, for rope; a view of pack */
    /* A paged cache (df_kv_batch_set_paged; n_pages 0: the slots' contiguous rows above): a cache
     * buffer holds n_pages pages of DF_KV_PAGE_ROWS rows, and row r of sequence i is row
     * r % DF_KV_PAGE_ROWS of page host_pages[i * pages_per_seq + r / DF_KV_PAGE_ROWS]. */
    int n_pages, pages_per_seq;       /* pages_per_seq: slot_capacity / DF_KV_PAGE_ROWS, rounded up */
    const int32_t *host_pages;        /* [n_seqs * pages_per_seq], in host_pack; -1 past the rows held */
    DfBuffer pages;                   /* its I32 copy, a view of pack; empty when not paged */
    /* Storage kept from step to step (grown, never shrunk): the layout packed
     * as slots, cache_lens, row_starts, positions, pages, on the host and on the
     * backend, so that a step is one upload and no allocation. */
    int32_t *host_pack;
    size_t pack_cap; /* int32s both packs hold */
    DfBuffer pack;
} DfKvBatch;

/* The q/k/v step of a dense decoder layer against KV caches (see DfKvBatch),
 * from the one fused q/k/v product of its new rows: per head, q and k are
 * rmsnorm'ed with q_norm / k_norm (the normed values rounded to ACT), then
 * rotated by rope at batch->positions; q goes to q_out, k and v into the
 * caches where kv_cache_write puts new row j of sequence i (slot
 * slots[i], row cache_lens[i] + j). Value for value the same as rmsnorm
 * (rows = n_rows * heads, dim = head_dim), rope and kv_cache_write on the
 * separate q, k, v. */
typedef struct DfQkvRopeCacheArgs {
    const DfKvBatch *batch;
    DfBuffer qkv;              /* ACT [n_rows, (heads + 2*kv_heads) * head_dim]: q heads, k heads, v heads */
    DfBuffer q_norm, k_norm;   /* ACT [head_dim], or both empty: no q/k norm (Llama) */
    float eps;
    DfBuffer cos_table, sin_table; /* F32 [n_pos, head_dim/2], as rope takes */
    DfBuffer q_out;            /* ACT [n_rows, heads * head_dim] */
    DfBuffer k_cache, v_cache; /* ACT [n_slots * slot_capacity, kv_heads * head_dim] */
    int heads, kv_heads, head_dim;
} DfQkvRopeCacheArgs;

/* One AdamW step over the whole training state, flat (model/drafter_layout.h):
 * master, exp_avg, exp_avg_sq and grads are F32 [n], params ACT [n]. Per
 * element: g = grads[i] * clip_coef (torch's clip_grad_norm_ multiplies the
 * gradients by the coefficient first; grads itself is left as it was), then
 * df_adamw_update_element (backend/optim_math.h) on master, exp_avg,
 * exp_avg_sq, then params[i] = master[i] in the backend's dtype (bf16
 * round-to-nearest-even on CUDA, the fp32 value on CPU). */
typedef struct DfAdamWArgs {
    DfBuffer master, exp_avg, exp_avg_sq, grads, params;
    float clip_coef;
    DfAdamWScalars s;
} DfAdamWArgs;

/* Head sizes of a gated delta rule (a hybrid target's linear attention):
 * key head h serves value heads h*r .. h*r+r-1, r = value_heads / key_heads. */
typedef struct DfDeltaRuleShape {
    int key_heads, value_heads, key_dim, value_dim;
} DfDeltaRuleShape;

/* A decode step of a hybrid target's DeltaNet layer against per-slot
 * recurrent states (what the KV cache is for attention): sequence i of the
 * step (DfKvBatch: slot slots[i], new rows row_starts[i] .. row_starts[i+1]-1)
 * continues from its slot's state and leaves it after its last new row.
 * save: empty, or F32 shaped like the state: save[slot] = the state the step
 * started from (the snapshot a speculative rollback restores: taken by the
 * op that reads the state anyway, so it costs one extra write).
 *
 * conv_step: the causal convolution + SiLU of backend/gated_deltanet.h over
 * the new rows continuing the slot's window, F32 [n_slots, kernel-1,
 * channels] (its last kernel-1 inputs, oldest first), which advances past
 * them. x ACT [n_rows, channels]; out ACT [n_rows, channels] (distinct from
 * x) or empty: only the windows advance; w F32 [channels, kernel]. */
typedef struct DfConvStepArgs {
    const DfKvBatch *batch;
    DfBuffer out, x, w, window, save;
    int channels, kernel;
} DfConvStepArgs;

/* delta_rule_step: the gated delta rule of gated_delta_rule over the new
 * rows from the slot's state F32 [n_slots, value_heads, key_dim, value_dim]
 * instead of zero. qkv, b, a, a_log, dt_bias as gated_delta_rule takes them
 * (rows of the step); out ACT [n_rows, value_heads*value_dim], or empty:
 * only the states advance (a rollback's replay). */
typedef struct DfDeltaStepArgs {
    const DfKvBatch *batch;
    DfBuffer out, qkv, b, a, a_log, dt_bias, state, save;
    DfDeltaRuleShape shape;
} DfDeltaStepArgs;

/* What a backend's device holds, in bytes (memory_info). */
typedef struct DfMemoryInfo {
    size_t available;  /* what this process may still allocate there now (GPU: its free memory; CPU: the
                          host's MemAvailable, within the process's address-space and data limits) */
    size_t total;      /* the device's size (CPU: the host's memory) */
    size_t in_use;     /* taken through this backend now (CPU: the process's resident set) */
    size_t peak;       /* the most in_use since creation (CPU: the process's peak resident set) */
    size_t op_scratch; /* the most the backend's ops take for scratch of their own, on top of the
                          buffers they are given (GPU: the lm-head cross-entropy's logits) */
    int host;          /* the device's memory is the host's (the CPU backend) */
} DfMemoryInfo;

typedef struct DfTimer DfTimer; /* a device timer (timer_create) */

/* Capabilities a backend may have beyond the ops every backend has; each
 * makes the ops the list marks DF_NEED_<CAP> required. */
enum {
    DF_CAP_GRAPHS = 1 << 0,  /* records a step's ops and replays them (record_begin ...) */
    DF_CAP_STREAMS = 1 << 1, /* a native stream, side streams and events (native_stream ...) */
    DF_CAP_NCCL = 1 << 2,    /* buffers NCCL can read and write on the native stream (with DF_CAP_STREAMS) */
    DF_CAP_TIMING = 1 << 3,  /* device timers and a copy bandwidth (timer_create ...) */
    DF_CAP_PROFILE = 1 << 4, /* a time per op (profile_enable ...) */
};

/* The table every backend fills: one field per entry of
 * backend/backend_ops.def, where each op's signature and meaning are. */
typedef struct DfBackendOps {
    const char *name; /* for messages ("the cpu backend"); code asks caps and the ops, never the name */
    unsigned caps;    /* DF_CAP_* */
#define DF_OP(ret, op, params, need) ret(*op) params;
#include "backend/backend_ops.def"
} DfBackendOps;

/* One id per op of the list (the profiler's kinds), DF_OP_COUNT of them. */
typedef enum DfOpId {
#define DF_OP(ret, op, params, need) DF_OP_ID_##op,
#include "backend/backend_ops.def"
    DF_OP_COUNT
} DfOpId;

/* "matmul" for DF_OP_ID_matmul; "?" outside 0..DF_OP_COUNT-1. */
const char *df_op_name(int id);
/* 1 for the ids of the list's compute ops (the ones the profiler times). */
int df_op_is_compute(int id);

struct DfBackend {
    const DfBackendOps *ops;
    void *impl; /* backend-private state */
};

/* The CPU backend (C + OpenMP + OpenBLAS); threads from OMP_NUM_THREADS.
 * It sets OpenBLAS to one thread, process-wide: every op, sgemm included,
 * is parallelized with OpenMP instead (see cpu/dense/cpu_matmul.c). */
DfBackend *df_backend_cpu_create(DfError *err);

/* Name of the first op this backend lacks that backend_ops.def marks as
 * needed (by every backend, or by a capability in its caps), or NULL when
 * it has them all. df_backend_create refuses a backend that lacks one. */
const char *df_backend_missing_op(const DfBackend *be);
void df_backend_destroy(DfBackend *be);

/* --- convenience wrappers: check shapes, then dispatch ------------------- */

int df_buffer_alloc(DfBackend *be, DfBuffer *out, DfBufKind kind, size_t count, DfError *err);
/* The device's memory (the optional memory_info op); where the backend
 * cannot tell: nothing in use, and nothing known of what is available
 * (SIZE_MAX). */
void df_backend_memory_info(DfBackend *be, DfMemoryInfo *info);

/* What a memory plan keeps free of a device of `total` bytes for memory the
 * backend does not count (the allocator's pools, cuBLASLt's and NCCL's own
 * buffers, kernels' split scratch): 3% of a GPU, at least 2 GiB; 10% of the
 * host (other processes, the page cache). */
size_t df_memory_reserve(size_t total, int host);

/* --- device queries (backend_ops.def) ------------------------------------- */

/* 1 when the backend has every capability in caps (DF_CAP_*). */
int df_backend_has(const DfBackend *be, unsigned caps);
void df_backend_describe(DfBackend *be, char *buf, size_t cap);
/* memory_info's peak restarts from what is in use now (nothing where the backend keeps none). */
void df_backend_reset_peak(DfBackend *be);
/* Kernel variants (backend_ops.def): -1 with a message when the backend has
 * no knob of that name (a backend without variants has none); name NULL:
 * every knob back to its default (nothing to do without variants). */
int df_backend_set_variant(DfBackend *be, const char *name, int value, DfError *err);
/* The knobs and their values, "" where the backend has none. */
void df_backend_variants(DfBackend *be, char *buf, size_t cap);
/* The native stream (NULL without DF_CAP_STREAMS: ops run as they are called). */
void *df_backend_native_stream(DfBackend *be);
/* Bytes of one element of a kind on the backend (ACT: 2 for bf16, 4 for fp32). */
int df_backend_elem_size(DfBackend *be, DfBufKind kind);
void df_buffer_free(DfBackend *be, DfBuffer *buf);

/* y[M,N] = x[M,K] W[N,K]^T (+ y when accumulate) */
void df_op_linear(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, int m, int n, int k, int accumulate);
/* y[M,N] = x[M,K] W[N,K]^T + r (r may be y) */
void df_op_linear_residual(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, DfBuffer r, int m, int n, int k);
void df_op_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                  float beta);
/* w ACT, or F32 (then the table's rmsnorm_f32_weight runs). */
void df_op_rmsnorm(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps);
void df_op_add_inplace(DfBackend *be, DfBuffer y, DfBuffer x);
void df_op_embedding(DfBackend *be, DfBuffer out, DfBuffer table, DfBuffer ids, int n_tokens, int dim);
void df_op_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                int heads, int head_dim);
/* rmsnorm of each head row, then rope, in one op (backend_ops.def); x's
 * tokens x_ld values apart (heads * head_dim when packed), out packed. */
void df_op_rmsnorm_rope(DfBackend *be, DfBuffer out, DfBuffer x, int x_ld, DfBuffer w, DfBuffer positions,
                        DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads, int head_dim, float eps);
/* The q and k norms with their rope in one op (backend_ops.def): x's q
 * heads then k heads a token, tokens x_ld values apart; q_out, k_out packed. */
void df_op_qk_norm_rope(DfBackend *be, DfBuffer q_out, DfBuffer k_out, DfBuffer x, int x_ld, DfBuffer q_w,
                        DfBuffer k_w, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                        int q_heads, int k_heads, int head_dim, float eps);
/* For backends: qk_norm_rope as the backend's own rmsnorm_rope twice (the
 * CPU's op and the CUDA fallback). */
void df_backend_qk_norm_rope_composed(DfBackend *be, DfBuffer q_out, DfBuffer k_out, DfBuffer x, int x_ld,
                                      DfBuffer q_w, DfBuffer k_w, DfBuffer positions, DfBuffer cos_table,
                                      DfBuffer sin_table, int n_tokens, int q_heads, int k_heads, int head_dim,
                                      float eps);
/* For backends: rmsnorm_rope as its definition composes it from the
 * backend's own copy2d, rmsnorm and rope (strided x packed into out first,
 * then normed and rotated there); the CPU's op and the CUDA fallback. */
void df_backend_rmsnorm_rope_composed(DfBackend *be, DfBuffer out, DfBuffer x, int x_ld, DfBuffer w,
                                      DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                                      int heads, int head_dim, float eps);
void df_op_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                     const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale);
void df_op_swiglu(DfBackend *be, DfBuffer out, DfBuffer gate, DfBuffer up);
void df_op_copy2d(DfBackend *be, DfBuffer dst, int ld_dst, DfBuffer src, int ld_src, int rows, int cols);

/* --- training ops (see the table for their meaning) --------------------- */

void df_op_fill_zero(DfBackend *be, DfBuffer buf);
/* rope_backward then rmsnorm_backward over head rows, in one op (backend_ops.def). */
void df_op_rmsnorm_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w,
                                 DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads,
                                 int head_dim, float eps);
void df_op_linear_weight_grad(DfBackend *be, DfBuffer dw, DfBuffer dy, DfBuffer x, int m, int n, int k, float beta);
void df_op_rmsnorm_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w, int rows,
                            int dim, float eps, int accumulate);
void df_op_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                         int n_tokens, int heads, int head_dim);
void df_op_swiglu_backward(DfBackend *be, DfBuffer d_gate, DfBuffer d_up, DfBuffer d_out, DfBuffer gate, DfBuffer up);
void df_op_block_attention(DfBackend *be, const DfBlockAttnArgs *a);
void df_op_block_attention_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);
void df_op_lm_head_ce(DfBackend *be, const DfLmHeadCeArgs *a);

/* Sum of squares of an F32 buffer (see the table); -1 with a message on failure. */
int df_op_sum_squares(DfBackend *be, DfBuffer x, double *result, DfError *err);
void df_op_adamw_step(DfBackend *be, const DfAdamWArgs *a);

/* Checks and copies the layout (anchors[j] in [0, length of its sequence],
 * every sequence's blocks inside 0..n_blocks) and uploads it. */
int df_block_attn_layout_init(DfBlockAttnLayout *l, DfBackend *be, int n_seqs, const int32_t *ctx_starts,
                              const int32_t *block_starts, const int32_t *anchors, int block_size, DfError *err);
/* The same into a layout made before (or zeroed): its backend storage is
 * reused where large enough, grown otherwise, so that a training step makes
 * no allocation (a freed GPU buffer waits for the device). The uploads are
 * queued in the backend's order: kernels queued before still read the
 * previous layout. On failure the layout is left empty but keeps its
 * storage (df_block_attn_layout_free releases it). */
int df_block_attn_layout_set(DfBlockAttnLayout *l, DfBackend *be, int n_seqs, const int32_t *ctx_starts,
                             const int32_t *block_starts, const int32_t *anchors, int block_size, DfError *err);
void df_block_attn_layout_free(DfBlockAttnLayout *l, DfBackend *be);

/* --- packed batches ------------------------------------------------------- */

/* Checks seq_starts (seq_starts[0] = 0, strictly increasing: no empty
 * sequence) and uploads it with the per-token positions. */
int df_packed_batch_init(DfPackedBatch *pb, DfBackend *be, const int32_t *seq_starts, int n_seqs, DfError *err);
/* The same into a batch made before (or zeroed), its backend storage reused
 * or grown as df_block_attn_layout_set's. */
int df_packed_batch_set(DfPackedBatch *pb, DfBackend *be, const int32_t *seq_starts, int n_seqs, DfError *err);
void df_packed_batch_free(DfPackedBatch *pb, DfBackend *be);

/* --- inference ops against KV caches (see DfKvBatch) --------------------- */

/* The order argmax ranks values by: a NaN above every number (as
 * torch.argmax), so that a NaN anywhere in a row is what it chooses. */
static inline float df_argmax_key(float v) {
    return v != v ? (float)INFINITY : v;
}

/* Row-wise first argmax (see the table); value may be an empty buffer. */
void df_op_argmax_rows(DfBackend *be, DfBuffer index, DfBuffer value, DfBuffer x, int rows, int cols);

void df_op_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim);
void df_op_kv_attention(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                        const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale, int causal);
void df_op_qkv_rope_cache(DfBackend *be, const DfQkvRopeCacheArgs *a);
void df_op_swiglu_packed(DfBackend *be, DfBuffer out, DfBuffer gate_up, int rows, int inter);

/* --- hybrid targets' ops (see the table) -------------------------------- */

void df_op_causal_conv_silu(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, const DfPackedBatch *batch,
                            int channels, int kernel);
void df_op_gated_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                            DfBuffer dt_bias, const DfPackedBatch *batch, const DfDeltaRuleShape *shape);
void df_op_gated_rmsnorm(DfBackend *be, DfBuffer x, DfBuffer z, DfBuffer w, int rows, int dim, float eps);
void df_op_sigmoid_gate(DfBackend *be, DfBuffer x, DfBuffer gate);
void df_op_rope_partial(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                        int n_tokens, int heads, int head_dim, int rotary_dim);

/* Hybrid decode steps (see DfConvStepArgs, DfDeltaStepArgs). */
void df_op_conv_step(DfBackend *be, const DfConvStepArgs *a);
void df_op_delta_rule_step(DfBackend *be, const DfDeltaStepArgs *a);

/* The KV ops' launch shapes depend on a step's host values only through
 * n_seqs, n_rows, max_new and this bound (max_visible rounded up to
 * DF_KV_VISIBLE_BUCKET keys), so that a recorded step replays for every later
 * step with the same values: blocks past a sequence's own length do nothing. */
#define DF_KV_VISIBLE_BUCKET 256
static inline int df_kv_visible_bound(const DfKvBatch *kb) {
    return (kb->max_visible + DF_KV_VISIBLE_BUCKET - 1) / DF_KV_VISIBLE_BUCKET * DF_KV_VISIBLE_BUCKET;
}

/* Checks (every sequence has new rows, distinct slots in 0..n_slots-1,
 * cache_lens[i] + new rows <= slot_capacity), copies and uploads a step's
 * layout with the positions of its new rows, into kb's own storage: kb is
 * zeroed ({0}) before its first set, then set again for every step (its
 * storage grows when a step needs more, otherwise one upload of the packed
 * layout and no allocation), and freed once. On failure kb keeps its
 * storage and can be set again or freed. */
int df_kv_batch_set(DfKvBatch *kb, DfBackend *be, int n_seqs, const int32_t *slots, const int32_t *cache_lens,
                    const int32_t *row_starts, int n_slots, int slot_capacity, DfError *err);
/* A paged cache's page tables: page j of slot s is table[s * df_kv_pages_for(slot_capacity) + j]
 * (-1: none), one of n_pages pages. */
typedef struct DfKvPageTable {
    const int32_t *table;
    int n_pages;
} DfKvPageTable;
/* df_kv_batch_set for a paged cache: besides, every page a sequence's rows
 * (cached and new) lie in must be one of the table's pages; the step's
 * sequences' table rows go into the layout. */
int df_kv_batch_set_paged(DfKvBatch *kb, DfBackend *be, int n_seqs, const int32_t *slots, const int32_t *cache_lens,
                          const int32_t *row_starts, int n_slots, int slot_capacity, const DfKvPageTable *pages,
                          DfError *err);
/* The cache row (of the buffer) holding row r of the step's sequence i. */
static inline size_t df_kv_cache_row(const DfKvBatch *kb, int i, int r) {
    if (!kb->n_pages) return (size_t)kb->host_slots[i] * kb->slot_capacity + (size_t)r;
    return (size_t)kb->host_pages[(size_t)i * kb->pages_per_seq + r / DF_KV_PAGE_ROWS] * DF_KV_PAGE_ROWS +
           (size_t)(r % DF_KV_PAGE_ROWS);
}
/* A fresh kb (zeroed, then set); freed again on failure. */
int df_kv_batch_init(DfKvBatch *kb, DfBackend *be, int n_seqs, const int32_t *slots, const int32_t *cache_lens,
                     const int32_t *row_starts, int n_slots, int slot_capacity, DfError *err);
void df_kv_batch_free(DfKvBatch *kb, DfBackend *be);

#endif
