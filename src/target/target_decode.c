/* Incremental decoding over the KV cache (target/target_decode.h): each
 * decoder layer by the layer builder (target/target_layer.h), its
 * attention against the slots' caches (the new rows' keys/values go into
 * the cache first, then the new queries attend to everything their slot
 * holds) and its recurrence from the slots' states. */
#include "target/target_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash64.h"
#include "target/rope.h"
#include "target/target_family.h"
#include "target/target_layer.h"
#include "target/target_memory.h"
#include "target/target_workspace.h"

/* Whether every layer of m is a dense layer with its fused owners set (as
 * the loader and the random init make them): the layers then take the
 * fused products, and the workspace holds qkv/gate_up instead of k, v, up. */
static int can_fuse(const DfTargetModel *m) {
    for (int i = 0; i < m->n_layers_loaded; i++)
        if (m->family->layer_kind(&m->cfg, i) != DF_LAYER_ATTENTION || !m->layers[i].qkv_proj.ptr ||
            !m->layers[i].gate_up_proj.ptr)
            return 0;
    return 1;
}

static void free_workspace(DfTargetDecoder *d) {
    DfBackend *be = d->model->be;
    DfBuffer *bufs[] = {&d->ids, &d->x, &d->h,    &d->q,        &d->k,   &d->v,      &d->attn,
                        &d->gate, &d->up, &d->last, &d->features, &d->qkv, &d->gate_up};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    d->ws_rows = 0;
}

/* Activations for `rows` new tokens (grown by doubling). */
static int ensure_workspace(DfTargetDecoder *d, int rows, DfError *err) {
    if (d->ws_rows >= rows) return 0;
    int want = d->ws_rows ? d->ws_rows : 16;
    while (want < rows) want *= 2;
    free_workspace(d);
    const DfModelConfig *c = &d->model->cfg;
    size_t t = (size_t)want, hid = c->hidden_size, q = (size_t)c->num_heads * c->head_dim;
    size_t kv = (size_t)c->num_kv_heads * c->head_dim, inter = c->intermediate_size;
    /* the fused layer needs qkv and gate_up in place of k, v, up (and only those of the one kind) */
    size_t split = d->fused ? 0 : 1, fused = d->fused ? 1 : 0;
    struct {
        DfBuffer *b;
        DfBufKind kind;
        size_t n;
    } bufs[] = {
        {&d->ids, DF_BUF_I32, t},
        {&d->x, DF_BUF_ACT, t * hid},
        {&d->h, DF_BUF_ACT, t * hid},
        {&d->q, DF_BUF_ACT, t * q},
        {&d->k, DF_BUF_ACT, split * t * kv},
        {&d->v, DF_BUF_ACT, split * t * kv},
        {&d->attn, DF_BUF_ACT, t * q},
        {&d->gate, DF_BUF_ACT, t * inter},
        {&d->up, DF_BUF_ACT, split * t * inter},
        {&d->last, DF_BUF_ACT, t * hid},
        {&d->features, DF_BUF_ACT, t * (size_t)(d->n_taps ? d->n_taps : 1) * hid},
        {&d->qkv, DF_BUF_ACT, fused * t * (q + 2 * kv)},
        {&d->gate_up, DF_BUF_ACT, fused * t * 2 * inter},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i].n && df_buffer_alloc(d->model->be, bufs[i].b, bufs[i].kind, bufs[i].n, err)) {
            free_workspace(d);
            return df_context(err, "target decoder workspace for %d tokens", want);
        }
    d->ws_rows = want;
    d->ws_generation++; /* recorded steps hold the old addresses (step_key) */
    return 0;
}

/* Logits rows are sized apart from the other activations: a prefill of many
 * prompt tokens needs one logits row per sequence, not per token. */
static int ensure_logits(DfTargetDecoder *d, int rows, DfError *err) {
    DfBackend *be = d->model->be;
    size_t need = (size_t)rows * d->model->cfg.vocab_size;
    if (d->logits.count < need) {
        df_buffer_free(be, &d->logits);
        if (df_buffer_alloc(be, &d->logits, DF_BUF_ACT, need, err))
            return df_context(err, "target decoder logits for %d rows", rows);
    }
    if (d->argmax.count < (size_t)rows) {
        df_buffer_free(be, &d->argmax);
        if (df_buffer_alloc(be, &d->argmax, DF_BUF_I32, (size_t)rows, err))
            return df_context(err, "target decoder argmax for %d rows", rows);
    }
    return 0;
}

