/* Anchors and blocks (DFLASH.md section 4): candidates follow the definition
 * C = { p : 1 <= p <= S-2, m[p+1] = 1 }; selected anchors are distinct,
 * sorted, candidates, min(N, |C|) of them, the same for the same (seed, epoch,
 * sample index) and different across epochs, samples and seeds; every
 * candidate is picked equally often (chi-square); loss weights, labels and
 * validity match the formula computed here directly; block ids/positions; the
 * skip predicate; the default gamma. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/anchors.h"
#include "test_util.h"

/* A mask with a prompt of `prompt` tokens, then response tokens with a few
 * holes (multi-turn-like), length len. */
static void make_mask(uint8_t *m, int64_t len, int64_t prompt) {
    for (int64_t p = 0; p < len; p++) m[p] = p >= prompt && (p % 11) != 5;
}

static int is_candidate(const uint8_t *m, int64_t len, int64_t p) {
    return p >= 1 && p <= len - 2 && m[p + 1] == 1;
}

static int64_t count_candidates(const uint8_t *m, int64_t len) {
    int64_t n = 0;
    for (int64_t p = 0; p < len; p++) n += is_candidate(m, len, p);
    return n;
}

static void test_candidates_follow_definition(void **state) {
    (void)state;
    enum { S = 57 };
    uint8_t m[S];
    int64_t c[S];
    make_mask(m, S, 9);
    m[S - 1] = 1; /* makes p = S-2, the last possible candidate, one */
    int64_t n = df_anchor_candidates(m, S, c);
    assert_int_equal(n, count_candidates(m, S));
    for (int64_t i = 0; i < n; i++) {
        assert_true(is_candidate(m, S, c[i]));
        if (i) assert_true(c[i] > c[i - 1]);
    }
    assert_int_equal(c[n - 1], S - 2);
    /* edge cases: p = 0 never, p = S-1 never */
    uint8_t all[4] = {1, 1, 1, 1};
    assert_int_equal(df_anchor_candidates(all, 4, c), 2); /* p = 1, 2 */
    assert_int_equal(c[0], 1);
    assert_int_equal(c[1], 2);
    assert_int_equal(df_anchor_candidates(all, 2, c), 0);
    assert_int_equal(df_anchor_candidates(all, 0, c), 0);
}

static void check_anchor_set(const uint8_t *m, int64_t len, const int64_t *a, int64_t n, int64_t want) {
    assert_int_equal(n, want);
    for (int64_t i = 0; i < n; i++) {
        assert_true(is_candidate(m, len, a[i]));
        if (i) assert_true(a[i] > a[i - 1]); /* sorted and distinct */
    }
}

static void test_anchor_properties(void **state) {
    (void)state;
    enum { S = 300 };
    uint8_t m[S];
    int64_t a[S], scratch[S];
    make_mask(m, S, 40);
    int64_t n_cand = count_candidates(m, S);
    const int64_t requests[] = {0, 1, 7, 64, n_cand - 1, n_cand, n_cand + 1, 512};
    for (size_t r = 0; r < sizeof requests / sizeof requests[0]; r++) {
        int64_t want = requests[r] < n_cand ? requests[r] : n_cand;
        int64_t n = df_select_anchors(m, S, requests[r], 1234, 2, 17, a, scratch);
        check_anchor_set(m, S, a, n, want);
    }
    /* all candidates requested: exactly C */
    int64_t c[S];
    df_anchor_candidates(m, S, c);
    int64_t n = df_select_anchors(m, S, 1 << 20, 1, 1, 1, a, scratch);
    assert_int_equal(n, n_cand);
    assert_memory_equal(a, c, (size_t)n * sizeof *a);
    /* no loss tokens: nothing */
    uint8_t zeros[S] = {0};
    assert_int_equal(df_select_anchors(zeros, S, 8, 1, 1, 1, a, scratch), 0);
}

static void test_anchor_determinism(void **state) {
    (void)state;
    enum { S = 400, N = 16 };
    uint8_t m[S];
    int64_t a[S], b[S], scratch[S];
    make_mask(m, S, 50);
    int64_t na = df_select_anchors(m, S, N, 99, 3, 1000, a, scratch);
    /* scratch content from a different call must not matter */
    for (int i = 0; i < S; i++) scratch[i] = -7;
    int64_t nb = df_select_anchors(m, S, N, 99, 3, 1000, b, scratch);
    assert_int_equal(na, N);
    assert_int_equal(nb, N);
    assert_memory_equal(a, b, sizeof(int64_t) * N);

    /* any change of epoch, sample index or seed gives another set */
    struct {
        uint64_t seed;
        uint32_t epoch;
        uint64_t index;
    } other[] = {{99, 4, 1000}, {99, 2, 1000}, {99, 3, 1001}, {100, 3, 1000}};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        int64_t n = df_select_anchors(m, S, N, other[k].seed, other[k].epoch, other[k].index, b, scratch);
        assert_int_equal(n, N);
        assert_memory_not_equal(a, b, sizeof(int64_t) * N);
    }
}

/* Every candidate must be chosen with probability N/|C|: over many sample
 * indices the counts per candidate pass a chi-square test, and the count of
 * the smallest-position pair (p0, p1) chosen together matches
 * N(N-1)/(|C|(|C|-1)) (uniform subsets, not just uniform marginals). */
