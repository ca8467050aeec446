/* Backend-independent parts of the op table: views, shape checks, packed
 * batch setup. */
#include "backend/backend.h"

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

void df_backend_destroy(DfBackend *be) {
    if (be) be->ops->destroy(be);
}

int df_buffer_alloc(DfBackend *be, DfBuffer *out, DfBufKind kind, size_t count, DfError *err) {
    return be->ops->alloc(be, out, kind, count, err);
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
    be->ops->matmul(be, c, a, b, m, n, k, trans_a, trans_b, beta);
}

void df_op_linear(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, int m, int n, int k, int accumulate) {
    df_op_matmul(be, y, x, w, m, n, k, 0, 1, accumulate ? 1.0f : 0.0f);
}

void df_op_rmsnorm(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps) {
    size_t n = (size_t)rows * dim;
    require(rows > 0 && dim > 0 && fits(out, n, DF_BUF_ACT) && fits(x, n, DF_BUF_ACT) && fits(w, dim, DF_BUF_ACT),
            "rmsnorm", "buffer smaller than [rows, dim]");
    be->ops->rmsnorm(be, out, x, w, rows, dim, eps);
}

void df_op_add_inplace(DfBackend *be, DfBuffer y, DfBuffer x) {
    require(y.kind == DF_BUF_ACT && x.kind == DF_BUF_ACT && y.count == x.count, "add_inplace", "sizes differ");
    be->ops->add_inplace(be, y, x);
}

void df_op_embedding(DfBackend *be, DfBuffer out, DfBuffer table, DfBuffer ids, int n_tokens, int dim) {
    require(n_tokens > 0 && dim > 0 && fits(out, (size_t)n_tokens * dim, DF_BUF_ACT) && fits(ids, n_tokens, DF_BUF_I32) &&
                table.kind == DF_BUF_ACT && table.count % (size_t)dim == 0,
            "embedding", "bad shapes");
    be->ops->embedding(be, out, table, ids, n_tokens, dim);
}

void df_op_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                int heads, int head_dim) {
    require(head_dim > 0 && head_dim % 2 == 0, "rope", "head_dim must be even");
    require(fits(x, (size_t)n_tokens * heads * head_dim, DF_BUF_ACT) && fits(positions, n_tokens, DF_BUF_I32) &&
                cos_table.kind == DF_BUF_F32 && sin_table.kind == DF_BUF_F32 && cos_table.count == sin_table.count &&
                cos_table.count % (size_t)(head_dim / 2) == 0,
            "rope", "bad shapes");
    be->ops->rope(be, x, positions, cos_table, sin_table, n_tokens, heads, head_dim);
}

void df_op_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                     const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    size_t t = (size_t)batch->n_tokens;
    require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "attention", "heads not a multiple of kv_heads");
    require(fits(out, t * heads * head_dim, DF_BUF_ACT) && fits(q, t * heads * head_dim, DF_BUF_ACT) &&
                fits(k, t * kv_heads * head_dim, DF_BUF_ACT) && fits(v, t * kv_heads * head_dim, DF_BUF_ACT),
            "attention", "buffer smaller than [T, heads*head_dim]");
    require(!lse.ptr || fits(lse, t * heads, DF_BUF_F32), "attention", "lse smaller than [heads, T]");
    be->ops->attention(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
}

void df_op_swiglu(DfBackend *be, DfBuffer out, DfBuffer gate, DfBuffer up) {
    require(out.kind == DF_BUF_ACT && gate.count == out.count && up.count == out.count, "swiglu", "sizes differ");
    be->ops->swiglu(be, out, gate, up);
}

void df_op_copy2d(DfBackend *be, DfBuffer dst, int ld_dst, DfBuffer src, int ld_src, int rows, int cols) {
    require(rows > 0 && cols > 0 && cols <= ld_dst && cols <= ld_src, "copy2d", "bad strides");
    require(dst.kind == src.kind && dst.count >= (size_t)(rows - 1) * ld_dst + cols &&
                src.count >= (size_t)(rows - 1) * ld_src + cols,
            "copy2d", "buffer smaller than the strided matrix");
    be->ops->copy2d(be, dst, ld_dst, src, ld_src, rows, cols);
}

int df_packed_batch_init(DfPackedBatch *pb, DfBackend *be, const int32_t *seq_starts, int n_seqs, DfError *err) {
    memset(pb, 0, sizeof *pb);
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
    int rc = -1;
    if (df_buffer_alloc(be, &pb->seq_starts, DF_BUF_I32, (size_t)n_seqs + 1, err) ||
        be->ops->upload_i32(be, pb->seq_starts, starts, err) ||
        df_buffer_alloc(be, &pb->positions, DF_BUF_I32, (size_t)t, err) ||
        be->ops->upload_i32(be, pb->positions, pos, err))
        goto done;
    rc = 0;
done:
    free(pos);
    if (rc) df_packed_batch_free(pb, be);
    return rc;
}

void df_packed_batch_free(DfPackedBatch *pb, DfBackend *be) {
    df_buffer_free(be, &pb->seq_starts);
    df_buffer_free(be, &pb->positions);
    free((void *)pb->host_seq_starts);
    memset(pb, 0, sizeof *pb);
}
