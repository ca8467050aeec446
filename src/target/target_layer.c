#include "target/target_layer.h"

DfTargetLayerActs df_target_layer_acts(const DfModelConfig *c, int t, DfBuffer x, DfBuffer h, DfBuffer q, DfBuffer k,
                                       DfBuffer v, DfBuffer attn, DfBuffer gate, DfBuffer up) {
    size_t hid = (size_t)c->hidden_size, qd = (size_t)c->num_heads * c->head_dim;
    size_t kvd = (size_t)c->num_kv_heads * c->head_dim, inter = (size_t)c->intermediate_size;
    DfTargetLayerActs a = {
        .n_rows = t,
        .x = df_buffer_view(x, 0, t * hid),
        .h = df_buffer_view(h, 0, t * hid),
        .q = df_buffer_view(q, 0, t * qd),
        .k = df_buffer_view(k, 0, t * kvd),
        .v = df_buffer_view(v, 0, t * kvd),
        .attn = df_buffer_view(attn, 0, t * qd),
        .gate = df_buffer_view(gate, 0, t * inter),
        .up = df_buffer_view(up, 0, t * inter),
    };
    return a;
}

/* Scratch for the one q/k/v product [t, (heads + 2 * kv_heads) * head_dim]:
 * the layer's gate buffer, [t, intermediate_size] in both callers'
 * workspaces (df_target_workspace_specs; the decoder's split layers,
 * target/target_decode.c). Nothing reads gate between the layer's start and
 * the MLP, whose gate product writes it over (attention reads q, k, v and
 * writes attn, which o_proj reads), so borrowing it adds no memory. Empty
 * where it cannot be used: models without q/k norms (their plain rope runs
 * in place, with no op to read strided columns), layers without the fused
 * weight, or intermediate_size below the product's width. */
static DfBuffer fused_qkv_scratch(const DfModelConfig *c, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    size_t need = (size_t)a->n_rows * (size_t)(c->num_heads + 2 * c->num_kv_heads) * c->head_dim;
    if (!c->has_qk_norm || !l->qkv_proj.ptr || !a->gate.ptr || a->gate.count < need) return (DfBuffer){0};
    return df_buffer_view(a->gate, 0, need);
}

/* q, k, v as one product of the fused weight into qkv (q, k, v columns a
 * row), then the q and k norms with their rope read from its columns into
 * a->q and a->k (one op), and v copied out into a->v: the values of the
 * three products up to their summation order. */
static void qkv_one_product(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a, DfBuffer qkv,
                            DfBuffer positions, DfBuffer rope_cos, DfBuffer rope_sin) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    int qd = nh * hd, kvd = nkv * hd, width = qd + 2 * kvd;
    float eps = (float)c->rms_norm_eps;
    df_op_linear(be, qkv, a->h, l->qkv_proj, t, width, c->hidden_size, 0);
    DfBuffer v_cols = df_buffer_view(qkv, (size_t)(qd + kvd), qkv.count - (size_t)(qd + kvd));
    df_op_qk_norm_rope(be, a->q, a->k, qkv, width, l->q_norm, l->k_norm, positions, rope_cos, rope_sin, t, nh, nkv, hd,
                       eps);
    df_op_copy2d(be, a->v, kvd, v_cols, width, t, kvd);
}

void df_target_layer_qkv(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                         DfBuffer positions, DfBuffer rope_cos, DfBuffer rope_sin) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, hid = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    df_op_rmsnorm(be, a->h, a->x, l->input_norm, t, hid, eps);
    DfBuffer qkv = fused_qkv_scratch(c, l, a);
    if (qkv.ptr) { /* one [t, width] product is faster than three narrower ones */
        qkv_one_product(m, l, a, qkv, positions, rope_cos, rope_sin);
        return;
    }
    df_op_linear(be, a->q, a->h, l->q_proj, t, nh * hd, hid, 0);
    df_op_linear(be, a->k, a->h, l->k_proj, t, nkv * hd, hid, 0);
    df_op_linear(be, a->v, a->h, l->v_proj, t, nkv * hd, hid, 0);
    if (c->has_qk_norm) { /* the norm and rope in one pass: bit for bit the two ops */
        df_op_rmsnorm_rope(be, a->q, a->q, nh * hd, l->q_norm, positions, rope_cos, rope_sin, t, nh, hd, eps);
        df_op_rmsnorm_rope(be, a->k, a->k, nkv * hd, l->k_norm, positions, rope_cos, rope_sin, t, nkv, hd, eps);
        return;
    }
    df_op_rope(be, a->q, positions, rope_cos, rope_sin, t, nh, hd);
    df_op_rope(be, a->k, positions, rope_cos, rope_sin, t, nkv, hd);
}

void df_target_layer_finish(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    const DfModelConfig *c = &m->cfg;
    df_op_linear(m->be, a->x, a->attn, l->o_proj, a->n_rows, c->hidden_size, c->num_heads * c->head_dim, 1);
    df_target_layer_mlp(m, l, a);
}

void df_target_layer_mlp(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, hid = c->hidden_size, inter = c->intermediate_size;
    df_op_rmsnorm(be, a->h, a->x, l->post_norm, t, hid, (float)c->rms_norm_eps);
    df_op_linear(be, a->gate, a->h, l->gate_proj, t, inter, hid, 0);
    df_op_linear(be, a->up, a->h, l->up_proj, t, inter, hid, 0);
    df_op_swiglu(be, a->gate, a->gate, a->up);
    df_op_linear(be, a->x, a->gate, l->down_proj, t, hid, inter, 1);
}
