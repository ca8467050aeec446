/* The drafter's work buffers: three arenas (ACT, F32, I32) on the backend,
 * cut into views for the current batch's T context rows and Q block rows.
 * Sizes grow monotonically with T and Q, so an arena sized for one batch
 * holds the views of any smaller one; a larger batch regrows the arenas. */
#include <stdlib.h>
#include <string.h>

#include "model/drafter_internal.h"
#include "target/rope.h"

typedef struct Carver {
    DfBuffer arena;
    size_t used;
    int counting; /* first pass: only add up the sizes */
} Carver;

static DfBuffer carve(Carver *c, size_t n) {
    DfBuffer v = {0};
    v.kind = c->arena.kind;
    if (!c->counting) v = df_buffer_view(c->arena, c->used, n);
    c->used += (n + 15) & ~(size_t)15; /* keep every view 64-byte aligned */
    return v;
}

static void lay_out(DfDrafter *d, Carver *act, Carver *f32, Carver *i32, size_t t, size_t q) {
    const DfDrafterConfig *c = &d->cfg;
    DfDrafterWork *w = d->work;
    size_t H = (size_t)c->hidden_size, qd = (size_t)c->num_heads * c->head_dim,
           kvd = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size;
    w->ctx_pre = carve(act, t * H);
    w->ctx = carve(act, t * H);
    for (int l = 0; l < c->num_layers; l++) {
        DfDrafterLayerActs *a = &w->layers[l];
        a->x = carve(act, q * H), a->h = carve(act, q * H);
        a->q_pre = carve(act, q * qd), a->q = carve(act, q * qd);
        a->k_pre = carve(act, (t + q) * kvd), a->k = carve(act, (t + q) * kvd), a->v = carve(act, (t + q) * kvd);
        a->attn = carve(act, q * qd);
        a->lse = carve(f32, q * (size_t)c->num_heads);
        a->x_mid = carve(act, q * H), a->n = carve(act, q * H);
        a->gate = carve(act, q * I), a->up = carve(act, q * I), a->act = carve(act, q * I);
    }
    w->x_final = carve(act, q * H), w->out = carve(act, q * H);
    DfDrafterGradScratch *g = &w->g;
    g->dx = carve(act, q * H), g->dh = carve(act, q * H);
    g->dattn = carve(act, q * qd), g->dq = carve(act, q * qd);
    g->dk = carve(act, (t + q) * kvd), g->dv = carve(act, (t + q) * kvd);
    g->dgate = carve(act, q * I), g->dup = carve(act, q * I), g->dact = carve(act, q * I);
    g->dctx = carve(act, t * H);
    w->ids = carve(i32, q), w->kpos = carve(i32, t + q), w->labels = carve(i32, q), w->argmax = carve(i32, q);
    w->loss_rows = carve(i32, q), w->loss_slot = carve(i32, q);
    w->weights = carve(f32, q), w->ce = carve(f32, q);
}

/* headroom: a batcher's batches vary in size, and regrowing every few steps
 * would free and allocate gigabytes each time; none once reserved. */
static int grow(DfBackend *be, DfBuffer *arena, DfBufKind kind, size_t need, int headroom, DfError *err) {
    if (arena->ptr && arena->count >= need) return 0;
    df_buffer_free(be, arena);
    if (df_buffer_alloc(be, arena, kind, need + (headroom ? need / 4 : 0), err))
        return df_context(err, "drafter work buffers (%zu elements)", need);
    return 0;
}

/* Elements of each arena for T context rows and Q block rows. */
static void count_arenas(DfDrafter *d, size_t n_ctx, size_t n_q, Carver *act, Carver *f32, Carver *i32) {
    *act = (Carver){.arena = {.kind = DF_BUF_ACT}, .counting = 1};
    *f32 = (Carver){.arena = {.kind = DF_BUF_F32}, .counting = 1};
    *i32 = (Carver){.arena = {.kind = DF_BUF_I32}, .counting = 1};
    lay_out(d, act, f32, i32, n_ctx, n_q);
}

