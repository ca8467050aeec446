/* Backend-independent parts of the op table: views, shape checks, packed
 * batch setup. */
#include "backend/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A shape mismatch between a model graph and its buffers is a bug in the
 * program, not bad input: stop with a message that names the op. */
static void require(int ok, const char *op, const char *what) {
    if (ok) return;
    fprintf(stderr, "dflash: internal error in %s: %s\n", op, what);
    abort();
}

DfBuffer df_buffer_view(DfBuffer b, size_t offset, size_t count) {
    require(offset <= b.count && count <= b.count - offset, "df_buffer_view", "range outside the buffer");
    DfBuffer v = b;
    v.ptr = b.ptr ? (char *)b.ptr + offset * (size_t)b.elem_size : NULL;
    v.count = count;
    return v;
}

/* The need column of backend_ops.def as capability bits: 0 for every
 * backend, DF_NEED_OPTIONAL for none. */
#define DF_NEED_ALL 0u
#define DF_NEED_OPTIONAL (~0u)
#define DF_NEED_GRAPHS ((unsigned)DF_CAP_GRAPHS)
#define DF_NEED_STREAMS ((unsigned)DF_CAP_STREAMS)
#define DF_NEED_TIMING ((unsigned)DF_CAP_TIMING)
#define DF_NEED_PROFILE ((unsigned)DF_CAP_PROFILE)

static const char *const OP_NAMES[DF_OP_COUNT] = {
#define DF_OP(ret, op, params, need) #op,
#include "backend/backend_ops.def"
};

static const unsigned char OP_IS_COMPUTE[DF_OP_COUNT] = {
#define DF_OP(ret, op, params, need) 0,
#define DF_COMPUTE_OP(ret, op, params, need) 1,
#include "backend/backend_ops.def"
};

const char *df_op_name(int id) {
    return id >= 0 && id < DF_OP_COUNT ? OP_NAMES[id] : "?";
}

int df_op_is_compute(int id) {
    return id >= 0 && id < DF_OP_COUNT && OP_IS_COMPUTE[id];
}

const char *df_backend_missing_op(const DfBackend *be) {
    const DfBackendOps *o = be->ops;
    const struct {
        int present;
        unsigned need;
    } ops[DF_OP_COUNT] = {
#define DF_OP(ret, op, params, need) {o->op != NULL, need},
#include "backend/backend_ops.def"
    };
    for (int i = 0; i < DF_OP_COUNT; i++) {
        int needed = ops[i].need == DF_NEED_ALL || (ops[i].need != DF_NEED_OPTIONAL && (o->caps & ops[i].need));
        if (needed && !ops[i].present) return OP_NAMES[i];
    }
    return NULL;
}

int df_backend_has(const DfBackend *be, unsigned caps) {
    return (be->ops->caps & caps) == caps;
}

void df_backend_describe(DfBackend *be, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
    be->ops->describe(be, buf, cap);
}

void df_backend_reset_peak(DfBackend *be) {
    if (be->ops->reset_peak) be->ops->reset_peak(be);
}

int df_backend_set_variant(DfBackend *be, const char *name, int value, DfError *err) {
    if (be->ops->set_variant) return be->ops->set_variant(be, name, value, err);
    if (!name) return 0;
    return df_fail(err, "the %s backend has no kernel variant '%s'", be->ops->name, name);
}

void df_backend_variants(DfBackend *be, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
    if (be->ops->variants) be->ops->variants(be, buf, cap);
}

void *df_backend_native_stream(DfBackend *be) {
    return df_backend_has(be, DF_CAP_STREAMS) ? be->ops->native_stream(be) : NULL;
}

/* Calls compute op `op` of the table, bracketed for the profiler where the
 * backend has one (it records only while enabled). */
#define DISPATCH(be, op, ...)                                                                                 \
    do {                                                                                                      \
        DfBackend *be_ = (be);                                                                                \
        if (be_->ops->profile_begin) be_->ops->profile_begin(be_, DF_OP_ID_##op);                              \
        be_->ops->op(be_, __VA_ARGS__);                                                                       \
        if (be_->ops->profile_end) be_->ops->profile_end(be_);                                                \
    } while (0)

void df_backend_destroy(DfBackend *be) {
    if (be) be->ops->destroy(be);
}

int df_buffer_alloc(DfBackend *be, DfBuffer *out, DfBufKind kind, size_t count, DfError *err) {
    return be->ops->alloc(be, out, kind, count, err);
}

void df_backend_memory_info(DfBackend *be, DfMemoryInfo *info) {
    *info = (DfMemoryInfo){.available = SIZE_MAX};
    if (be->ops->memory_info) be->ops->memory_info(be, info);
}

/* An empty alloc sets the element size and takes nothing. */
size_t df_memory_reserve(size_t total, int host) {
    if (host) return total / 10;
    size_t r = total / 100 * 3, floor = (size_t)2 << 30;
    return r > floor ? r : floor;
}

int df_backend_elem_size(DfBackend *be, DfBufKind kind) {
    DfBuffer probe;
    DfError ignored = {{0}};
    if (be->ops->alloc(be, &probe, kind, 0, &ignored) || probe.elem_size <= 0) return 4;
    return probe.elem_size;
}

void df_buffer_free(DfBackend *be, DfBuffer *buf) {
    if (buf && buf->ptr) be->ops->free(be, buf);
    if (buf) memset(buf, 0, sizeof *buf);
}

static int fits(DfBuffer b, size_t need, DfBufKind kind) {
    return b.kind == kind && b.count >= need;
}

void df_op_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                  float beta) {
    require(m > 0 && n > 0 && k > 0, "matmul", "empty dimension");
    require(fits(c, (size_t)m * n, DF_BUF_ACT) && fits(a, (size_t)m * k, DF_BUF_ACT) &&
                fits(b, (size_t)k * n, DF_BUF_ACT),
            "matmul", "buffer smaller than its matrix");
    DISPATCH(be, matmul, c, a, b, m, n, k, trans_a, trans_b, beta);
}

