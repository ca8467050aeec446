/* Random-weight targets: every tensor is generated on the host in blocks
 * (Philox, one generator per block of values, so blocks fill in parallel)
 * and uploaded through the backend's upload_f32 into its ACT dtype. */
#include "target/target_random.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "target/target_family.h"
#include "target/target_layer_storage.h"

#define HOST_BLOCK ((size_t)1 << 24) /* values generated and uploaded at a time */
#define GEN_CHUNK ((size_t)1 << 16)  /* values per generator */

typedef struct RandomFill {
    uint64_t seed;
    uint32_t tensor; /* running tensor number: the rng stream */
    float *host;     /* HOST_BLOCK values */
} RandomFill;

/* Fills an existing buffer (or view) with center + uniform[-half, half]
 * from the next tensor's rng stream. */
static int fill_values(DfBackend *be, RandomFill *f, DfBuffer out, float center, float half, DfError *err) {
    size_t count = out.count;
    uint32_t stream = df_rng_stream(DF_RNG_DOMAIN_INIT, f->tensor++);
    for (size_t off = 0; off < count; off += HOST_BLOCK) {
        size_t n = count - off < HOST_BLOCK ? count - off : HOST_BLOCK;
        long chunks = (long)((n + GEN_CHUNK - 1) / GEN_CHUNK);
#pragma omp parallel for schedule(static)
        for (long c = 0; c < chunks; c++) {
            size_t lo = (size_t)c * GEN_CHUNK, hi = lo + GEN_CHUNK < n ? lo + GEN_CHUNK : n;
            DfRng r = df_rng_key(f->seed, stream, (off + lo) / GEN_CHUNK);
            for (size_t i = lo; i < hi; i++) f->host[i] = center + half * (2.0f * df_rng_float(&r) - 1.0f);
        }
        if (be->ops->upload_f32(be, df_buffer_view(out, off, n), f->host, err)) return -1;
    }
    return 0;
}

/* Allocates count values of `kind` and fills them (fill_values). */
static int fill_kind(DfBackend *be, RandomFill *f, DfBuffer *out, DfBufKind kind, size_t count, float center,
                     float half, DfError *err) {
    if (df_buffer_alloc(be, out, kind, count, err)) return -1;
    return fill_values(be, f, *out, center, half, err);
}

static int fill_tensor(DfBackend *be, RandomFill *f, DfBuffer *out, size_t count, float center, float half,
                       DfError *err) {
    return fill_kind(be, f, out, DF_BUF_ACT, count, center, half, err);
}

/* uniform with variance 1/fan_in: half-width sqrt(3/fan_in) */
static float matrix_half_width(int fan_in) {
    return sqrtf(3.0f / (float)fan_in);
}

static int fill_matrix(DfBackend *be, RandomFill *f, DfBuffer *out, int rows, int fan_in, DfError *err) {
    return fill_tensor(be, f, out, (size_t)rows * fan_in, 0.0f, matrix_half_width(fan_in), err);
}

/* A view into a fused owner (target/target.h), filled as fill_matrix would a buffer of its own. */
static int fill_matrix_view(DfBackend *be, RandomFill *f, DfBuffer view, int fan_in, DfError *err) {
    return fill_values(be, f, view, 0.0f, matrix_half_width(fan_in), err);
}

static int fill_norm(DfBackend *be, RandomFill *f, DfBuffer *out, int dim, DfError *err) {
    return fill_tensor(be, f, out, (size_t)dim, 1.0f, 0.1f, err);
}

/* A hybrid layer's small parameters are F32 (target/hybrid_layer.h). */
static int fill_norm_f32(DfBackend *be, RandomFill *f, DfBuffer *out, int dim, DfError *err) {
    return fill_kind(be, f, out, DF_BUF_F32, (size_t)dim, 1.0f, 0.1f, err);
}

/* A hybrid target's Gated DeltaNet. Its small parameters: conv1d uniform
 * with variance 1/kernel; A_log uniform in [0, log 16] (transformers draws
 * A from uniform(0, 16) and stores its log); dt_bias 1 +- 0.1 (transformers:
 * ones); the gated norm's weight 1 +- 0.1. */
