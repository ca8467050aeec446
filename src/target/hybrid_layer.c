#include "target/hybrid_layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "target/target_layer.h"
#include "target/target_memory.h"

/* The workspace's buffers in the order of its fields: the order of
 * df_hybrid_workspace_specs (target/target_memory.h). */
static void workspace_buffers(DfHybridWorkspace *ws, DfBuffer *out[DF_HYBRID_WS_BUFFERS]) {
    DfBuffer *bufs[DF_HYBRID_WS_BUFFERS] = {&ws->qg, &ws->attn_gate, &ws->mixed, &ws->conv,
                                           &ws->z,  &ws->beta,      &ws->decay, &ws->core};
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++) out[i] = bufs[i];
}

void df_hybrid_workspace_free(DfBackend *be, DfHybridWorkspace *ws) {
    DfBuffer *bufs[DF_HYBRID_WS_BUFFERS];
    workspace_buffers(ws, bufs);
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++) df_buffer_free(be, bufs[i]);
    ws->capacity = 0;
}

int df_hybrid_workspace_ensure(DfTargetModel *m, int n_tokens, DfError *err) {
    DfHybridWorkspace *ws = &m->hws;
    if (ws->capacity >= n_tokens) return 0;
    df_hybrid_workspace_free(m->be, ws);
    DfBuffer *bufs[DF_HYBRID_WS_BUFFERS];
    DfBufSpec want[DF_HYBRID_WS_BUFFERS];
    workspace_buffers(ws, bufs);
    df_hybrid_workspace_specs(&m->cfg, n_tokens, want);
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++)
        if (df_buffer_alloc(m->be, bufs[i], want[i].kind, want[i].count, err)) {
            df_hybrid_workspace_free(m->be, ws);
            return df_context(err, "hybrid target workspace for %d tokens", n_tokens);
        }
    ws->capacity = n_tokens;
    return 0;
}

float *df_hybrid_host(DfBuffer b) {
    if (b.elem_size != (int)sizeof(float)) {
        fprintf(stderr, "dflash: hybrid layer: a buffer of %d-byte elements is not host fp32\n", b.elem_size);
        abort();
    }
    return (float *)b.ptr;
}

/* RoPE on the first rotary_dim values of each of `heads` heads of x [t, heads*head_dim]. */
static void partial_rope(DfTargetModel *m, DfBuffer x, int heads, int t, DfBuffer positions, DfBuffer cos_t,
                         DfBuffer sin_t) {
    const DfModelConfig *c = &m->cfg;
    df_op_rope_partial(m->be, x, positions, cos_t, sin_t, t, heads, c->head_dim, c->rotary_dim);
}

void df_hybrid_attention_qkv(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                             DfBuffer positions, DfBuffer cos_t, DfBuffer sin_t) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, hid = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    size_t q = (size_t)nh * hd;
    DfBuffer qg = df_buffer_view(m->hws.qg, 0, (size_t)t * 2 * q);
    DfBuffer gate = df_buffer_view(m->hws.attn_gate, 0, (size_t)t * q);
    df_op_linear(be, qg, a->h, l->q_proj, t, 2 * nh * hd, hid, 0);
    /* each head's 2*hd outputs are [query | gate] */
    df_op_copy2d(be, a->q, hd, qg, 2 * hd, t * nh, hd);
    df_op_copy2d(be, gate, hd, df_buffer_view(qg, (size_t)hd, qg.count - (size_t)hd), 2 * hd, t * nh, hd);
    df_op_linear(be, a->k, a->h, l->k_proj, t, nkv * hd, hid, 0);
    df_op_linear(be, a->v, a->h, l->v_proj, t, nkv * hd, hid, 0);
    df_op_rmsnorm(be, a->q, a->q, l->q_norm, t * nh, hd, eps);
    df_op_rmsnorm(be, a->k, a->k, l->k_norm, t * nkv, hd, eps);
    partial_rope(m, a->q, nh, t, positions, cos_t, sin_t);
    partial_rope(m, a->k, nkv, t, positions, cos_t, sin_t);
}

void df_hybrid_attention_out(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, nh = c->num_heads, hd = c->head_dim;
    size_t q = (size_t)nh * hd;
    df_op_sigmoid_gate(m->be, df_buffer_view(a->attn, 0, (size_t)t * q), df_buffer_view(m->hws.attn_gate, 0, (size_t)t * q));
    df_op_linear(m->be, a->x, a->attn, l->o_proj, t, c->hidden_size, nh * hd, 1);
}