void df_op_linear(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, int m, int n, int k, int accumulate) {
    df_op_matmul(be, y, x, w, m, n, k, 0, 1, accumulate ? 1.0f : 0.0f);
}

void df_op_linear_residual(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, DfBuffer r, int m, int n, int k) {
    require(m > 0 && n > 0 && k > 0 && fits(y, (size_t)m * n, DF_BUF_ACT) && fits(r, (size_t)m * n, DF_BUF_ACT) &&
                fits(x, (size_t)m * k, DF_BUF_ACT) && fits(w, (size_t)n * k, DF_BUF_ACT),
            "linear_residual", "buffer smaller than its [rows, cols]");
    DISPATCH(be, linear_residual, y, x, w, r, m, n, k);
}

void df_op_rmsnorm(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps) {
    size_t n = (size_t)rows * dim;
    require(rows > 0 && dim > 0 && fits(out, n, DF_BUF_ACT) && fits(x, n, DF_BUF_ACT) &&
                (fits(w, dim, DF_BUF_ACT) || fits(w, dim, DF_BUF_F32)),
            "rmsnorm", "buffer smaller than [rows, dim]");
    if (w.kind == DF_BUF_F32) {
        require(be->ops->rmsnorm_f32_weight != NULL, "rmsnorm", "this backend has no rmsnorm with an F32 weight");
        DISPATCH(be, rmsnorm_f32_weight, out, x, w, rows, dim, eps);
        return;
    }
    DISPATCH(be, rmsnorm, out, x, w, rows, dim, eps);
}

void df_op_add_inplace(DfBackend *be, DfBuffer y, DfBuffer x) {
    require(y.kind == DF_BUF_ACT && x.kind == DF_BUF_ACT && y.count == x.count, "add_inplace", "sizes differ");
    DISPATCH(be, add_inplace, y, x);
}

void df_op_embedding(DfBackend *be, DfBuffer out, DfBuffer table, DfBuffer ids, int n_tokens, int dim) {
    require(n_tokens > 0 && dim > 0 && fits(out, (size_t)n_tokens * dim, DF_BUF_ACT) && fits(ids, n_tokens, DF_BUF_I32) &&
                table.kind == DF_BUF_ACT && table.count % (size_t)dim == 0,
            "embedding", "bad shapes");
    DISPATCH(be, embedding, out, table, ids, n_tokens, dim);
}

void df_op_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                int heads, int head_dim) {
    require(head_dim > 0 && head_dim % 2 == 0, "rope", "head_dim must be even");
    require(fits(x, (size_t)n_tokens * heads * head_dim, DF_BUF_ACT) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(head_dim / 2) == 0,
            "rope", "bad shapes");
    DISPATCH(be, rope, x, positions, cos_table, sin_table, n_tokens, heads, head_dim);
}

/* Whether the first na elements of a and the first nb of b share memory. */
static int overlaps(DfBuffer a, size_t na, DfBuffer b, size_t nb) {
    uintptr_t a0 = (uintptr_t)a.ptr, b0 = (uintptr_t)b.ptr;
    return a0 < b0 + nb * (size_t)b.elem_size && b0 < a0 + na * (size_t)a.elem_size;
}

void df_op_rmsnorm_rope(DfBackend *be, DfBuffer out, DfBuffer x, int x_ld, DfBuffer w, DfBuffer positions,
                        DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads, int head_dim, float eps) {
    require(n_tokens > 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0, "rmsnorm_rope",
            "needs tokens, heads and an even head_dim");
    size_t row = (size_t)heads * head_dim, n = (size_t)n_tokens * row;
    require(x_ld > 0 && (size_t)x_ld >= row, "rmsnorm_rope", "x_ld smaller than heads * head_dim");
    size_t x_span = (size_t)(n_tokens - 1) * (size_t)x_ld + row; /* the last token's row ends there */
    require(fits(x, x_span, DF_BUF_ACT), "rmsnorm_rope", "x holds fewer than (T - 1) * x_ld + heads * head_dim values");
    /* strided rows read while packed ones are written over them would race */
    require(!overlaps(out, n, x, x_span) || (out.ptr == x.ptr && (size_t)x_ld == row), "rmsnorm_rope",
            "out shares x's memory: only in place (out at x) on packed x (x_ld = heads * head_dim)");
    require(fits(out, n, DF_BUF_ACT) && fits(w, head_dim, DF_BUF_ACT) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(head_dim / 2) == 0,
            "rmsnorm_rope", "bad shapes");
    DISPATCH(be, rmsnorm_rope, out, x, x_ld, w, positions, cos_table, sin_table, n_tokens, heads, head_dim, eps);
}

void df_op_qk_norm_rope(DfBackend *be, DfBuffer q_out, DfBuffer k_out, DfBuffer x, int x_ld, DfBuffer q_w,
                        DfBuffer k_w, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                        int q_heads, int k_heads, int head_dim, float eps) {
    require(n_tokens > 0 && q_heads > 0 && k_heads > 0 && head_dim > 0 && head_dim % 2 == 0, "qk_norm_rope",
            "needs tokens, q and k heads and an even head_dim");
    size_t q_row = (size_t)q_heads * head_dim, k_row = (size_t)k_heads * head_dim;
    size_t nq = (size_t)n_tokens * q_row, nk = (size_t)n_tokens * k_row;
    require(x_ld > 0 && (size_t)x_ld >= q_row + k_row, "qk_norm_rope", "x_ld smaller than (q_heads + k_heads) * head_dim");
    size_t x_span = (size_t)(n_tokens - 1) * (size_t)x_ld + q_row + k_row;
    require(fits(x, x_span, DF_BUF_ACT), "qk_norm_rope",
            "x holds fewer than (T - 1) * x_ld + (q_heads + k_heads) * head_dim values");
    require(!overlaps(q_out, nq, x, x_span) && !overlaps(k_out, nk, x, x_span) && !overlaps(q_out, nq, k_out, nk),
            "qk_norm_rope", "q_out, k_out and x share memory");
    require(fits(q_out, nq, DF_BUF_ACT) && fits(k_out, nk, DF_BUF_ACT) && fits(q_w, head_dim, DF_BUF_ACT) &&
                fits(k_w, head_dim, DF_BUF_ACT) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(head_dim / 2) == 0,
            "qk_norm_rope", "bad shapes");
    DISPATCH(be, qk_norm_rope, q_out, k_out, x, x_ld, q_w, k_w, positions, cos_table, sin_table, n_tokens, q_heads,
             k_heads, head_dim, eps);
}

