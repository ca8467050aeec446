#include "train/batcher.h"

#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "model/anchors.h"

enum { MAX_BUCKETS = 64 };

int df_batcher_bucket(int64_t len) {
    int b = 0;
    for (uint64_t v = (uint64_t)(len > 0 ? len : 1); v > 1; v >>= 1) b++;
    return b;
}

int df_batcher_init(DfBatcher *b, const DfTokenStore *store, int block_size, int64_t max_length,
                    int64_t token_budget, uint64_t seed, DfError *err) {
    memset(b, 0, sizeof *b);
    if (token_budget <= 0) return df_fail(err, "batcher: --token-budget must be positive, got %lld", (long long)token_budget);
    if (max_length <= 0) return df_fail(err, "batcher: --max-length must be positive, got %lld", (long long)max_length);
    b->store = store;
    b->token_budget = token_budget;
    b->seed = seed;
    b->n_samples = df_token_store_num_samples(store);
    b->usable = df_xcalloc((size_t)(b->n_samples > 0 ? b->n_samples : 1), 1, "usable samples");
    b->candidates = df_xcalloc((size_t)(b->n_samples > 0 ? b->n_samples : 1), sizeof *b->candidates,
                               "anchor candidates");
    for (int64_t i = 0; i < b->n_samples; i++) {
        const int32_t *ids;
        const uint8_t *mask;
        int64_t len;
        if (df_token_store_sample(store, i, &ids, &mask, &len, err) != 0) {
            df_batcher_free(b);
            return -1;
        }
        if (len > max_length) {
            b->n_too_long++;
        } else if (!df_sequence_trainable(mask, len, block_size)) {
            b->n_few_loss_tokens++;
        } else {
            b->usable[i] = 1;
            b->candidates[i] = df_anchor_candidate_count(mask, len);
            b->n_usable++;
            b->usable_tokens += len;
        }
    }
    if (b->n_usable == 0) {
        int rc = df_fail(err,
                         "%s: no trainable sample among %lld (%lld with fewer than 2*B = %d loss tokens, %lld longer "
                         "than --max-length %lld)",
                         df_token_store_path(store), (long long)b->n_samples, (long long)b->n_few_loss_tokens,
                         2 * block_size, (long long)b->n_too_long, (long long)max_length);
        df_batcher_free(b);
        return rc;
    }
    return 0;
}

void df_batcher_free(DfBatcher *b) {
    free(b->usable);
    free(b->candidates);
    memset(b, 0, sizeof *b);
}

void df_batcher_shuffle(int64_t n, uint64_t seed, int64_t epoch, int64_t *order) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    DfRng rng = df_rng_key(seed, df_rng_stream(DF_RNG_DOMAIN_SHUFFLE, (uint32_t)epoch), 0);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)df_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* The pending samples of each bucket, as linked lists through next[]. */
typedef struct Buckets {
    int64_t head[MAX_BUCKETS], tail[MAX_BUCKETS], tokens[MAX_BUCKETS];
    int64_t *next; /* indexed by sample */
} Buckets;

/* Appends one batch, the samples of a list starting at `first`. */
static void emit_list(DfEpochPlan *plan, const int64_t *next, int64_t first, int64_t *n_out) {
    for (int64_t s = first; s >= 0; s = next[s]) plan->samples[(*n_out)++] = s;
    plan->starts[++plan->n_batches] = *n_out;
}

static void emit_bucket(DfEpochPlan *plan, Buckets *bk, int k, int64_t *n_out) {
    emit_list(plan, bk->next, bk->head[k], n_out);
    bk->head[k] = bk->tail[k] = -1;
    bk->tokens[k] = 0;
}

void df_batcher_plan_epoch(const DfBatcher *b, int64_t epoch, DfEpochPlan *plan) {
    int64_t n = b->n_samples;
    memset(plan, 0, sizeof *plan);
    plan->epoch = epoch;
    plan->samples = df_xmalloc((size_t)(b->n_usable > 0 ? b->n_usable : 1) * sizeof(int64_t), "epoch plan");
    plan->starts = df_xmalloc((size_t)(b->n_usable + 1) * sizeof(int64_t), "epoch plan");
    plan->starts[0] = 0;
    int64_t *order = df_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *order, "epoch order");
    df_batcher_shuffle(n, b->seed, epoch, order);
    Buckets bk;
    bk.next = df_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *bk.next, "buckets");
    for (int k = 0; k < MAX_BUCKETS; k++) bk.head[k] = bk.tail[k] = -1, bk.tokens[k] = 0;
    int64_t n_out = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = order[i];
        if (!b->usable[s]) continue;
        int64_t len = df_token_store_sample_length(b->store, s);
        bk.next[s] = -1;
        if (len > b->token_budget) { /* alone, over the budget */
            emit_list(plan, bk.next, s, &n_out);
            continue;
        }
        int k = df_batcher_bucket(len);
        if (bk.head[k] >= 0 && bk.tokens[k] + len > b->token_budget) emit_bucket(plan, &bk, k, &n_out);
        if (bk.head[k] < 0) bk.head[k] = s;
        else bk.next[bk.tail[k]] = s;
        bk.tail[k] = s;
        bk.tokens[k] += len;
    }
    for (int k = 0; k < MAX_BUCKETS; k++)
        if (bk.head[k] >= 0) emit_bucket(plan, &bk, k, &n_out);
    free(bk.next);
    free(order);
}

void df_epoch_plan_free(DfEpochPlan *plan) {
    free(plan->starts);
    free(plan->samples);
    memset(plan, 0, sizeof *plan);
}

int64_t df_batcher_total_batches(const DfBatcher *b, int64_t epochs) {
    int64_t total = 0;
    for (int64_t e = 0; e < epochs; e++) {
        DfEpochPlan plan;
        df_batcher_plan_epoch(b, e, &plan);
        total += plan.n_batches;
        df_epoch_plan_free(&plan);
    }
    return total;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void df_batcher_epoch_anchors(const DfBatcher *b, int64_t num_anchors, DfEpochAnchors *out) {
    *out = (DfEpochAnchors){0};
    for (int64_t s = 0; s < b->n_samples; s++) {
        int64_t c = b->candidates[s];
        out->anchors += min64(c, num_anchors);
        out->capped += c > num_anchors;
        if (c > out->max_candidates) out->max_candidates = c;
    }
}

void df_batcher_step_peaks(const DfBatcher *b, int64_t steps, int64_t num_anchors, int block_size, DfStepPeaks *out) {
    *out = (DfStepPeaks){0};
    for (int64_t e = 0; steps > 0 && b->n_usable > 0; e++) {
        DfEpochPlan plan;
        df_batcher_plan_epoch(b, e, &plan);
        for (int64_t k = 0; k < plan.n_batches && steps > 0; k++, steps--) {
            int64_t tokens = 0, blocks = 0;
            for (int64_t i = plan.starts[k]; i < plan.starts[k + 1]; i++) {
                int64_t s = plan.samples[i], len = df_token_store_sample_length(b->store, s);
                tokens += len;
                blocks += min64(b->candidates[s], num_anchors);
                out->max_len = max64(out->max_len, len);
            }
            out->tokens = max64(out->tokens, tokens);
            out->seqs = max64(out->seqs, plan.starts[k + 1] - plan.starts[k]);
            out->block_rows = max64(out->block_rows, blocks * block_size);
        }
        df_epoch_plan_free(&plan);
    }
}
