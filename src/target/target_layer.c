/* The layer builder (target/target_layer.h). */
#include "target/target_layer.h"

#include "target/hybrid_layer.h"
#include "target/target_family.h"

static DfBuffer first_rows(DfBuffer b, size_t count) {
    return b.count ? df_buffer_view(b, 0, count) : b;
}

DfTargetLayerActs df_target_layer_acts(const DfModelConfig *c, int n_rows, const DfTargetLayerBuffers *b) {
    size_t t = (size_t)n_rows, hid = (size_t)c->hidden_size, qd = (size_t)c->num_heads * c->head_dim;
    size_t kvd = (size_t)c->num_kv_heads * c->head_dim, inter = (size_t)c->intermediate_size;
    DfTargetLayerActs a = {
        .n_rows = n_rows,
        .x = first_rows(b->x, t * hid),
        .h = first_rows(b->h, t * hid),
        .q = first_rows(b->q, t * qd),
        .k = first_rows(b->k, t * kvd),
        .v = first_rows(b->v, t * kvd),
        .attn = first_rows(b->attn, t * qd),
        .gate = first_rows(b->gate, t * inter),
        .up = first_rows(b->up, t * inter),
        .qkv = first_rows(b->qkv, t * (qd + 2 * kvd)),
        .gate_up = first_rows(b->gate_up, t * 2 * inter),
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

/* q, k, v of a->h: normed (Qwen3) and rotated at the rows' positions. */
static void attention_qkv(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a,
                          const DfSequenceSteps *s) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, hid = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    DfBuffer qkv = fused_qkv_scratch(c, l, a);
    if (qkv.ptr) { /* one [t, width] product is faster than three narrower ones */
        qkv_one_product(m, l, a, qkv, s->positions, s->rope_cos, s->rope_sin);
        return;
    }
    df_op_linear(be, a->q, a->h, l->q_proj, t, nh * hd, hid, 0);
    df_op_linear(be, a->k, a->h, l->k_proj, t, nkv * hd, hid, 0);
    df_op_linear(be, a->v, a->h, l->v_proj, t, nkv * hd, hid, 0);
    if (c->has_qk_norm) { /* the norm and rope in one pass: bit for bit the two ops */
        df_op_rmsnorm_rope(be, a->q, a->q, nh * hd, l->q_norm, s->positions, s->rope_cos, s->rope_sin, t, nh, hd, eps);
        df_op_rmsnorm_rope(be, a->k, a->k, nkv * hd, l->k_norm, s->positions, s->rope_cos, s->rope_sin, t, nkv, hd, eps);
        return;
    }
    df_op_rope(be, a->q, s->positions, s->rope_cos, s->rope_sin, t, nh, hd);
    df_op_rope(be, a->k, s->positions, s->rope_cos, s->rope_sin, t, nkv, hd);
}

/* The MLP over the fused gate|up weight: one product, then swiglu over its
 * two halves into gate: the values of the two products up to their
 * summation order. */
static void fused_mlp(const DfTargetModel *m, const DfTargetLayer *l, const DfTargetLayerActs *a) {
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = a->n_rows, hid = c->hidden_size, inter = c->intermediate_size;
    df_op_rmsnorm(be, a->h, a->x, l->post_norm, t, hid, (float)c->rms_norm_eps);
    df_op_linear(be, a->gate_up, a->h, l->gate_up_proj, t, 2 * inter, hid, 0);
    df_op_swiglu_packed(be, a->gate, a->gate_up, t, inter);
    df_op_linear(be, a->x, a->gate, l->down_proj, t, hid, inter, 1);
}

/* A dense layer. With a->qkv (fused decoding) the q|k|v product goes to the
 * steps raw: one op there does the norms, rope and cache writes. */
static void attention_layer(DfTargetModel *m, int layer, const DfTargetLayerActs *a, const DfSequenceSteps *s) {
    const DfModelConfig *c = &m->cfg;
    const DfTargetLayer *l = &m->layers[layer];
    int t = a->n_rows, qd = c->num_heads * c->head_dim, width = (c->num_heads + 2 * c->num_kv_heads) * c->head_dim;
    if (a->qkv.ptr) {
        df_op_linear(m->be, a->qkv, a->h, l->qkv_proj, t, width, c->hidden_size, 0);
        s->attend_qkv(s->self, layer, a);
    } else {
        attention_qkv(m, l, a, s);
        s->attend(s->self, layer, a);
    }
    df_op_linear(m->be, a->x, a->attn, l->o_proj, t, c->hidden_size, qd, 1);
    if (a->gate_up.ptr)
        fused_mlp(m, l, a);
    else
        df_target_layer_mlp(m, l, a);
}

static void gated_attention_layer(DfTargetModel *m, int layer, const DfTargetLayerActs *a, const DfSequenceSteps *s) {
    const DfTargetLayer *l = &m->layers[layer];
    df_hybrid_attention_qkv(m, l, a, s->positions, s->rope_cos, s->rope_sin);
    s->attend(s->self, layer, a);
    df_hybrid_attention_out(m, l, a);
    df_target_layer_mlp(m, l, a);
}

static void gated_deltanet_layer(DfTargetModel *m, int layer, const DfTargetLayerActs *a, const DfSequenceSteps *s) {
    const DfTargetLayer *l = &m->layers[layer];
    df_hybrid_deltanet_in(m, l, a);
    s->recur(s->self, layer, a->n_rows);
    df_hybrid_deltanet_out(m, l, a);
    df_target_layer_mlp(m, l, a);
}

void df_target_layer(DfTargetModel *m, int layer, const DfTargetLayerActs *a, const DfSequenceSteps *s) {
    const DfModelConfig *c = &m->cfg;
    df_op_rmsnorm(m->be, a->h, a->x, m->layers[layer].input_norm, a->n_rows, c->hidden_size, (float)c->rms_norm_eps);
    switch (m->family->layer_kind(c, layer)) {
    case DF_LAYER_ATTENTION: attention_layer(m, layer, a, s); break;
    case DF_LAYER_GATED_ATTENTION: gated_attention_layer(m, layer, a, s); break;
    case DF_LAYER_GATED_DELTANET: gated_deltanet_layer(m, layer, a, s); break;
    }
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