void df_backend_qk_norm_rope_composed(DfBackend *be, DfBuffer q_out, DfBuffer k_out, DfBuffer x, int x_ld,
                                      DfBuffer q_w, DfBuffer k_w, DfBuffer positions, DfBuffer cos_table,
                                      DfBuffer sin_table, int n_tokens, int q_heads, int k_heads, int head_dim,
                                      float eps) {
    size_t q_row = (size_t)q_heads * head_dim;
    DfBuffer k_x = df_buffer_view(x, q_row, x.count - q_row);
    be->ops->rmsnorm_rope(be, q_out, x, x_ld, q_w, positions, cos_table, sin_table, n_tokens, q_heads, head_dim, eps);
    be->ops->rmsnorm_rope(be, k_out, k_x, x_ld, k_w, positions, cos_table, sin_table, n_tokens, k_heads, head_dim, eps);
}

void df_backend_rmsnorm_rope_composed(DfBackend *be, DfBuffer out, DfBuffer x, int x_ld, DfBuffer w,
                                      DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                                      int heads, int head_dim, float eps) {
    int row = heads * head_dim;
    if (x_ld != row) {
        be->ops->copy2d(be, out, row, x, x_ld, n_tokens, row);
        x = out;
    }
    be->ops->rmsnorm(be, out, x, w, n_tokens * heads, head_dim, eps);
    be->ops->rope(be, out, positions, cos_table, sin_table, n_tokens, heads, head_dim);
}

void df_op_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                     const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    size_t t = (size_t)batch->n_tokens;
    require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "attention", "heads not a multiple of kv_heads");
    require(fits(out, t * heads * head_dim, DF_BUF_ACT) && fits(q, t * heads * head_dim, DF_BUF_ACT) &&
                fits(k, t * kv_heads * head_dim, DF_BUF_ACT) && fits(v, t * kv_heads * head_dim, DF_BUF_ACT),
            "attention", "buffer smaller than [T, heads*head_dim]");
    require(!lse.ptr || fits(lse, t * heads, DF_BUF_F32), "attention", "lse smaller than [heads, T]");
    DISPATCH(be, attention, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
}

void df_op_swiglu(DfBackend *be, DfBuffer out, DfBuffer gate, DfBuffer up) {
    require(out.kind == DF_BUF_ACT && gate.count == out.count && up.count == out.count, "swiglu", "sizes differ");
    DISPATCH(be, swiglu, out, gate, up);
}

void df_op_copy2d(DfBackend *be, DfBuffer dst, int ld_dst, DfBuffer src, int ld_src, int rows, int cols) {
    require(rows > 0 && cols > 0 && cols <= ld_dst && cols <= ld_src, "copy2d", "bad strides");
    require(dst.kind == src.kind && dst.count >= (size_t)(rows - 1) * ld_dst + cols &&
                src.count >= (size_t)(rows - 1) * ld_src + cols,
            "copy2d", "buffer smaller than the strided matrix");
    DISPATCH(be, copy2d, dst, ld_dst, src, ld_src, rows, cols);
}

int df_op_sum_squares(DfBackend *be, DfBuffer x, double *result, DfError *err) {
    require(x.kind == DF_BUF_F32, "sum_squares", "x must be an F32 buffer");
    /* not bracketed for the profiler: it waits for the queued work, and returns */
    return be->ops->sum_squares(be, x, result, err);
}

void df_op_adamw_step(DfBackend *be, const DfAdamWArgs *a) {
    size_t n = a->master.count;
    require(a->master.kind == DF_BUF_F32 && a->exp_avg.kind == DF_BUF_F32 && a->exp_avg_sq.kind == DF_BUF_F32 &&
                a->grads.kind == DF_BUF_F32 && a->params.kind == DF_BUF_ACT,
            "adamw_step", "master, moments and grads must be F32, params ACT");
    require(a->exp_avg.count == n && a->exp_avg_sq.count == n && a->grads.count == n && a->params.count == n,
            "adamw_step", "buffers of different sizes");
    DISPATCH(be, adamw_step, a);
}

/* n values into *store (grown to n when smaller, never shrunk: the largest
 * batch's size, as the memory plan counts it) through the backend's queue;
 * *view: the first n of them. */
static int upload_kept(DfBackend *be, DfBuffer *store, DfBuffer *view, const int32_t *src, size_t n, DfError *err) {
    if (store->count < n) {
        df_buffer_free(be, store);
        if (df_buffer_alloc(be, store, DF_BUF_I32, n, err)) return -1;
    }
    *view = df_buffer_view(*store, 0, n);
    return n ? be->ops->upload_i32(be, *view, src, err) : 0;
}

int df_packed_batch_init(DfPackedBatch *pb, DfBackend *be, const int32_t *seq_starts, int n_seqs, DfError *err) {
    memset(pb, 0, sizeof *pb);
    int rc = df_packed_batch_set(pb, be, seq_starts, n_seqs, err);
    if (rc) df_packed_batch_free(pb, be);
    return rc;
}