/* Over the rotated part of a head: all of it, or a hybrid target's rotary_dim. */
static int build_rope_tables(DfTargetDecoder *d, int n_pos, DfError *err) {
    const DfModelConfig *c = &d->model->cfg;
    DfBackend *be = d->model->be;
    int dim = df_target_rope_dim(c);
    size_t n = (size_t)n_pos * (dim / 2);
    float *cs = df_xmalloc(n * sizeof *cs, "rope cos"), *sn = df_xmalloc(n * sizeof *sn, "rope sin");
    df_rope_tables(&c->rope, dim, n_pos, cs, sn);
    int rc = df_buffer_alloc(be, &d->rope_cos, DF_BUF_F32, n, err) || be->ops->upload_f32(be, d->rope_cos, cs, err) ||
             df_buffer_alloc(be, &d->rope_sin, DF_BUF_F32, n, err) || be->ops->upload_f32(be, d->rope_sin, sn, err);
    free(cs);
    free(sn);
    return rc ? -1 : 0;
}

int df_target_decoder_init(DfTargetDecoder *d, DfTargetModel *m, int n_slots, int slot_capacity, const int *taps,
                           int n_taps, DfError *err) {
    return df_target_decoder_init_paged(d, m, n_slots, slot_capacity, 0, taps, n_taps, err);
}

int df_target_decoder_init_paged(DfTargetDecoder *d, DfTargetModel *m, int n_slots, int slot_capacity, int n_pages,
                                 const int *taps, int n_taps, DfError *err) {
    memset(d, 0, sizeof *d);
    d->nonfinite_slot = -1;
    const DfModelConfig *c = &m->cfg;
    if (!m->has_head || m->n_layers_loaded != c->num_layers)
        return df_fail(err, "target decoder: the model must be loaded with all %d layers and the lm head",
                       c->num_layers);
    if (n_taps < 0 || n_taps > DF_MAX_TAPS) return df_fail(err, "target decoder: %d taps (at most %d)", n_taps, DF_MAX_TAPS);
    for (int i = 0; i < n_taps; i++)
        if (taps[i] < 0 || taps[i] >= c->num_layers)
            return df_fail(err, "target decoder: tap layer %d outside 0..%d", taps[i], c->num_layers - 1);
    d->model = m;
    d->fused = can_fuse(m);
    d->n_taps = n_taps;
    df_target_decoder_set_graphs(d, 1);
    if (n_taps) memcpy(d->taps, taps, (size_t)n_taps * sizeof *taps);
    d->step_lens = df_xmalloc((size_t)(n_slots > 0 ? n_slots : 1) * sizeof *d->step_lens, "cache lengths");
    /* a hybrid's linear layers keep recurrent states instead of K/V rows */
    unsigned char cached[DF_MAX_LAYERS];
    for (int l = 0; l < c->num_layers; l++) cached[l] = m->family->layer_kind(c, l) != DF_LAYER_GATED_DELTANET;
    if (df_kv_cache_init_layers(&d->cache, m->be, c->num_layers, cached, n_slots, slot_capacity, n_pages,
                                c->num_kv_heads * c->head_dim, err) ||
        build_rope_tables(d, slot_capacity, err) || (m->family->hybrid_layers && df_hybrid_state_init(&d->hybrid, m->be, c, n_slots, err))) {
        df_target_decoder_free(d);
        return -1;
    }
    return 0;
}

void df_target_decoder_free(DfTargetDecoder *d) {
    if (!d->model) return;
    df_decode_graphs_free(&d->graphs); /* before the buffers its recordings use */
    free_workspace(d);
    df_buffer_free(d->model->be, &d->logits);
    df_buffer_free(d->model->be, &d->argmax);
    df_kv_batch_free(&d->kb, d->model->be);
    free(d->step_lens);
    df_kv_cache_free(&d->cache, d->model->be);
    df_buffer_free(d->model->be, &d->rope_cos);
    df_buffer_free(d->model->be, &d->rope_sin);
    df_hybrid_state_free(&d->hybrid);
    memset(d, 0, sizeof *d);
}

