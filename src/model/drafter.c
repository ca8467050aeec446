/* The drafter's lifecycle, parameter/gradient transfers, loss weight sum and
 * cost model. The compute lives in drafter_step.c (batch preparation, loss,
 * metrics), drafter_forward.c and drafter_backward.c. */
#include <stdlib.h>
#include <string.h>

#include "model/drafter_internal.h"
#include "model/anchors.h"
#include "model/drafter_rows.h"

DfBuffer df_drafter_param(const DfDrafter *d, int index) {
    const DfParamInfo *p = &d->layout.params[index];
    return df_buffer_view(d->params, p->offset, p->count);
}

DfBuffer df_drafter_grad(const DfDrafter *d, int index) {
    const DfParamInfo *p = &d->layout.params[index];
    return df_buffer_view(d->grads, p->offset, p->count);
}

/* Checks the backend and the frozen tables; fills d's config and layout. */
static int drafter_begin(DfDrafter *d, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer embed, DfBuffer lm_head,
                         DfError *err) {
    memset(d, 0, sizeof *d);
    const char *missing = df_backend_missing_op(be);
    if (missing)
        return df_fail(err, "drafter: the %s backend does not implement drafter training yet (no '%s' op)",
                       be->ops->name, missing);
    size_t table = (size_t)cfg->vocab_size * cfg->hidden_size;
    if (embed.kind != DF_BUF_ACT || embed.count != table || lm_head.kind != DF_BUF_ACT || lm_head.count != table)
        return df_fail(err, "drafter: embedding and lm head must both be [%d, %d] activation buffers (got %zu and %zu values)",
                       cfg->vocab_size, cfg->hidden_size, embed.count, lm_head.count);
    if (cfg->block_size < 1 || cfg->block_size > DF_METRICS_MAX_BLOCK)
        return df_fail(err, "drafter: block size %d outside 1..%d", cfg->block_size, DF_METRICS_MAX_BLOCK);
    d->cfg = *cfg;
    d->be = be;
    d->embed = embed;
    d->lm_head = lm_head;
    df_drafter_layout_build(&d->layout, cfg);
    return 0;
}

static void drafter_make_work(DfDrafter *d) {
    d->work = df_xcalloc(1, sizeof *d->work, "drafter work");
    d->work->layers = df_xcalloc((size_t)d->cfg.num_layers, sizeof *d->work->layers, "drafter work layers");
}

int df_drafter_create(DfDrafter *d, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer embed, DfBuffer lm_head,
                      DfError *err) {
    if (drafter_begin(d, be, cfg, embed, lm_head, err)) return -1;
    d->owns_state = 1;
    if (df_buffer_alloc(be, &d->params, DF_BUF_ACT, d->layout.total, err) ||
        df_buffer_alloc(be, &d->grads, DF_BUF_F32, d->layout.total, err)) {
        df_drafter_free(d);
        return df_context(err, "drafter parameters (%zu values)", d->layout.total);
    }
    df_op_fill_zero(be, d->params);
    df_op_fill_zero(be, d->grads);
    drafter_make_work(d);
    return 0;
}

int df_drafter_create_in(DfDrafter *d, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer embed, DfBuffer lm_head,
                         DfBuffer params, DfBuffer grads, DfError *err) {
    if (drafter_begin(d, be, cfg, embed, lm_head, err)) return -1;
    if (params.kind != DF_BUF_ACT || params.count != d->layout.total || grads.kind != DF_BUF_F32 ||
        grads.count != d->layout.total) {
        df_drafter_free(d);
        return df_fail(err, "drafter: parameter and gradient buffers must be ACT and F32 of %zu values (got %zu, %zu)",
                       d->layout.total, params.count, grads.count);
    }
    d->params = params;
    d->grads = grads;
    drafter_make_work(d);
    return 0;
}

void df_drafter_free(DfDrafter *d) {
    if (!d->be) return;
    df_drafter_work_free(d);
    if (d->owns_state) {
        df_buffer_free(d->be, &d->params);
        df_buffer_free(d->be, &d->grads);
    }
    df_drafter_layout_free(&d->layout);
    memset(d, 0, sizeof *d);
}

int df_drafter_set_params(DfDrafter *d, const float *flat, DfError *err) {
    return d->be->ops->upload_f32(d->be, d->params, flat, err);
}

int df_drafter_get_grads(DfDrafter *d, float *flat, DfError *err) {
    if (d->be->ops->sync(d->be, err)) return -1;
    return d->be->ops->download_f32(d->be, flat, d->grads, err);
}