int df_packed_batch_set(DfPackedBatch *pb, DfBackend *be, const int32_t *seq_starts, int n_seqs, DfError *err) {
    free((void *)pb->host_seq_starts);
    DfBuffer keep_starts = pb->seq_starts_store, keep_pos = pb->positions_store;
    memset(pb, 0, sizeof *pb);
    pb->seq_starts_store = keep_starts, pb->positions_store = keep_pos;
    if (n_seqs <= 0) return df_fail(err, "packed batch: no sequences");
    if (seq_starts[0] != 0) return df_fail(err, "packed batch: seq_starts[0] is %d, expected 0", (int)seq_starts[0]);
    int max_len = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (seq_starts[s + 1] <= seq_starts[s])
            return df_fail(err, "packed batch: sequence %d is empty or seq_starts decreases (%d -> %d)", s,
                           (int)seq_starts[s], (int)seq_starts[s + 1]);
        int len = seq_starts[s + 1] - seq_starts[s];
        if (len > max_len) max_len = len;
    }
    int t = seq_starts[n_seqs];
    int32_t *starts = df_xmalloc((size_t)(n_seqs + 1) * sizeof *starts, "packed batch starts");
    memcpy(starts, seq_starts, (size_t)(n_seqs + 1) * sizeof *starts);
    int32_t *pos = df_xmalloc((size_t)t * sizeof *pos, "packed batch positions");
    for (int s = 0; s < n_seqs; s++)
        for (int i = seq_starts[s]; i < seq_starts[s + 1]; i++) pos[i] = i - seq_starts[s];
    pb->n_tokens = t;
    pb->n_seqs = n_seqs;
    pb->max_seq_len = max_len;
    pb->host_seq_starts = starts;
    int rc = upload_kept(be, &pb->seq_starts_store, &pb->seq_starts, starts, (size_t)n_seqs + 1, err) ||
             upload_kept(be, &pb->positions_store, &pb->positions, pos, (size_t)t, err);
    free(pos);
    return rc ? -1 : 0;
}

void df_packed_batch_free(DfPackedBatch *pb, DfBackend *be) {
    df_buffer_free(be, &pb->seq_starts_store);
    df_buffer_free(be, &pb->positions_store);
    free((void *)pb->host_seq_starts);
    memset(pb, 0, sizeof *pb);
}

/* --- training ops --------------------------------------------------------- */

void df_op_fill_zero(DfBackend *be, DfBuffer buf) {
    if (buf.count) DISPATCH(be, fill_zero, buf);
}

void df_op_rmsnorm_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w,
                                 DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads,
                                 int head_dim, float eps) {
    size_t n = (size_t)n_tokens * heads * head_dim;
    require(n_tokens > 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0, "rmsnorm_rope_backward",
            "needs tokens, heads and an even head_dim");
    require(fits(dx, n, DF_BUF_ACT) && fits(dy, n, DF_BUF_ACT) && fits(x, n, DF_BUF_ACT) &&
                fits(w, head_dim, DF_BUF_ACT) && fits(dw, head_dim, DF_BUF_F32) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(head_dim / 2) == 0,
            "rmsnorm_rope_backward", "bad shapes");
    DISPATCH(be, rmsnorm_rope_backward, dx, dw, dy, x, w, positions, cos_table, sin_table, n_tokens, heads, head_dim,
             eps);
}

void df_op_linear_weight_grad(DfBackend *be, DfBuffer dw, DfBuffer dy, DfBuffer x, int m, int n, int k, float beta) {
    require(m > 0 && n > 0 && k > 0, "linear_weight_grad", "empty dimension");
    require(beta == 0.0f || beta == 1.0f, "linear_weight_grad", "beta must be 0 (write) or 1 (add)");
    require(fits(dw, (size_t)n * k, DF_BUF_F32) && fits(dy, (size_t)m * n, DF_BUF_ACT) &&
                fits(x, (size_t)m * k, DF_BUF_ACT),
            "linear_weight_grad", "buffer smaller than its matrix");
    DISPATCH(be, linear_weight_grad, dw, dy, x, m, n, k, beta);
}

void df_op_rmsnorm_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w, int rows,
                            int dim, float eps, int accumulate) {
    size_t n = (size_t)rows * dim;
    require(rows > 0 && dim > 0 && fits(dx, n, DF_BUF_ACT) && fits(dy, n, DF_BUF_ACT) && fits(x, n, DF_BUF_ACT) &&
                fits(w, dim, DF_BUF_ACT) && fits(dw, dim, DF_BUF_F32),
            "rmsnorm_backward", "buffer smaller than [rows, dim]");
    require(!accumulate || dx.ptr != dy.ptr, "rmsnorm_backward", "dx may alias dy only when overwriting");
    DISPATCH(be, rmsnorm_backward, dx, dw, dy, x, w, rows, dim, eps, accumulate);
}

void df_op_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                         int n_tokens, int heads, int head_dim) {
    require(head_dim > 0 && head_dim % 2 == 0, "rope_backward", "head_dim must be even");
    require(fits(dx, (size_t)n_tokens * heads * head_dim, DF_BUF_ACT) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(head_dim / 2) == 0,
            "rope_backward", "bad shapes");
    DISPATCH(be, rope_backward, dx, positions, cos_table, sin_table, n_tokens, heads, head_dim);
}

void df_op_swiglu_backward(DfBackend *be, DfBuffer d_gate, DfBuffer d_up, DfBuffer d_out, DfBuffer gate, DfBuffer up) {
    size_t n = d_out.count;
    require(fits(d_gate, n, DF_BUF_ACT) && fits(d_up, n, DF_BUF_ACT) && fits(gate, n, DF_BUF_ACT) &&
                fits(up, n, DF_BUF_ACT) && d_out.kind == DF_BUF_ACT,
            "swiglu_backward", "sizes differ");
    DISPATCH(be, swiglu_backward, d_gate, d_up, d_out, gate, up);
}

static void check_block_attn(const DfBlockAttnArgs *a, const char *op) {
    const DfBlockAttnLayout *l = a->layout;
    require(l && l->n_blocks > 0 && l->block_size > 0, op, "empty layout");
    require(a->heads > 0 && a->kv_heads > 0 && a->heads % a->kv_heads == 0, op, "heads not a multiple of kv_heads");
    size_t q_rows = (size_t)l->n_blocks * l->block_size, qd = (size_t)a->heads * a->head_dim,
           kvd = (size_t)a->kv_heads * a->head_dim, ctx = (size_t)l->n_ctx_rows;
    require(fits(a->q, q_rows * qd, DF_BUF_ACT) && fits(a->out, q_rows * qd, DF_BUF_ACT) &&
                fits(a->k_blk, q_rows * kvd, DF_BUF_ACT) && fits(a->v_blk, q_rows * kvd, DF_BUF_ACT) &&
                fits(a->k_ctx, ctx * kvd, DF_BUF_ACT) && fits(a->v_ctx, ctx * kvd, DF_BUF_ACT) &&
                fits(a->lse, q_rows * a->heads, DF_BUF_F32),
            op, "buffer smaller than the layout needs");
}