void df_target_decoder_set_graphs(DfTargetDecoder *d, int on) {
    df_decode_graphs_free(&d->graphs);
    df_decode_graphs_init(&d->graphs, d->model->be, on);
}

int32_t df_argmax_f32(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (df_argmax_key(x[i]) > df_argmax_key(x[best])) best = i;
    return best;
}

void df_target_decoder_reset_slot(DfTargetDecoder *d, int slot) {
    if (slot < 0 || slot >= d->cache.n_slots) return;
    df_kv_cache_release(&d->cache, slot);
    if (d->model->family->hybrid_layers) df_hybrid_state_reset(&d->hybrid, slot);
}

int df_target_decoder_hold(DfTargetDecoder *d, int slot, int rows) {
    if (slot < 0 || slot >= d->cache.n_slots) return -1;
    return df_kv_cache_hold(&d->cache, slot, rows);
}

/* The pages a step's new rows need, taken before its layout is set. */
static int hold_step_pages(DfTargetDecoder *d, const DfDecodeStep *step, DfError *err) {
    for (int i = 0; i < step->n_seqs; i++) {
        int slot = step->slots[i], rows = d->cache.lens[slot] + step->row_starts[i + 1] - step->row_starts[i];
        if (rows <= d->cache.capacity && df_kv_cache_hold(&d->cache, slot, rows))
            return df_fail(err, "target decode: slot %d needs %d pages of the KV cache for %d tokens; %d of %d are free",
                           slot, df_kv_pages_for(rows), rows, d->cache.n_free, d->cache.n_pages);
    }
    return 0;
}

int df_target_decoder_enable_rollback(DfTargetDecoder *d, int rows, DfError *err) {
    return d->model->family->hybrid_layers ? df_hybrid_state_set_record_rows(&d->hybrid, rows, err) : 0;
}

int df_target_decoder_rollback(DfTargetDecoder *d, int slot, int len, DfError *err) {
    if (slot < 0 || slot >= d->cache.n_slots || len < 0 || len > d->cache.lens[slot])
        return df_fail(err, "target decoder: cannot roll slot %d back to %d tokens", slot, len);
    if (d->model->family->hybrid_layers &&
        df_hybrid_state_rollback(&d->hybrid, d->model->layers, slot, len, err))
        return -1;
    df_kv_cache_truncate(&d->cache, slot, len);
    return 0;
}

/* The layer steps against the slots' caches and states (target/target_layer.h),
 * for the step's layout d->kb. */

/* The new rows' keys and values into the layer's cache, then the new
 * queries attend to everything their slot holds (causal within the rows). */
static void cache_attend(void *self, int layer, const DfTargetLayerActs *a) {
    DfTargetDecoder *d = self;
    DfBackend *be = d->model->be;
    const DfModelConfig *c = &d->model->cfg;
    const DfKvBatch *kb = &d->kb;
    int nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    df_op_kv_cache_write(be, d->cache.k[layer], a->k, kb, nkv * hd);
    df_op_kv_cache_write(be, d->cache.v[layer], a->v, kb, nkv * hd);
    df_op_kv_attention(be, a->attn, a->q, d->cache.k[layer], d->cache.v[layer], kb, nh, nkv, hd,
                       1.0f / sqrtf((float)hd), 1);
}

/* Fused weights: one op takes the q|k|v product through the q/k norms and
 * rope, q into a->q, k and v straight into the cache; then attention. The
 * same values as the split steps (attention_qkv in target_layer.c, then
 * cache_attend) given the same product. */
static void cache_attend_qkv(void *self, int layer, const DfTargetLayerActs *a) {
    DfTargetDecoder *d = self;
    const DfModelConfig *c = &d->model->cfg;
    const DfTargetLayer *l = &d->model->layers[layer];
    DfBackend *be = d->model->be;
    int nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    DfQkvRopeCacheArgs args = {
        .batch = &d->kb,
        .qkv = a->qkv,
        .q_norm = c->has_qk_norm ? l->q_norm : (DfBuffer){0},
        .k_norm = c->has_qk_norm ? l->k_norm : (DfBuffer){0},
        .eps = (float)c->rms_norm_eps,
        .cos_table = d->rope_cos,
        .sin_table = d->rope_sin,
        .q_out = a->q,
        .k_cache = d->cache.k[layer],
        .v_cache = d->cache.v[layer],
        .heads = nh,
        .kv_heads = nkv,
        .head_dim = hd,
    };
    df_op_qkv_rope_cache(be, &args);
    df_op_kv_attention(be, a->attn, a->q, d->cache.k[layer], d->cache.v[layer], &d->kb, nh, nkv, hd,
                       1.0f / sqrtf((float)hd), 1);
}

