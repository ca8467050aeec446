/* Gradient buckets: a hand-worked plan (sizes chosen to hit every rule:
 * merging small parameters, closing a bucket that would overflow, cutting a
 * parameter larger than a bucket into equal pieces), the readiness count as
 * backward finishes parameters from the last to the first, bad inputs, and
 * on real drafter layouts the invariants checked independently: the buckets
 * tile the flat buffer from its end to its start, none is over the size,
 * edges fall on parameter edges except inside an oversized parameter, no
 * bucket could take the next parameter without going over, and the
 * parameter ranges are those the offsets say. Readiness from reported
 * ranges (the overlapped reduction's): on the hand-worked plan, which
 * buckets are handed out after which ranges, in backward order and out of
 * order, double and outside reports; on drafter layouts, the ranges the
 * drafter's backward reports (one per layer, then fc and hidden_norm)
 * against the count of buckets lying wholly in what has been reported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/grad_buckets.h"
#include "model/drafter_layout.h"
#include "train/param_ranges.h"
#include "test_util.h"

static void expect_bucket(const DfGradBucket *b, size_t start, size_t end, int lo, int hi) {
    assert_int_equal(b->offset, start);
    assert_int_equal(b->count, end - start);
    assert_int_equal(b->param_lo, lo);
    assert_int_equal(b->param_hi, hi);
}

static void test_hand_worked_plan(void **state) {
    (void)state;
    const size_t counts[6] = {10, 4, 30, 6, 6, 50};
    const size_t offsets[6] = {0, 10, 14, 44, 50, 56};
    DfGradBuckets p;
    DfError err;
    assert_int_equal(df_grad_buckets_plan(&p, offsets, counts, 6, 106, 16, &err), 0);
    assert_int_equal(p.n, 8);
    /* parameter 5 (50 > 16): four pieces of 50/4, last first: 56+[0,12,25,37,50] */
    expect_bucket(&p.buckets[0], 93, 106, 5, 5);
    expect_bucket(&p.buckets[1], 81, 93, 5, 5);
    expect_bucket(&p.buckets[2], 68, 81, 5, 5);
    expect_bucket(&p.buckets[3], 56, 68, 5, 5);
    /* 6 + 6 fit; 30 does not */
    expect_bucket(&p.buckets[4], 44, 56, 3, 4);
    /* parameter 2 (30): two pieces of 15 */
    expect_bucket(&p.buckets[5], 29, 44, 2, 2);
    expect_bucket(&p.buckets[6], 14, 29, 2, 2);
    /* 4 + 10 fit */
    expect_bucket(&p.buckets[7], 0, 14, 0, 1);
    /* readiness as backward finishes parameters 5, 4, ..., 0 */
    const int ready[7] = {8, 7, 7, 5, 4, 4, 0}; /* index: first_done 0..6 */
    for (int d = 0; d <= 6; d++) assert_int_equal(df_grad_buckets_ready(&p, d), ready[d]);
    df_grad_buckets_free(&p);

    /* a bucket size that holds everything: one bucket */
    assert_int_equal(df_grad_buckets_plan(&p, offsets, counts, 6, 106, 1000, &err), 0);
    assert_int_equal(p.n, 1);
    expect_bucket(&p.buckets[0], 0, 106, 0, 5);
    df_grad_buckets_free(&p);
}

/* The drafter's layout as the trainer gives it to dist/ (train/param_ranges.h),
 * planned in buckets of bucket_mib MiB. */
static int plan_from_layout(DfGradBuckets *p, const DfDrafterLayout *l, double bucket_mib, DfError *err) {
    DfParamRanges ranges;
    df_param_ranges_from_layout(&ranges, l);
    int rc = df_grad_buckets_plan_mib(p, &ranges, bucket_mib, err);
    df_param_ranges_free(&ranges);
    return rc;
}

static void test_bad_plans(void **state) {
    (void)state;
    DfGradBuckets p;
    DfError err;
    const size_t counts[3] = {4, 4, 4};
    const size_t gap[3] = {0, 4, 9};
    assert_int_equal(df_grad_buckets_plan(&p, gap, counts, 3, 12, 8, &err), -1);
    assert_non_null(strstr(err.msg, "parameter 2 starts at element 9, expected 8"));
    const size_t offsets[3] = {0, 4, 8};
    assert_int_equal(df_grad_buckets_plan(&p, offsets, counts, 3, 11, 8, &err), -1);
    assert_non_null(strstr(err.msg, "runs past the end"));
    assert_int_equal(df_grad_buckets_plan(&p, offsets, counts, 3, 13, 8, &err), -1);
    assert_non_null(strstr(err.msg, "cover 12 of 13"));
    assert_int_equal(df_grad_buckets_plan(&p, offsets, counts, 3, 12, 0, &err), -1);
    DfDrafterLayout layout = {0};
    assert_int_equal(plan_from_layout(&p, &layout, 0.0, &err), -1);
    assert_non_null(strstr(err.msg, "not a positive size"));
}