void df_op_block_attention(DfBackend *be, const DfBlockAttnArgs *a) {
    check_block_attn(a, "block_attention");
    DISPATCH(be, block_attention, a);
}

void df_op_block_attention_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    check_block_attn(a, "block_attention_backward");
    const DfBlockAttnLayout *l = a->layout;
    size_t q_rows = (size_t)l->n_blocks * l->block_size, qd = (size_t)a->heads * a->head_dim,
           kvd = (size_t)a->kv_heads * a->head_dim, ctx = (size_t)l->n_ctx_rows;
    require(fits(g->d_out, q_rows * qd, DF_BUF_ACT) && fits(g->dq, q_rows * qd, DF_BUF_ACT) &&
                fits(g->dk_blk, q_rows * kvd, DF_BUF_ACT) && fits(g->dv_blk, q_rows * kvd, DF_BUF_ACT) &&
                fits(g->dk_ctx, ctx * kvd, DF_BUF_ACT) && fits(g->dv_ctx, ctx * kvd, DF_BUF_ACT),
            "block_attention_backward", "gradient buffer smaller than the layout needs");
    DISPATCH(be, block_attention_backward, a, g);
}

void df_op_lm_head_ce(DfBackend *be, const DfLmHeadCeArgs *a) {
    size_t r = (size_t)a->rows;
    require(a->rows > 0 && a->hidden > 0 && a->vocab > 0, "lm_head_ce", "empty dimension");
    require(fits(a->x, r * a->hidden, DF_BUF_ACT) && fits(a->head, (size_t)a->vocab * a->hidden, DF_BUF_ACT) &&
                fits(a->labels, r, DF_BUF_I32) && fits(a->weights, r, DF_BUF_F32) && fits(a->ce, r, DF_BUF_F32) &&
                fits(a->argmax, r, DF_BUF_I32) && (!a->d_x.ptr || fits(a->d_x, r * a->hidden, DF_BUF_ACT)),
            "lm_head_ce", "buffer smaller than its matrix");
    DISPATCH(be, lm_head_ce, a);
}

static int32_t *copy_i32(const int32_t *src, int n) {
    int32_t *dst = df_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *dst, "block attention layout");
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof *dst);
    return dst;
}

int df_block_attn_layout_init(DfBlockAttnLayout *l, DfBackend *be, int n_seqs, const int32_t *ctx_starts,
                              const int32_t *block_starts, const int32_t *anchors, int block_size, DfError *err) {
    memset(l, 0, sizeof *l);
    int rc = df_block_attn_layout_set(l, be, n_seqs, ctx_starts, block_starts, anchors, block_size, err);
    if (rc) df_block_attn_layout_free(l, be);
    return rc;
}

/* The layout emptied, its backend storage kept. */
static void layout_clear(DfBlockAttnLayout *l) {
    free((void *)l->host_ctx_starts);
    free((void *)l->host_block_starts);
    free((void *)l->host_anchors);
    DfBuffer a = l->ctx_starts_store, b = l->block_starts_store, c = l->anchors_store;
    memset(l, 0, sizeof *l);
    l->ctx_starts_store = a, l->block_starts_store = b, l->anchors_store = c;
}

int df_block_attn_layout_set(DfBlockAttnLayout *l, DfBackend *be, int n_seqs, const int32_t *ctx_starts,
                             const int32_t *block_starts, const int32_t *anchors, int block_size, DfError *err) {
    layout_clear(l);
    if (n_seqs <= 0 || block_size <= 0) return df_fail(err, "block attention: %d sequences, block size %d", n_seqs, block_size);
    if (ctx_starts[0] != 0 || block_starts[0] != 0)
        return df_fail(err, "block attention: context and block starts must begin at 0");
    int max_visible = 0;
    for (int s = 0; s < n_seqs; s++) {
        int len = ctx_starts[s + 1] - ctx_starts[s];
        if (len <= 0 || block_starts[s + 1] < block_starts[s])
            return df_fail(err, "block attention: sequence %d has %d context rows and blocks %d..%d", s, len,
                           (int)block_starts[s], (int)block_starts[s + 1]);
        for (int j = block_starts[s]; j < block_starts[s + 1]; j++) {
            if (anchors[j] < 0 || anchors[j] >= len)
                return df_fail(err, "block attention: block %d of sequence %d has anchor %d outside [0, %d)", j, s,
                               (int)anchors[j], len);
            if (anchors[j] + block_size > max_visible) max_visible = anchors[j] + block_size;
        }
    }
    int n_blocks = block_starts[n_seqs];
    if (n_blocks <= 0) return df_fail(err, "block attention: no blocks");
    l->n_seqs = n_seqs;
    l->n_blocks = n_blocks;
    l->block_size = block_size;
    l->n_ctx_rows = ctx_starts[n_seqs];
    l->max_visible = max_visible;
    l->host_ctx_starts = copy_i32(ctx_starts, n_seqs + 1);
    l->host_block_starts = copy_i32(block_starts, n_seqs + 1);
    l->host_anchors = copy_i32(anchors, n_blocks);
    if (upload_kept(be, &l->ctx_starts_store, &l->ctx_starts, ctx_starts, (size_t)n_seqs + 1, err) ||
        upload_kept(be, &l->block_starts_store, &l->block_starts, block_starts, (size_t)n_seqs + 1, err) ||
        upload_kept(be, &l->anchors_store, &l->anchors, anchors, (size_t)n_blocks, err)) {
        layout_clear(l);
        return -1;
    }
    return 0;
}

void df_block_attn_layout_free(DfBlockAttnLayout *l, DfBackend *be) {
    df_buffer_free(be, &l->ctx_starts_store);
    df_buffer_free(be, &l->block_starts_store);
    df_buffer_free(be, &l->anchors_store);
    free((void *)l->host_ctx_starts);
    free((void *)l->host_block_starts);
    free((void *)l->host_anchors);
    memset(l, 0, sizeof *l);
}

