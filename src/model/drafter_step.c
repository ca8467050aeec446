/* One drafter training step over a packed batch: checks the batch, builds
 * the blocks on the host (ids, positions, labels, weights:
 * model/drafter_rows.h) unless the batch brings them, runs the forward, the
 * fused lm-head cross-entropy, the metrics, and (when asked) the backward;
 * in micro-batches (model/drafter_split.h) when the batch has more block
 * rows than the drafter's bound. */
#include <stdlib.h>
#include <string.h>

#include "model/drafter_internal.h"
#include "model/drafter_split.h"

static int check_batch(const DfDrafter *d, const DfDrafterBatch *b, DfError *err) {
    const DfDrafterConfig *c = &d->cfg;
    if (b->n_seqs < 1) return df_fail(err, "drafter batch: no sequences");
    if (b->seq_starts[0] != 0 || b->anchor_starts[0] != 0)
        return df_fail(err, "drafter batch: seq_starts[0] and anchor_starts[0] must be 0");
    for (int s = 0; s < b->n_seqs; s++) {
        int64_t t0 = b->seq_starts[s], len = b->seq_starts[s + 1] - t0;
        if (len < 1) return df_fail(err, "drafter batch: sequence %d is empty or seq_starts decreases", s);
        if (b->anchor_starts[s + 1] < b->anchor_starts[s])
            return df_fail(err, "drafter batch: anchor_starts decreases at sequence %d", s);
        for (int64_t j = b->anchor_starts[s]; j < b->anchor_starts[s + 1]; j++)
            if (b->anchors[j] < 0 || b->anchors[j] >= len)
                return df_fail(err, "drafter batch: anchor %lld of sequence %d is outside [0, %lld)",
                               (long long)b->anchors[j], s, (long long)len);
    }
    int64_t t = b->seq_starts[b->n_seqs];
    for (int64_t i = 0; i < t; i++)
        if (b->ids[i] < 0 || b->ids[i] >= c->vocab_size)
            return df_fail(err, "drafter batch: token id %d at row %lld is outside the vocabulary [0, %d)",
                           (int)b->ids[i], (long long)i, c->vocab_size);
    size_t need = (size_t)t * c->n_taps * c->hidden_size;
    if (b->features.kind != DF_BUF_ACT || b->features.count < need)
        return df_fail(err, "drafter batch: features hold %zu values, need [%lld, %d]", b->features.count,
                       (long long)t, c->n_taps * c->hidden_size);
    if ((int64_t)b->anchor_starts[b->n_seqs] * c->block_size + t > INT32_MAX / 2)
        return df_fail(err, "drafter batch: too many rows");
    if (b->rows && (b->rows->n_ctx != t || b->rows->n_blocks != b->anchor_starts[b->n_seqs]))
        return df_fail(err, "internal: the drafter batch's rows (%d context rows, %d blocks) were built for another "
                       "batch (%lld, %lld)", b->rows->n_ctx, b->rows->n_blocks, (long long)t,
                       (long long)b->anchor_starts[b->n_seqs]);
    return 0;
}

/* The pass's block rows: the batch's own when they were built ahead (a
 * whole batch; a micro-batch is a part of one and builds its own), else
 * built here. */
static void set_rows(DfDrafter *d, const DfDrafterBatch *b) {
    DfDrafterHostBatch *h = &d->work->host;
    if (!b->rows) df_drafter_rows_build(&h->built, &d->cfg, b);
    h->rows = b->rows ? b->rows : &h->built;
    df_drafter_host_prepare(h, h->rows->n_q);
}

static int upload_batch(DfDrafter *d, const DfDrafterBatch *b, DfError *err) {
    DfDrafterWork *w = d->work;
    const DfDrafterRows *r = w->host.rows;
    DfBackend *be = d->be;
    /* the layout's storage is kept from the last micro-batch: no allocation in a step */
    if (df_block_attn_layout_set(&w->attn_layout, be, b->n_seqs, b->seq_starts, r->block_starts, r->anchors,
                                 d->cfg.block_size, err))
        return -1;
    return be->ops->upload_i32(be, w->ids, r->block_ids, err) || be->ops->upload_i32(be, w->kpos, r->kpos, err) ||
           df_drafter_loss_rows_upload(d, err);
}

/* Loss sums and per-position hits into metrics. */
static int collect_metrics(DfDrafter *d, DfMetrics *metrics, DfError *err) {
    DfDrafterWork *w = d->work;
    DfDrafterHostBatch *h = &w->host;
    const DfDrafterRows *rows = h->rows;
    if (df_drafter_loss_rows_download(d, err)) return -1;
    if (metrics) {
        double loss = 0;
        for (int r = 0; r < rows->n_q; r++) loss += (double)rows->weights[r] * h->ce[r];
        for (int j = 0; j < rows->n_blocks; j++) {
            size_t r = (size_t)j * d->cfg.block_size;
            df_metrics_add_block(metrics, rows->labels + r, h->argmax + r, rows->valid + r);
        }
        df_metrics_add_loss(metrics, loss, rows->weight_sum);
    }
    return 0;
}