/* The invariants, checked from the layout itself. */
static void check_plan(const DfDrafterLayout *l, const DfGradBuckets *p, size_t max_elems) {
    assert_int_equal(p->total, l->total);
    size_t end = l->total;
    for (int b = 0; b < p->n; b++) {
        const DfGradBucket *k = &p->buckets[b];
        assert_int_equal(k->offset + k->count, end); /* tiles from the end */
        assert_true(k->count >= 1 && k->count <= max_elems);
        end = k->offset;
        const DfParamInfo *lo = &l->params[k->param_lo], *hi = &l->params[k->param_hi];
        if (k->param_lo == k->param_hi && lo->count > max_elems) {
            /* a piece of an oversized parameter: inside it */
            assert_true(k->offset >= lo->offset && k->offset + k->count <= lo->offset + lo->count);
            continue;
        }
        assert_int_equal(k->offset, lo->offset); /* whole parameters lo..hi */
        assert_int_equal(k->offset + k->count, hi->offset + hi->count);
        for (int i = k->param_lo; i <= k->param_hi; i++) assert_true(l->params[i].count <= max_elems);
        /* greedy: the next parameter backward did not fit */
        if (k->param_lo > 0) assert_true(k->count + l->params[k->param_lo - 1].count > max_elems);
    }
    assert_int_equal(end, 0);
    /* readiness only grows as backward goes on, ending with every bucket */
    int prev = 0;
    for (int d = l->n_params; d >= 0; d--) {
        int r = df_grad_buckets_ready(p, d);
        assert_true(r >= prev);
        prev = r;
    }
    assert_int_equal(prev, p->n);
    assert_int_equal(df_grad_buckets_ready(p, l->n_params), 0);
}

static void test_drafter_layouts(void **state) {
    (void)state;
    DfDrafterConfig cfg = {.hidden_size = 64, .num_heads = 4, .num_kv_heads = 2, .head_dim = 16,
                           .intermediate_size = 176, .num_layers = 3, .n_taps = 3};
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &cfg);
    const double mib[5] = {0.001, 0.01, 0.03, 0.2, 64};
    for (int i = 0; i < 5; i++) {
        DfGradBuckets p;
        DfError err;
        assert_int_equal(plan_from_layout(&p, &l, mib[i], &err), 0);
        check_plan(&l, &p, (size_t)(mib[i] * 1024 * 1024 / 4));
        if (mib[i] == 64) assert_int_equal(p.n, 1);
        if (mib[i] == 0.001) assert_true(p.n > l.n_params); /* every matrix in pieces */
        df_grad_buckets_free(&p);
    }
    df_drafter_layout_free(&l);

    /* qwen3-8b's drafter shape (5 layers, 5 taps), 25 MiB buckets */
    DfDrafterConfig big = {.hidden_size = 4096, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                           .intermediate_size = 12288, .num_layers = 5, .n_taps = 5};
    df_drafter_layout_build(&l, &big);
    DfGradBuckets p;
    DfError err;
    assert_int_equal(plan_from_layout(&p, &l, 25, &err), 0);
    check_plan(&l, &p, 25u << 18);
    assert_int_equal(p.buckets[0].param_hi, l.n_params - 1); /* the last norm goes first */
    assert_int_equal(p.buckets[p.n - 1].param_lo, 0);        /* fc last */
    df_grad_buckets_free(&p);
    df_drafter_layout_free(&l);
}

/* The hand-worked plan of test_hand_worked_plan: buckets [93,106) [81,93)
 * [68,81) [56,68) [44,56) [29,44) [14,29) [0,14). */
static void hand_worked(DfGradBuckets *p) {
    const size_t counts[6] = {10, 4, 30, 6, 6, 50};
    const size_t offsets[6] = {0, 10, 14, 44, 50, 56};
    DfError err;
    assert_int_equal(df_grad_buckets_plan(p, offsets, counts, 6, 106, 16, &err), 0);
    assert_int_equal(p->n, 8);
}

