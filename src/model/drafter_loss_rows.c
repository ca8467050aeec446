/* The lm head runs only on the block rows that carry a loss weight. A
 * block's first row is its anchor, a given token (weight 0: model/anchors.c),
 * and rows past the sequence or outside the loss mask weigh 0 too, yet every
 * row costs the same vocab-wide product and softmax there (the step's
 * largest op after the layers' GEMMs). So the weighted rows' hidden states
 * are gathered into g.dh (free until the backward), the fused lm-head
 * cross-entropy runs on them in place (d_x over x: each chunk's d_x is
 * written after its logits were computed from it), and d(loss)/d(out)
 * goes back to its rows in g.dx, zero elsewhere, by a second gather from
 * those rows with one zero row appended. Both gathers are the embedding op
 * (rows of a table by index). Loss, gradients and the weighted rows' argmax
 * are those of the whole-rows op. */
#include "model/drafter_internal.h"

static DfBuffer first(DfBuffer b, size_t n) { return df_buffer_view(b, 0, n); }

int df_drafter_loss_rows_upload(DfDrafter *d, DfError *err) {
    DfDrafterWork *w = d->work;
    const DfDrafterRows *r = w->host.rows;
    DfBackend *be = d->be;
    size_t n = (size_t)r->n_loss, q = (size_t)r->n_q;
    if (n > 0 && (be->ops->upload_i32(be, first(w->labels, n), r->loss_labels, err) ||
                  be->ops->upload_f32(be, first(w->weights, n), r->loss_weights, err) ||
                  be->ops->upload_i32(be, first(w->loss_rows, n), r->loss_rows, err)))
        return -1;
    return be->ops->upload_i32(be, first(w->loss_slot, q), r->loss_slot, err);
}

/* The fused lm-head CE over n rows of x (d_x: NULL buffer when no gradient). */
static void lm_head_rows(DfDrafter *d, DfBuffer x, DfBuffer d_x, size_t n, double grad_scale) {
    DfDrafterWork *w = d->work;
    DfLmHeadCeArgs ce = {.x = x, .d_x = d_x, .head = d->lm_head, .labels = first(w->labels, n),
                         .weights = first(w->weights, n), .ce = first(w->ce, n), .argmax = first(w->argmax, n),
                         .rows = (int)n, .hidden = d->cfg.hidden_size, .vocab = d->cfg.vocab_size,
                         .grad_scale = (float)grad_scale};
    df_op_lm_head_ce(d->be, &ce);
}

void df_drafter_lm_head(DfDrafter *d, double grad_scale) {
    DfDrafterWork *w = d->work;
    DfBackend *be = d->be;
    size_t n = (size_t)w->host.rows->n_loss, q = (size_t)w->host.rows->n_q, H = (size_t)d->cfg.hidden_size;
    int grads = grad_scale != 0;
    /* n < q: a block's first row never weighs (model/anchors.c), which leaves room for the zero row */
    DfBuffer rows = first(w->g.dh, n * H);
    if (n > 0) {
        df_op_embedding(be, rows, first(w->out, q * H), first(w->loss_rows, n), (int)n, (int)H);
        lm_head_rows(d, rows, grads ? rows : (DfBuffer){0}, n, grad_scale);
    }
    if (!grads) return;
    df_op_fill_zero(be, df_buffer_view(w->g.dh, n * H, H));
    df_op_embedding(be, first(w->g.dx, q * H), first(w->g.dh, (n + 1) * H), first(w->loss_slot, q), (int)q, (int)H);
}

int df_drafter_loss_rows_download(DfDrafter *d, DfError *err) {
    DfDrafterWork *w = d->work;
    DfDrafterHostBatch *h = &w->host;
    const DfDrafterRows *rows = h->rows;
    DfBackend *be = d->be;
    size_t n = (size_t)rows->n_loss;
    if (n > 0 && (be->ops->download_f32(be, h->loss_ce, first(w->ce, n), err) ||
                  be->ops->download_i32(be, h->loss_argmax, first(w->argmax, n), err)))
        return -1;
    for (int r = 0; r < rows->n_q; r++) {
        int slot = rows->loss_slot[r];
        h->ce[r] = slot < rows->n_loss ? h->loss_ce[slot] : 0.0f;
        h->argmax[r] = slot < rows->n_loss ? h->loss_argmax[slot] : -1;
    }
    return 0;
}