/* The convolution and recurrence of every sequence from its slot's state
 * (two backend ops for the whole step). */
static void state_recur(void *self, int layer, int n_rows) {
    DfTargetDecoder *d = self;
    DfTargetModel *m = d->model;
    const DfLinearAttnConfig *la = &m->cfg.linear;
    DfHybridWorkspace *ws = &m->hws;
    size_t t = (size_t)n_rows, nv = (size_t)la->num_value_heads, vd = nv * la->value_head_dim;
    size_t cd = (size_t)d->hybrid.conv_dim;
    df_hybrid_state_layer(&d->hybrid, &m->layers[layer], layer, &d->kb, df_buffer_view(ws->mixed, 0, t * cd),
                          df_buffer_view(ws->beta, 0, t * nv), df_buffer_view(ws->decay, 0, t * nv),
                          df_buffer_view(ws->conv, 0, t * cd), df_buffer_view(ws->core, 0, t * vd));
}

static void decoder_layer(DfTargetDecoder *d, int layer) {
    DfTargetModel *m = d->model;
    const DfTargetLayerBuffers bufs = {d->x,    d->h,  d->q,  d->k,   d->v,
                                       d->attn, d->gate, d->up, d->qkv, d->gate_up};
    DfTargetLayerActs a = df_target_layer_acts(&m->cfg, d->kb.n_rows, &bufs);
    DfSequenceSteps steps = {.self = d, .positions = d->kb.positions, .rope_cos = d->rope_cos,
                             .rope_sin = d->rope_sin, .attend = cache_attend, .attend_qkv = cache_attend_qkv,
                             .recur = state_recur};
    df_target_layer(m, layer, &a, &steps);
}

/* Final norm and lm head over the rows asked for. */
static void run_head(DfTargetDecoder *d, const DfKvBatch *kb, DfLogitsRows which) {
    DfTargetModel *m = d->model;
    DfBackend *be = m->be;
    int hid = m->cfg.hidden_size, rows = kb->n_rows;
    DfBuffer src = d->x;
    /* a decode step (one new row per sequence) has its last rows in place */
    if (which == DF_LOGITS_LAST && kb->n_rows > kb->n_seqs) {
        rows = kb->n_seqs;
        for (int i = 0; i < kb->n_seqs; i++)
            df_op_copy2d(be, df_buffer_view(d->last, (size_t)i * hid, hid), hid,
                         df_buffer_view(d->x, (size_t)(kb->host_row_starts[i + 1] - 1) * hid, hid), hid, 1, hid);
        src = d->last;
    }
    DfBuffer h = df_buffer_view(d->h, 0, (size_t)rows * hid);
    df_op_rmsnorm(be, h, df_buffer_view(src, 0, (size_t)rows * hid), m->final_norm, rows, hid,
                  (float)m->cfg.rms_norm_eps);
    df_op_linear(be, df_buffer_view(d->logits, 0, (size_t)rows * m->cfg.vocab_size), h, m->lm_head, rows,
                 m->cfg.vocab_size, hid, 0);
}

/* Greedy choices without the logits: made on the backend, queued before the sync. */
static int argmax_on_backend(const DfDecodeStep *step) {
    return step->argmax && !step->logits;
}

/* Logits row `row` of the step is not finite: names the target, the slot
 * and the position of the token whose next-token logits they are. */
