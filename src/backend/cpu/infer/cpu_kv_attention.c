/* GQA attention of new query rows against per-sequence KV cache slots.
 *
 * Tasks are (sequence, head, tile of up to TILE new rows), spread over
 * OpenMP threads. A task's scores against the visible cache rows are one
 * single-threaded sgemm straight from the strided q rows and the slot's
 * cache rows, then a masked fp32 softmax per row (causal: new row j of a
 * sequence with L cached rows sees L + j + 1 keys; a block: all L + n), then
 * a second sgemm for the output rows. A decode step (one new row per
 * sequence) is one task per (sequence, head). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

#define TILE 64

typedef struct KvTask {
    int seq, head, j0;
} KvTask;

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
        float *scores = malloc((size_t)TILE * (size_t)batch->max_visible * sizeof *scores);
        if (!scores)
            df_cpu_record_failure(be, "kv_attention: out of memory for a %d x %d score tile", TILE, batch->max_visible);
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < n_tasks; t++) {
            if (!scores) continue;
            int i = tasks[t].seq, h = tasks[t].head, j0 = tasks[t].j0;
            int r0 = batch->host_row_starts[i], n = batch->host_row_starts[i + 1] - r0;
            int len = batch->host_cache_lens[i];
            int rows = n - j0 < TILE ? n - j0 : TILE;
            /* keys this tile can see: causal stops at its last row */
            int cols = causal ? len + j0 + rows : len + n;
            size_t slot_row = (size_t)batch->host_slots[i] * batch->slot_capacity;
            const float *qh = (const float *)q.ptr + (size_t)(r0 + j0) * ldq + (size_t)h * hd;
            const float *kh = (const float *)k_cache.ptr + slot_row * ldk + (size_t)(h / group) * hd;
            const float *vh = (const float *)v_cache.ptr + slot_row * ldk + (size_t)(h / group) * hd;
            float *oh = (float *)out.ptr + (size_t)(r0 + j0) * ldq + (size_t)h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd, scale, qh, ldq, kh, ldk, 0.0f, scores,
                        cols);
            df_cpu_softmax_prefix_rows(scores, rows, cols, causal ? len + j0 + 1 : cols, causal, NULL);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, cols, 1.0f, scores, cols, vh, ldk, 0.0f,
                        oh, ldq);
        }
        free(scores);
    }
    free(tasks);
}