static void gated_attention(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                            const DfPackedBatch *batch, DfBuffer cos_t, DfBuffer sin_t) {
    const DfModelConfig *c = &m->cfg;
    int nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    df_hybrid_attention_qkv(m, l, a, batch->positions, cos_t, sin_t);
    DfBuffer no_lse = {0};
    no_lse.kind = DF_BUF_F32;
    df_op_attention(m->be, a->attn, no_lse, a->q, a->k, a->v, batch, nh, nkv, hd, 1.0f / sqrtf((float)hd));
    df_hybrid_attention_out(m, l, a);
}

void df_hybrid_deltanet_in(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    const DfLinearAttnConfig *la = &c->linear;
    DfHybridWorkspace *ws = &m->hws;
    int t = a->n_rows, hid = c->hidden_size, nv = la->num_value_heads;
    int value_dim = nv * la->value_head_dim, conv_dim = 2 * la->num_key_heads * la->key_head_dim + value_dim;
    DfBuffer mixed = df_buffer_view(ws->mixed, 0, (size_t)t * conv_dim);
    DfBuffer z = df_buffer_view(ws->z, 0, (size_t)t * value_dim);
    DfBuffer beta = df_buffer_view(ws->beta, 0, (size_t)t * nv), decay = df_buffer_view(ws->decay, 0, (size_t)t * nv);
    df_op_linear(be, mixed, a->h, l->in_proj_qkv, t, conv_dim, hid, 0);
    df_op_linear(be, z, a->h, l->in_proj_z, t, value_dim, hid, 0);
    df_op_linear(be, beta, a->h, l->in_proj_b, t, nv, hid, 0);
    df_op_linear(be, decay, a->h, l->in_proj_a, t, nv, hid, 0);
}

void df_hybrid_deltanet_out(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    const DfModelConfig *c = &m->cfg;
    const DfLinearAttnConfig *la = &c->linear;
    int t = a->n_rows, nv = la->num_value_heads, value_dim = nv * la->value_head_dim;
    DfBuffer core = df_buffer_view(m->hws.core, 0, (size_t)t * value_dim);
    df_op_gated_rmsnorm(m->be, core, df_buffer_view(m->hws.z, 0, (size_t)t * value_dim), l->linear_norm, t * nv,
                        la->value_head_dim, (float)c->rms_norm_eps);
    df_op_linear(m->be, a->x, core, l->out_proj, t, c->hidden_size, value_dim, 1);
}

static void gated_deltanet(DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                           const DfPackedBatch *batch) {
    const DfLinearAttnConfig *la = &m->cfg.linear;
    DfHybridWorkspace *ws = &m->hws;
    int t = a->n_rows, nv = la->num_value_heads, value_dim = nv * la->value_head_dim;
    int conv_dim = 2 * la->num_key_heads * la->key_head_dim + value_dim;
    DfBuffer mixed = df_buffer_view(ws->mixed, 0, (size_t)t * conv_dim), conv = df_buffer_view(ws->conv, 0, (size_t)t * conv_dim);
    DfBuffer beta = df_buffer_view(ws->beta, 0, (size_t)t * nv), decay = df_buffer_view(ws->decay, 0, (size_t)t * nv);
    const DfDeltaRuleShape shape = {la->num_key_heads, nv, la->key_head_dim, la->value_head_dim};
    df_hybrid_deltanet_in(m, l, a);
    df_op_causal_conv_silu(m->be, conv, mixed, l->conv1d, batch, conv_dim, la->conv_kernel);
    df_op_gated_delta_rule(m->be, df_buffer_view(ws->core, 0, (size_t)t * value_dim), conv, beta, decay, l->a_log,
                           l->dt_bias, batch, &shape);
    df_hybrid_deltanet_out(m, l, a);
}

void df_hybrid_layer(DfTargetModel *m, int layer, const DfPackedBatch *batch, DfBuffer rope_cos, DfBuffer rope_sin) {
    const DfModelConfig *c = &m->cfg;
    const DfTargetLayer *l = &m->layers[layer];
    DfTargetWorkspace *ws = &m->ws;
    DfTargetLayerActs a = df_target_layer_acts(c, batch->n_tokens, ws->x, ws->h, ws->q, ws->k, ws->v, ws->attn,
                                               ws->gate, ws->up);
    df_op_rmsnorm(m->be, a.h, a.x, l->input_norm, a.n_rows, c->hidden_size, (float)c->rms_norm_eps);
    if (c->layer_is_linear[layer])
        gated_deltanet(m, l, &a, batch);
    else
        gated_attention(m, l, &a, batch, rope_cos, rope_sin);
    df_target_layer_mlp(m, l, &a);
}
