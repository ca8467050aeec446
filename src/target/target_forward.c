/* The target forward over a packed batch, written once over the backend op
 * table: the embedding, each decoder layer by the layer builder
 * (target/target_layer.h) with attention and the Gated DeltaNet's
 * recurrence over the whole batch, the taps, and the head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "target/rope.h"
#include "target/target.h"
#include "target/target_family.h"
#include "target/target_layer.h"
#include "target/target_memory.h"
#include "target/target_workspace.h"




/* cos/sin tables covering positions 0..max_len-1, rebuilt (doubling: see
 * df_target_rope_positions) when a longer sequence comes. */
static int ensure_rope_tables(DfTargetModel *m, int max_len, DfError *err) {
    if (m->rope_positions >= max_len) return 0;
    int n_pos = df_target_rope_positions(m->rope_positions, max_len), dim = df_target_rope_dim(&m->cfg);
    size_t half = (size_t)dim / 2;
    float *c = df_xmalloc((size_t)n_pos * half * sizeof *c, "rope cos"), *s = df_xmalloc((size_t)n_pos * half * sizeof *s, "rope sin");
    df_rope_tables(&m->cfg.rope, dim, n_pos, c, s);
    df_buffer_free(m->be, &m->rope_cos);
    df_buffer_free(m->be, &m->rope_sin);
    m->rope_positions = 0;
    int rc = df_buffer_alloc(m->be, &m->rope_cos, DF_BUF_F32, (size_t)n_pos * half, err) ||
             m->be->ops->upload_f32(m->be, m->rope_cos, c, err) ||
             df_buffer_alloc(m->be, &m->rope_sin, DF_BUF_F32, (size_t)n_pos * half, err) ||
             m->be->ops->upload_f32(m->be, m->rope_sin, s, err);
    free(c);
    free(s);
    if (rc) return -1;
    m->rope_positions = n_pos;
    return 0;
}

/* The layer steps over the whole packed batch (target/target_layer.h). */
typedef struct PackedSteps {
    DfTargetModel *m;
    const DfPackedBatch *batch;
} PackedSteps;

static void packed_attend(void *self, int layer, const DfTargetLayerActs *a) {
    const PackedSteps *p = self;
    const DfModelConfig *c = &p->m->cfg;
    DfBuffer no_lse = {0};
    no_lse.kind = DF_BUF_F32;
    (void)layer;
    df_op_attention(p->m->be, a->attn, no_lse, a->q, a->k, a->v, p->batch, c->num_heads, c->num_kv_heads, c->head_dim,
                    1.0f / sqrtf((float)c->head_dim));
}

/* The convolution and the delta rule over each sequence from a zero state. */
static void packed_recur(void *self, int layer, int t) {
    const PackedSteps *p = self;
    DfTargetModel *m = p->m;
    const DfTargetLayer *l = &m->layers[layer];
    const DfLinearAttnConfig *la = &m->cfg.linear;
    DfHybridWorkspace *ws = &m->hws;
    int nv = la->num_value_heads, value_dim = nv * la->value_head_dim;
    int conv_dim = 2 * la->num_key_heads * la->key_head_dim + value_dim;
    DfBuffer mixed = df_buffer_view(ws->mixed, 0, (size_t)t * conv_dim), conv = df_buffer_view(ws->conv, 0, (size_t)t * conv_dim);
    DfBuffer beta = df_buffer_view(ws->beta, 0, (size_t)t * nv), decay = df_buffer_view(ws->decay, 0, (size_t)t * nv);
    const DfDeltaRuleShape shape = {la->num_key_heads, nv, la->key_head_dim, la->value_head_dim};
    df_op_causal_conv_silu(m->be, conv, mixed, l->conv1d, p->batch, conv_dim, la->conv_kernel);
    df_op_gated_delta_rule(m->be, df_buffer_view(ws->core, 0, (size_t)t * value_dim), conv, beta, decay, l->a_log,
                           l->dt_bias, p->batch, &shape);
}

