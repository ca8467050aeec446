/* Counter-based RNG: Philox-4x32-10 matches the published known-answer
 * vectors (Random123 kat_vectors); draws are a pure function of the key and
 * the draw number; different seeds, streams or indices give unrelated
 * sequences; uniform integers, floats and doubles pass chi-square tests; the
 * below-n reduction has no modulo bias even for an n near 2^63; normal draws
 * have mean 0 and variance 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/rng.h"
#include "test_util.h"

static void test_philox_known_answers(void **state) {
    (void)state;
    /* Random123 kat_vectors, philox4x32 10 rounds: counter, key, output */
    static const uint32_t cases[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
         0x24126ea1},
    };
    for (int c = 0; c < 3; c++) {
        uint32_t out[4];
        df_philox4x32_10(cases[c], cases[c] + 4, out);
        for (int i = 0; i < 4; i++) assert_int_equal(out[i], cases[c][6 + i]);
    }
}

static void test_key_layout(void **state) {
    (void)state;
    /* Draw d is word d % 4 of block d / 4 of counter (block, stream, index lo, index hi), key = seed. */
    uint64_t seed = 0x0123456789abcdefull, index = 0xfedcba9876543210ull;
    uint32_t stream = df_rng_stream(DF_RNG_DOMAIN_ANCHORS, 5);
    assert_int_equal(stream, (1u << 24) | 5u);
    DfRng r = df_rng_key(seed, stream, index);
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (uint32_t block = 0; block < 3; block++) {
        uint32_t ctr[4] = {block, stream, (uint32_t)index, (uint32_t)(index >> 32)}, out[4];
        df_philox4x32_10(ctr, key, out);
        for (int w = 0; w < 4; w++) assert_int_equal(df_rng_u32(&r), out[w]);
    }
}

static void test_determinism(void **state) {
    (void)state;
    DfRng a = df_rng_key(42, 7, 1234), b = df_rng_key(42, 7, 1234);
    for (int i = 0; i < 1000; i++) assert_true(df_rng_u64(&a) == df_rng_u64(&b));
    /* mixed draw kinds replay identically too */
    a = df_rng_key(42, 7, 1234);
    b = df_rng_key(42, 7, 1234);
    for (int i = 0; i < 200; i++) {
        assert_true(df_rng_below(&a, 1000 + i) == df_rng_below(&b, 1000 + i));
        assert_true(df_rng_float(&a) == df_rng_float(&b));
        assert_true(df_rng_normal(&a) == df_rng_normal(&b));
    }
}

/* Fraction of equal bits between two sequences of 64-bit draws: about 0.5
 * for unrelated sequences. */
static double equal_bit_fraction(DfRng a, DfRng b, int n) {
    long equal = 0;
    for (int i = 0; i < n; i++) equal += 64 - __builtin_popcountll(df_rng_u64(&a) ^ df_rng_u64(&b));
    return (double)equal / (64.0 * n);
}

static void test_independence_across_keys(void **state) {
    (void)state;
    const int n = 4096; /* 262144 bits: sd of the fraction is 0.001 */
    DfRng base = df_rng_key(1, 0, 0);
    DfRng others[] = {df_rng_key(2, 0, 0), df_rng_key(1, 1, 0), df_rng_key(1, 0, 1), df_rng_key(1ull << 32, 0, 0),
                      df_rng_key(1, 0, 1ull << 32), df_rng_key(1, df_rng_stream(1, 0), 0)};
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        double f = equal_bit_fraction(base, others[k], n);
        assert_true(fabs(f - 0.5) < 0.006);
    }
    /* neighbouring indices: first draws differ */
    for (uint64_t i = 0; i < 100; i++) {
        DfRng x = df_rng_key(9, 3, i), y = df_rng_key(9, 3, i + 1);
        assert_true(df_rng_u64(&x) != df_rng_u64(&y));
    }
}