static void test_anchor_uniformity(void **state) {
    (void)state;
    enum { S = 30, N = 5, TRIALS = 20000 };
    uint8_t m[S];
    int64_t a[S], scratch[S], c[S];
    for (int p = 0; p < S; p++) m[p] = p >= 8;
    int64_t n_cand = df_anchor_candidates(m, S, c); /* p = 7 .. 28: 22 candidates */
    assert_int_equal(n_cand, 22);
    long hist[S] = {0}, pair = 0;
    for (int t = 0; t < TRIALS; t++) {
        int64_t n = df_select_anchors(m, S, N, 5, 0, (uint64_t)t, a, scratch);
        assert_int_equal(n, N);
        int has0 = 0, has1 = 0;
        for (int i = 0; i < N; i++) {
            hist[a[i]]++;
            has0 |= a[i] == c[0];
            has1 |= a[i] == c[1];
        }
        pair += has0 && has1;
    }
    double expected = (double)TRIALS * N / n_cand, chi = 0;
    for (int64_t i = 0; i < n_cand; i++) chi += (hist[c[i]] - expected) * (hist[c[i]] - expected) / expected;
    assert_true(chi < 48.3); /* 99.9% quantile of chi-square, 21 degrees of freedom: 46.8 */
    double p_pair = (double)N * (N - 1) / ((double)n_cand * (n_cand - 1));
    double sd = sqrt(TRIALS * p_pair * (1 - p_pair));
    assert_true(fabs(pair - TRIALS * p_pair) < 4 * sd);
}

static void test_trainable_predicate(void **state) {
    (void)state;
    enum { S = 100 };
    uint8_t m[S] = {0};
    const int B = 16;
    for (int p = 0; p < 2 * B - 1; p++) m[60 + p % 40] = 1; /* 31 loss tokens */
    int loss = 0;
    for (int p = 0; p < S; p++) loss += m[p];
    assert_int_equal(loss, 2 * B - 1);
    assert_false(df_sequence_trainable(m, S, B));
    m[3] = 1; /* 32 */
    assert_true(df_sequence_trainable(m, S, B));
    assert_true(df_sequence_trainable(m, S, 10));
    assert_false(df_sequence_trainable(m, S, 17));
    assert_false(df_sequence_trainable(m, 0, 1));
}

static void test_default_gamma(void **state) {
    (void)state;
    assert_true(df_default_gamma(16) == 7.0);
    assert_true(df_default_gamma(10) == 5.0);
    assert_true(df_default_gamma(8) == 4.0);
    assert_true(df_default_gamma(4) == 4.0);
    assert_true(df_default_gamma(32) == 7.0);
    assert_true(fabs(df_default_gamma(9) - 4.5) < 1e-12);
    assert_true(fabs(df_default_gamma(13) - 6.0) < 1e-12);
    for (int b = 2; b < 40; b++) assert_true(df_default_gamma(b + 1) >= df_default_gamma(b));
}

static void test_block_inputs(void **state) {
    (void)state;
    int32_t x[20];
    for (int i = 0; i < 20; i++) x[i] = 100 + i * 3;
    int32_t ids[8], pos[8];
    df_block_inputs(x, 15, 8, 8190, ids, pos); /* runs past the end: positions still a..a+B-1 */
    assert_int_equal(ids[0], x[15]);
    for (int k = 1; k < 8; k++) assert_int_equal(ids[k], 8190);
    for (int k = 0; k < 8; k++) assert_int_equal(pos[k], 15 + k);
}

static void test_block_targets(void **state) {
    (void)state;
    enum { S = 40, B = 16 };
    int32_t x[S];
    uint8_t m[S];
    make_mask(m, S, 12);
    for (int i = 0; i < S; i++) x[i] = 7 * i + 1;
    const double gamma = 7.0;
    float decay[B];
    df_block_decay(gamma, B, decay);
    const int64_t anchors[] = {1, 11, 15, 30, 38};
    for (size_t j = 0; j < sizeof anchors / sizeof anchors[0]; j++) {
        int64_t a = anchors[j];
        int32_t labels[B];
        uint8_t valid[B];
        float w[B];
        df_block_targets(x, m, S, a, B, decay, labels, valid, w);
        for (int k = 0; k < B; k++) {
            int inside = a + k < S;
            double want = (k >= 1) * inside * (inside ? m[a + k] : 0) * exp(-(k - 1) / gamma);
            assert_true(fabs(w[k] - want) <= 1e-7 * want);
            assert_int_equal(valid[k], want > 0);
            assert_int_equal(labels[k], inside ? x[a + k] : -1);
        }
        /* NULL outputs are allowed */
        float w2[B];
        df_block_targets(x, m, S, a, B, decay, NULL, NULL, w2);
        assert_memory_equal(w, w2, sizeof w);
    }
    /* k = 1 has weight exactly 1 where valid; k = 0 never counts */
    float w[B];
    uint8_t all[S];
    memset(all, 1, sizeof all);
    df_block_targets(x, all, S, 2, B, decay, NULL, NULL, w);
    assert_true(w[0] == 0.0f);
    assert_true(w[1] == 1.0f);
    assert_true(fabsf(w[8] - (float)exp(-1.0)) == 0.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates_follow_definition),
        cmocka_unit_test(test_anchor_properties),
        cmocka_unit_test(test_anchor_determinism),
        cmocka_unit_test(test_anchor_uniformity),
        cmocka_unit_test(test_trainable_predicate),
        cmocka_unit_test(test_default_gamma),
        cmocka_unit_test(test_block_inputs),
        cmocka_unit_test(test_block_targets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