static void decoder_layer(DfTargetModel *m, int layer, const DfPackedBatch *batch) {
    DfTargetWorkspace *ws = &m->ws;
    const DfTargetLayerBuffers bufs = {ws->x, ws->h, ws->q, ws->k, ws->v, ws->attn, ws->gate, ws->up};
    DfTargetLayerActs a = df_target_layer_acts(&m->cfg, batch->n_tokens, &bufs);
    PackedSteps p = {m, batch};
    DfSequenceSteps steps = {.self = &p, .positions = batch->positions, .rope_cos = m->rope_cos,
                             .rope_sin = m->rope_sin, .attend = packed_attend, .recur = packed_recur};
    df_target_layer(m, layer, &a, &steps);
}

static int check_taps(const DfTargetModel *m, const int *taps, int n_taps, DfError *err) {
    for (int i = 0; i < n_taps; i++)
        if (taps[i] < 0 || taps[i] >= m->n_layers_loaded)
            return df_fail(err, "tap layer %d is outside the %d loaded layers (model has %d)", taps[i],
                           m->n_layers_loaded, m->cfg.num_layers);
    return 0;
}

int df_target_forward_batch(DfTargetModel *m, const DfPackedBatch *batch, DfBuffer ids, const int *tap_layer_ids,
                            int n_taps, DfBuffer features, DfBuffer logits, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    DfBackend *be = m->be;
    int t = batch->n_tokens, hid = c->hidden_size;
    int want_logits = logits.ptr != NULL;
    if (check_taps(m, tap_layer_ids, n_taps, err)) return -1;
    if (want_logits && !m->has_head) return df_fail(err, "logits asked for, but the lm head was not loaded");
    if (want_logits && m->n_layers_loaded != c->num_layers)
        return df_fail(err, "logits need all %d layers, %d were loaded", c->num_layers, m->n_layers_loaded);
    if (features.ptr && features.count < (size_t)t * n_taps * hid)
        return df_fail(err, "feature buffer holds %zu values, need %zu", features.count, (size_t)t * n_taps * hid);
    if (want_logits && logits.count < (size_t)t * c->vocab_size)
        return df_fail(err, "logits buffer holds %zu values, need %zu", logits.count, (size_t)t * c->vocab_size);
    int n_run = df_target_layers_needed(c, tap_layer_ids, n_taps, want_logits);
    if (n_run == 0) return df_fail(err, "target forward with neither taps nor logits");
    if (df_target_workspace_ensure(m, t, err) || ensure_rope_tables(m, batch->max_seq_len, err)) return -1;

    DfBuffer x = df_buffer_view(m->ws.x, 0, (size_t)t * hid);
    df_op_embedding(be, x, m->embed, ids, t, hid);
    for (int l = 0; l < n_run; l++) {
        decoder_layer(m, l, batch);
        for (int j = 0; j < n_taps && features.ptr; j++)
            if (tap_layer_ids[j] == l)
                df_op_copy2d(be, df_buffer_view(features, (size_t)j * hid, features.count - (size_t)j * hid),
                             n_taps * hid, x, hid, t, hid);
    }
    m->layers_run = n_run;
    if (want_logits) {
        DfBuffer h = df_buffer_view(m->ws.h, 0, (size_t)t * hid);
        df_op_rmsnorm(be, h, x, m->final_norm, t, hid, (float)c->rms_norm_eps);
        df_op_linear(be, logits, h, m->lm_head, t, c->vocab_size, hid, 0);
    }
    return be->ops->sync(be, err);
}

