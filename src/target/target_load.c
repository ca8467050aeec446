/* Loading a target model's weights from a Hugging Face directory onto a
 * backend: only the layers a run needs (a hybrid target's layers: see
 * target/hybrid_load.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "target/hybrid_layer.h"
#include "target/target.h"
#include "target/target_internal.h"
#include "target/target_tensor_set.h"

int df_target_layers_needed(const DfModelConfig *cfg, const int *tap_layer_ids, int n_taps, int with_logits) {
    if (with_logits) return cfg->num_layers;
    int max_tap = -1;
    for (int i = 0; i < n_taps; i++)
        if (tap_layer_ids[i] > max_tap) max_tap = tap_layer_ids[i];
    return max_tap + 1;
}

static size_t shape_count(int ndim, const int64_t *shape) {
    size_t count = 1;
    for (int d = 0; d < ndim; d++) count *= (size_t)shape[d];
    return count;
}

/* Reads `name` as fp32 (shape checked), adds `add`, uploads into dst. */
static int upload_weight(const DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim,
                         const int64_t *shape, float add, DfBuffer dst, DfError *err) {
    size_t count = shape_count(ndim, shape);
    if (dst.count != count)
        return df_fail(err, "%s: %zu values do not fill a buffer of %zu", name, count, dst.count);
    float *host = df_safetensors_load_f32(st, name, ndim, shape, err);
    if (!host) return -1;
    if (add != 0.0f)
        for (size_t i = 0; i < count; i++) host[i] += add;
    int rc = m->be->ops->upload_f32(m->be, dst, host, err);
    free(host);
    if (rc) df_context(err, "uploading %s", name);
    return rc;
}

/* The tensor is in the file with the shape config.json implies: checked
 * before anything is allocated for it, so that a config larger than its
 * weights says which tensor and both shapes instead of running out of
 * memory for a buffer the file could never fill. */
static int check_shape(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape, DfError *err) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) return df_fail(err, "tensor %s is missing from the safetensors", name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (same) return 0;
    char want[64] = "", have[64] = "";
    for (int d = 0; d < ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
    for (int d = 0; d < t->ndim; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    return df_fail(err, "tensor %s is [%s] in %s, config.json implies [%s]", name, have, t->file, want);
}

int df_target_load_weight(DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                          DfBufKind kind, float add, DfBuffer *out, DfError *err) {
    if (check_shape(st, name, ndim, shape, err)) return -1;
    if (df_buffer_alloc(m->be, out, kind, shape_count(ndim, shape), err)) return df_context(err, "uploading %s", name);
    return upload_weight(m, st, name, ndim, shape, add, *out, err);
}

int df_target_load_weight_into(const DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim,
                               const int64_t *shape, DfBuffer dst, DfError *err) {
    return upload_weight(m, st, name, ndim, shape, 0.0f, dst, err);
}

/* Reads one tensor of the expected shape as fp32 and uploads it. */
static int load_weight(DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim, int64_t d0, int64_t d1,
                       DfBuffer *out, DfError *err) {
    int64_t shape[2] = {d0, d1};
    return df_target_load_weight(m, st, name, ndim, shape, DF_BUF_ACT, 0.0f, out, err);
}

const char *df_target_weight_prefix(const DfModelConfig *c) {
    return c->weight_prefix[0] ? c->weight_prefix : "model.";
}

static int load_layer(DfTargetModel *m, const DfSafetensors *st, int i, DfError *err) {
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
        if (check_shape(st, names[j], w[j].ndim, shape, err)) return -1;
    }
    /* q/k/v and gate/up become views into the fused owners: they are loaded in place */
    if (df_target_layer_alloc_fused(m, l, err)) return df_context(err, "layer %d", i);
    for (int j = 0; j < n; j++) {
        const char *name = names[j];
        int64_t shape[2] = {w[j].d0, w[j].d1};
        int rc = w[j].dst->ptr ? df_target_load_weight_into(m, st, name, w[j].ndim, shape, *w[j].dst, err)
                               : load_weight(m, st, name, w[j].ndim, w[j].d0, w[j].d1, w[j].dst, err);
        if (rc) return -1;
    }
    return 0;
}

static int load_weights(DfTargetModel *m, const DfSafetensors *st, int with_head, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", df_target_weight_prefix(c));
    if (load_weight(m, st, name, 2, c->vocab_size, c->hidden_size, &m->embed, err)) return -1;
    for (int i = 0; i < m->n_layers_loaded; i++)
        if ((c->is_hybrid ? df_hybrid_load_layer(m, st, i, err) : load_layer(m, st, i, err))) return -1;
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

void df_target_free(DfTargetModel *m) {
    if (!m->be) return;
    DfBackend *be = m->be;
    for (int i = 0; m->layers && i < m->n_layers_loaded; i++) df_target_layer_free(be, &m->layers[i]);
    free(m->layers);
    if (!m->lm_head_tied) df_buffer_free(be, &m->lm_head);
    df_buffer_free(be, &m->embed);
    df_buffer_free(be, &m->final_norm);
    df_buffer_free(be, &m->rope_cos);
    df_buffer_free(be, &m->rope_sin);
    df_target_workspace_free(be, &m->ws);
    df_hybrid_workspace_free(be, &m->hws);
    free(m->dir);
    memset(m, 0, sizeof *m);
}
