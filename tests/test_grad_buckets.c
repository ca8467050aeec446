/* Gradient buckets: a hand-worked plan (sizes chosen to hit every rule:
 * merging small parameters, closing a bucket that would overflow, cutting a
 * parameter larger than a bucket into equal pieces), the readiness count as
 * backward finishes parameters from the last to the first, bad inputs, and
 * on real drafter layouts the invariants checked independently: the buckets
 * tile the flat buffer from its end to its start, none is over the size,
 * edges fall on parameter edges except inside an oversized parameter, no
 * bucket could take the next parameter without going over, and the
 * parameter ranges are those the offsets say. */
#include <stdlib.h>
#include <string.h>

#include "dist/grad_buckets.h"
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
    assert_int_equal(df_grad_buckets_from_layout(&p, &layout, 0.0, &err), -1);
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
        assert_int_equal(df_grad_buckets_from_layout(&p, &l, mib[i], &err), 0);
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
    assert_int_equal(df_grad_buckets_from_layout(&p, &l, 25, &err), 0);
    check_plan(&l, &p, 25u << 18);
    assert_int_equal(p.buckets[0].param_hi, l.n_params - 1); /* the last norm goes first */
    assert_int_equal(p.buckets[p.n - 1].param_lo, 0);        /* fc last */
    df_grad_buckets_free(&p);
    df_drafter_layout_free(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked_plan),
        cmocka_unit_test(test_bad_plans),
        cmocka_unit_test(test_drafter_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
