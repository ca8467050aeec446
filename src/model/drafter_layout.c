#include "model/drafter_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"

static int add_param(DfDrafterLayout *l, const char *name, DfParamKind kind, int64_t rows, int64_t cols) {
    DfParamInfo *p = &l->params[l->n_params];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols > 0 ? cols : 0;
    p->count = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    p->offset = l->total;
    l->total += p->count;
    return l->n_params++;
}

static int add_layer_param(DfDrafterLayout *l, int layer, const char *suffix, DfParamKind kind, int64_t rows,
                           int64_t cols) {
    char name[96];
    snprintf(name, sizeof name, "layers.%d.%s", layer, suffix);
    return add_param(l, name, kind, rows, cols);
}

void df_drafter_layout_build(DfDrafterLayout *l, const DfDrafterConfig *c) {
    memset(l, 0, sizeof *l);
    const int H = c->hidden_size, I = c->intermediate_size;
    const int q_dim = c->num_heads * c->head_dim, kv_dim = c->num_kv_heads * c->head_dim;
    l->num_layers = c->num_layers;
    l->params = df_xcalloc((size_t)(3 + 11 * c->num_layers), sizeof *l->params, "drafter layout");
    l->layers = df_xcalloc((size_t)c->num_layers, sizeof *l->layers, "drafter layout");
    l->fc = add_param(l, "fc.weight", DF_PARAM_LINEAR, H, (int64_t)c->n_taps * H);
    l->hidden_norm = add_param(l, "hidden_norm.weight", DF_PARAM_NORM, H, 0);
    for (int i = 0; i < c->num_layers; i++) {
        DfDrafterLayerIndex *x = &l->layers[i];
        x->input_layernorm = add_layer_param(l, i, "input_layernorm.weight", DF_PARAM_NORM, H, 0);
        x->q_proj = add_layer_param(l, i, "self_attn.q_proj.weight", DF_PARAM_LINEAR, q_dim, H);
        x->k_proj = add_layer_param(l, i, "self_attn.k_proj.weight", DF_PARAM_LINEAR, kv_dim, H);
        x->v_proj = add_layer_param(l, i, "self_attn.v_proj.weight", DF_PARAM_LINEAR, kv_dim, H);
        x->o_proj = add_layer_param(l, i, "self_attn.o_proj.weight", DF_PARAM_LINEAR, H, q_dim);
        x->q_norm = add_layer_param(l, i, "self_attn.q_norm.weight", DF_PARAM_NORM, c->head_dim, 0);
        x->k_norm = add_layer_param(l, i, "self_attn.k_norm.weight", DF_PARAM_NORM, c->head_dim, 0);
        x->post_attention_layernorm = add_layer_param(l, i, "post_attention_layernorm.weight", DF_PARAM_NORM, H, 0);
        x->gate_proj = add_layer_param(l, i, "mlp.gate_proj.weight", DF_PARAM_LINEAR, I, H);
        x->up_proj = add_layer_param(l, i, "mlp.up_proj.weight", DF_PARAM_LINEAR, I, H);
        x->down_proj = add_layer_param(l, i, "mlp.down_proj.weight", DF_PARAM_LINEAR, H, I);
    }
    l->norm = add_param(l, "norm.weight", DF_PARAM_NORM, H, 0);
}

void df_drafter_layout_free(DfDrafterLayout *l) {
    free(l->params);
    free(l->layers);
    memset(l, 0, sizeof *l);
}

int df_drafter_layout_find(const DfDrafterLayout *l, const char *name) {
    for (int i = 0; i < l->n_params; i++)
        if (strcmp(l->params[i].name, name) == 0) return i;
    return -1;
}

void df_drafter_init_params(const DfDrafterLayout *l, float *flat, uint64_t seed) {
    for (int i = 0; i < l->n_params; i++) {
        const DfParamInfo *p = &l->params[i];
        float *w = flat + p->offset;
        if (p->kind == DF_PARAM_NORM) {
            for (size_t j = 0; j < p->count; j++) w[j] = 1.0f;
            continue;
        }
        DfRng rng = df_rng_key(seed, df_rng_stream(DF_RNG_DOMAIN_INIT, 0), (uint64_t)i);
        for (size_t j = 0; j < p->count; j++) w[j] = (float)(0.02 * df_rng_normal(&rng));
    }
}
