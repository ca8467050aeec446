/* Fused frozen lm head + weighted cross-entropy on the CPU. Rows are cut into
 * chunks (at most CHUNK_FLOATS logits per chunk), one chunk per OpenMP task:
 * logits = X_chunk head^T (one sgemm), then per row max/argmax, log-sum-exp
 * and CE, then the logits are turned in place into
 * grad_scale * w * (softmax - onehot) and d_x = that times head (a second
 * sgemm). The full [rows, vocab] logits never exist. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_fast_exp.h"
#include "backend/cpu/cpu_ops.h"

#define CHUNK_FLOATS (1 << 21) /* 8 MiB of logits per thread */
#define MAX_CHUNK_ROWS 128

/* Max (first index of it) of one logits row. */
static float row_max(const float *row, int vocab, int32_t *argmax) {
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int i = 1; i < vocab; i++) mx = row[i] > mx ? row[i] : mx;
    int best = 0; /* bounded: a NaN max equals no entry (non-finite logits must not read past the row) */
    while (best < vocab - 1 && row[best] != mx) best++;
    *argmax = best;
    return mx;
}

static void ce_chunk(DfBackend *be, const DfLmHeadCeArgs *a, int r0, int rows, float *logits) {
    const float *x = a->x.ptr, *head = a->head.ptr, *w = a->weights.ptr;
    const int32_t *labels = a->labels.ptr;
    float *ce = a->ce.ptr;
    int32_t *argmax = a->argmax.ptr;
    int V = a->vocab, H = a->hidden;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, V, H, 1.0f, x + (size_t)r0 * H, H, head, H, 0.0f,
                logits, V);
    for (int r = 0; r < rows; r++) {
        float *row = logits + (size_t)r * V;
        int label = labels[r0 + r];
        if (label >= V) {
            df_cpu_record_failure(be, "lm_head_ce: label %d of row %d is outside the vocabulary [0, %d)", label, r0 + r, V);
            label = -1;
        }
        float mx = row_max(row, V, &argmax[r0 + r]), label_logit = label >= 0 ? row[label] : 0.0f, sum = 0.0f;
        if (!a->d_x.ptr) {
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < V; i++) sum += df_fast_expf(row[i] - mx);
        } else { /* keep exp(logit - max) in place for the softmax below */
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < V; i++) {
                row[i] = df_fast_expf(row[i] - mx);
                sum += row[i];
            }
        }
        float lse = mx + logf(sum);
        ce[r0 + r] = label >= 0 ? lse - label_logit : 0.0f;
        if (!a->d_x.ptr) continue;
        float coef = a->grad_scale * w[r0 + r], scale = coef / sum;
#pragma omp simd
        for (int i = 0; i < V; i++) row[i] *= scale;
        if (label >= 0) row[label] -= coef;
    }
    if (a->d_x.ptr)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, H, V, 1.0f, logits, V, head, H, 0.0f,
                    (float *)a->d_x.ptr + (size_t)r0 * H, H);
}

void df_cpu_lm_head_ce(DfBackend *be, const DfLmHeadCeArgs *a) {
    int chunk = CHUNK_FLOATS / a->vocab;
    if (chunk > MAX_CHUNK_ROWS) chunk = MAX_CHUNK_ROWS;
    if (chunk < 1) chunk = 1;
    int n_chunks = (a->rows + chunk - 1) / chunk;
#pragma omp parallel
    {
        float *logits = malloc((size_t)chunk * a->vocab * sizeof *logits);
        if (!logits) df_cpu_record_failure(be, "lm_head_ce: out of memory for %d x %d logits", chunk, a->vocab);
#pragma omp for schedule(dynamic, 1)
        for (int c = 0; c < n_chunks; c++) {
            if (!logits) continue;
            int r0 = c * chunk, rows = a->rows - r0 < chunk ? a->rows - r0 : chunk;
            ce_chunk(be, a, r0, rows, logits);
        }
        free(logits);
    }
}