int df_drafter_work_prepare(DfDrafter *d, int n_ctx, int n_q, DfError *err) {
    DfDrafterWork *w = d->work;
    Carver act, f32, i32;
    count_arenas(d, (size_t)n_ctx, (size_t)n_q, &act, &f32, &i32);
    int headroom = !w->reserved;
    if (grow(d->be, &w->arena_act, DF_BUF_ACT, act.used, headroom, err) ||
        grow(d->be, &w->arena_f32, DF_BUF_F32, f32.used, headroom, err) ||
        grow(d->be, &w->arena_i32, DF_BUF_I32, i32.used, headroom, err))
        return -1;
    act = (Carver){.arena = w->arena_act}, f32 = (Carver){.arena = w->arena_f32}, i32 = (Carver){.arena = w->arena_i32};
    lay_out(d, &act, &f32, &i32, (size_t)n_ctx, (size_t)n_q);
    return 0;
}

int df_drafter_work_rope(DfDrafter *d, int n_positions, DfError *err) {
    DfDrafterWork *w = d->work;
    if (w->rope_positions >= n_positions) return 0;
    int n_pos = w->rope_positions ? w->rope_positions : 256;
    while (n_pos < n_positions) n_pos *= 2;
    size_t half = (size_t)d->cfg.head_dim / 2;
    float *c = df_xmalloc((size_t)n_pos * half * sizeof *c, "drafter rope cos");
    float *s = df_xmalloc((size_t)n_pos * half * sizeof *s, "drafter rope sin");
    df_rope_tables(&d->cfg.rope, d->cfg.head_dim, n_pos, c, s);
    df_buffer_free(d->be, &w->rope_cos);
    df_buffer_free(d->be, &w->rope_sin);
    w->rope_positions = 0;
    int rc = df_buffer_alloc(d->be, &w->rope_cos, DF_BUF_F32, (size_t)n_pos * half, err) ||
             d->be->ops->upload_f32(d->be, w->rope_cos, c, err) ||
             df_buffer_alloc(d->be, &w->rope_sin, DF_BUF_F32, (size_t)n_pos * half, err) ||
             d->be->ops->upload_f32(d->be, w->rope_sin, s, err);
    free(c);
    free(s);
    if (rc) return -1;
    w->rope_positions = n_pos;
    return 0;
}

static void *regrow(void *p, size_t n, size_t size) {
    return df_xrealloc(p, (n ? n : 1) * size, "drafter host batch");
}

void df_drafter_host_prepare(DfDrafterHostBatch *h, int n_q) {
    if (n_q <= h->cap_out) return;
    h->ce = regrow(h->ce, (size_t)n_q, sizeof *h->ce);
    h->argmax = regrow(h->argmax, (size_t)n_q, sizeof *h->argmax);
    h->loss_ce = regrow(h->loss_ce, (size_t)n_q, sizeof *h->loss_ce);
    h->loss_argmax = regrow(h->loss_argmax, (size_t)n_q, sizeof *h->loss_argmax);
    h->cap_out = n_q;
}

void df_drafter_work_free(DfDrafter *d) {
    DfDrafterWork *w = d->work;
    if (!w) return;
    df_buffer_free(d->be, &w->arena_act);
    df_buffer_free(d->be, &w->arena_f32);
    df_buffer_free(d->be, &w->arena_i32);
    df_buffer_free(d->be, &w->rope_cos);
    df_buffer_free(d->be, &w->rope_sin);
    df_block_attn_layout_free(&w->attn_layout, d->be);
    df_drafter_split_free(&w->split);
    free(w->batch_argmax);
    DfDrafterHostBatch *h = &w->host;
    df_drafter_rows_free(&h->built);
    free(h->ce), free(h->argmax), free(h->loss_ce), free(h->loss_argmax);
    free(w->layers);
    free(w);
    d->work = NULL;
}

int df_drafter_reserve(DfDrafter *d, int n_ctx, int n_q, DfError *err) {
    d->work->reserved = 1;
    return df_drafter_work_prepare(d, n_ctx, n_q, err);
}

void df_drafter_work_elements(const DfDrafterConfig *cfg, int n_ctx, int n_q, size_t *act, size_t *f32, size_t *i32) {
    DfDrafter d = {.cfg = *cfg};
    DfDrafterWork w = {0};
    w.layers = df_xcalloc((size_t)cfg->num_layers, sizeof *w.layers, "drafter work layers");
    d.work = &w;
    Carver a, f, i;
    count_arenas(&d, (size_t)n_ctx, (size_t)n_q, &a, &f, &i);
    free(w.layers);
    *act = a.used, *f32 = f.used, *i32 = i.used;
}
