#include "model/drafter_split.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void df_drafter_split_plan(DfDrafterSplit *s, const DfDrafterBatch *b, int64_t max_blocks) {
    int64_t blocks = b->anchor_starts[b->n_seqs];
    int parts = 1;
    if (max_blocks > 0 && blocks > max_blocks) parts = (int)((blocks + max_blocks - 1) / max_blocks);
    s->n_parts = parts;
    s->blocks = blocks;
    s->block_starts = df_xrealloc(s->block_starts, (size_t)(parts + 1) * sizeof *s->block_starts, "micro-batches");
    for (int p = 0; p <= parts; p++) s->block_starts[p] = blocks * p / parts;
}

/* The sequence that owns block j (anchor_starts[s] <= j < anchor_starts[s + 1]). */
static int owner_of(const DfDrafterBatch *b, int64_t j) {
    int lo = 0, hi = b->n_seqs - 1;
    while (lo < hi) { /* the last s with anchor_starts[s] <= j */
        int mid = (lo + hi + 1) / 2;
        if (b->anchor_starts[mid] <= j) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void df_drafter_split_part(DfDrafterSplit *s, const DfDrafterBatch *b, int p, size_t width, DfDrafterBatch *out) {
    int64_t j0 = s->block_starts[p], j1 = s->block_starts[p + 1];
    int first = owner_of(b, j0), last = owner_of(b, j1 - 1), n = last - first + 1;
    if (n + 1 > s->cap_seqs) {
        s->cap_seqs = n + 1;
        s->seq_starts = df_xrealloc(s->seq_starts, (size_t)s->cap_seqs * sizeof *s->seq_starts, "micro-batch");
        s->anchor_starts = df_xrealloc(s->anchor_starts, (size_t)s->cap_seqs * sizeof *s->anchor_starts, "micro-batch");
    }
    int32_t row0 = b->seq_starts[first];
    for (int i = 0; i <= n; i++) {
        s->seq_starts[i] = b->seq_starts[first + i] - row0;
        s->anchor_starts[i] = clamp64(b->anchor_starts[first + i], j0, j1) - j0;
    }
    int64_t rows = s->seq_starts[n];
    *out = (DfDrafterBatch){.n_seqs = n, .seq_starts = s->seq_starts, .ids = b->ids + row0,
                            .loss_mask = b->loss_mask + row0,
                            .features = df_buffer_view(b->features, (size_t)row0 * width, (size_t)rows * width),
                            .anchor_starts = s->anchor_starts, .anchors = b->anchors + j0};
}

void df_drafter_split_free(DfDrafterSplit *s) {
    free(s->block_starts);
    free(s->seq_starts);
    free(s->anchor_starts);
    memset(s, 0, sizeof *s);
}
