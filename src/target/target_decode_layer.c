/* The fused dense decoder layer: rmsnorm, the q/k/v product, qkv_rope_cache
 * (q into the workspace, k and v straight into the cache), kv_attention,
 * o_proj, rmsnorm, the gate/up product, swiglu_packed, down. The same
 * values as df_target_layer_qkv + kv_cache_write + df_target_layer_finish
 * given the same products. */
#include "target/target_decode_layer.h"

#include <math.h>

int df_target_decode_can_fuse(const DfTargetModel *m) {
    if (m->cfg.is_hybrid) return 0;
    for (int i = 0; i < m->n_layers_loaded; i++)
        if (!m->layers[i].qkv_proj.ptr || !m->layers[i].gate_up_proj.ptr) return 0;
    return 1;
}

static void fused_attention(DfTargetDecoder *d, int layer, const DfKvBatch *kb) {
    DfTargetModel *m = d->model;
    const DfTargetLayer *l = &m->layers[layer];
    const DfModelConfig *c = &m->cfg;
    DfBackend *be = m->be;
    int t = kb->n_rows, hid = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    size_t qd = (size_t)nh * hd, width = (size_t)(nh + 2 * nkv) * hd;
    DfBuffer x = df_buffer_view(d->x, 0, (size_t)t * hid), h = df_buffer_view(d->h, 0, (size_t)t * hid);
    DfBuffer q = df_buffer_view(d->q, 0, (size_t)t * qd), attn = df_buffer_view(d->attn, 0, (size_t)t * qd);
    float eps = (float)c->rms_norm_eps;
    df_op_rmsnorm(be, h, x, l->input_norm, t, hid, eps);
    df_op_linear(be, df_buffer_view(d->qkv, 0, (size_t)t * width), h, l->qkv_proj, t, (int)width, hid, 0);
    DfQkvRopeCacheArgs a = {
        .batch = kb,
        .qkv = df_buffer_view(d->qkv, 0, (size_t)t * width),
        .q_norm = c->has_qk_norm ? l->q_norm : (DfBuffer){0},
        .k_norm = c->has_qk_norm ? l->k_norm : (DfBuffer){0},
        .eps = eps,
        .cos_table = d->rope_cos,
        .sin_table = d->rope_sin,
        .q_out = q,
        .k_cache = d->cache.k[layer],
        .v_cache = d->cache.v[layer],
        .heads = nh,
        .kv_heads = nkv,
        .head_dim = hd,
    };
    df_op_qkv_rope_cache(be, &a);
    df_op_kv_attention(be, attn, q, d->cache.k[layer], d->cache.v[layer], kb, nh, nkv, hd, 1.0f / sqrtf((float)hd),
                       1);
    df_op_linear(be, x, attn, l->o_proj, t, hid, (int)qd, 1);
}

static void fused_mlp(DfTargetDecoder *d, int layer, int t) {
    DfTargetModel *m = d->model;
    const DfTargetLayer *l = &m->layers[layer];
    const DfModelConfig *c = &m->cfg;
    DfBackend *be = m->be;
    int hid = c->hidden_size, inter = c->intermediate_size;
    DfBuffer x = df_buffer_view(d->x, 0, (size_t)t * hid), h = df_buffer_view(d->h, 0, (size_t)t * hid);
    DfBuffer gate_up = df_buffer_view(d->gate_up, 0, (size_t)t * 2 * inter);
    DfBuffer act = df_buffer_view(d->gate, 0, (size_t)t * inter);
    df_op_rmsnorm(be, h, x, l->post_norm, t, hid, (float)c->rms_norm_eps);
    df_op_linear(be, gate_up, h, l->gate_up_proj, t, 2 * inter, hid, 0);
    df_op_swiglu_packed(be, act, gate_up, t, inter);
    df_op_linear(be, x, act, l->down_proj, t, hid, inter, 1);
}

void df_target_decode_fused_layer(DfTargetDecoder *d, int layer, const DfKvBatch *kb) {
    fused_attention(d, layer, kb);
    fused_mlp(d, layer, kb->n_rows);
}