void df_drafter_set_grad_ready(DfDrafter *d, DfDrafterGradReady fn, void *ctx) {
    d->grad_ready = fn;
    d->grad_ready_ctx = fn ? ctx : NULL;
}

void df_drafter_set_max_block_rows(DfDrafter *d, int rows) {
    int B = d->cfg.block_size;
    d->max_block_rows = rows <= 0 ? 0 : rows < B ? B : rows / B * B;
}

void df_drafter_zero_grads(DfDrafter *d) {
    df_op_fill_zero(d->be, d->grads);
}

double df_drafter_batch_weight_sum(const DfDrafterConfig *cfg, const DfDrafterBatch *batch) {
    if (batch->rows) return batch->rows->weight_sum; /* the same sum, in the same order */
    int B = cfg->block_size;
    float *w = df_xmalloc(2 * (size_t)B * sizeof *w, "block weights"), *decay = w + B;
    df_block_decay(cfg->gamma, B, decay);
    double sum = 0;
    for (int s = 0; s < batch->n_seqs; s++) {
        int64_t t0 = batch->seq_starts[s], len = batch->seq_starts[s + 1] - t0;
        for (int64_t j = batch->anchor_starts[s]; j < batch->anchor_starts[s + 1]; j++) {
            if (batch->anchors[j] < 0 || batch->anchors[j] >= len) continue; /* refused by the step itself */
            df_block_targets(batch->ids + t0, batch->loss_mask + t0, len, batch->anchors[j], B, decay, NULL,
                             NULL, w);
            for (int k = 0; k < B; k++) sum += w[k];
        }
    }
    free(w);
    return sum;
}

/* Section 8 without the block attention term, which depends on the anchors. */
static double flops_without_attention(const DfDrafterConfig *c, double s, double n_anchors) {
    double H = c->hidden_size, qd = (double)c->num_heads * c->head_dim, kvd = (double)c->num_kv_heads * c->head_dim;
    double p_layer = 2 * H * qd + 2 * H * kvd + 3 * H * c->intermediate_size;
    double q = n_anchors * c->block_size, L = c->num_layers;
    return 2 * q * p_layer * L + 4 * s * H * kvd * L + 2 * s * c->n_taps * H * H + 2 * q * H * c->vocab_size;
}

/* Block attention 4 * B * (a + B) * nh*hd per block and layer, a the
 * context rows the block sees (its anchor, at most the layer's sliding
 * window); with only the anchor count known, a is its mean under uniform
 * anchors in [0, S): S/2, or (S*W - W^2/2) / S with a window W < S. */
static double mean_visible(double s, int window) {
    if (window <= 0 || window >= s) return s / 2;
    return (s * window - (double)window * window / 2) / s;
}

double df_drafter_forward_flops(const DfDrafterConfig *c, int64_t seq_len, int64_t n_anchors) {
    double B = c->block_size, qd = (double)c->num_heads * c->head_dim, attn = 0;
    for (int l = 0; l < c->num_layers; l++)
        attn += 4 * B * (mean_visible((double)seq_len, df_drafter_layer_window(c, l)) + B) * qd * (double)n_anchors;
    return flops_without_attention(c, (double)seq_len, (double)n_anchors) + attn;
}

double df_drafter_batch_forward_flops(const DfDrafterConfig *c, const DfDrafterBatch *batch) {
    double B = c->block_size, qd = (double)c->num_heads * c->head_dim, total = 0;
    for (int s = 0; s < batch->n_seqs; s++) {
        int64_t n = batch->anchor_starts[s + 1] - batch->anchor_starts[s];
        total += flops_without_attention(c, (double)(batch->seq_starts[s + 1] - batch->seq_starts[s]), (double)n);
        for (int64_t j = batch->anchor_starts[s]; j < batch->anchor_starts[s + 1]; j++)
            for (int l = 0; l < c->num_layers; l++) {
                int w = df_drafter_layer_window(c, l);
                double a = w > 0 && batch->anchors[j] > w ? w : (double)batch->anchors[j];
                total += 4 * B * (a + B) * qd;
            }
    }
    return total;
}

double df_drafter_step_flops(const DfDrafterConfig *c, const DfDrafterBatch *batch) {
    double fwd = df_drafter_batch_forward_flops(c, batch), head = 0;
    for (int s = 0; s < batch->n_seqs; s++)
        head += 2.0 * (double)(batch->anchor_starts[s + 1] - batch->anchor_starts[s]) * c->block_size *
                c->hidden_size * c->vocab_size;
    return fwd + 2 * (fwd - head) + head; /* backward: 2x the trained parts, plus d out through the head */
}