int df_target_forward(DfTargetModel *m, const int32_t *ids, const int32_t *seq_starts, int n_seqs,
                      const int *tap_layer_ids, int n_taps, float *features_out, float *logits_out, DfError *err) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    DfPackedBatch batch;
    if (df_packed_batch_init(&batch, be, seq_starts, n_seqs, err)) return -1;
    int t = batch.n_tokens, rc = -1;
    DfBuffer features = {0}, logits = {0};
    for (int i = 0; i < t; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size) {
            df_fail(err, "token id %d at position %d is outside the vocabulary [0, %d)", (int)ids[i], i, c->vocab_size);
            goto done;
        }
    if (df_target_workspace_ensure(m, t, err) || be->ops->upload_i32(be, df_buffer_view(m->ws.ids, 0, (size_t)t), ids, err))
        goto done;
    if (features_out && n_taps > 0 &&
        df_buffer_alloc(be, &features, DF_BUF_ACT, (size_t)t * n_taps * c->hidden_size, err))
        goto done;
    if (logits_out && df_buffer_alloc(be, &logits, DF_BUF_ACT, (size_t)t * c->vocab_size, err)) goto done;
    if (df_target_forward_batch(m, &batch, df_buffer_view(m->ws.ids, 0, (size_t)t), tap_layer_ids, n_taps, features,
                                logits, err))
        goto done;
    if (features.ptr && be->ops->download_f32(be, features_out, features, err)) goto done;
    if (logits.ptr && be->ops->download_f32(be, logits_out, logits, err)) goto done;
    rc = 0;
done:
    df_buffer_free(be, &features);
    df_buffer_free(be, &logits);
    df_packed_batch_free(&batch, be);
    return rc;
}

/* Weights of one layer's token mixer (attention or Gated DeltaNet): 2 flops each per token. */
static double mixer_params(const DfModelConfig *c, int layer) {
    double h = c->hidden_size, q = (double)c->num_heads * c->head_dim, kv = (double)c->num_kv_heads * c->head_dim;
    DfTargetLayerKind kind = df_target_layer_kind(c, layer);
    if (kind == DF_LAYER_ATTENTION) return 2 * h * q + 2 * h * kv;       /* q,o + k,v */
    if (kind == DF_LAYER_GATED_ATTENTION) return 3 * h * q + 2 * h * kv; /* gated q (2q), o + k,v */
    const DfLinearAttnConfig *la = &c->linear;
    double key = (double)la->num_key_heads * la->key_head_dim, value = (double)la->num_value_heads * la->value_head_dim;
    return h * (2 * key + value) + 2 * h * value + 2 * h * la->num_value_heads; /* qkv + z, out + b, a */
}

/* Per-token flops of a layer's sequence mixing beyond its weights: attention's
 * 2*S*q per token (causal average), or the delta rule's three state
 * mat-vecs (S^T k, k delta^T, S^T q): 6 * key_dim * value_dim per value head. */
static double mixer_token_flops(const DfModelConfig *c, int layer, double s) {
    if (df_target_layer_kind(c, layer) == DF_LAYER_GATED_DELTANET) {
        const DfLinearAttnConfig *la = &c->linear;
        return 6.0 * la->num_value_heads * la->key_head_dim * la->value_head_dim;
    }
    return 2 * s * (double)c->num_heads * c->head_dim;
}

double df_target_forward_flops(const DfModelConfig *c, const int *seq_lens, int n_seqs, int n_layers,
                               int with_logits) {
    double h = c->hidden_size, mlp = 3 * h * c->intermediate_size; /* gate,up,down */
    double total = 0;
    for (int i = 0; i < n_seqs; i++) {
        double s = seq_lens[i];
        for (int l = 0; l < n_layers; l++) total += 2 * (mixer_params(c, l) + mlp) * s + mixer_token_flops(c, l, s) * s;
        if (with_logits) total += 2 * s * h * c->vocab_size;
    }
    return total;
}

double df_target_decode_flops(const DfModelConfig *c, int n_seqs, double keys) {
    double h = c->hidden_size, mlp = 3 * h * c->intermediate_size, per_token = 2 * h * c->vocab_size;
    for (int l = 0; l < c->num_layers; l++) {
        /* a decode token attends to `keys` rows: twice the causal average of a prefill of `keys` tokens */
        double mixing = df_target_layer_kind(c, l) == DF_LAYER_GATED_DELTANET ? mixer_token_flops(c, l, keys)
                                                                              : 2 * mixer_token_flops(c, l, keys);
        per_token += 2 * (mixer_params(c, l) + mlp) + mixing;
    }
    return n_seqs * per_token;
}