/* --- inference against KV caches ----------------------------------------- */

static void check_kv_batch(const DfKvBatch *kb, DfBuffer cache, int dim, const char *op) {
    require(kb->n_seqs > 0 && dim > 0, op, "empty batch");
    size_t rows = kb->n_pages ? (size_t)kb->n_pages * DF_KV_PAGE_ROWS : (size_t)kb->n_slots * kb->slot_capacity;
    require(cache.kind == DF_BUF_ACT && cache.count >= rows * dim, op,
            kb->n_pages ? "cache smaller than [n_pages * DF_KV_PAGE_ROWS, dim]"
                        : "cache smaller than [n_slots * slot_capacity, dim]");
}

void df_op_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim) {
    check_kv_batch(batch, cache, dim, "kv_cache_write");
    require(fits(rows, (size_t)batch->n_rows * dim, DF_BUF_ACT), "kv_cache_write", "rows smaller than [n_rows, dim]");
    DISPATCH(be, kv_cache_write, cache, rows, batch, dim);
}

void df_op_kv_attention(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                        const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale, int causal) {
    require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "kv_attention", "heads not a multiple of kv_heads");
    check_kv_batch(batch, k_cache, kv_heads * head_dim, "kv_attention");
    check_kv_batch(batch, v_cache, kv_heads * head_dim, "kv_attention");
    size_t qn = (size_t)batch->n_rows * heads * head_dim;
    require(fits(out, qn, DF_BUF_ACT) && fits(q, qn, DF_BUF_ACT), "kv_attention", "q/out smaller than [n_rows, heads*hd]");
    DISPATCH(be, kv_attention, out, q, k_cache, v_cache, batch, heads, kv_heads, head_dim, scale, causal);
}

static void check_rope_tables(DfBuffer cos_table, DfBuffer sin_table, int head_dim, const char *op) {
    require(cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count > 0 && cos_table.count % (size_t)(head_dim / 2) == 0,
            op, "rope tables are not F32 [n_pos, head_dim/2]");
}

void df_op_qkv_rope_cache(DfBackend *be, const DfQkvRopeCacheArgs *a) {
    const char *op = "qkv_rope_cache";
    int nh = a->heads, nkv = a->kv_heads, hd = a->head_dim;
    require(nh > 0 && nkv > 0 && nh % nkv == 0, op, "heads not a multiple of kv_heads");
    require(hd > 0 && hd % 2 == 0, op, "head_dim must be even");
    const DfKvBatch *kb = a->batch;
    check_kv_batch(kb, a->k_cache, nkv * hd, op);
    check_kv_batch(kb, a->v_cache, nkv * hd, op);
    size_t rows = (size_t)kb->n_rows;
    require(fits(a->qkv, rows * (size_t)(nh + 2 * nkv) * hd, DF_BUF_ACT), op,
            "qkv smaller than [n_rows, (heads + 2*kv_heads) * head_dim]");
    require(fits(a->q_out, rows * (size_t)nh * hd, DF_BUF_ACT), op, "q_out smaller than [n_rows, heads * head_dim]");
    int with_norm = a->q_norm.ptr != NULL;
    require(with_norm == (a->k_norm.ptr != NULL), op, "q_norm and k_norm must be both set or both empty");
    require(!with_norm || (fits(a->q_norm, (size_t)hd, DF_BUF_ACT) && fits(a->k_norm, (size_t)hd, DF_BUF_ACT)), op,
            "q_norm / k_norm not ACT [head_dim]");
    require(fits(kb->positions, rows, DF_BUF_I32), op, "positions smaller than [n_rows]");
    check_rope_tables(a->cos_table, a->sin_table, hd, op);
    DISPATCH(be, qkv_rope_cache, a);
}

void df_op_swiglu_packed(DfBackend *be, DfBuffer out, DfBuffer gate_up, int rows, int inter) {
    require(rows > 0 && inter > 0, "swiglu_packed", "empty dimension");
    require(fits(out, (size_t)rows * inter, DF_BUF_ACT) && fits(gate_up, (size_t)rows * 2 * inter, DF_BUF_ACT),
            "swiglu_packed", "out smaller than [rows, inter] or gate_up than [rows, 2*inter]");
    DISPATCH(be, swiglu_packed, out, gate_up, rows, inter);
}

void df_op_argmax_rows(DfBackend *be, DfBuffer index, DfBuffer value, DfBuffer x, int rows, int cols) {
    require(rows > 0 && cols > 0, "argmax_rows", "empty dimension");
    require(fits(x, (size_t)rows * cols, DF_BUF_ACT) && fits(index, (size_t)rows, DF_BUF_I32) &&
                (!value.ptr || fits(value, (size_t)rows, DF_BUF_F32)),
            "argmax_rows", "buffer smaller than its matrix");
    DISPATCH(be, argmax_rows, index, value, x, rows, cols);
}

static int check_kv_layout(int n_seqs, const int32_t *slots, const int32_t *cache_lens, const int32_t *row_starts,
                           int n_slots, int slot_capacity, int *max_new, int *max_visible, DfError *err) {
    if (n_seqs <= 0) return df_fail(err, "kv batch: no sequences");
    if (row_starts[0] != 0) return df_fail(err, "kv batch: row_starts[0] is %d, expected 0", (int)row_starts[0]);
    *max_new = *max_visible = 0;
    for (int i = 0; i < n_seqs; i++) {
        int n = row_starts[i + 1] - row_starts[i];
        if (n <= 0) return df_fail(err, "kv batch: sequence %d has no new rows", i);
        if (slots[i] < 0 || slots[i] >= n_slots)
            return df_fail(err, "kv batch: sequence %d uses slot %d, outside 0..%d", i, (int)slots[i], n_slots - 1);
        for (int j = 0; j < i; j++)
            if (slots[j] == slots[i]) return df_fail(err, "kv batch: sequences %d and %d share slot %d", j, i, (int)slots[i]);
        if (cache_lens[i] < 0 || cache_lens[i] > slot_capacity - n)
            return df_fail(err, "kv batch: sequence %d: %d cached + %d new rows exceed the slot capacity %d", i,
                           (int)cache_lens[i], n, slot_capacity);
        if (n > *max_new) *max_new = n;
        if (cache_lens[i] + n > *max_visible) *max_visible = cache_lens[i] + n;
    }
    return 0;
}

