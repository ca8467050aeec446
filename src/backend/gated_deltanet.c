#include "backend/gated_deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static float siluf(float x) { return x * sigmoidf(x); }

/* torch.nn.functional.softplus (beta 1, threshold 20: linear above it). */
static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void df_causal_conv_silu(float *out, const float *x, const float *w, const int32_t *seq_starts, int n_seqs,
                         int channels, int kernel) {
    for (int s = 0; s < n_seqs; s++) {
        long begin = seq_starts[s], end = seq_starts[s + 1];
#pragma omp parallel for schedule(static)
        for (long t = begin; t < end; t++) {
            float *o = out + (size_t)t * channels;
            for (int c = 0; c < channels; c++) o[c] = 0.0f;
            for (int j = 0; j < kernel; j++) {
                long src = t - (kernel - 1) + j;
                if (src < begin) continue; /* before the sequence: zero padding */
                const float *xr = x + (size_t)src * channels;
                for (int c = 0; c < channels; c++) o[c] += w[(size_t)c * kernel + j] * xr[c];
            }
            for (int c = 0; c < channels; c++) o[c] = siluf(o[c]);
        }
    }
}

/* v / sqrt(sum v^2 + 1e-6), times scale. */
static void l2_normalize(float *dst, const float *v, int n, float scale) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += v[i] * v[i];
    float r = scale / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) dst[i] = v[i] * r;
}

/* One value head hv of one sequence, tokens begin..end-1, from and into
 * state [dk, dv] (out may be NULL: only the state advances). scratch: 2*dk + dv floats. */
static void delta_rule_head(float *out, const float *qkv, const float *b, const float *a, float a_log, float dt_bias,
                            long begin, long end, int hv, const DfDeltaRuleShape *shape, float *state, float *scratch) {
    int dk = shape->key_dim, dv = shape->value_dim, nv = shape->value_heads;
    int hk = hv / (nv / shape->key_heads);
    size_t key_dim = (size_t)shape->key_heads * dk, width = 2 * key_dim + (size_t)nv * dv;
    float *q = scratch, *k = q + dk, *delta = k + dk;
    float neg_a = -expf(a_log), q_scale = 1.0f / sqrtf((float)dk);
    for (long t = begin; t < end; t++) {
        const float *row = qkv + (size_t)t * width;
        l2_normalize(q, row + (size_t)hk * dk, dk, q_scale);
        l2_normalize(k, row + key_dim + (size_t)hk * dk, dk, 1.0f);
        const float *v = row + 2 * key_dim + (size_t)hv * dv;
        float decay = expf(neg_a * softplusf(a[(size_t)t * nv + hv] + dt_bias));
        float beta = sigmoidf(b[(size_t)t * nv + hv]);
        /* S *= decay; delta = beta * (v - S^T k) */
        for (int j = 0; j < dv; j++) delta[j] = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *si = state + (size_t)i * dv;
            for (int j = 0; j < dv; j++) {
                si[j] *= decay;
                delta[j] += si[j] * k[i];
            }
        }
        for (int j = 0; j < dv; j++) delta[j] = beta * (v[j] - delta[j]);
        /* S += k delta^T; o = S^T q */
        for (int i = 0; i < dk; i++) {
            float *si = state + (size_t)i * dv;
            for (int j = 0; j < dv; j++) si[j] += k[i] * delta[j];
        }
        if (!out) continue;
        float *o = out + (size_t)t * nv * dv + (size_t)hv * dv;
        for (int j = 0; j < dv; j++) o[j] = 0.0f;
        for (int i = 0; i < dk; i++) {
            const float *si = state + (size_t)i * dv;
            for (int j = 0; j < dv; j++) o[j] += si[j] * q[i];
        }
    }
}

void df_gated_delta_rule(float *out, const float *qkv, const float *b, const float *a, const float *a_log,
                         const float *dt_bias, const int32_t *seq_starts, int n_seqs, const DfDeltaRuleShape *shape) {
    int nv = shape->value_heads;
    long n_tasks = (long)n_seqs * nv;
    size_t state_floats = (size_t)shape->key_dim * shape->value_dim;
    size_t scratch_floats = state_floats + 2 * (size_t)shape->key_dim + (size_t)shape->value_dim;
#pragma omp parallel
    {
        float *scratch = df_xmalloc(scratch_floats * sizeof *scratch, "delta rule state");
#pragma omp for schedule(dynamic)
        for (long task = 0; task < n_tasks; task++) {
            int s = (int)(task / nv), hv = (int)(task % nv);
            memset(scratch, 0, state_floats * sizeof *scratch); /* zero at the sequence's start */
            delta_rule_head(out, qkv, b, a, a_log[hv], dt_bias[hv], seq_starts[s], seq_starts[s + 1], hv, shape,
                            scratch, scratch + state_floats);
        }
        free(scratch);
    }
}

void df_gated_delta_rule_continue(float *out, const float *qkv, const float *b, const float *a, const float *a_log,
                                  const float *dt_bias, int n, const DfDeltaRuleShape *shape, float *state) {
    int nv = shape->value_heads;
    size_t state_floats = (size_t)shape->key_dim * shape->value_dim;
    size_t scratch_floats = 2 * (size_t)shape->key_dim + (size_t)shape->value_dim;
#pragma omp parallel
    {
        float *scratch = df_xmalloc(scratch_floats * sizeof *scratch, "delta rule scratch");
#pragma omp for schedule(static)
        for (int hv = 0; hv < nv; hv++)
            delta_rule_head(out, qkv, b, a, a_log[hv], dt_bias[hv], 0, n, hv, shape, state + (size_t)hv * state_floats,
                            scratch);
        free(scratch);
    }
}

void df_causal_conv_silu_continue(float *out, const float *x, const float *w, float *window, int n, int channels,
                                  int kernel) {
    int keep = kernel - 1;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < n; t++) {
        float *o = out + (size_t)t * channels;
        for (int c = 0; c < channels; c++) o[c] = 0.0f;
        for (int j = 0; j < kernel; j++) {
            long src = t - keep + j; /* < 0: row keep + src of the window */
            const float *xr = src < 0 ? window + (size_t)(keep + src) * channels : x + (size_t)src * channels;
            for (int c = 0; c < channels; c++) o[c] += w[(size_t)c * kernel + j] * xr[c];
        }
        for (int c = 0; c < channels; c++) o[c] = siluf(o[c]);
    }
    df_conv_window_advance(window, x, n, channels, kernel);
}

void df_conv_window_advance(float *window, const float *x, int n, int channels, int kernel) {
    int keep = kernel - 1;
    if (keep <= 0 || n <= 0) return;
    size_t row = (size_t)channels * sizeof *window;
    if (n >= keep) {
        memcpy(window, x + (size_t)(n - keep) * channels, (size_t)keep * row);
        return;
    }
    memmove(window, window + (size_t)n * channels, (size_t)(keep - n) * row);
    memcpy(window + (size_t)(keep - n) * channels, x, (size_t)n * row);
}

void df_gated_rmsnorm(float *x, const float *z, const float *w, int rows, int dim, float eps) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * dim;
        const float *zr = z + (size_t)r * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) xr[i] = xr[i] * inv * w[i] * siluf(zr[i]);
    }
}

void df_sigmoid_gate(float *x, const float *gate, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= sigmoidf(gate[i]);
}
