/* Training metrics: small blocks whose per-position accuracy and leading-run
 * length are worked out by hand from the definitions; merging accumulators
 * equals accumulating everything in one; and the PyTorch reference step
 * (tests/fixtures/drafter/step.safetensors, made by tests/ref/drafter_ref.py):
 * block ids, positions and weights rebuilt from the fixture's inputs and
 * anchors with the anchors module, and accuracy and train_tau computed from
 * its drafter argmax, all equal the reference's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "model/anchors.h"
#include "model/metrics.h"
#include "test_util.h"

/* ------------------------------------------------ hand-made blocks */

/* Block size 4; slot 0 never counts. Each row: labels, argmax, valid. */
static const int32_t hand_labels[4][4] = {{9, 5, 6, 7}, {9, 5, 6, 7}, {9, 5, 6, 7}, {9, 5, 6, -1}};
static const int32_t hand_argmax[4][4] = {
    {1, 5, 6, 7}, /* all three right: run 3 */
    {9, 5, 0, 7}, /* k=2 wrong: run 1; k=3 right still counts for accuracy */
    {9, 5, 6, 7}, /* k=1 not a loss token: run 0, although all predictions match */
    {9, 0, 6, -1}, /* k=1 wrong: run 0; k=3 is past the end (invalid) */
};
static const uint8_t hand_valid[4][4] = {{0, 1, 1, 1}, {0, 1, 1, 1}, {0, 0, 1, 1}, {0, 1, 1, 0}};

static void add_hand_blocks(DfMetrics *m, int from, int to) {
    for (int b = from; b < to; b++) df_metrics_add_block(m, hand_labels[b], hand_argmax[b], hand_valid[b]);
}

static void test_hand_made_blocks(void **state) {
    (void)state;
    DfMetrics m;
    DfError err;
    assert_int_equal(df_metrics_init(&m, 4, &err), 0);
    add_hand_blocks(&m, 0, 4);
    /* k=1: valid in blocks 0, 1, 3; right in 0, 1 -> 2/3.
     * k=2: valid in all four; right in 0, 2, 3 -> 3/4.
     * k=3: valid in 0, 1, 2; right in all three -> 1. */
    assert_true(df_metrics_accuracy(&m, 0) == 0.0);
    assert_true(fabs(df_metrics_accuracy(&m, 1) - 2.0 / 3.0) < 1e-15);
    assert_true(fabs(df_metrics_accuracy(&m, 2) - 3.0 / 4.0) < 1e-15);
    assert_true(df_metrics_accuracy(&m, 3) == 1.0);
    assert_true(df_metrics_accuracy(&m, 4) == 0.0); /* outside the block */
    /* runs 3, 1, 0, 0 */
    assert_true(fabs(df_metrics_train_tau(&m) - (1.0 + (3 + 1 + 0 + 0) / 4.0)) < 1e-15);
}

static void test_empty_and_loss(void **state) {
    (void)state;
    DfMetrics m;
    DfError err;
    assert_int_equal(df_metrics_init(&m, 8, &err), 0);
    assert_true(df_metrics_train_tau(&m) == 1.0);
    assert_true(df_metrics_accuracy(&m, 3) == 0.0);
    assert_true(df_metrics_loss(&m) == 0.0);
    df_metrics_add_loss(&m, 6.0, 2.0);
    df_metrics_add_loss(&m, 3.0, 1.0);
    assert_true(df_metrics_loss(&m) == 3.0);
    assert_int_equal(df_metrics_init(&m, 0, &err), -1);
    assert_non_null(strstr(err.msg, "block size 0"));
    assert_int_equal(df_metrics_init(&m, DF_METRICS_MAX_BLOCK + 1, &err), -1);
}

static void test_merge(void **state) {
    (void)state;
    DfMetrics all, a, b, other;
    DfError err;
    df_metrics_init(&all, 4, &err);
    df_metrics_init(&a, 4, &err);
    df_metrics_init(&b, 4, &err);
    add_hand_blocks(&all, 0, 4);
    df_metrics_add_loss(&all, 5.5, 2.5);
    add_hand_blocks(&a, 0, 1);
    df_metrics_add_loss(&a, 1.5, 0.5);
    add_hand_blocks(&b, 1, 4);
    df_metrics_add_loss(&b, 4.0, 2.0);
    assert_int_equal(df_metrics_merge(&a, &b, &err), 0);
    assert_memory_equal(a.values, all.values, sizeof all.values);
    df_metrics_init(&other, 8, &err);
    assert_int_equal(df_metrics_merge(&a, &other, &err), -1);
    assert_non_null(strstr(err.msg, "block size 8"));
    df_metrics_reset(&a);
    assert_true(df_metrics_train_tau(&a) == 1.0);
}

