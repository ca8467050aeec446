/* Causal GQA attention over a packed batch. Work is split over (sequence,
 * head, query row): each task computes one row of scaled scores against the
 * keys 0..i of its own sequence in a per-thread scratch row (never a T x T
 * matrix), takes the softmax in fp32, and sums the value rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

typedef struct AttnArgs {
    float *out, *lse;
    const float *q, *k, *v;
    int n_tokens, heads, kv_heads, head_dim;
    float scale;
} AttnArgs;

/* One query row i (0-based inside the sequence that starts at row t0). */
static void attend_row(const AttnArgs *a, int t0, int i, int h, float *scores) {
    int hd = a->head_dim;
    int group = a->heads / a->kv_heads;
    size_t ldq = (size_t)a->heads * hd, ldk = (size_t)a->kv_heads * hd;
    const float *qi = a->q + (size_t)(t0 + i) * ldq + (size_t)h * hd;
    const float *kb = a->k + (size_t)t0 * ldk + (size_t)(h / group) * hd;
    const float *vb = a->v + (size_t)t0 * ldk + (size_t)(h / group) * hd;
    float mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
        const float *kj = kb + (size_t)j * ldk;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < hd; d++) s += qi[d] * kj[d];
        s *= a->scale;
        scores[j] = s;
        if (s > mx) mx = s;
    }
    float sum = 0.0f;
    for (int j = 0; j <= i; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    float *o = a->out + (size_t)(t0 + i) * ldq + (size_t)h * hd;
    memset(o, 0, (size_t)hd * sizeof *o);
    for (int j = 0; j <= i; j++) {
        const float *vj = vb + (size_t)j * ldk;
        float p = scores[j];
#pragma omp simd
        for (int d = 0; d < hd; d++) o[d] += p * vj[d];
    }
    float inv = 1.0f / sum;
    for (int d = 0; d < hd; d++) o[d] *= inv;
    if (a->lse) a->lse[(size_t)h * a->n_tokens + t0 + i] = mx + logf(sum);
}

void df_cpu_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                      const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    (void)be;
    AttnArgs a = {out.ptr, lse.ptr, q.ptr, k.ptr, v.ptr, batch->n_tokens, heads, kv_heads, head_dim, scale};
    const int32_t *starts = batch->host_seq_starts;
#pragma omp parallel
    {
        float *scores = malloc((size_t)batch->max_seq_len * sizeof *scores);
        for (int s = 0; s < batch->n_seqs; s++) {
            int t0 = starts[s], len = starts[s + 1] - starts[s];
            long tasks = (long)len * heads;
            /* long rows first: causal rows cost grows with i */
#pragma omp for schedule(dynamic, 4)
            for (long task = 0; task < tasks; task++) {
                int i = len - 1 - (int)(task / heads), h = (int)(task % heads);
                if (scores) attend_row(&a, t0, i, h, scores);
            }
        }
        if (!scores) df_cpu_record_failure(be, "attention: out of memory for a score row of %d", batch->max_seq_len);
        free(scores);
    }
}