/* Packs of at least `need` int32s on both sides (doubling, so that a
 * growing batch reallocates a few times, not every step). */
static int reserve_kv_pack(DfKvBatch *kb, DfBackend *be, size_t need, DfError *err) {
    if (kb->pack_cap >= need && kb->pack.ptr) return 0;
    size_t cap = kb->pack_cap ? kb->pack_cap : 64;
    while (cap < need) cap *= 2;
    df_buffer_free(be, &kb->pack);
    kb->pack_cap = 0;
    kb->host_pack = df_xrealloc(kb->host_pack, cap * sizeof *kb->host_pack, "kv batch layout");
    if (df_buffer_alloc(be, &kb->pack, DF_BUF_I32, cap, err)) return df_context(err, "kv batch layout");
    kb->pack_cap = cap;
    return 0;
}

/* Every page holding a row of sequence i (cached or new) is one of the table's. */
static int check_kv_pages(int n_seqs, const int32_t *slots, const int32_t *cache_lens, const int32_t *row_starts,
                          int slot_capacity, const DfKvPageTable *pages, DfError *err) {
    if (pages->n_pages <= 0) return df_fail(err, "kv batch: a page table of %d pages", pages->n_pages);
    int per_slot = df_kv_pages_for(slot_capacity);
    for (int i = 0; i < n_seqs; i++) {
        const int32_t *row = pages->table + (size_t)slots[i] * per_slot;
        int used = df_kv_pages_for(cache_lens[i] + row_starts[i + 1] - row_starts[i]);
        for (int j = 0; j < used; j++)
            if (row[j] < 0 || row[j] >= pages->n_pages)
                return df_fail(err, "kv batch: sequence %d (slot %d) needs page %d of its table, which is %d (pages 0..%d)",
                               i, (int)slots[i], j, (int)row[j], pages->n_pages - 1);
    }
    return 0;
}

int df_kv_batch_set_paged(DfKvBatch *kb, DfBackend *be, int n_seqs, const int32_t *slots, const int32_t *cache_lens,
                          const int32_t *row_starts, int n_slots, int slot_capacity, const DfKvPageTable *pages,
                          DfError *err) {
    int max_new = 0, max_visible = 0;
    if (check_kv_layout(n_seqs, slots, cache_lens, row_starts, n_slots, slot_capacity, &max_new, &max_visible, err) ||
        (pages && check_kv_pages(n_seqs, slots, cache_lens, row_starts, slot_capacity, pages, err)))
        return -1;
    size_t n = (size_t)n_seqs, t = (size_t)row_starts[n_seqs], per_seq = (size_t)df_kv_pages_for(slot_capacity);
    size_t table_n = pages ? n * per_seq : 0, total = 3 * n + 1 + t + table_n;
    /* the layout changes below: an upload that fails leaves an empty batch */
    kb->n_seqs = 0;
    if (reserve_kv_pack(kb, be, total, err)) return -1;
    int32_t *s = kb->host_pack, *l = s + n, *r = l + n, *pos = r + n + 1, *tab = pos + t;
    memcpy(s, slots, n * sizeof *s);
    memcpy(l, cache_lens, n * sizeof *l);
    memcpy(r, row_starts, (n + 1) * sizeof *r);
    for (size_t i = 0; i < n; i++)
        for (int j = r[i]; j < r[i + 1]; j++) pos[j] = l[i] + (j - r[i]);
    for (size_t i = 0; i < n && pages; i++)
        memcpy(tab + i * per_seq, pages->table + (size_t)s[i] * per_seq, per_seq * sizeof *tab);
    if (be->ops->upload_i32(be, df_buffer_view(kb->pack, 0, total), kb->host_pack, err))
        return df_context(err, "kv batch layout");
    kb->n_pages = pages ? pages->n_pages : 0;
    kb->pages_per_seq = (int)per_seq;
    kb->host_pages = pages ? tab : NULL;
    kb->pages = pages ? df_buffer_view(kb->pack, 3 * n + 1 + t, table_n) : (DfBuffer){0};
    kb->n_rows = (int)t;
    kb->n_slots = n_slots;
    kb->slot_capacity = slot_capacity;
    kb->max_new = max_new;
    kb->max_visible = max_visible;
    kb->host_slots = s;
    kb->host_cache_lens = l;
    kb->host_row_starts = r;
    kb->slots = df_buffer_view(kb->pack, 0, n);
    kb->cache_lens = df_buffer_view(kb->pack, n, n);
    kb->row_starts = df_buffer_view(kb->pack, 2 * n, n + 1);
    kb->positions = df_buffer_view(kb->pack, 3 * n + 1, t);
    kb->n_seqs = n_seqs;
    return 0;
}

int df_kv_batch_set(DfKvBatch *kb, DfBackend *be, int n_seqs, const int32_t *slots, const int32_t *cache_lens,
                    const int32_t *row_starts, int n_slots, int slot_capacity, DfError *err) {
    return df_kv_batch_set_paged(kb, be, n_seqs, slots, cache_lens, row_starts, n_slots, slot_capacity, NULL, err);
}

int df_kv_batch_init(DfKvBatch *kb, DfBackend *be, int n_seqs, const int32_t *slots, const int32_t *cache_lens,
                     const int32_t *row_starts, int n_slots, int slot_capacity, DfError *err) {
    memset(kb, 0, sizeof *kb);
    if (df_kv_batch_set(kb, be, n_seqs, slots, cache_lens, row_starts, n_slots, slot_capacity, err)) {
        df_kv_batch_free(kb, be);
        return -1;
    }
    return 0;
}

void df_kv_batch_free(DfKvBatch *kb, DfBackend *be) {
    df_buffer_free(be, &kb->pack);
    free(kb->host_pack);
    memset(kb, 0, sizeof *kb);
}