/* One forward (and backward) over a batch whose block rows fit the work
 * buffers; the whole batch's argmax rows from first_row on get its argmax. */
static int run_pass(DfDrafter *d, const DfDrafterBatch *batch, double grad_scale, DfMetrics *metrics,
                    size_t first_row, DfError *err) {
    DfBackend *be = d->be;
    set_rows(d, batch);
    DfDrafterWork *w = d->work;
    const DfDrafterRows *rows = w->host.rows;
    if (df_drafter_work_prepare(d, rows->n_ctx, rows->n_q, err) || df_drafter_work_rope(d, rows->max_pos, err) ||
        upload_batch(d, batch, err))
        return -1;
    df_drafter_run_forward(d, batch);
    df_drafter_lm_head(d, grad_scale);
    /* the loss rows (their own buffers, which the backward leaves alone) are
     * read back once the backward is queued too: a sync between the two
     * would leave the device idle while the host reads them */
    if (grad_scale != 0) df_drafter_run_backward(d, batch);
    if (be->ops->sync(be, err) || collect_metrics(d, metrics, err)) return -1;
    memcpy(w->batch_argmax + first_row, w->host.argmax, (size_t)rows->n_q * sizeof *w->batch_argmax);
    return 0;
}

int df_drafter_forward_backward(DfDrafter *d, const DfDrafterBatch *batch, double grad_scale, DfMetrics *metrics,
                                DfError *err) {
    const DfDrafterConfig *c = &d->cfg;
    if (metrics && metrics->block_size != c->block_size)
        return df_fail(err, "drafter: metrics for block size %d, drafter has %d", metrics->block_size, c->block_size);
    if (check_batch(d, batch, err)) return -1;
    DfDrafterWork *w = d->work;
    w->batch_rows = 0;
    if (batch->anchor_starts[batch->n_seqs] == 0) return 0; /* no blocks: nothing to learn from */
    int B = c->block_size;
    DfDrafterSplit *split = &w->split;
    df_drafter_split_plan(split, batch, d->max_block_rows / B);
    size_t rows = (size_t)split->blocks * B;
    if (rows > w->batch_argmax_cap) {
        w->batch_argmax = df_xrealloc(w->batch_argmax, rows * sizeof *w->batch_argmax, "drafter argmax");
        w->batch_argmax_cap = rows;
    }
    size_t width = (size_t)c->n_taps * c->hidden_size;
    for (int p = 0; p < split->n_parts; p++) {
        DfDrafterBatch part = *batch;
        if (split->n_parts > 1) df_drafter_split_part(split, batch, p, width, &part);
        /* a gradient range is final only in the last micro-batch's backward */
        w->grads_final = p == split->n_parts - 1;
        w->grads_overwrite = w->grads_fresh && p == 0;
        if (run_pass(d, &part, grad_scale, metrics, (size_t)split->block_starts[p] * B, err))
            return split->n_parts > 1 ? df_context(err, "drafter micro-batch %d of %d", p + 1, split->n_parts) : -1;
    }
    w->batch_rows = (int)rows;
    w->grads_overwrite = 0;
    return 0;
}

/* The norm weights' gradients, which rmsnorm_backward only adds to, zeroed
 * (a few thousand values: the weight matrices' first writers write theirs). */
static void zero_norm_grads(DfDrafter *d) {
    for (int i = 0; i < d->layout.n_params; i++)
        if (d->layout.params[i].kind == DF_PARAM_NORM) df_op_fill_zero(d->be, df_drafter_grad(d, i));
}

int df_drafter_compute_grads(DfDrafter *d, const DfDrafterBatch *batch, double grad_scale, DfMetrics *metrics,
                             DfError *err) {
    if (grad_scale == 0 || batch->n_seqs < 1 || batch->anchor_starts[batch->n_seqs] == 0) {
        df_drafter_zero_grads(d); /* no backward writes them */
        return df_drafter_forward_backward(d, batch, grad_scale, metrics, err);
    }
    zero_norm_grads(d);
    d->work->grads_fresh = 1;
    int rc = df_drafter_forward_backward(d, batch, grad_scale, metrics, err);
    d->work->grads_fresh = 0;
    d->work->grads_overwrite = 0;
    return rc;
}

const int32_t *df_drafter_last_argmax(const DfDrafter *d, int *n_rows) {
    if (!d->work || !d->work->batch_rows) {
        *n_rows = 0;
        return NULL;
    }
    *n_rows = d->work->batch_rows;
    return d->work->batch_argmax;
}