static int nonfinite_logits(DfTargetDecoder *d, const DfDecodeStep *step, int row, DfError *err) {
    int seq = row; /* DF_LOGITS_LAST: one row per sequence, its last new token */
    if (step->logits_rows == DF_LOGITS_ALL)
        for (seq = 0; seq + 1 < step->n_seqs && step->row_starts[seq + 1] <= row;) seq++;
    int offset = step->logits_rows == DF_LOGITS_ALL ? row - step->row_starts[seq]
                                                     : step->row_starts[seq + 1] - step->row_starts[seq] - 1;
    d->nonfinite_slot = step->slots[seq];
    const char *dir = d->model->dir ? d->model->dir : "(in memory)";
    return df_fail(err, "target %s: its logits are not finite (NaN or infinity) at position %d of the sequence in cache "
                        "slot %d", dir, d->step_lens[seq] + offset, (int)step->slots[seq]);
}

static int fetch_outputs(DfTargetDecoder *d, const DfDecodeStep *step, int n_rows, int logit_rows, DfError *err) {
    DfBackend *be = d->model->be;
    int vocab = d->model->cfg.vocab_size;
    size_t nf = (size_t)n_rows * d->n_taps * d->model->cfg.hidden_size;
    if (step->features && d->n_taps && be->ops->download_f32(be, step->features, df_buffer_view(d->features, 0, nf), err))
        return -1;
    if (!logit_rows) return 0;
    if (argmax_on_backend(step)) {
        if (be->ops->download_i32(be, step->argmax, df_buffer_view(d->argmax, 0, (size_t)logit_rows), err)) return -1;
        for (int r = 0; r < logit_rows; r++) /* flagged by the op: -1 - column */
            if (step->argmax[r] < 0) return nonfinite_logits(d, step, r, err);
        return 0;
    }
    if (!step->logits) return 0;
    if (be->ops->download_f32(be, step->logits, df_buffer_view(d->logits, 0, (size_t)logit_rows * vocab), err))
        return -1;
    for (int r = 0; r < logit_rows; r++) {
        const float *row = step->logits + (size_t)r * vocab;
        int32_t best = df_argmax_f32(row, vocab);
        if (!isfinite(row[best])) return nonfinite_logits(d, step, r, err);
        if (step->argmax) step->argmax[r] = best;
    }
    return 0;
}

/* One step's ops, from the embedding to the greedy choices, queued on the
 * backend (or recorded: target/decode_graphs.h): no host work in between. */
typedef struct StepRun {
    DfTargetDecoder *d;
    const DfDecodeStep *step;
    int t, logit_rows;
} StepRun;

static int wants_features(const DfDecodeStep *step) {
    return step->features || step->keep_features;
}

static void enqueue_step(void *ctx) {
    const StepRun *r = ctx;
    DfTargetDecoder *d = r->d;
    DfTargetModel *m = d->model;
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int t = r->t, hid = c->hidden_size;
    DfBuffer x = df_buffer_view(d->x, 0, (size_t)t * hid);
    df_op_embedding(be, x, m->embed, df_buffer_view(d->ids, 0, (size_t)t), t, hid);
    for (int l = 0; l < c->num_layers; l++) {
        decoder_layer(d, l);
        for (int j = 0; j < d->n_taps && wants_features(r->step); j++)
            if (d->taps[j] == l)
                df_op_copy2d(be, df_buffer_view(d->features, (size_t)j * hid, d->features.count - (size_t)j * hid),
                             d->n_taps * hid, x, hid, t, hid);
    }
    if (!r->logit_rows) return;
    run_head(d, &d->kb, r->step->logits_rows);
    if (argmax_on_backend(r->step))
        df_op_argmax_rows(be, df_buffer_view(d->argmax, 0, (size_t)r->logit_rows), (DfBuffer){0},
                          df_buffer_view(d->logits, 0, (size_t)r->logit_rows * c->vocab_size), r->logit_rows,
                          c->vocab_size);
}

/* A hybrid's part: the model's hybrid workspace (the step's DeltaNet and
 * gated-attention activations; grown, never moved otherwise), and whether
 * the step saves snapshots and records its inputs (other kernels, and the
 * records' layout buffer). The recurrent states stay put for the decoder's
 * life; the snapshots and records move only when record_rows grows. */
static void hybrid_step_key(const DfTargetDecoder *d, DfDecodeGraphKey *key) {
    const DfHybridState *h = &d->hybrid;
    key->hybrid_capacity = d->model->hws.capacity;
    key->record_rows = h->record_rows;
    key->recording = h->recording;
    key->bufs[3] = h->recording ? h->record_kb.pack.ptr : NULL;
}

