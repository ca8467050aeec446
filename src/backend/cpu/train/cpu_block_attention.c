/* DFlash block attention on the CPU, forward and backward, flash style: one
 * block at a time against only the keys it sees (the first `anchor` context
 * rows of its sequence, then its own B rows), never a [Q, S+Q] score matrix.
 *
 * The heads of one GQA group read the same keys, so a task gathers their
 * query rows into one [G*B, hd] matrix and each product is a single
 * single-threaded sgemm with G*B rows (see cpu_attention.c for why OpenBLAS
 * beats hand-written loops here). Scores live in a per-thread
 * [G*B, max_visible] scratch; context and block keys are two column ranges
 * of it, each filled by its own sgemm straight from the strided K/V rows.
 *
 * Forward tasks are (block, kv head): independent. Backward tasks are
 * (sequence, kv head): every block of a sequence adds into the same context
 * dK/dV rows, so one task owns all of them and no two threads write the same
 * row. The backward recomputes the probabilities from the saved lse.
 *
 * A sliding window (a->window > 0) only moves the start of a block's
 * visible context: its first visible row and count (see visible_context). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_fast_exp.h"
#include "backend/cpu/cpu_ops.h"

typedef struct Dims {
    int B, G, hd, ldq, ldk, n_q;
} Dims;

static Dims dims_of(const DfBlockAttnArgs *a) {
    Dims d;
    d.B = a->layout->block_size;
    d.G = a->heads / a->kv_heads;
    d.hd = a->head_dim;
    d.ldq = a->heads * a->head_dim;
    d.ldk = a->kv_heads * a->head_dim;
    d.n_q = a->layout->n_blocks * d.B;
    return d;
}

/* Rows (h*B + r) of dst [G*B, hd] from query-like rows j*B+r, heads g*G+h. */
static void gather_group(float *dst, const float *src, const Dims *d, int j, int g) {
    for (int h = 0; h < d->G; h++)
        for (int r = 0; r < d->B; r++) {
            const float *s = src + (size_t)(j * d->B + r) * d->ldq + (size_t)(g * d->G + h) * d->hd;
            float *o = dst + (size_t)(h * d->B + r) * d->hd;
            for (int i = 0; i < d->hd; i++) o[i] = s[i];
        }
}

static void scatter_group(float *dst, const float *src, const Dims *d, int j, int g) {
    for (int h = 0; h < d->G; h++)
        for (int r = 0; r < d->B; r++) {
            float *o = dst + (size_t)(j * d->B + r) * d->ldq + (size_t)(g * d->G + h) * d->hd;
            const float *s = src + (size_t)(h * d->B + r) * d->hd;
            for (int i = 0; i < d->hd; i++) o[i] = s[i];
        }
}

/* C[:, 0:a] and C[:, a:a+B] (ldc = a + B) = alpha * X [M, hd] times the
 * visible keys (or values) of block j, transposed: the context part from
 * rows c0.. of ctx, the block part from rows j*B.. of blk. */
static void times_visible_t(float *c, const float *x, int m, const float *ctx, const float *blk, int c0, int a, int j,
                            int g, const Dims *d, float alpha) {
    int n = a + d->B;
    if (a > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, a, d->hd, alpha, x, d->hd,
                    ctx + (size_t)c0 * d->ldk + (size_t)g * d->hd, d->ldk, 0.0f, c, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, d->B, d->hd, alpha, x, d->hd,
                blk + (size_t)j * d->B * d->ldk + (size_t)g * d->hd, d->ldk, 0.0f, c + a, n);
}

/* Y [M, hd] = P [M, a+B] times the visible rows (keys or values) of block j. */
static void times_visible(float *y, const float *p, int m, const float *ctx, const float *blk, int c0, int a, int j,
                          int g, const Dims *d) {
    int n = a + d->B;
    if (a > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d->hd, a, 1.0f, p, n,
                    ctx + (size_t)c0 * d->ldk + (size_t)g * d->hd, d->ldk, 0.0f, y, d->hd);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d->hd, d->B, 1.0f, p + a, n,
                blk + (size_t)j * d->B * d->ldk + (size_t)g * d->hd, d->ldk, a > 0 ? 1.0f : 0.0f, y, d->hd);
}

/* visible rows of block j (ldk-strided) += P[:, part]^T X, X [M, hd]. */
static void add_visible_t(float *ctx, float *blk, const float *p, const float *x, int m, int c0, int a, int j, int g,
                          const Dims *d) {
    int n = a + d->B;
    if (a > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a, d->hd, m, 1.0f, p, n, x, d->hd, 1.0f,
                    ctx + (size_t)c0 * d->ldk + (size_t)g * d->hd, d->ldk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d->B, d->hd, m, 1.0f, p + a, n, x, d->hd, 1.0f,
                blk + (size_t)j * d->B * d->ldk + (size_t)g * d->hd, d->ldk);
}

/* Block j's visible context in sequence s: rows *c0 .. *c0 + return - 1. */
static int visible_context(const DfBlockAttnArgs *a, int s, int j, int *c0) {
    int anchor = a->layout->host_anchors[j], skip = 0;
    if (a->window > 0 && anchor > a->window) skip = anchor - a->window;
    *c0 = a->layout->host_ctx_starts[s] + skip;
    return anchor - skip;
}

/* Sequence of each block, from the layout. */
static int *block_sequences(const DfBlockAttnLayout *l) {
    int *seq = malloc((size_t)l->n_blocks * sizeof *seq);
    if (!seq) return NULL;
    for (int s = 0; s < l->n_seqs; s++)
        for (int j = l->host_block_starts[s]; j < l->host_block_starts[s + 1]; j++) seq[j] = s;
    return seq;
}