/* ------------------------------------------------ the reference step */

enum { FIX_B = 8, FIX_MASK = 8190 };
#define FIX_GAMMA 4.0

/* A 1-D int32 tensor of the fixture, copied out (the mapped data need not be aligned). */
static int32_t *load_i32(const DfSafetensors *st, const char *name, int64_t *len) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    assert_non_null(t);
    assert_int_equal(t->dtype, DF_DTYPE_I32);
    assert_int_equal(t->ndim, 1);
    *len = t->shape[0];
    int32_t *out = malloc(t->nbytes ? t->nbytes : 1);
    memcpy(out, t->data, t->nbytes);
    return out;
}

/* The fixture's inputs, anchors and reference outputs. */
typedef struct StepFixture {
    DfSafetensors st;
    int64_t n_tok, n_seq, n_anchors, n_q;
    int32_t *ids, *seq_starts, *anchors, *anchor_starts, *ref_ids, *ref_pos, *argmax;
    uint8_t *mask;
    float *ref_w, *ref_acc, *ref_tau;
} StepFixture;

static void fixture_open(StepFixture *f) {
    DfError err;
    memset(f, 0, sizeof *f);
    if (df_safetensors_open(&f->st, df_test_path("tests/fixtures/drafter/step.safetensors"), &err))
        fail_msg("%s", err.msg);
    int64_t n_mask, n_seq1, n_as1, n_q2, n_q3;
    f->ids = load_i32(&f->st, "input_ids", &f->n_tok);
    int32_t *mask32 = load_i32(&f->st, "loss_mask", &n_mask);
    f->seq_starts = load_i32(&f->st, "seq_starts", &n_seq1);
    f->anchors = load_i32(&f->st, "anchors", &f->n_anchors);
    f->anchor_starts = load_i32(&f->st, "anchor_starts", &n_as1);
    f->ref_ids = load_i32(&f->st, "block_ids", &f->n_q);
    f->ref_pos = load_i32(&f->st, "block_pos", &n_q2);
    f->argmax = load_i32(&f->st, "argmax", &n_q3);
    assert_int_equal(n_mask, f->n_tok);
    assert_int_equal(n_as1, n_seq1);
    assert_int_equal(f->n_q, f->n_anchors * FIX_B);
    assert_int_equal(n_q2, f->n_q);
    assert_int_equal(n_q3, f->n_q);
    assert_int_equal(f->seq_starts[n_seq1 - 1], f->n_tok);
    f->n_seq = n_seq1 - 1;
    int64_t shape_q[1] = {f->n_q}, shape_b[1] = {FIX_B}, shape_1[1] = {1};
    f->ref_w = df_safetensors_load_f32(&f->st, "weights", 1, shape_q, &err);
    f->ref_acc = df_safetensors_load_f32(&f->st, "accuracy", 1, shape_b, &err);
    f->ref_tau = df_safetensors_load_f32(&f->st, "train_tau", 1, shape_1, &err);
    assert_non_null(f->ref_w);
    assert_non_null(f->ref_acc);
    assert_non_null(f->ref_tau);
    f->mask = malloc((size_t)f->n_tok);
    for (int64_t i = 0; i < f->n_tok; i++) f->mask[i] = (uint8_t)mask32[i];
    free(mask32);
}

static void fixture_close(StepFixture *f) {
    free(f->ids), free(f->seq_starts), free(f->anchors), free(f->anchor_starts);
    free(f->ref_ids), free(f->ref_pos), free(f->argmax), free(f->mask);
    free(f->ref_w), free(f->ref_acc), free(f->ref_tau);
    df_safetensors_close(&f->st);
}

/* Rebuilds every block of the fixture with the anchors module, checks ids,
 * positions and weights against the reference, and accumulates metrics for
 * the given argmax (n_q entries). */
