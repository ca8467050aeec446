/* The hybrid layers' own steps (target/hybrid_layer.h). */
#include "target/hybrid_layer.h"

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

