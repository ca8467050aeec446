/* GQA attention of new query rows against per-sequence KV cache slots.
 *
 * Tasks are (sequence, head, tile of up to TILE new rows), spread over
 * OpenMP threads. A task's scores against the visible cache rows are one
 * single-threaded sgemm straight from the strided q rows and the slot's
 * cache rows, then a masked fp32 softmax per row (causal: new row j of a
 * sequence with L cached rows sees L + j + 1 keys; a block: all L + n), then
 * a second sgemm for the output rows. A decode step (one new row per
 * sequence) is one task per (sequence, head). A paged cache's keys and
 * values are first gathered, page by page, into the task's contiguous rows. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

#define TILE 64

typedef struct KvTask {
    int seq, head, j0;
} KvTask;

/* Rows 0..cols-1 of sequence i's head part (hd values at column col0 of each
 * cache row) into dst [cols, hd], a page's rows at a time. */
static void gather_rows(float *dst, const float *cache, const DfKvBatch *kb, int i, int cols, int ld, int col0,
                        int hd) {
    for (int r = 0; r < cols; r++)
        memcpy(dst + (size_t)r * hd, cache + df_kv_cache_row(kb, i, r) * ld + col0, (size_t)hd * sizeof *dst);
}

void df_cpu_kv_attention(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                         const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale, int causal) {
    int group = heads / kv_heads, hd = head_dim, ldq = heads * hd, ldk = kv_heads * hd;
    long n_tasks = 0;
    for (int i = 0; i < batch->n_seqs; i++) {
        int n = batch->host_row_starts[i + 1] - batch->host_row_starts[i];
        n_tasks += (long)heads * ((n + TILE - 1) / TILE);
    }
    KvTask *tasks = malloc((size_t)n_tasks * sizeof *tasks);
    if (!tasks) {
        df_cpu_record_failure(be, "kv_attention: out of memory for %ld tasks", n_tasks);
        return;
    }
    long nt = 0;
    for (int i = 0; i < batch->n_seqs; i++) {
        int n = batch->host_row_starts[i + 1] - batch->host_row_starts[i];
        for (int j0 = 0; j0 < n; j0 += TILE)
            for (int h = 0; h < heads; h++) tasks[nt++] = (KvTask){i, h, j0};
    }
#pragma omp parallel
    {
        size_t gathered = batch->n_pages ? 2 * (size_t)batch->max_visible * hd : 0;
        float *scores = malloc(((size_t)TILE * (size_t)batch->max_visible + gathered) * sizeof *scores);
        if (!scores)
            df_cpu_record_failure(be, "kv_attention: out of memory for a %d x %d score tile", TILE, batch->max_visible);
        float *kg = scores ? scores + (size_t)TILE * batch->max_visible : NULL, *vg = kg ? kg + gathered / 2 : NULL;
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < n_tasks; t++) {
            if (!scores) continue;
            int i = tasks[t].seq, h = tasks[t].head, j0 = tasks[t].j0;
            int r0 = batch->host_row_starts[i], n = batch->host_row_starts[i + 1] - r0;
            int len = batch->host_cache_lens[i];
            int rows = n - j0 < TILE ? n - j0 : TILE;
            /* keys this tile can see: causal stops at its last row */
            int cols = causal ? len + j0 + rows : len + n;
            int col0 = (h / group) * hd, ld = batch->n_pages ? hd : ldk;
            const float *qh = (const float *)q.ptr + (size_t)(r0 + j0) * ldq + (size_t)h * hd;
            const float *kh = kg, *vh = vg;
            if (batch->n_pages) {
                gather_rows(kg, k_cache.ptr, batch, i, cols, ldk, col0, hd);
                gather_rows(vg, v_cache.ptr, batch, i, cols, ldk, col0, hd);
            } else { /* the slot's rows, in place */
                kh = (const float *)k_cache.ptr + df_kv_cache_row(batch, i, 0) * ldk + col0;
                vh = (const float *)v_cache.ptr + df_kv_cache_row(batch, i, 0) * ldk + col0;
            }
            float *oh = (float *)out.ptr + (size_t)(r0 + j0) * ldq + (size_t)h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd, scale, qh, ldq, kh, ld, 0.0f, scores,
                        cols);
            df_cpu_softmax_prefix_rows(scores, rows, cols, causal ? len + j0 + 1 : cols, causal, NULL);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, cols, 1.0f, scores, cols, vh, ld, 0.0f,
                        oh, ldq);
        }
        free(scores);
    }
    free(tasks);
}
