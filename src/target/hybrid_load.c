/* Loading one decoder layer of a hybrid Qwen3.5 / Qwen3.6 target, with the
 * tensor names of the Hugging Face checkpoints: a linear_attention layer's
 * Gated DeltaNet (linear_attn.*) or a full_attention layer's gated attention
 * (self_attn.*), then the MLP and the two norms every layer has. */
#include <stdio.h>

#include "target/target_family.h"
#include "target/target_weights.h"

typedef struct WeightSpec {
    const char *suffix;
    DfBuffer *dst;
    int ndim;
    int64_t shape[3];
    DfBufKind kind;
    float add; /* 1 for the (1 + w) norms */
    /* kind: F32 for the small parameters (the norms, conv1d, A_log, dt_bias): see target/hybrid_layer.h */
} WeightSpec;

static int load_specs(DfTargetModel *m, const DfSafetensors *st, int layer, const WeightSpec *w, size_t n,
                      DfError *err) {
    for (size_t j = 0; j < n; j++) {
        char name[256];
        snprintf(name, sizeof name, "%slayers.%d.%s", df_target_weight_prefix(&m->cfg), layer, w[j].suffix);
        if (df_target_load_weight(m, st, name, w[j].ndim, w[j].shape, w[j].kind, w[j].add, w[j].dst, err)) return -1;
    }
    return 0;
}

static int load_gated_attention(DfTargetModel *m, const DfSafetensors *st, int i, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    DfTargetLayer *l = &m->layers[i];
    int64_t h = c->hidden_size, q = (int64_t)c->num_heads * c->head_dim, kv = (int64_t)c->num_kv_heads * c->head_dim;
    float one = c->norm_unit_offset ? 1.0f : 0.0f;
    const WeightSpec w[] = {
        {"self_attn.q_proj.weight", &l->q_proj, 2, {2 * q, h}, DF_BUF_ACT, 0},
        {"self_attn.k_proj.weight", &l->k_proj, 2, {kv, h}, DF_BUF_ACT, 0},
        {"self_attn.v_proj.weight", &l->v_proj, 2, {kv, h}, DF_BUF_ACT, 0},
        {"self_attn.o_proj.weight", &l->o_proj, 2, {h, q}, DF_BUF_ACT, 0},
        {"self_attn.q_norm.weight", &l->q_norm, 1, {c->head_dim}, DF_BUF_F32, one},
        {"self_attn.k_norm.weight", &l->k_norm, 1, {c->head_dim}, DF_BUF_F32, one},
    };
    return load_specs(m, st, i, w, sizeof w / sizeof w[0], err);
}

static int load_gated_deltanet(DfTargetModel *m, const DfSafetensors *st, int i, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    const DfLinearAttnConfig *la = &c->linear;
    DfTargetLayer *l = &m->layers[i];
    int64_t h = c->hidden_size, key_dim = (int64_t)la->num_key_heads * la->key_head_dim;
    int64_t value_dim = (int64_t)la->num_value_heads * la->value_head_dim, nv = la->num_value_heads;
    const WeightSpec w[] = {
        {"linear_attn.in_proj_qkv.weight", &l->in_proj_qkv, 2, {2 * key_dim + value_dim, h}, DF_BUF_ACT, 0},
        {"linear_attn.in_proj_z.weight", &l->in_proj_z, 2, {value_dim, h}, DF_BUF_ACT, 0},
        {"linear_attn.in_proj_b.weight", &l->in_proj_b, 2, {nv, h}, DF_BUF_ACT, 0},
        {"linear_attn.in_proj_a.weight", &l->in_proj_a, 2, {nv, h}, DF_BUF_ACT, 0},
        {"linear_attn.out_proj.weight", &l->out_proj, 2, {h, value_dim}, DF_BUF_ACT, 0},
        {"linear_attn.conv1d.weight", &l->conv1d, 3, {2 * key_dim + value_dim, 1, la->conv_kernel}, DF_BUF_F32, 0},
        {"linear_attn.dt_bias", &l->dt_bias, 1, {nv}, DF_BUF_F32, 0},
        {"linear_attn.A_log", &l->a_log, 1, {nv}, DF_BUF_F32, 0},
        {"linear_attn.norm.weight", &l->linear_norm, 1, {la->value_head_dim}, DF_BUF_F32, 0},
    };
    return load_specs(m, st, i, w, sizeof w / sizeof w[0], err);
}

int df_hybrid_load_layer(DfTargetModel *m, const DfSafetensors *st, int i, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    DfTargetLayer *l = &m->layers[i];
    int64_t h = c->hidden_size, inter = c->intermediate_size;
    float one = c->norm_unit_offset ? 1.0f : 0.0f;
    const WeightSpec common[] = {
        {"input_layernorm.weight", &l->input_norm, 1, {h}, DF_BUF_F32, one},
        {"post_attention_layernorm.weight", &l->post_norm, 1, {h}, DF_BUF_F32, one},
        {"mlp.gate_proj.weight", &l->gate_proj, 2, {inter, h}, DF_BUF_ACT, 0},
        {"mlp.up_proj.weight", &l->up_proj, 2, {inter, h}, DF_BUF_ACT, 0},
        {"mlp.down_proj.weight", &l->down_proj, 2, {h, inter}, DF_BUF_ACT, 0},
    };
    if (load_specs(m, st, i, common, sizeof common / sizeof common[0], err)) return -1;
    /* the hybrid family's layer kinds (target_family.c) */
    return c->layer_is_linear[i] ? load_gated_deltanet(m, st, i, err) : load_gated_attention(m, st, i, err);
}