/* --- hybrid targets' ops --------------------------------------------------- */

void df_op_causal_conv_silu(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, const DfPackedBatch *batch,
                            int channels, int kernel) {
    size_t n = (size_t)batch->n_tokens * channels;
    require(channels > 0 && kernel > 0 && fits(out, n, DF_BUF_ACT) && fits(x, n, DF_BUF_ACT) &&
                fits(w, (size_t)channels * kernel, DF_BUF_F32) && out.ptr != x.ptr,
            "causal_conv_silu", "bad shapes (out, x ACT [T, channels], distinct; w F32 [channels, kernel])");
    DISPATCH(be, causal_conv_silu, out, x, w, batch, channels, kernel);
}

void df_op_gated_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                            DfBuffer dt_bias, const DfPackedBatch *batch, const DfDeltaRuleShape *s) {
    require(s->key_heads > 0 && s->value_heads > 0 && s->key_dim > 0 && s->value_dim > 0 &&
                s->value_heads % s->key_heads == 0,
            "gated_delta_rule", "value heads not a multiple of key heads");
    size_t t = (size_t)batch->n_tokens, nv = (size_t)s->value_heads, value = nv * s->value_dim;
    size_t width = 2 * (size_t)s->key_heads * s->key_dim + value;
    require(fits(out, t * value, DF_BUF_ACT) && fits(qkv, t * width, DF_BUF_ACT) && fits(b, t * nv, DF_BUF_ACT) &&
                fits(a, t * nv, DF_BUF_ACT) && fits(a_log, nv, DF_BUF_F32) && fits(dt_bias, nv, DF_BUF_F32),
            "gated_delta_rule", "bad shapes");
    DISPATCH(be, gated_delta_rule, out, qkv, b, a, a_log, dt_bias, batch, s);
}

void df_op_gated_rmsnorm(DfBackend *be, DfBuffer x, DfBuffer z, DfBuffer w, int rows, int dim, float eps) {
    size_t n = (size_t)rows * dim;
    require(rows > 0 && dim > 0 && fits(x, n, DF_BUF_ACT) && fits(z, n, DF_BUF_ACT) && fits(w, dim, DF_BUF_F32),
            "gated_rmsnorm", "bad shapes (x, z ACT [rows, dim]; w F32 [dim])");
    DISPATCH(be, gated_rmsnorm, x, z, w, rows, dim, eps);
}

void df_op_sigmoid_gate(DfBackend *be, DfBuffer x, DfBuffer gate) {
    require(x.kind == DF_BUF_ACT && gate.kind == DF_BUF_ACT && x.count == gate.count, "sigmoid_gate", "sizes differ");
    if (x.count) DISPATCH(be, sigmoid_gate, x, gate);
}

void df_op_rope_partial(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                        int n_tokens, int heads, int head_dim, int rotary_dim) {
    require(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim, "rope_partial",
            "rotary_dim must be even and at most head_dim");
    require(fits(x, (size_t)n_tokens * heads * head_dim, DF_BUF_ACT) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(rotary_dim / 2) == 0,
            "rope_partial", "bad shapes");
    DISPATCH(be, rope_partial, x, positions, cos_table, sin_table, n_tokens, heads, head_dim, rotary_dim);
}

/* --- hybrid targets' decode steps against per-slot states ----------------- */

/* state: F32 [n_slots, slot_floats]; save: empty or the same shape. */
static void check_slot_states(const DfKvBatch *kb, DfBuffer state, DfBuffer save, size_t slot_floats, const char *op) {
    require(kb->n_seqs > 0 && kb->n_rows > 0, op, "empty batch");
    size_t n = (size_t)kb->n_slots * slot_floats;
    require(fits(state, n, DF_BUF_F32), op, "state smaller than [n_slots, per-slot state] (F32)");
    require(!save.ptr || (fits(save, n, DF_BUF_F32) && save.ptr != state.ptr), op,
            "save must be empty or an F32 buffer like the state, apart from it");
}

void df_op_conv_step(DfBackend *be, const DfConvStepArgs *a) {
    const DfKvBatch *kb = a->batch;
    size_t n = (size_t)kb->n_rows * a->channels;
    require(a->channels > 0 && a->kernel > 1, "conv_step", "channels > 0 and a kernel of at least 2 taps");
    check_slot_states(kb, a->window, a->save, (size_t)(a->kernel - 1) * a->channels, "conv_step");
    require(fits(a->x, n, DF_BUF_ACT) && fits(a->w, (size_t)a->channels * a->kernel, DF_BUF_F32) &&
                (!a->out.ptr || (fits(a->out, n, DF_BUF_ACT) && a->out.ptr != a->x.ptr)),
            "conv_step", "bad shapes (x, out ACT [n_rows, channels], distinct; w F32 [channels, kernel])");
    DISPATCH(be, conv_step, a);
}

void df_op_delta_rule_step(DfBackend *be, const DfDeltaStepArgs *a) {
    const DfDeltaRuleShape *s = &a->shape;
    const DfKvBatch *kb = a->batch;
    require(s->key_heads > 0 && s->value_heads > 0 && s->key_dim > 0 && s->value_dim > 0 &&
                s->value_heads % s->key_heads == 0,
            "delta_rule_step", "value heads not a multiple of key heads");
    size_t t = (size_t)kb->n_rows, nv = (size_t)s->value_heads, value = nv * s->value_dim;
    size_t width = 2 * (size_t)s->key_heads * s->key_dim + value;
    check_slot_states(kb, a->state, a->save, nv * s->key_dim * s->value_dim, "delta_rule_step");
    require((!a->out.ptr || fits(a->out, t * value, DF_BUF_ACT)) && fits(a->qkv, t * width, DF_BUF_ACT) &&
                fits(a->b, t * nv, DF_BUF_ACT) && fits(a->a, t * nv, DF_BUF_ACT) && fits(a->a_log, nv, DF_BUF_F32) &&
                fits(a->dt_bias, nv, DF_BUF_F32),
            "delta_rule_step", "bad shapes");
    DISPATCH(be, delta_rule_step, a);
}
