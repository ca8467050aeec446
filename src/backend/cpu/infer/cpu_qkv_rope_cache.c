/* A dense decoder layer's q/k/v step in one pass over the fused q/k/v
 * product (backend.h, DfQkvRopeCacheArgs): per head of a new row, q/k norm,
 * rope, and q into q_out or k, v into the caches. The math is that of
 * cpu_rmsnorm.c and cpu_rope.c, applied to one head at a time. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* x = x * rsqrt(mean(x^2) + eps) * w over one head, in place. */
static void norm_head(float *x, const float *w, int dim, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < dim; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = 0; i < dim; i++) x[i] = x[i] * inv * w[i];
}

/* rotate_half rope of one head with the table rows c, s of its position. */
static void rope_head(float *x, const float *c, const float *s, int half) {
    float *x2 = x + half;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x2[i];
        x[i] = a * c[i] - b * s[i];
        x2[i] = b * c[i] + a * s[i];
    }
}

/* The sequence owning packed new row `row`. */
static int seq_of_row(const DfKvBatch *kb, int row) {
    int i = 0;
    while (i + 1 < kb->n_seqs && kb->host_row_starts[i + 1] <= row) i++;
    return i;
}

/* Head h of new row `row` (position pos, j-th new row of sequence i) to its destination. */
static void place_head(const DfQkvRopeCacheArgs *a, int row, int i, int h, const float *c, const float *s) {
    const DfKvBatch *kb = a->batch;
    int nh = a->heads, nkv = a->kv_heads, hd = a->head_dim;
    const float *src = (const float *)a->qkv.ptr + ((size_t)row * (nh + 2 * nkv) + h) * hd;
    size_t cache_row = df_kv_cache_row(kb, i, kb->host_cache_lens[i] + row - kb->host_row_starts[i]);
    float *dst;
    const float *norm = NULL;
    if (h < nh) {
        dst = (float *)a->q_out.ptr + ((size_t)row * nh + h) * hd;
        norm = a->q_norm.ptr;
    } else if (h < nh + nkv) {
        dst = (float *)a->k_cache.ptr + (cache_row * nkv + (h - nh)) * hd;
        norm = a->k_norm.ptr;
    } else {
        memcpy((float *)a->v_cache.ptr + (cache_row * nkv + (h - nh - nkv)) * hd, src, (size_t)hd * sizeof *src);
        return;
    }
    memcpy(dst, src, (size_t)hd * sizeof *src);
    if (norm) norm_head(dst, norm, hd, a->eps);
    rope_head(dst, c, s, hd / 2);
}

void df_cpu_qkv_rope_cache(DfBackend *be, const DfQkvRopeCacheArgs *a) {
    const DfKvBatch *kb = a->batch;
    const int32_t *pos = kb->positions.ptr;
    int half = a->head_dim / 2, heads = a->heads + 2 * a->kv_heads;
    long table_rows = (long)(a->cos_table.count / (size_t)half);
#pragma omp parallel for schedule(static)
    for (int row = 0; row < kb->n_rows; row++) {
        if (pos[row] < 0 || pos[row] >= table_rows) {
            df_cpu_record_failure(be, "qkv_rope_cache: position %d of row %d is outside the table (%ld rows)",
                                  (int)pos[row], row, table_rows);
            continue;
        }
        const float *c = (const float *)a->cos_table.ptr + (size_t)pos[row] * half;
        const float *s = (const float *)a->sin_table.ptr + (size_t)pos[row] * half;
        int i = seq_of_row(kb, row);
        for (int h = 0; h < heads; h++) place_head(a, row, i, h, c, s);
    }
}
