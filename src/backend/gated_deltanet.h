/* The host-side (fp32, C + OpenMP) math of a hybrid target's layers: the
 * Gated DeltaNet's causal convolution, its gated delta rule recurrence and
 * gated RMSNorm, and the sigmoid output gate of the gated attention. The
 * CPU backend's ops are these functions (cpu/hybrid/cpu_hybrid.c,
 * cpu_hybrid_step.c), and the reference the other backends are tested
 * against; it lives in the backend so that the backends never include
 * target/. Every function works on a
 * packed batch (sequences back to back, seq_starts[n_seqs + 1]) and restarts
 * its state at each sequence boundary, so no padding is ever processed.
 *
 * Formulas as transformers' Qwen3.5 modeling code defines them (torch
 * fallback of the delta rule, recurrent form): per value head with state
 * S [key_dim, value_dim], zero at a sequence's start, and per token
 *   q, k = l2norm(q), l2norm(k) (eps 1e-6); q *= key_dim^-1/2
 *   g = -exp(A_log) * softplus(a + dt_bias); beta = sigmoid(b)
 *   S *= exp(g); delta = beta * (v - S^T k); S += k delta^T; o = S^T q
 * Key head h serves value heads h*r .. h*r+r-1, r = value_heads / key_heads. */
#ifndef DF_BACKEND_GATED_DELTANET_H
#define DF_BACKEND_GATED_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* out[t, c] = silu(sum_j w[c, j] * x[t - (kernel-1) + j, c]) over j < kernel,
 * rows before the start of t's sequence counting as zero. x, out [T, channels]
 * (distinct); w [channels, kernel]. */
void df_causal_conv_silu(float *out, const float *x, const float *w, const int32_t *seq_starts, int n_seqs,
                         int channels, int kernel);

/* qkv [T, 2*key_heads*key_dim + value_heads*value_dim]: q, k, v of each token
 * side by side (the convolution's output); b, a [T, value_heads]: the raw
 * in_proj_b / in_proj_a outputs; a_log, dt_bias [value_heads]. Writes out
 * [T, value_heads*value_dim]. */
void df_gated_delta_rule(float *out, const float *qkv, const float *b, const float *a, const float *a_log,
                         const float *dt_bias, const int32_t *seq_starts, int n_seqs, const DfDeltaRuleShape *shape);

/* Incremental decoding of one sequence (target/hybrid_state.c): the same
 * operations continuing from a carried state instead of zero.
 *
 * df_causal_conv_silu_continue: n new rows x [n, channels] after the
 * sequence's previous inputs, of which window [kernel-1, channels] holds the
 * last kernel-1 (oldest first; zeros at the start of a sequence); writes out
 * [n, channels] and advances the window past the new rows. */
void df_causal_conv_silu_continue(float *out, const float *x, const float *w, float *window, int n, int channels,
                                  int kernel);

/* window [kernel-1, channels] = the last kernel-1 rows of [window ; x[0..n-1]]. */
void df_conv_window_advance(float *window, const float *x, int n, int channels, int kernel);

/* The delta rule over n tokens of one sequence (qkv, b, a as for
 * df_gated_delta_rule, rows 0..n-1) from state [value_heads, key_dim,
 * value_dim], which is left after the last token. out [n, value_heads *
 * value_dim], or NULL to advance the state only. */
void df_gated_delta_rule_continue(float *out, const float *qkv, const float *b, const float *a, const float *a_log,
                                  const float *dt_bias, int n, const DfDeltaRuleShape *shape, float *state);

/* In place on x [rows, dim]: x = x * rsqrt(mean(x^2) + eps) * w * silu(z),
 * z [rows, dim], w [dim]. */
void df_gated_rmsnorm(float *x, const float *z, const float *w, int rows, int dim, float eps);

/* x[i] *= sigmoid(gate[i]) for i < n. */
void df_sigmoid_gate(float *x, const float *gate, size_t n);

#endif