/* What a recording of the step depends on besides the weights and caches,
 * which stay put for the decoder's life. */
static void step_key(const StepRun *r, DfDecodeGraphKey *key) {
    const DfTargetDecoder *d = r->d;
    const DfKvBatch *kb = &d->kb;
    df_decode_graph_key_clear(key);
    key->n_seqs = kb->n_seqs;
    key->n_rows = kb->n_rows;
    key->visible_bound = df_kv_visible_bound(kb);
    key->logits_rows = r->logit_rows ? (int)r->step->logits_rows + 1 : 0;
    key->argmax_on_backend = argmax_on_backend(r->step);
    key->features = wants_features(r->step);
    key->row_starts_hash = df_hash64(kb->host_row_starts, (size_t)(kb->n_seqs + 1) * sizeof *kb->host_row_starts);
    /* the workspace's buffers are reallocated together: a new generation, even where
     * one of them comes back at its old address; the others are single buffers */
    key->generation = d->ws_generation;
    const void *bufs[] = {d->logits.ptr, d->argmax.ptr, kb->pack.ptr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) key->bufs[i] = bufs[i];
    if (d->model->family->hybrid_layers) hybrid_step_key(d, key);
}

int df_target_decode(DfTargetDecoder *d, const DfDecodeStep *step, DfError *err) {
    DfTargetModel *m = d->model;
    DfBackend *be = m->be;
    const DfModelConfig *c = &m->cfg;
    int n_seqs = step->n_seqs;
    d->nonfinite_slot = -1;
    if (n_seqs <= 0) return df_fail(err, "target decode: no sequences");
    int t = step->row_starts[n_seqs];
    for (int i = 0; i < t; i++)
        if (step->ids[i] < 0 || step->ids[i] >= c->vocab_size)
            return df_fail(err, "target decode: token id %d (new token %d) is outside the vocabulary [0, %d)",
                           (int)step->ids[i], i, c->vocab_size);
    for (int i = 0; i < n_seqs; i++)
        if (step->slots[i] < 0 || step->slots[i] >= d->cache.n_slots)
            return df_fail(err, "target decode: slot %d outside 0..%d", (int)step->slots[i], d->cache.n_slots - 1);
    if (n_seqs > d->cache.n_slots)
        return df_fail(err, "target decode: %d sequences for %d cache slots", n_seqs, d->cache.n_slots);
    for (int i = 0; i < n_seqs; i++) d->step_lens[i] = d->cache.lens[step->slots[i]];
    DfKvBatch *kb = &d->kb;
    DfKvPageTable table;
    if (hold_step_pages(d, step, err) ||
        df_kv_batch_set_paged(kb, be, n_seqs, step->slots, d->step_lens, step->row_starts, d->cache.n_slots,
                              d->cache.capacity, df_kv_cache_page_table(&d->cache, &table), err))
        return df_context(err, "target decode");
    int logit_rows = step->logits_rows == DF_LOGITS_ALL ? t : step->logits_rows == DF_LOGITS_LAST ? n_seqs : 0;
    if (ensure_workspace(d, t, err) || (logit_rows && ensure_logits(d, logit_rows, err)) ||
        (m->family->hybrid_layers && df_hybrid_workspace_ensure(m, t, err)) ||
        be->ops->upload_i32(be, df_buffer_view(d->ids, 0, (size_t)t), step->ids, err))
        return -1;
    if (m->family->hybrid_layers && df_hybrid_state_begin_step(&d->hybrid, kb, err)) return -1;
    StepRun run = {d, step, t, logit_rows};
    DfDecodeGraphKey key;
    step_key(&run, &key);
    if (df_decode_graphs_run(&d->graphs, &key, enqueue_step, &run, err) || be->ops->sync(be, err) ||
        fetch_outputs(d, step, t, logit_rows, err))
        return -1;
    for (int i = 0; i < n_seqs; i++) d->cache.lens[step->slots[i]] += step->row_starts[i + 1] - step->row_starts[i];
    return 0;
}

DfBuffer df_target_features(const DfTargetDecoder *d, int first, int n) {
    size_t row = (size_t)d->n_taps * d->model->cfg.hidden_size;
    return df_buffer_view(d->features, (size_t)first * row, (size_t)n * row);
}