static int fill_gated_deltanet(DfTargetModel *m, RandomFill *f, DfTargetLayer *l, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    const DfLinearAttnConfig *la = &c->linear;
    DfBackend *be = m->be;
    int h = c->hidden_size, nv = la->num_value_heads, value = nv * la->value_head_dim;
    int conv = 2 * la->num_key_heads * la->key_head_dim + value, kernel = la->conv_kernel;
    float log16 = logf(16.0f);
    return fill_matrix(be, f, &l->in_proj_qkv, conv, h, err) || fill_matrix(be, f, &l->in_proj_z, value, h, err) ||
                   fill_matrix(be, f, &l->in_proj_b, nv, h, err) || fill_matrix(be, f, &l->in_proj_a, nv, h, err) ||
                   fill_matrix(be, f, &l->out_proj, h, value, err) ||
                   fill_kind(be, f, &l->conv1d, DF_BUF_F32, (size_t)conv * kernel, 0.0f,
                             sqrtf(3.0f / (float)kernel), err) ||
                   fill_kind(be, f, &l->a_log, DF_BUF_F32, (size_t)nv, log16 / 2, log16 / 2, err) ||
                   fill_kind(be, f, &l->dt_bias, DF_BUF_F32, (size_t)nv, 1.0f, 0.1f, err) ||
                   fill_norm_f32(be, f, &l->linear_norm, la->value_head_dim, err)
               ? -1
               : 0;
}

/* A hybrid target's layer: the (1 + w) norms F32, a gated q_proj of twice
 * the width, or a Gated DeltaNet instead of the attention. */
static int fill_hybrid_layer(DfTargetModel *m, RandomFill *f, DfTargetLayer *l, int layer, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    DfBackend *be = m->be;
    int h = c->hidden_size, q = c->num_heads * c->head_dim, kv = c->num_kv_heads * c->head_dim;
    int inter = c->intermediate_size;
    if (fill_norm_f32(be, f, &l->input_norm, h, err) || fill_norm_f32(be, f, &l->post_norm, h, err) ||
        fill_matrix(be, f, &l->gate_proj, inter, h, err) || fill_matrix(be, f, &l->up_proj, inter, h, err) ||
        fill_matrix(be, f, &l->down_proj, h, inter, err))
        return -1;
    if (m->family->layer_kind(c, layer) == DF_LAYER_GATED_DELTANET) return fill_gated_deltanet(m, f, l, err);
    return fill_matrix(be, f, &l->q_proj, 2 * q, h, err) || fill_matrix(be, f, &l->k_proj, kv, h, err) ||
                   fill_matrix(be, f, &l->v_proj, kv, h, err) || fill_matrix(be, f, &l->o_proj, h, q, err) ||
                   fill_norm_f32(be, f, &l->q_norm, c->head_dim, err) ||
                   fill_norm_f32(be, f, &l->k_norm, c->head_dim, err)
               ? -1
               : 0;
}

/* A dense layer: q/k/v and gate/up are views into the fused owners, filled
 * in the same order (the same rng streams) as separate tensors were. */
static int fill_layer(DfTargetModel *m, RandomFill *f, DfTargetLayer *l, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    DfBackend *be = m->be;
    int h = c->hidden_size, q = c->num_heads * c->head_dim, inter = c->intermediate_size;
    if (df_target_layer_alloc_fused(m, l, err)) return -1;
    if (fill_norm(be, f, &l->input_norm, h, err) || fill_matrix_view(be, f, l->q_proj, h, err) ||
        fill_matrix_view(be, f, l->k_proj, h, err) || fill_matrix_view(be, f, l->v_proj, h, err) ||
        fill_matrix(be, f, &l->o_proj, h, q, err) || fill_norm(be, f, &l->post_norm, h, err) ||
        fill_matrix_view(be, f, l->gate_proj, h, err) || fill_matrix_view(be, f, l->up_proj, h, err) ||
        fill_matrix(be, f, &l->down_proj, h, inter, err))
        return -1;
    if (c->has_qk_norm &&
        (fill_norm(be, f, &l->q_norm, c->head_dim, err) || fill_norm(be, f, &l->k_norm, c->head_dim, err)))
        return -1;
    return 0;
}