void df_cpu_block_attention(DfBackend *be, const DfBlockAttnArgs *a) {
    const DfBlockAttnLayout *l = a->layout;
    Dims d = dims_of(a);
    int *seq = block_sequences(l);
    if (!seq) {
        df_cpu_record_failure(be, "block_attention: out of memory");
        return;
    }
    const float *q = a->q.ptr, *kc = a->k_ctx.ptr, *vc = a->v_ctx.ptr, *kb = a->k_blk.ptr, *vb = a->v_blk.ptr;
    float *out = a->out.ptr, *lse = a->lse.ptr;
    int m = d.G * d.B;
    long n_tasks = (long)l->n_blocks * a->kv_heads;
#pragma omp parallel
    {
        float *qg = malloc((size_t)m * d.hd * sizeof *qg), *og = malloc((size_t)m * d.hd * sizeof *og);
        float *p = malloc((size_t)m * l->max_visible * sizeof *p);
        if (!qg || !og || !p) df_cpu_record_failure(be, "block_attention: out of memory for a %d x %d tile", m, l->max_visible);
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < n_tasks; t++) {
            if (!qg || !og || !p) continue;
            int j = (int)(t / a->kv_heads), g = (int)(t % a->kv_heads);
            int c0, anchor = visible_context(a, seq[j], j, &c0), n = anchor + d.B;
            gather_group(qg, q, &d, j, g);
            times_visible_t(p, qg, m, kc, kb, c0, anchor, j, g, &d, a->scale);
            for (int r = 0; r < m; r++) {
                float *row = p + (size_t)r * n, mx = -INFINITY, sum = 0.0f;
                for (int i = 0; i < n; i++) mx = row[i] > mx ? row[i] : mx;
                for (int i = 0; i < n; i++) {
                    row[i] = df_fast_expf(row[i] - mx);
                    sum += row[i];
                }
                float inv = 1.0f / sum;
                for (int i = 0; i < n; i++) row[i] *= inv;
                int h = g * d.G + r / d.B;
                lse[(size_t)h * d.n_q + (size_t)j * d.B + r % d.B] = mx + logf(sum);
            }
            times_visible(og, p, m, vc, vb, c0, anchor, j, g, &d);
            scatter_group(out, og, &d, j, g);
        }
        free(qg), free(og), free(p);
    }
    free(seq);
}

/* One block of the backward for kv head g: dq rows written, dK/dV rows added. */
static void block_backward(const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr, const Dims *d, int j, int g, int s,
                           float *qg, float *dog, float *dD, float *p, float *dp) {
    int c0, anchor = visible_context(a, s, j, &c0), n = anchor + d->B, m = d->G * d->B;
    const float *kc = a->k_ctx.ptr, *vc = a->v_ctx.ptr, *kb = a->k_blk.ptr, *vb = a->v_blk.ptr;
    const float *out = a->out.ptr, *lse = a->lse.ptr, *dout = gr->d_out.ptr;
    gather_group(qg, a->q.ptr, d, j, g);
    gather_group(dog, dout, d, j, g);
    for (int r = 0; r < m; r++) { /* D = rowsum(dO * O) */
        size_t off = (size_t)(j * d->B + r % d->B) * d->ldq + (size_t)(g * d->G + r / d->B) * d->hd;
        float s = 0.0f;
        for (int i = 0; i < d->hd; i++) s += dout[off + i] * out[off + i];
        dD[r] = s;
    }
    times_visible_t(p, qg, m, kc, kb, c0, anchor, j, g, d, a->scale);
    times_visible_t(dp, dog, m, vc, vb, c0, anchor, j, g, d, 1.0f);
    for (int r = 0; r < m; r++) {
        int h = g * d->G + r / d->B;
        float row_lse = lse[(size_t)h * d->n_q + (size_t)j * d->B + r % d->B];
        float *pr = p + (size_t)r * n, *dpr = dp + (size_t)r * n;
        for (int i = 0; i < n; i++) {
            pr[i] = df_fast_expf(pr[i] - row_lse);
            dpr[i] = pr[i] * (dpr[i] - dD[r]) * a->scale; /* dS, with the score scale folded in */
        }
    }
    add_visible_t(gr->dv_ctx.ptr, gr->dv_blk.ptr, p, dog, m, c0, anchor, j, g, d);
    add_visible_t(gr->dk_ctx.ptr, gr->dk_blk.ptr, dp, qg, m, c0, anchor, j, g, d);
    times_visible(dog, dp, m, kc, kb, c0, anchor, j, g, d); /* dq, reusing dog */
    scatter_group(gr->dq.ptr, dog, d, j, g);
}

void df_cpu_block_attention_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr) {
    const DfBlockAttnLayout *l = a->layout;
    Dims d = dims_of(a);
    int m = d.G * d.B;
    long n_tasks = (long)l->n_seqs * a->kv_heads;
#pragma omp parallel
    {
        float *qg = malloc((size_t)m * d.hd * sizeof *qg), *dog = malloc((size_t)m * d.hd * sizeof *dog);
        float *dD = malloc((size_t)m * sizeof *dD);
        float *p = malloc((size_t)m * l->max_visible * sizeof *p), *dp = malloc((size_t)m * l->max_visible * sizeof *dp);
        int ok = qg && dog && dD && p && dp;
        if (!ok) df_cpu_record_failure(be, "block_attention_backward: out of memory for a %d x %d tile", m, l->max_visible);
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < n_tasks; t++) {
            if (!ok) continue;
            int s = (int)(t / a->kv_heads), g = (int)(t % a->kv_heads);
            for (int j = l->host_block_starts[s]; j < l->host_block_starts[s + 1]; j++)
                block_backward(a, gr, &d, j, g, s, qg, dog, dD, p, dp);
        }
        free(qg), free(dog), free(dD), free(p), free(dp);
    }
}
