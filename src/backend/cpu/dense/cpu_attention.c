/* Causal GQA attention over a packed batch.
 *
 * Work is split into tasks (sequence, head, tile of up to TILE query rows),
 * spread over OpenMP threads. In a task the scores of rows i0..i1-1 against
 * the keys 0..i1-1 of the same sequence are one single-threaded sgemm
 * (S = scale * Q_tile K^T, straight from the strided q/k rows, no copies),
 * then a masked fp32 softmax per row, then the output rows are a second
 * sgemm (O_tile = P V). The score matrix is at most TILE x (sequence
 * length) per thread, never T x T. A hand-written dot-product loop was
 * several times slower than OpenBLAS's kernels at this size (it runs at the
 * compile-time SSE2 width; the library dispatches to the widest unit). The
 * causal cost of tiling: keys past a row's own position inside its tile are
 * computed, then masked (about TILE/2 per row). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

#define TILE 128

typedef struct AttnTask {
    int seq, head, i0;
} AttnTask;

void df_cpu_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                      const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    const int32_t *starts = batch->host_seq_starts;
    int group = heads / kv_heads, hd = head_dim, t = batch->n_tokens;
    int ldq = heads * hd, ldk = kv_heads * hd;
    float *lse_all = lse.ptr;
    /* tasks, the widest tiles (latest rows of the longest sequences) first */
    long n_tasks = 0;
    for (int s = 0; s < batch->n_seqs; s++) n_tasks += (long)heads * ((starts[s + 1] - starts[s] + TILE - 1) / TILE);
    AttnTask *tasks = malloc((size_t)n_tasks * sizeof *tasks);
    if (!tasks) {
        df_cpu_record_failure(be, "attention: out of memory for %ld tasks", n_tasks);
        return;
    }
    long n = 0;
    for (int i0 = (batch->max_seq_len - 1) / TILE * TILE; i0 >= 0; i0 -= TILE)
        for (int s = 0; s < batch->n_seqs; s++)
            if (i0 < starts[s + 1] - starts[s])
                for (int h = 0; h < heads; h++) tasks[n++] = (AttnTask){s, h, i0};
#pragma omp parallel
    {
        float *scores = malloc((size_t)TILE * (size_t)batch->max_seq_len * sizeof *scores);
        if (!scores) df_cpu_record_failure(be, "attention: out of memory for a %d x %d score tile", TILE, batch->max_seq_len);
#pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < n_tasks; i++) {
            if (!scores) continue;
            int s = tasks[i].seq, h = tasks[i].head, i0 = tasks[i].i0;
            int t0 = starts[s], len = starts[s + 1] - t0;
            int rows = len - i0 < TILE ? len - i0 : TILE, cols = i0 + rows;
            const float *qh = (const float *)q.ptr + (size_t)(t0 + i0) * ldq + (size_t)h * hd;
            const float *kh = (const float *)k.ptr + (size_t)t0 * ldk + (size_t)(h / group) * hd;
            const float *vh = (const float *)v.ptr + (size_t)t0 * ldk + (size_t)(h / group) * hd;
            float *oh = (float *)out.ptr + (size_t)(t0 + i0) * ldq + (size_t)h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd, scale, qh, ldq, kh, ldk, 0.0f, scores,
                        cols);
            /* row r of the tile (query i0 + r) sees keys 0 .. i0 + r */
            df_cpu_softmax_prefix_rows(scores, rows, cols, i0 + 1, 1, lse_all ? lse_all + (size_t)h * t + t0 + i0 : NULL);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, cols, 1.0f, scores, cols, vh, ldk, 0.0f,
                        oh, ldq);
        }
        free(scores);
    }
    free(tasks);
}