/* Tensors (rng streams) the fill of layer i takes: fill_layer's 9 (+ the q/k
 * norms), or fill_hybrid_layer's 5 + 9 (Gated DeltaNet) or 5 + 6 (gated
 * attention). Layers not built still use up their streams, so that the
 * head's values do not depend on how many layers were built (a split
 * layout's drafter rank builds none, yet must have the head of a rank that
 * built them: tests/test_target_memory.c checks it). */
static uint32_t layer_tensors(const DfModelConfig *c, int layer) {
    switch (df_target_layer_kind(c, layer)) {
    case DF_LAYER_ATTENTION: return c->has_qk_norm ? 11 : 9;
    case DF_LAYER_GATED_ATTENTION: return 11;
    case DF_LAYER_GATED_DELTANET: return 14;
    }
    return 0;
}

static int fill_model(DfTargetModel *m, RandomFill *f, int with_head, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    if (fill_tensor(m->be, f, &m->embed, (size_t)c->vocab_size * c->hidden_size, 0.0f, 1.0f, err)) return -1;
    for (int i = 0; i < m->n_layers_loaded; i++)
        if ((m->family->layer_kind(c, i) == DF_LAYER_ATTENTION ? fill_layer(m, f, &m->layers[i], err)
                                                               : fill_hybrid_layer(m, f, &m->layers[i], i, err)))
            return df_context(err, "layer %d", i);
    for (int i = m->n_layers_loaded; i < c->num_layers; i++) f->tensor += layer_tensors(c, i);
    if (!with_head) return 0;
    if ((c->norm_unit_offset ? fill_norm_f32(m->be, f, &m->final_norm, c->hidden_size, err)
                             : fill_norm(m->be, f, &m->final_norm, c->hidden_size, err)))
        return -1;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head_tied = 1;
    } else if (fill_matrix(m->be, f, &m->lm_head, c->vocab_size, c->hidden_size, err)) {
        return -1;
    }
    m->has_head = 1;
    return 0;
}

int df_target_init_random_layers(DfTargetModel *m, DfBackend *be, const DfModelConfig *cfg, uint64_t seed,
                                 int n_layers, int with_head, DfError *err) {
    memset(m, 0, sizeof *m);
    if (cfg->num_layers < 1 || cfg->hidden_size < 1 || cfg->head_dim % 2 != 0 || cfg->num_kv_heads < 1 ||
        cfg->num_heads % cfg->num_kv_heads != 0)
        return df_fail(err, "random target: bad shape (layers %d, hidden %d, heads %d / %d kv, head_dim %d)",
                       cfg->num_layers, cfg->hidden_size, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim);
    if (n_layers < 0 || n_layers > cfg->num_layers)
        return df_fail(err, "random target: asked for %d layers, the model has %d", n_layers, cfg->num_layers);
    m->cfg = *cfg;
    m->family = df_target_family(cfg);
    m->be = be;
    m->n_layers_loaded = n_layers;
    m->layers = df_xcalloc((size_t)n_layers, sizeof *m->layers, "target layers");
    RandomFill f = {seed, 0, df_xmalloc(HOST_BLOCK * sizeof(float), "random weights block")};
    int rc = fill_model(m, &f, with_head, err);
    free(f.host);
    if (rc) {
        df_context(err, "random target");
        df_target_free(m);
    }
    return rc;
}

int df_target_init_random(DfTargetModel *m, DfBackend *be, const DfModelConfig *cfg, uint64_t seed, int with_head,
                          DfError *err) {
    return df_target_init_random_layers(m, be, cfg, seed, cfg->num_layers, with_head, err);
}
