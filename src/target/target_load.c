/* Loading a target model's weights from a Hugging Face directory onto a
 * backend: only the layers a run needs, each by its family's layer loader
 * (dense_load.c, hybrid_load.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "target/target.h"
#include "target/target_family.h"
#include "target/target_tensor_set.h"
#include "target/target_weights.h"

/* Reads one tensor of the expected shape as fp32 and uploads it. */
static int load_weight(DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim, int64_t d0, int64_t d1,
                       DfBuffer *out, DfError *err) {
    int64_t shape[2] = {d0, d1};
    return df_target_load_weight(m, st, name, ndim, shape, DF_BUF_ACT, 0.0f, out, err);
}

static int load_weights(DfTargetModel *m, const DfSafetensors *st, int with_head, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", df_target_weight_prefix(c));
    if (load_weight(m, st, name, 2, c->vocab_size, c->hidden_size, &m->embed, err)) return -1;
    for (int i = 0; i < m->n_layers_loaded; i++)
        if (m->family->load_layer(m, st, i, err)) return -1;
    if (!with_head) return 0;
    int64_t hidden = c->hidden_size;
    snprintf(name, sizeof name, "%snorm.weight", df_target_weight_prefix(c));
    /* a (1 + w) norm's weight stays F32 (target/hybrid_layer.h) */
    if (df_target_load_weight(m, st, name, 1, &hidden, c->norm_unit_offset ? DF_BUF_F32 : DF_BUF_ACT,
                              c->norm_unit_offset ? 1.0f : 0.0f, &m->final_norm, err))
        return -1;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head_tied = 1;
    } else if (load_weight(m, st, "lm_head.weight", 2, c->vocab_size, c->hidden_size, &m->lm_head, err)) {
        return df_context(err, "config.json has tie_word_embeddings false");
    }
    m->has_head = 1;
    return 0;
}

int df_target_load(DfTargetModel *m, DfBackend *be, const char *dir, int n_layers, int with_head, DfError *err) {
    memset(m, 0, sizeof *m);
    m->be = be;
    if (df_model_config_load(&m->cfg, dir, err)) return -1;
    m->family = df_target_family(&m->cfg);
    const DfModelConfig *c = &m->cfg;
    if (c->head_dim % 2 != 0) return df_fail(err, "%s: head_dim %d is odd, RoPE needs it even", dir, c->head_dim);
    if (c->num_heads % c->num_kv_heads != 0)
        return df_fail(err, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", dir,
                       c->num_heads, c->num_kv_heads);
    if (n_layers < 0 || n_layers > c->num_layers)
        return df_fail(err, "%s: asked for %d layers, the model has %d", dir, n_layers, c->num_layers);
    DfSafetensors st;
    if (df_safetensors_open(&st, dir, err)) return -1;
    if (df_target_check_tensor_set(c, &st, err)) {
        df_safetensors_close(&st);
        memset(m, 0, sizeof *m);
        return df_context(err, "loading target %s", dir);
    }
    m->n_layers_loaded = n_layers;
    m->dir = df_xstrdup(dir);
    m->layers = df_xcalloc((size_t)n_layers, sizeof *m->layers, "target layers");
    int rc = load_weights(m, &st, with_head, err);
    df_safetensors_close(&st);
    if (rc) {
        df_context(err, "loading target %s", dir);
        df_target_free(m);
    }
    return rc;
}

