#include "model/drafter_rows.h"

#include <stdlib.h>

#include "model/anchors.h"

static void *regrow(void *p, size_t n, size_t size) {
    return df_xrealloc(p, (n ? n : 1) * size, "drafter block rows");
}

static void reserve(DfDrafterRows *r, int n_ctx, int n_q, int n_seqs) {
    if (n_q > r->cap_q) {
        r->block_ids = regrow(r->block_ids, (size_t)n_q, sizeof *r->block_ids);
        r->labels = regrow(r->labels, (size_t)n_q, sizeof *r->labels);
        r->weights = regrow(r->weights, (size_t)n_q, sizeof *r->weights);
        r->valid = regrow(r->valid, (size_t)n_q, sizeof *r->valid);
        r->anchors = regrow(r->anchors, (size_t)n_q, sizeof *r->anchors);
        r->loss_rows = regrow(r->loss_rows, (size_t)n_q, sizeof *r->loss_rows);
        r->loss_labels = regrow(r->loss_labels, (size_t)n_q, sizeof *r->loss_labels);
        r->loss_weights = regrow(r->loss_weights, (size_t)n_q, sizeof *r->loss_weights);
        r->loss_slot = regrow(r->loss_slot, (size_t)n_q, sizeof *r->loss_slot);
        r->cap_q = n_q;
        r->cap_ctx = 0; /* kpos holds T + Q */
    }
    if (n_ctx > r->cap_ctx) {
        r->kpos = regrow(r->kpos, (size_t)n_ctx + (size_t)r->cap_q, sizeof *r->kpos);
        r->cap_ctx = n_ctx;
    }
    if (n_seqs + 1 > r->cap_seqs) {
        r->block_starts = regrow(r->block_starts, (size_t)n_seqs + 1, sizeof *r->block_starts);
        r->cap_seqs = n_seqs + 1;
    }
}

/* The rows with a loss weight, in row order, and each row's slot among them. */
static void list_loss_rows(DfDrafterRows *r) {
    int n = 0;
    for (int i = 0; i < r->n_q; i++) {
        if (!(r->weights[i] > 0)) continue;
        r->loss_rows[n] = i, r->loss_labels[n] = r->labels[i], r->loss_weights[n] = r->weights[i];
        r->loss_slot[i] = n++;
    }
    for (int i = 0; i < r->n_q; i++)
        if (!(r->weights[i] > 0)) r->loss_slot[i] = n; /* the zero row after the gathered ones */
    r->n_loss = n;
}

void df_drafter_rows_build(DfDrafterRows *r, const DfDrafterConfig *cfg, const DfDrafterBatch *b) {
    int B = cfg->block_size, T = (int)b->seq_starts[b->n_seqs];
    float decay[DF_MAX_BLOCK_SIZE];
    df_block_decay(cfg->gamma, B, decay);
    r->n_ctx = T;
    r->n_blocks = (int)b->anchor_starts[b->n_seqs];
    r->n_q = r->n_blocks * B;
    reserve(r, T, r->n_q, b->n_seqs);
    int max_pos = 0;
    double weight_sum = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_starts[s], len = b->seq_starts[s + 1] - t0;
        r->block_starts[s] = (int32_t)b->anchor_starts[s];
        for (int i = 0; i < len; i++) r->kpos[t0 + i] = i;
        if (len > max_pos) max_pos = len;
        for (int64_t j = b->anchor_starts[s]; j < b->anchor_starts[s + 1]; j++) {
            int64_t a = b->anchors[j];
            size_t row = (size_t)j * B;
            r->anchors[j] = (int32_t)a;
            df_block_inputs(b->ids + t0, a, B, cfg->mask_token_id, r->block_ids + row, r->kpos + T + row);
            df_block_targets(b->ids + t0, b->loss_mask + t0, len, a, B, decay, r->labels + row, r->valid + row,
                             r->weights + row);
            for (int k = 0; k < B; k++) weight_sum += r->weights[row + k];
            if (a + B > max_pos) max_pos = (int)a + B;
        }
    }
    r->block_starts[b->n_seqs] = r->n_blocks;
    r->max_pos = max_pos;
    r->weight_sum = weight_sum;
    list_loss_rows(r);
}

void df_drafter_rows_free(DfDrafterRows *r) {
    free(r->block_ids), free(r->labels), free(r->weights), free(r->valid), free(r->kpos), free(r->anchors);
    free(r->block_starts), free(r->loss_rows), free(r->loss_labels), free(r->loss_weights), free(r->loss_slot);
    *r = (DfDrafterRows){0};
}