static void fixture_blocks(const StepFixture *f, const int32_t *argmax, DfMetrics *metrics) {
    int64_t *cand = malloc(sizeof *cand * (size_t)f->n_tok);
    int64_t blocks = 0;
    float decay[FIX_B];
    df_block_decay(FIX_GAMMA, FIX_B, decay);
    for (int64_t s = 0; s < f->n_seq; s++) {
        const int32_t *x = f->ids + f->seq_starts[s];
        const uint8_t *m = f->mask + f->seq_starts[s];
        int64_t len = f->seq_starts[s + 1] - f->seq_starts[s];
        assert_true(df_sequence_trainable(m, len, FIX_B));
        int64_t n_cand = df_anchor_candidates(m, len, cand);
        for (int64_t j = f->anchor_starts[s]; j < f->anchor_starts[s + 1]; j++, blocks++) {
            int64_t a = f->anchors[j];
            int is_cand = 0;
            for (int64_t c = 0; c < n_cand; c++) is_cand |= cand[c] == a;
            assert_true(is_cand);
            int32_t bid[FIX_B], bpos[FIX_B], labels[FIX_B];
            uint8_t valid[FIX_B];
            float w[FIX_B];
            df_block_inputs(x, a, FIX_B, FIX_MASK, bid, bpos);
            df_block_targets(x, m, len, a, FIX_B, decay, labels, valid, w);
            size_t q = (size_t)(blocks * FIX_B);
            assert_memory_equal(bid, f->ref_ids + q, sizeof bid);
            assert_memory_equal(bpos, f->ref_pos + q, sizeof bpos);
            for (int k = 0; k < FIX_B; k++) assert_true(fabsf(w[k] - f->ref_w[q + k]) <= 1e-6f);
            df_metrics_add_block(metrics, labels, argmax + q, valid);
        }
    }
    assert_int_equal(blocks, f->n_anchors);
    free(cand);
}

static void test_reference_step(void **state) {
    (void)state;
    StepFixture f;
    DfError err;
    fixture_open(&f);
    DfMetrics metrics;
    assert_int_equal(df_metrics_init(&metrics, FIX_B, &err), 0);
    fixture_blocks(&f, f.argmax, &metrics);
    for (int k = 0; k < FIX_B; k++) assert_true(fabs(df_metrics_accuracy(&metrics, k) - f.ref_acc[k]) <= 1e-6);
    assert_true(fabs(df_metrics_train_tau(&metrics) - f.ref_tau[0]) <= 1e-6);
    print_message("reference step: %lld blocks, train_tau %.6f (reference %.6f)\n", (long long)f.n_anchors,
                  df_metrics_train_tau(&metrics), f.ref_tau[0]);
    fixture_close(&f);
}

/* The reference drafter (random weights) never predicts a label, so its
 * accuracy is 0 and its train_tau 1. To exercise runs and partial accuracy on
 * the fixture's real blocks (overlapping, one past the end, prompt-masked
 * slots), argmax is set to the label at a fixed pattern of slots, and the
 * expected values are computed here by transcribing drafter_ref.py: labels 0
 * past the end, acc_k = sum(corr*valid) / max(sum(valid), 1),
 * run = sum_k cumprod(corr*valid)[k] over k = 1..B-1. */
static void test_reference_blocks_with_hits(void **state) {
    (void)state;
    StepFixture f;
    DfError err;
    fixture_open(&f);
    int32_t *argmax = malloc(sizeof *argmax * (size_t)f.n_q);
    double corr_valid[FIX_B] = {0}, valid_sum[FIX_B] = {0}, run_sum = 0;
    int64_t blocks = 0;
    for (int64_t s = 0; s < f.n_seq; s++) {
        int64_t start = f.seq_starts[s], len = f.seq_starts[s + 1] - start;
        for (int64_t j = f.anchor_starts[s]; j < f.anchor_starts[s + 1]; j++, blocks++) {
            double cum = 1.0;
            for (int k = 0; k < FIX_B; k++) {
                size_t q = (size_t)(blocks * FIX_B + k);
                int64_t t = f.anchors[j] + k;
                int32_t label = t < len ? f.ids[start + t] : 0;
                int hit = (q * 7 + (size_t)blocks) % 5 != 0;
                argmax[q] = hit ? label : f.argmax[q];
                double corr = argmax[q] == label, valid = k >= 1 && t < len && f.mask[start + t];
                if (k >= 1) {
                    corr_valid[k] += corr * valid;
                    valid_sum[k] += valid;
                    cum *= corr * valid;
                    run_sum += cum;
                }
            }
        }
    }
    DfMetrics metrics;
    assert_int_equal(df_metrics_init(&metrics, FIX_B, &err), 0);
    fixture_blocks(&f, argmax, &metrics);
    double tau = 1.0 + run_sum / (double)blocks;
    assert_true(tau > 1.5); /* the pattern does make runs */
    assert_true(fabs(df_metrics_train_tau(&metrics) - tau) <= 1e-12);
    int partial = 0;
    for (int k = 1; k < FIX_B; k++) {
        double acc = corr_valid[k] / (valid_sum[k] > 1 ? valid_sum[k] : 1);
        partial |= acc > 0 && acc < 1;
        assert_true(fabs(df_metrics_accuracy(&metrics, k) - acc) <= 1e-12);
    }
    assert_true(partial);
    print_message("fixture blocks with hits: train_tau %.6f\n", tau);
    free(argmax);
    fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_made_blocks),
        cmocka_unit_test(test_empty_and_loss),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_reference_step),
        cmocka_unit_test(test_reference_blocks_with_hits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