/* Chi-square statistic of a histogram against equal expected counts. */
static double chi_square(const long *hist, int bins, long total) {
    double expected = (double)total / bins, chi = 0;
    for (int b = 0; b < bins; b++) chi += (hist[b] - expected) * (hist[b] - expected) / expected;
    return chi;
}

/* 99.9% quantile of chi-square with k degrees of freedom (Wilson-Hilferty). */
static double chi_square_limit(int k) {
    double z = 3.09, h = 2.0 / (9.0 * k);
    return k * pow(1 - h + z * sqrt(h), 3);
}

static void test_uniform_float_histogram(void **state) {
    (void)state;
    enum { BINS = 100 };
    long hist[BINS] = {0}, hist_d[BINS] = {0};
    const long n = 200000;
    DfRng r = df_rng_key(2024, 1, 0);
    for (long i = 0; i < n; i++) {
        float u = df_rng_float(&r);
        double d = df_rng_double(&r);
        assert_true(u >= 0.0f && u < 1.0f);
        assert_true(d >= 0.0 && d < 1.0);
        hist[(int)(u * BINS)]++;
        hist_d[(int)(d * BINS)]++;
    }
    assert_true(chi_square(hist, BINS, n) < chi_square_limit(BINS - 1));
    assert_true(chi_square(hist_d, BINS, n) < chi_square_limit(BINS - 1));
}

static void test_below_histogram(void **state) {
    (void)state;
    const uint64_t ns[] = {1, 2, 3, 7, 10, 97, 1000};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        uint64_t n = ns[c];
        long hist[1000] = {0};
        long total = 200 * (long)n + 1000;
        DfRng r = df_rng_key(77, 2, n);
        for (long i = 0; i < total; i++) {
            uint64_t v = df_rng_below(&r, n);
            assert_true(v < n);
            hist[v]++;
        }
        if (n > 1) assert_true(chi_square(hist, (int)n, total) < chi_square_limit((int)n - 1));
    }
    DfRng r = df_rng_key(1, 1, 1);
    assert_true(df_rng_below(&r, 0) == 0);
}

/* With n = 3 * 2^62, plain u64 % n would give values in [0, 2^62) twice the
 * probability of the rest (they are hit by u and by u - n): half of all draws
 * instead of a third. Rejection must keep it at a third. */
static void test_below_no_modulo_bias(void **state) {
    (void)state;
    const uint64_t n = 3ull << 62, low = 1ull << 62;
    const long total = 60000;
    long in_low = 0;
    DfRng r = df_rng_key(5, 5, 5);
    for (long i = 0; i < total; i++) {
        uint64_t v = df_rng_below(&r, n);
        assert_true(v < n);
        in_low += v < low;
    }
    double frac = (double)in_low / total; /* 1/3, sd 0.0019; the biased value would be 1/2 */
    assert_true(fabs(frac - 1.0 / 3.0) < 0.01);
}

static void test_normal_moments(void **state) {
    (void)state;
    const long n = 100000;
    double sum = 0, sum2 = 0, sum4 = 0;
    DfRng r = df_rng_key(11, 3, 0);
    for (long i = 0; i < n; i++) {
        double x = df_rng_normal(&r);
        assert_true(isfinite(x));
        sum += x, sum2 += x * x, sum4 += x * x * x * x;
    }
    double mean = sum / n, var = sum2 / n - mean * mean, kurt = (sum4 / n) / (var * var);
    assert_true(fabs(mean) < 0.015);       /* sd 0.0032 */
    assert_true(fabs(var - 1.0) < 0.03);   /* sd 0.0045 */
    assert_true(fabs(kurt - 3.0) < 0.1);   /* a normal has kurtosis 3; a uniform 1.8 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_key_layout),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_independence_across_keys),
        cmocka_unit_test(test_uniform_float_histogram),
        cmocka_unit_test(test_below_histogram),
        cmocka_unit_test(test_below_no_modulo_bias),
        cmocka_unit_test(test_normal_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
