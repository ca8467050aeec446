#include "infer/drafter_infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "target/target_decode.h"
#include "target/rope.h"

static DfBuffer param(const DfDrafterRunner *r, int index) {
    const DfParamInfo *p = &r->layout.params[index];
    return df_buffer_view(r->params, p->offset, p->count);
}

static void free_workspace(DfDrafterRunner *r) {
    DfBuffer *bufs[] = {&r->ids, &r->feat, &r->x, &r->h, &r->q, &r->k, &r->v, &r->attn, &r->gate, &r->up};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(r->be, bufs[i]);
    r->ws_rows = 0;
}

static int ensure_workspace(DfDrafterRunner *r, int rows, DfError *err) {
    if (r->ws_rows >= rows) return 0;
    int want = r->ws_rows ? r->ws_rows : 32;
    while (want < rows) want *= 2;
    free_workspace(r);
    r->ws_generation++;
    const DfDrafterConfig *c = &r->cfg;
    size_t t = (size_t)want, hid = c->hidden_size, q = (size_t)c->num_heads * c->head_dim;
    size_t kv = (size_t)c->num_kv_heads * c->head_dim, inter = c->intermediate_size;
    struct {
        DfBuffer *b;
        DfBufKind kind;
        size_t n;
    } bufs[] = {
        {&r->ids, DF_BUF_I32, t},        {&r->feat, DF_BUF_ACT, t * c->n_taps * hid}, {&r->x, DF_BUF_ACT, t * hid},
        {&r->h, DF_BUF_ACT, t * hid},    {&r->q, DF_BUF_ACT, t * q},                  {&r->k, DF_BUF_ACT, t * kv},
        {&r->v, DF_BUF_ACT, t * kv},     {&r->attn, DF_BUF_ACT, t * q},               {&r->gate, DF_BUF_ACT, t * inter},
        {&r->up, DF_BUF_ACT, t * inter},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (df_buffer_alloc(r->be, bufs[i].b, bufs[i].kind, bufs[i].n, err)) {
            free_workspace(r);
            return df_context(err, "drafter workspace for %d rows", want);
        }
    r->ws_rows = want;
    return 0;
}

/* Logits for one block only (a context append of a long prompt needs none). */
static int ensure_logits(DfDrafterRunner *r, int rows, DfError *err) {
    size_t need = (size_t)rows * r->cfg.vocab_size;
    if (r->logits.count < need) {
        df_buffer_free(r->be, &r->logits);
        free(r->host_logits);
        r->host_logits = NULL;
        if (df_buffer_alloc(r->be, &r->logits, DF_BUF_ACT, need, err)) return df_context(err, "drafter logits");
    }
    if (r->argmax.count < (size_t)rows) {
        df_buffer_free(r->be, &r->argmax);
        if (df_buffer_alloc(r->be, &r->argmax, DF_BUF_I32, (size_t)rows, err)) return df_context(err, "drafter argmax");
    }
    return 0;
}

/* Everything but the weights: the shape, the rope tables, the context cache. */
static int runner_init_common(DfDrafterRunner *r, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer embed,
                              DfBuffer lm_head, int n_slots, int slot_capacity, DfError *err) {
    memset(r, 0, sizeof *r);
    size_t vh = (size_t)cfg->vocab_size * cfg->hidden_size;
    if (embed.count < vh || lm_head.count < vh)
        return df_fail(err, "drafter: the target's embedding/lm head hold fewer than %d x %d values", cfg->vocab_size,
                       cfg->hidden_size);
    r->cfg = *cfg;
    r->be = be;
    r->embed = embed;
    r->lm_head = lm_head;
    df_drafter_layout_build(&r->layout, cfg);
    size_t half = (size_t)cfg->head_dim / 2, n_rope = (size_t)slot_capacity * half;
    float *cs = df_xmalloc(n_rope * sizeof *cs, "rope cos"), *sn = df_xmalloc(n_rope * sizeof *sn, "rope sin");
    df_rope_tables(&cfg->rope, cfg->head_dim, slot_capacity, cs, sn);
    int rc = df_buffer_alloc(be, &r->rope_cos, DF_BUF_F32, n_rope, err) || be->ops->upload_f32(be, r->rope_cos, cs, err) ||
             df_buffer_alloc(be, &r->rope_sin, DF_BUF_F32, n_rope, err) || be->ops->upload_f32(be, r->rope_sin, sn, err) ||
             df_kv_cache_init(&r->ctx, be, cfg->num_layers, n_slots, slot_capacity, cfg->num_kv_heads * cfg->head_dim,
                              err);
    free(cs);
    free(sn);
    return rc ? -1 : 0;
}

int df_drafter_runner_init(DfDrafterRunner *r, DfBackend *be, const DfDrafterConfig *cfg, const float *params,
                           DfBuffer embed, DfBuffer lm_head, int n_slots, int slot_capacity, DfError *err) {
    int rc = runner_init_common(r, be, cfg, embed, lm_head, n_slots, slot_capacity, err);
    if (rc == 0 && r->be)
        rc = df_buffer_alloc(be, &r->params, DF_BUF_ACT, r->layout.total, err) ||
             be->ops->upload_f32(be, r->params, params, err);
    if (rc) {
        df_drafter_runner_free(r);
        return -1;
    }
    df_drafter_runner_set_graphs(r, 1);
    return 0;
}

void df_drafter_runner_set_graphs(DfDrafterRunner *r, int on) {
    df_decode_graphs_free(&r->propose_graphs);
    df_decode_graphs_free(&r->append_graphs);
    df_decode_graphs_init(&r->propose_graphs, r->be, on);
    df_decode_graphs_init(&r->append_graphs, r->be, on);
}

int df_drafter_runner_init_on(DfDrafterRunner *r, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer params,
                              DfBuffer embed, DfBuffer lm_head, int n_slots, int slot_capacity, DfError *err) {
    int rc = runner_init_common(r, be, cfg, embed, lm_head, n_slots, slot_capacity, err);
    if (rc == 0 && (params.kind != DF_BUF_ACT || params.count != r->layout.total))
        rc = df_fail(err, "drafter: weights of %zu values given, the layout of this config has %zu", params.count,
                     r->layout.total);
    if (rc) {
        df_drafter_runner_free(r);
        return -1;
    }
    r->params = params;
    r->params_borrowed = 1;
    df_drafter_runner_set_graphs(r, 1); /* the weights change in place: a recording reads them as they are */
    return 0;
}

void df_drafter_runner_free(DfDrafterRunner *r) {
    if (!r->be) return;
    df_decode_graphs_free(&r->propose_graphs); /* before the buffers their recordings use */
    df_decode_graphs_free(&r->append_graphs);
    free_workspace(r);
    df_buffer_free(r->be, &r->logits);
    df_buffer_free(r->be, &r->argmax);
    df_kv_batch_free(&r->kb, r->be);
    df_kv_batch_free(&r->window_kb, r->be);
    free(r->host_logits);
    df_kv_cache_free(&r->ctx, r->be);
    if (!r->params_borrowed) df_buffer_free(r->be, &r->params);
    df_buffer_free(r->be, &r->rope_cos);
    df_buffer_free(r->be, &r->rope_sin);
    df_drafter_layout_free(&r->layout);
    memset(r, 0, sizeof *r);
}

/* The runner's step layout set to one sequence over slot: n new rows after its cached ones. */
static int one_seq_batch(DfDrafterRunner *r, int slot, int n, DfError *err) {
    if (slot < 0 || slot >= r->ctx.n_slots) return df_fail(err, "drafter: slot %d outside 0..%d", slot, r->ctx.n_slots - 1);
    int32_t s = slot, len = r->ctx.lens[slot], starts[2] = {0, n};
    return df_kv_batch_set(&r->kb, r->be, 1, &s, &len, starts, r->ctx.n_slots, r->ctx.capacity, err);
}

/* k_norm(k_proj(in)) with rope, and v_proj(in), into the cache rows of kb. */
static void write_kv(DfDrafterRunner *r, int layer, DfBuffer in, const DfKvBatch *kb) {
    const DfDrafterConfig *c = &r->cfg;
    const DfDrafterLayerIndex *li = &r->layout.layers[layer];
    int t = kb->n_rows, hid = c->hidden_size, nkv = c->num_kv_heads, hd = c->head_dim;
    DfBuffer k = df_buffer_view(r->k, 0, (size_t)t * nkv * hd), v = df_buffer_view(r->v, 0, (size_t)t * nkv * hd);
    df_op_linear(r->be, k, in, param(r, li->k_proj), t, nkv * hd, hid, 0);
    df_op_linear(r->be, v, in, param(r, li->v_proj), t, nkv * hd, hid, 0);
    df_op_rmsnorm(r->be, k, k, param(r, li->k_norm), t * nkv, hd, (float)c->rms_norm_eps);
    df_op_rope(r->be, k, kb->positions, r->rope_cos, r->rope_sin, t, nkv, hd);
    df_op_kv_cache_write(r->be, r->ctx.k[layer], k, kb, nkv * hd);
    df_op_kv_cache_write(r->be, r->ctx.v[layer], v, kb, nkv * hd);
}

int df_drafter_append_context(DfDrafterRunner *r, int slot, const float *features, int n, DfError *err) {
    if (n <= 0) return 0;
    const DfDrafterConfig *c = &r->cfg;
    int hid = c->hidden_size, nf = c->n_taps * hid;
    if (ensure_workspace(r, n, err)) return df_context(err, "drafter context");
    DfBuffer feat = df_buffer_view(r->feat, 0, (size_t)n * nf);
    if (r->be->ops->upload_f32(r->be, feat, features, err)) return -1;
    return df_drafter_append_context_buffer(r, slot, feat, n, err);
}

/* What a recording depends on besides the weights, the caches and the rope
 * tables, which stay put for the runner's life: the step's rows, the
 * visible-key bucket where it attends (an append only writes the cache),
 * the workspace's generation (its buffers are reallocated together) and the
 * other buffers the step reads or writes. */
static void step_key(const DfDrafterRunner *r, DfDecodeGraphKey *key, int attends, DfBuffer a, DfBuffer b) {
    df_decode_graph_key_clear(key);
    key->n_seqs = r->kb.n_seqs;
    key->n_rows = r->kb.n_rows;
    key->visible_bound = attends ? df_kv_visible_bound(&r->kb) : 0;
    key->generation = r->ws_generation;
    key->bufs[0] = r->kb.pack.ptr;
    key->bufs[1] = a.ptr;
    key->bufs[2] = b.ptr;
}

typedef struct AppendRun {
    DfDrafterRunner *r;
    DfBuffer feat;
    int n;
} AppendRun;

/* The context rows' K/V: fc, hidden_norm, then each layer's k/v into the cache. */
static void enqueue_append(void *ctx) {
    const AppendRun *a = ctx;
    DfDrafterRunner *r = a->r;
    const DfDrafterConfig *c = &r->cfg;
    int hid = c->hidden_size, nf = c->n_taps * hid;
    DfBuffer x = df_buffer_view(r->x, 0, (size_t)a->n * hid);
    df_op_linear(r->be, x, a->feat, param(r, r->layout.fc), a->n, hid, nf, 0);
    df_op_rmsnorm(r->be, x, x, param(r, r->layout.hidden_norm), a->n, hid, (float)c->rms_norm_eps);
    for (int l = 0; l < c->num_layers; l++) write_kv(r, l, x, &r->kb);
}

int df_drafter_append_context_buffer(DfDrafterRunner *r, int slot, DfBuffer features, int n, DfError *err) {
    if (n <= 0) return 0;
    const DfDrafterConfig *c = &r->cfg;
    int nf = c->n_taps * c->hidden_size;
    if (features.kind != DF_BUF_ACT || features.count < (size_t)n * nf)
        return df_fail(err, "drafter context: %zu feature values for %d rows of %d", features.count, n, nf);
    if (ensure_workspace(r, n, err) || one_seq_batch(r, slot, n, err)) return df_context(err, "drafter context");
    AppendRun run = {r, df_buffer_view(features, 0, (size_t)n * nf), n};
    DfDecodeGraphKey key;
    step_key(r, &key, 0, run.feat, (DfBuffer){0});
    if (df_decode_graphs_run(&r->append_graphs, &key, enqueue_append, &run, err) || r->be->ops->sync(r->be, err))
        return -1;
    r->ctx.lens[slot] += n;
    return 0;
}

/* The sliding-window view of a one-sequence block step: the slot's cache
 * rows len - window .. len + n - 1 as slot 0 of a one-slot cache of window + n
 * rows holding `window` cached rows, so that the unchanged kv_attention op
 * sees only the window's context (the positions for rope stay those of kb). */
static int window_batch(DfDrafterRunner *r, size_t *first_row, int slot, int n, DfError *err) {
    int window = r->cfg.sliding_window, len = r->ctx.lens[slot];
    int32_t s0 = 0, starts[2] = {0, n};
    *first_row = (size_t)slot * r->ctx.capacity + (size_t)(len - window);
    return df_kv_batch_set(&r->window_kb, r->be, 1, &s0, &window, starts, 1, window + n, err);
}

/* kv_attention of one layer; wkb (windowed view, or NULL) for a sliding layer. */
static void block_attention(DfDrafterRunner *r, int layer, DfBuffer attn, DfBuffer q, const DfKvBatch *kb,
                            const DfKvBatch *wkb, size_t first_row) {
    const DfDrafterConfig *c = &r->cfg;
    int nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    DfBuffer kc = r->ctx.k[layer], vc = r->ctx.v[layer];
    if (wkb && df_drafter_layer_window(c, layer)) {
        size_t off = first_row * nkv * hd, count = (size_t)wkb->slot_capacity * nkv * hd;
        kc = df_buffer_view(kc, off, count);
        vc = df_buffer_view(vc, off, count);
        kb = wkb;
    }
    df_op_kv_attention(r->be, attn, q, kc, vc, kb, nh, nkv, hd, 1.0f / sqrtf((float)hd), 0);
}

static void block_layer(DfDrafterRunner *r, int layer, const DfKvBatch *kb, const DfKvBatch *wkb, size_t first_row) {
    const DfDrafterConfig *c = &r->cfg;
    const DfDrafterLayerIndex *li = &r->layout.layers[layer];
    DfBackend *be = r->be;
    int t = kb->n_rows, hid = c->hidden_size, nh = c->num_heads, hd = c->head_dim;
    int inter = c->intermediate_size;
    float eps = (float)c->rms_norm_eps;
    DfBuffer x = df_buffer_view(r->x, 0, (size_t)t * hid), h = df_buffer_view(r->h, 0, (size_t)t * hid);
    DfBuffer q = df_buffer_view(r->q, 0, (size_t)t * nh * hd), attn = df_buffer_view(r->attn, 0, (size_t)t * nh * hd);
    DfBuffer gate = df_buffer_view(r->gate, 0, (size_t)t * inter), up = df_buffer_view(r->up, 0, (size_t)t * inter);

    df_op_rmsnorm(be, h, x, param(r, li->input_layernorm), t, hid, eps);
    df_op_linear(be, q, h, param(r, li->q_proj), t, nh * hd, hid, 0);
    df_op_rmsnorm(be, q, q, param(r, li->q_norm), t * nh, hd, eps);
    df_op_rope(be, q, kb->positions, r->rope_cos, r->rope_sin, t, nh, hd);
    write_kv(r, layer, h, kb);
    block_attention(r, layer, attn, q, kb, wkb, first_row);
    df_op_linear(be, x, attn, param(r, li->o_proj), t, hid, nh * hd, 1);

    df_op_rmsnorm(be, h, x, param(r, li->post_attention_layernorm), t, hid, eps);
    df_op_linear(be, gate, h, param(r, li->gate_proj), t, inter, hid, 0);
    df_op_linear(be, up, h, param(r, li->up_proj), t, inter, hid, 0);
    df_op_swiglu(be, gate, gate, up);
    df_op_linear(be, x, gate, param(r, li->down_proj), t, hid, inter, 1);
}

typedef struct ProposeRun {
    DfDrafterRunner *r;
    int b, windowed;
    size_t first_row;
} ProposeRun;

/* A block's ops from the embedding to the argmax of every row. */
static void enqueue_propose(void *ctx) {
    const ProposeRun *p = ctx;
    DfDrafterRunner *r = p->r;
    const DfDrafterConfig *c = &r->cfg;
    int b = p->b, hid = c->hidden_size, vocab = c->vocab_size;
    DfBuffer x = df_buffer_view(r->x, 0, (size_t)b * hid), h = df_buffer_view(r->h, 0, (size_t)b * hid);
    DfBuffer logits = df_buffer_view(r->logits, 0, (size_t)b * vocab), am = df_buffer_view(r->argmax, 0, (size_t)b);
    df_op_embedding(r->be, x, r->embed, df_buffer_view(r->ids, 0, (size_t)b), b, hid);
    for (int l = 0; l < c->num_layers; l++) block_layer(r, l, &r->kb, p->windowed ? &r->window_kb : NULL, p->first_row);
    df_op_rmsnorm(r->be, h, x, param(r, r->layout.norm), b, hid, (float)c->rms_norm_eps);
    df_op_linear(r->be, logits, h, r->lm_head, b, vocab, hid, 0);
    df_op_argmax_rows(r->be, am, (DfBuffer){0}, logits, b, vocab);
}

int df_drafter_propose(DfDrafterRunner *r, int slot, const int32_t *ids, int block_size, int32_t *argmax,
                       DfError *err) {
    const DfDrafterConfig *c = &r->cfg;
    int b = block_size, vocab = c->vocab_size;
    for (int i = 0; i < b; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return df_fail(err, "drafter: block token %d is outside the vocabulary [0, %d)", (int)ids[i], vocab);
    if (ensure_workspace(r, b, err) || ensure_logits(r, b, err) || one_seq_batch(r, slot, b, err))
        return df_context(err, "drafter block");
    /* sliding layers need a window view only once the context outgrows the window */
    ProposeRun run = {r, b, c->sliding_window > 0 && r->ctx.lens[slot] > c->sliding_window, 0};
    if (run.windowed && window_batch(r, &run.first_row, slot, b, err)) return df_context(err, "drafter block");
    if (r->be->ops->upload_i32(r->be, df_buffer_view(r->ids, 0, (size_t)b), ids, err)) return -1;
    if (run.windowed) {
        /* the window's view moves with every token: nothing a recording could replay */
        enqueue_propose(&run);
    } else {
        DfDecodeGraphKey key;
        step_key(r, &key, 1, r->logits, r->argmax);
        if (df_decode_graphs_run(&r->propose_graphs, &key, enqueue_propose, &run, err)) return -1;
    }
    if (r->be->ops->sync(r->be, err) ||
        r->be->ops->download_i32(r->be, argmax, df_buffer_view(r->argmax, 0, (size_t)b), err))
        return -1;
    for (int i = 0; i < b; i++) /* flagged by the op: -1 - column */
        if (argmax[i] < 0)
            return df_fail(err, "drafter: its logits are not finite (NaN or infinity) at block row %d of slot %d", i,
                           slot);
    r->logits_rows = b;
    return 0; /* the slot's length is unchanged: the block rows are scratch */
}

const float *df_drafter_logits(DfDrafterRunner *r, DfError *err) {
    if (!r->logits_rows) {
        df_fail(err, "drafter: no proposal yet, so no logits");
        return NULL;
    }
    size_t n = (size_t)r->logits_rows * r->cfg.vocab_size;
    if (!r->host_logits) r->host_logits = df_xmalloc(r->logits.count * sizeof *r->host_logits, "drafter logits");
    if (r->be->ops->download_f32(r->be, r->host_logits, df_buffer_view(r->logits, 0, n), err)) return NULL;
    return r->host_logits;
}

int df_drafter_fit_target(DfDrafterConfig *c, const DfModelConfig *t, int tokenizer_vocab, const char *dir,
                          DfError *err) {
#define SAME(field, tfield)                                                                                         \
    if (c->field != t->tfield)                                                                                      \
        return df_fail(err, "%s: %s is %d, the target's is %d", dir, #field, (int)c->field, (int)t->tfield);
    /* the embedding and lm head are the target's; the attention shape
     * (heads, kv heads, head_dim) is the drafter's own (spec section 3) */
    SAME(hidden_size, hidden_size)
    SAME(vocab_size, vocab_size)
#undef SAME
    for (int i = 0; i < c->n_taps; i++)
        if (c->target_layer_ids[i] < 0 || c->target_layer_ids[i] >= t->num_layers)
            return df_fail(err, "%s: target layer %d is outside the target's %d layers", dir, c->target_layer_ids[i],
                           t->num_layers);
    if (c->mask_token_id < 0) {
        if (tokenizer_vocab >= t->vocab_size)
            return df_fail(err, "%s: no mask_token_id in config.json, and the target's embedding (%d rows) has no row "
                           "past the tokenizer's %d ids", dir, t->vocab_size, tokenizer_vocab);
        c->mask_token_id = tokenizer_vocab;
    }
    if (c->mask_token_id >= t->vocab_size)
        return df_fail(err, "%s: mask token %d is outside the target's embedding (%d rows)", dir, c->mask_token_id,
                       t->vocab_size);
    return 0;
}
