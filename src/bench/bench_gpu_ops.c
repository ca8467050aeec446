/* GPU op figures of the bench harness: the GEMM and the attention op alone,
 * timed with the device's events after a warm-up, median of many. */
#include <math.h>
#include <stdlib.h>

#include "base/sort.h"
#include "bench/bench_internal.h"

/* Uniform values in [-1, 1]: never zeros, which run faster than real data. */
static int fill_uniform(DfBackend *be, DfBuffer b, uint64_t seed, DfError *err) {
    size_t block = (size_t)1 << 22;
    float *host = df_xmalloc(block * sizeof *host, "bench block");
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    int rc = 0;
    for (size_t off = 0; off < b.count && rc == 0; off += block) {
        size_t n = b.count - off < block ? b.count - off : block;
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            host[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
        }
        rc = be->ops->upload_f32(be, df_buffer_view(b, off, n), host, err);
    }
    free(host);
    return rc;
}

/* Median TFLOP/s of y[m,n] = x[m,k] w[n,k]^T, the layout of every linear
 * layer, timed one product at a time with CUDA events after a warm-up. */
int df_bench_gemm_tflops(DfBackend *be, int m, int n, int k, int iters, double *tflops, DfError *err) {
    DfBuffer x = {0}, w = {0}, y = {0};
    DfTimer *timer = be->ops->timer_create(be, err);
    double *ms = df_xmalloc((size_t)iters * sizeof *ms, "gemm times");
    int rc = -1;
    if (!timer) goto done;
    if (df_buffer_alloc(be, &x, DF_BUF_ACT, (size_t)m * k, err) || df_buffer_alloc(be, &w, DF_BUF_ACT, (size_t)n * k, err) ||
        df_buffer_alloc(be, &y, DF_BUF_ACT, (size_t)m * n, err) || fill_uniform(be, x, 1, err) || fill_uniform(be, w, 2, err))
        goto done;
    for (int i = 0; i < 3; i++) df_op_linear(be, y, x, w, m, n, k, 0);
    for (int i = 0; i < iters; i++) {
        be->ops->timer_start(be, timer);
        df_op_linear(be, y, x, w, m, n, k, 0);
        ms[i] = be->ops->timer_stop(be, timer);
    }
    if (be->ops->sync(be, err)) goto done;
    *tflops = 2.0 * m * n * k / (df_median_sorting(ms, (size_t)iters) * 1e-3) / 1e12;
    rc = 0;
done:
    df_buffer_free(be, &x), df_buffer_free(be, &w), df_buffer_free(be, &y);
    if (timer) be->ops->timer_destroy(be, timer);
    free(ms);
    return rc;
}

/* Median TFLOP/s of the attention op alone over n_seqs x seq_len packed
 * tokens (causal FLOPs as spec section 8 counts them: 2 S^2 nh hd per sequence). */
int df_bench_attention_tflops(DfBackend *be, int seq_len, int n_seqs, int heads, int kv_heads, int hd, int iters,
                                double *tflops, DfError *err) {
    int t = seq_len * n_seqs;
    int32_t *starts = df_xmalloc((size_t)(n_seqs + 1) * sizeof *starts, "attention starts");
    for (int s = 0; s <= n_seqs; s++) starts[s] = s * seq_len;
    DfPackedBatch batch;
    DfBuffer q = {0}, k = {0}, v = {0}, o = {0}, no_lse = {0};
    no_lse.kind = DF_BUF_F32;
    DfTimer *timer = be->ops->timer_create(be, err);
    double *ms = df_xmalloc((size_t)iters * sizeof *ms, "attention times");
    int rc = df_packed_batch_init(&batch, be, starts, n_seqs, err);
    free(starts);
    if (rc) goto done_nobatch;
    rc = -1;
    if (!timer || df_buffer_alloc(be, &q, DF_BUF_ACT, (size_t)t * heads * hd, err) ||
        df_buffer_alloc(be, &o, DF_BUF_ACT, (size_t)t * heads * hd, err) ||
        df_buffer_alloc(be, &k, DF_BUF_ACT, (size_t)t * kv_heads * hd, err) ||
        df_buffer_alloc(be, &v, DF_BUF_ACT, (size_t)t * kv_heads * hd, err) || fill_uniform(be, q, 3, err) ||
        fill_uniform(be, k, 4, err) || fill_uniform(be, v, 5, err))
        goto done;
    float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < 3; i++) df_op_attention(be, o, no_lse, q, k, v, &batch, heads, kv_heads, hd, scale);
    for (int i = 0; i < iters; i++) {
        be->ops->timer_start(be, timer);
        df_op_attention(be, o, no_lse, q, k, v, &batch, heads, kv_heads, hd, scale);
        ms[i] = be->ops->timer_stop(be, timer);
    }
    if (be->ops->sync(be, err)) goto done;
    *tflops = 2.0 * seq_len * (double)seq_len * heads * hd * n_seqs / (df_median_sorting(ms, (size_t)iters) * 1e-3) / 1e12;
    rc = 0;
done:
    df_packed_batch_free(&batch, be);
done_nobatch:
    df_buffer_free(be, &q), df_buffer_free(be, &k), df_buffer_free(be, &v), df_buffer_free(be, &o);
    if (timer) be->ops->timer_destroy(be, timer);
    free(ms);
    return rc;
}