static void test_readiness_in_backward_order(void **state) {
    (void)state;
    DfGradBuckets p;
    hand_worked(&p);
    DfGradReadiness r;
    DfError err;
    df_grad_readiness_init(&r, &p);
    /* ranges as a backward reports them, from the end; expected complete buckets after each */
    const size_t start[6] = {100, 56, 50, 44, 20, 0};
    const int complete[6] = {0, 4, 4, 5, 6, 8};
    size_t end = 106;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(df_grad_readiness_mark(&r, start[i], end - start[i], &err), complete[i]);
        end = start[i];
    }
    /* reset: a new step, nothing complete; an empty range changes nothing */
    df_grad_readiness_reset(&r);
    assert_int_equal(df_grad_readiness_mark(&r, 106, 0, &err), 0);
    assert_int_equal(df_grad_readiness_mark(&r, 0, 106, &err), 8);
    df_grad_readiness_free(&r);
    df_grad_buckets_free(&p);
}

static void test_readiness_in_plan_order_only(void **state) {
    (void)state;
    DfGradBuckets p;
    hand_worked(&p);
    DfGradReadiness r;
    DfError err;
    df_grad_readiness_init(&r, &p);
    /* the first bucket's elements last: nothing is handed out before them,
     * though every other bucket is complete */
    assert_int_equal(df_grad_readiness_mark(&r, 0, 14, &err), 0);
    assert_int_equal(df_grad_readiness_mark(&r, 14, 79, &err), 0);
    assert_int_equal(df_grad_readiness_mark(&r, 94, 12, &err), 0);
    assert_int_equal(df_grad_readiness_mark(&r, 93, 1, &err), 8);
    df_grad_readiness_reset(&r);
    /* buckets 0 and 2 complete, 1 not: only 0 */
    assert_int_equal(df_grad_readiness_mark(&r, 93, 13, &err), 1);
    assert_int_equal(df_grad_readiness_mark(&r, 68, 13, &err), 1);
    assert_int_equal(df_grad_readiness_mark(&r, 81, 12, &err), 3);
    /* reported twice, outside the buffer: refused, nothing changes */
    assert_int_equal(df_grad_readiness_mark(&r, 80, 2, &err), -1);
    assert_non_null(strstr(err.msg, "reported final again"));
    assert_int_equal(df_grad_readiness_mark(&r, 100, 7, &err), -1);
    assert_non_null(strstr(err.msg, "outside the 106 gradients"));
    assert_int_equal(df_grad_readiness_mark(&r, 56, 12, &err), 4);
    df_grad_readiness_free(&r);
    df_grad_buckets_free(&p);
}

/* The drafter backward's ranges (model/drafter_backward.c): layer l is final
 * from its input_layernorm on, the last layer with the final norm behind it;
 * fc and hidden_norm last. After each, the complete buckets are exactly
 * those lying in [start, total), counted here from the plan directly. */
static void test_readiness_on_drafter_ranges(void **state) {
    (void)state;
    DfDrafterConfig cfg = {.hidden_size = 64, .num_heads = 4, .num_kv_heads = 2, .head_dim = 16,
                           .intermediate_size = 176, .num_layers = 3, .n_taps = 3};
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &cfg);
    const double mib[4] = {0.001, 0.01, 0.03, 64};
    for (int m = 0; m < 4; m++) {
        DfGradBuckets p;
        DfGradReadiness r;
        DfError err;
        assert_int_equal(plan_from_layout(&p, &l, mib[m], &err), 0);
        df_grad_readiness_init(&r, &p);
        size_t end = l.total;
        int prev = 0;
        for (int layer = cfg.num_layers - 1; layer >= -1; layer--) { /* -1: fc and hidden_norm */
            size_t start = 0;
            if (layer >= 0) {
                char name[96];
                snprintf(name, sizeof name, "layers.%d.input_layernorm.weight", layer);
                int idx = df_drafter_layout_find(&l, name);
                assert_true(idx >= 0);
                start = l.params[idx].offset;
            }
            int complete = df_grad_readiness_mark(&r, start, end - start, &err);
            int expect = 0;
            while (expect < p.n && p.buckets[expect].offset >= start) expect++;
            assert_int_equal(complete, expect);
            assert_true(complete >= prev);
            prev = complete;
            end = start;
        }
        assert_int_equal(prev, p.n);
        df_grad_readiness_free(&r);
        df_grad_buckets_free(&p);
    }
    df_drafter_layout_free(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked_plan),
        cmocka_unit_test(test_bad_plans),
        cmocka_unit_test(test_drafter_layouts),
        cmocka_unit_test(test_readiness_in_backward_order),
        cmocka_unit_test(test_readiness_in_plan_order_only),
        cmocka_unit_test(test_readiness_on_drafter_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
