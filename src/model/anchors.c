#include "model/anchors.h"

#include <math.h>
#include <stdlib.h>

#include "base/rng.h"

bool df_sequence_trainable(const uint8_t *loss_mask, int64_t len, int block_size) {
    int64_t loss_tokens = 0;
    for (int64_t p = 0; p < len; p++) loss_tokens += loss_mask[p] != 0;
    return loss_tokens >= 2 * (int64_t)block_size;
}

int64_t df_anchor_candidates(const uint8_t *loss_mask, int64_t len, int64_t *out) {
    int64_t n = 0;
    for (int64_t p = 1; p <= len - 2; p++)
        if (loss_mask[p + 1]) out[n++] = p;
    return n;
}

int64_t df_anchor_candidate_count(const uint8_t *loss_mask, int64_t len) {
    int64_t n = 0;
    for (int64_t p = 1; p <= len - 2; p++) n += loss_mask[p + 1] != 0;
    return n;
}

static int compare_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t df_select_anchors(const uint8_t *loss_mask, int64_t len, int64_t num_anchors, uint64_t seed,
                          uint32_t epoch, uint64_t sample_index, int64_t *anchors, int64_t *scratch) {
    int64_t n_cand = df_anchor_candidates(loss_mask, len, scratch);
    int64_t n = num_anchors < n_cand ? num_anchors : n_cand;
    if (n < 0) n = 0;
    DfRng rng = df_rng_key(seed, df_rng_stream(DF_RNG_DOMAIN_ANCHORS, epoch), sample_index);
    /* Partial Fisher-Yates: after step i, scratch[0..i] is a uniform random
     * (i+1)-subset of the candidates in random order. */
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i + (int64_t)df_rng_below(&rng, (uint64_t)(n_cand - i));
        int64_t t = scratch[i];
        scratch[i] = scratch[j];
        scratch[j] = t;
    }
    for (int64_t i = 0; i < n; i++) anchors[i] = scratch[i];
    qsort(anchors, (size_t)n, sizeof *anchors, compare_i64);
    return n;
}

double df_default_gamma(int block_size) {
    static const struct {
        int block;
        double gamma;
    } known[] = {{8, 4.0}, {10, 5.0}, {16, 7.0}};
    const int n_known = (int)(sizeof known / sizeof known[0]);
    if (block_size <= known[0].block) return known[0].gamma;
    for (int i = 1; i < n_known; i++) {
        if (block_size <= known[i].block) {
            double t = (double)(block_size - known[i - 1].block) / (known[i].block - known[i - 1].block);
            return known[i - 1].gamma + t * (known[i].gamma - known[i - 1].gamma);
        }
    }
    return known[n_known - 1].gamma;
}

void df_block_inputs(const int32_t *ids, int64_t anchor, int block_size, int32_t mask_id, int32_t *block_ids,
                     int32_t *block_pos) {
    for (int k = 0; k < block_size; k++) {
        block_ids[k] = k == 0 ? ids[anchor] : mask_id;
        block_pos[k] = (int32_t)(anchor + k);
    }
}

void df_block_decay(double gamma, int block_size, float *decay) {
    for (int k = 0; k < block_size; k++) decay[k] = k >= 1 ? (float)exp(-(double)(k - 1) / gamma) : 0.0f;
}

void df_block_targets(const int32_t *ids, const uint8_t *loss_mask, int64_t len, int64_t anchor, int block_size,
                      const float *decay, int32_t *labels, uint8_t *valid, float *weights) {
    for (int k = 0; k < block_size; k++) {
        int64_t t = anchor + k;
        bool inside = t < len;
        bool is_valid = k >= 1 && inside && loss_mask[t] != 0;
        if (labels) labels[k] = inside ? ids[t] : -1;
        if (valid) valid[k] = is_valid;
        if (weights) weights[k] = is_valid ? decay[k] : 0.0f;
    }
}
