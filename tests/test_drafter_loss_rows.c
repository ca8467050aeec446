/* The drafter's lm head runs on the block rows with a loss weight only
 * (model/drafter_loss_rows.c), on a tiny random CPU drafter. A block that
 * carries no weight (anchored at its sequence's last token: every row after
 * the anchor lies past the end) adds nothing to the loss, and, since blocks
 * see the context and their own rows only, nothing to any gradient. So:
 * - a batch with such blocks added gives the gradient, loss and weight of
 *   the batch without them (independent of how the weighted rows are
 *   gathered and d_x scattered back; only summation order may differ);
 * - their rows' argmax is -1, the others' a token;
 * - a batch of such blocks alone gives zero gradients, weight 0, no NaN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "model/drafter.h"
#include "model/metrics.h"

enum { B = DF_TINY_B, V = DF_TINY_V };
typedef DfTestTinyDrafter Tiny;

typedef struct Outcome {
    float *grads;
    double loss_sum, weight_sum;
} Outcome;

/* One zeroed forward_backward over the given anchors (per sequence: n0 of
 * them in sequence 0, the rest in sequence 1), grad_scale 1. */
static Outcome step(Tiny *f, const int64_t *anchors, int n0, int n) {
    DfError err;
    int64_t starts[3] = {0, n0, n};
    DfDrafterBatch batch = {.n_seqs = 2, .seq_starts = f->seq_starts, .ids = f->ids, .loss_mask = f->mask,
                            .features = f->features, .anchor_starts = starts, .anchors = anchors};
    DfMetrics m;
    assert_int_equal(df_metrics_init(&m, B, &err), 0);
    df_drafter_zero_grads(&f->d);
    if (df_drafter_forward_backward(&f->d, &batch, 1.0, &m, &err)) fail_msg("%s", err.msg);
    Outcome o = {malloc(f->d.layout.total * sizeof(float)), m.values[DF_METRICS_LOSS_SUM],
                 m.values[DF_METRICS_WEIGHT_SUM]};
    assert_int_equal(df_drafter_get_grads(&f->d, o.grads, &err), 0);
    return o;
}

static void test_unweighted_blocks_change_nothing(void **state) {
    (void)state;
    Tiny f;
    df_test_tiny_drafter_init(&f, 2);
    /* sequence 0 has 13 tokens, sequence 1 has 9: blocks anchored at 12 and 8 lie past the ends */
    const int64_t plain[5] = {2, 5, 8, 1, 4}, padded[7] = {2, 12, 5, 8, 1, 8, 4};
    Outcome a = step(&f, plain, 3, 5);
    int rows;
    Outcome b = step(&f, padded, 4, 7);
    const int32_t *argmax = df_drafter_last_argmax(&f.d, &rows);
    assert_int_equal(rows, 7 * B);
    for (int j = 0; j < 7; j++)
        for (int k = 0; k < B; k++) {
            /* weighted: past the anchor, inside the sequence and its loss mask (spec section 4) */
            int s = j < 4 ? 0 : 1, t0 = f.seq_starts[s], len = f.seq_starts[s + 1] - t0;
            int64_t t = padded[j] + k;
            int unweighted = k == 0 || t >= len || !f.mask[t0 + t];
            int32_t got = argmax[j * B + k];
            if (unweighted && got != -1) fail_msg("block %d row %d has no weight but argmax %d", j, k, got);
            if (!unweighted && (got < 0 || got >= V)) fail_msg("block %d row %d: argmax %d", j, k, got);
        }
    assert_true(a.weight_sum > 0 && a.weight_sum == b.weight_sum);
    assert_true(fabs(a.loss_sum - b.loss_sum) <= 1e-6 * fabs(a.loss_sum));
    double e = df_rel_error(b.grads, a.grads, f.d.layout.total);
    if (!(e <= 1e-5)) fail_msg("gradient with the unweighted blocks: relative error %g", e);
    free(a.grads), free(b.grads);
    df_test_tiny_drafter_free(&f);
}

static void test_no_weighted_row_gives_zero_gradients(void **state) {
    (void)state;
    Tiny f;
    df_test_tiny_drafter_init(&f, 2);
    const int64_t past_end[2] = {12, 8};
    Outcome o = step(&f, past_end, 1, 2);
    assert_true(o.weight_sum == 0 && o.loss_sum == 0);
    for (size_t i = 0; i < f.d.layout.total; i++)
        if (o.grads[i] != 0) fail_msg("gradient %zu is %g without any weighted row", i, o.grads[i]);
    free(o.grads);
    df_test_tiny_drafter_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unweighted_blocks_change_nothing),
        cmocka_unit_test(test_no_weighted_row_gives_zero_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
