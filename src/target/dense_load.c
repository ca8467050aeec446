/* Loading one decoder layer of a dense Qwen3 / Llama-3 target, with the
 * tensor names of the Hugging Face checkpoints: q/k/v and gate/up are
 * loaded in place into the fused owners (target_layer_storage.h). */
#include "target/target_family.h"

#include <stdio.h>

#include "target/target_layer_storage.h"
#include "target/target_weights.h"

int df_dense_load_layer(DfTargetModel *m, const DfSafetensors *st, int i, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    DfTargetLayer *l = &m->layers[i];
    int64_t h = c->hidden_size, q = (int64_t)c->num_heads * c->head_dim, kv = (int64_t)c->num_kv_heads * c->head_dim;
    int64_t inter = c->intermediate_size;
    struct {
        const char *suffix;
        DfBuffer *dst;
        int ndim;
        int64_t d0, d1;
    } w[] = {
        {"input_layernorm.weight", &l->input_norm, 1, h, 0},
        {"self_attn.q_proj.weight", &l->q_proj, 2, q, h},
        {"self_attn.k_proj.weight", &l->k_proj, 2, kv, h},
        {"self_attn.v_proj.weight", &l->v_proj, 2, kv, h},
        {"self_attn.o_proj.weight", &l->o_proj, 2, h, q},
        {"post_attention_layernorm.weight", &l->post_norm, 1, h, 0},
        {"mlp.gate_proj.weight", &l->gate_proj, 2, inter, h},
        {"mlp.up_proj.weight", &l->up_proj, 2, inter, h},
        {"mlp.down_proj.weight", &l->down_proj, 2, h, inter},
        {"self_attn.q_norm.weight", &l->q_norm, 1, c->head_dim, 0},
        {"self_attn.k_norm.weight", &l->k_norm, 1, c->head_dim, 0},
    };
    int n = c->has_qk_norm ? 11 : 9;
    char names[11][256];
    for (int j = 0; j < n; j++) { /* every shape first: the fused owners below are allocated from them */
        snprintf(names[j], sizeof names[j], "%slayers.%d.%s", df_target_weight_prefix(c), i, w[j].suffix);
        int64_t shape[2] = {w[j].d0, w[j].d1};
        if (df_target_check_weight_shape(st, names[j], w[j].ndim, shape, err)) return -1;
    }
    /* q/k/v and gate/up become views into the fused owners: they are loaded in place */
    if (df_target_layer_alloc_fused(m, l, err)) return df_context(err, "layer %d", i);
    for (int j = 0; j < n; j++) {
        const char *name = names[j];
        int64_t shape[2] = {w[j].d0, w[j].d1};
        int rc = w[j].dst->ptr ? df_target_load_weight_into(m, st, name, w[j].ndim, shape, *w[j].dst, err)
                               : df_target_load_weight(m, st, name, w[j].ndim, shape, DF_BUF_ACT, 0.0f, w[j].dst, err);
        if (rc) return -1;
    }
    return 0;
}
