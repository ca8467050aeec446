/* The batcher: usable samples and skip counts, the epoch shuffle (a
 * permutation, uniform, different per epoch and seed), and the batches of an
 * epoch checked against an independent transcription of the documented rule
 * plus its invariants (every usable sample once, the budget, one length
 * bucket per batch, determinism). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/token_store.h"
#include "train/batcher.h"

#define BLOCK 4 /* trainable: at least 8 loss tokens */

typedef struct Fixture {
    char *dir;
    char path[512];
    int n;
    int64_t *len;
    int *loss; /* loss tokens per sample */
} Fixture;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n samples, lengths 1..max_len, loss tokens a random suffix of each sample. */
static Fixture make_store(int n, int max_len, uint64_t seed) {
    Fixture f = {.dir = df_test_tmpdir("batcher"), .n = n};
    snprintf(f.path, sizeof f.path, "%s/data.store", f.dir);
    f.len = calloc((size_t)n, sizeof *f.len);
    f.loss = calloc((size_t)n, sizeof *f.loss);
    DfError err = {{0}};
    DfTokenStoreWriter *w = df_token_store_writer_open(f.path, 100, 1, &err);
    assert_non_null(w);
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    int32_t *ids = malloc((size_t)max_len * sizeof *ids);
    uint8_t *mask = malloc((size_t)max_len);
    for (int i = 0; i < n; i++) {
        int64_t len = 1 + (int64_t)(xorshift(&r) % (uint64_t)max_len);
        int64_t prompt = (int64_t)(xorshift(&r) % (uint64_t)len);
        for (int64_t k = 0; k < len; k++) ids[k] = (int32_t)(xorshift(&r) % 100), mask[k] = k >= prompt;
        f.len[i] = len;
        f.loss[i] = (int)(len - prompt);
        assert_int_equal(df_token_store_writer_append(w, ids, mask, (size_t)len, &err), 0);
    }
    assert_int_equal(df_token_store_writer_commit(w, &err), 0);
    free(ids);
    free(mask);
    return f;
}

static void free_fixture(Fixture *f) {
    df_test_rmtree(f->dir);
    free(f->dir);
    free(f->len);
    free(f->loss);
}

static int usable(const Fixture *f, int i, int64_t max_length) {
    return f->len[i] <= max_length && f->loss[i] >= 2 * BLOCK;
}

static void test_usable_samples_and_counts(void **state) {
    (void)state;
    Fixture f = make_store(300, 120, 1);
    DfError err = {{0}};
    DfTokenStore *s = df_token_store_open(f.path, 0, &err);
    assert_non_null(s);
    DfBatcher b;
    assert_int_equal(df_batcher_init(&b, s, BLOCK, 100, 256, 7, &err), 0);
    int64_t n_usable = 0, few = 0, too_long = 0, tokens = 0;
    for (int i = 0; i < f.n; i++) {
        if (f.len[i] > 100) too_long++;
        else if (f.loss[i] < 2 * BLOCK) few++;
        assert_int_equal(b.usable[i], usable(&f, i, 100));
        if (usable(&f, i, 100)) n_usable++, tokens += f.len[i];
    }
    assert_true(few > 0 && too_long > 0 && n_usable > 0);
    assert_int_equal(b.n_usable, n_usable);
    assert_int_equal(b.n_few_loss_tokens, few);
    assert_int_equal(b.n_too_long, too_long);
    assert_int_equal(b.usable_tokens, tokens);
    df_batcher_free(&b);
    /* nothing usable: a clear error */
    assert_int_equal(df_batcher_init(&b, s, 64, 100, 256, 7, &err), -1);
    assert_non_null(strstr(err.msg, "no trainable sample"));
    assert_int_equal(df_batcher_init(&b, s, BLOCK, 100, 0, 7, &err), -1);
    assert_non_null(strstr(err.msg, "--token-budget"));
    df_token_store_close(s);
    free_fixture(&f);
}

static void test_shuffle_is_a_uniform_permutation(void **state) {
    (void)state;
    enum { N = 50 };
    int64_t a[N], b[N];
    df_batcher_shuffle(N, 11, 0, a);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) seen[a[i]]++;
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    df_batcher_shuffle(N, 11, 0, b);
    assert_memory_equal(a, b, sizeof a);
    df_batcher_shuffle(N, 11, 1, b);
    assert_memory_not_equal(a, b, sizeof a);
    df_batcher_shuffle(N, 12, 0, b);
    assert_memory_not_equal(a, b, sizeof a);
    /* all 6 permutations of 3 elements, equally often (chi-square, 5 dof,
     * 0.1% critical value 20.5) */
    enum { TRIALS = 6000 };
    int count[6] = {0};
    for (int t = 0; t < TRIALS; t++) {
        int64_t p[3];
        df_batcher_shuffle(3, (uint64_t)t, 0, p);
        count[p[0] * 2 + (p[1] > p[2])]++;
    }
    double chi2 = 0, expect = TRIALS / 6.0;
    for (int k = 0; k < 6; k++) chi2 += (count[k] - expect) * (count[k] - expect) / expect;
    assert_true(chi2 < 20.5);
}

static int bucket_of(int64_t len) {
    int k = -1;
    while (len > 0) len >>= 1, k++;
    return k;
}

/* The documented rule, written out again with plain arrays. */
static int reference_plan(const Fixture *f, const int64_t *order, int64_t budget, int64_t max_length,
                          int64_t *samples, int64_t *starts) {
    int64_t pending[64][512];
    int n_pending[64] = {0};
    int64_t tokens[64] = {0};
    int nb = 0, n_out = 0;
    starts[0] = 0;
    for (int i = 0; i < f->n; i++) {
        int s = (int)order[i];
        if (!usable(f, s, max_length)) continue;
        if (f->len[s] > budget) {
            samples[n_out++] = s;
            starts[++nb] = n_out;
            continue;
        }
        int k = bucket_of(f->len[s]);
        if (n_pending[k] > 0 && tokens[k] + f->len[s] > budget) {
            for (int j = 0; j < n_pending[k]; j++) samples[n_out++] = pending[k][j];
            starts[++nb] = n_out;
            n_pending[k] = 0;
            tokens[k] = 0;
        }
        pending[k][n_pending[k]++] = s;
        tokens[k] += f->len[s];
    }
    for (int k = 0; k < 64; k++) {
        if (!n_pending[k]) continue;
        for (int j = 0; j < n_pending[k]; j++) samples[n_out++] = pending[k][j];
        starts[++nb] = n_out;
    }
    return nb;
}

static void check_epoch(const Fixture *f, const DfBatcher *b, int64_t epoch, int64_t budget, int64_t max_length) {
    DfEpochPlan plan, again;
    df_batcher_plan_epoch(b, epoch, &plan);
    int64_t *order = malloc((size_t)f->n * sizeof *order);
    df_batcher_shuffle(f->n, b->seed, epoch, order);
    int64_t *ref_samples = malloc((size_t)f->n * sizeof(int64_t)), *ref_starts = malloc((size_t)(f->n + 1) * sizeof(int64_t));
    int nb = reference_plan(f, order, budget, max_length, ref_samples, ref_starts);
    assert_int_equal(plan.n_batches, nb);
    assert_memory_equal(plan.starts, ref_starts, (size_t)(nb + 1) * sizeof(int64_t));
    assert_memory_equal(plan.samples, ref_samples, (size_t)b->n_usable * sizeof(int64_t));

    /* invariants, independent of the reference */
    int *seen = calloc((size_t)f->n, sizeof *seen);
    for (int64_t k = 0; k < plan.n_batches; k++) {
        int64_t first = plan.starts[k], end = plan.starts[k + 1], tokens = 0;
        assert_true(end > first);
        for (int64_t j = first; j < end; j++) {
            int64_t s = plan.samples[j];
            seen[s]++;
            tokens += f->len[s];
            assert_int_equal(bucket_of(f->len[s]), bucket_of(f->len[plan.samples[first]]));
        }
        if (tokens > budget) { /* only a single sample longer than the budget */
            assert_int_equal(end - first, 1);
            assert_true(f->len[plan.samples[first]] > budget);
        }
    }
    for (int i = 0; i < f->n; i++) assert_int_equal(seen[i], usable(f, i, max_length));
    assert_int_equal(plan.starts[plan.n_batches], b->n_usable);

    df_batcher_plan_epoch(b, epoch, &again);
    assert_int_equal(again.n_batches, plan.n_batches);
    assert_memory_equal(again.samples, plan.samples, (size_t)b->n_usable * sizeof(int64_t));
    df_epoch_plan_free(&again);
    df_epoch_plan_free(&plan);
    free(seen);
    free(order);
    free(ref_samples);
    free(ref_starts);
}

static void test_epoch_batches(void **state) {
    (void)state;
    Fixture f = make_store(400, 300, 2);
    DfError err = {{0}};
    DfTokenStore *s = df_token_store_open(f.path, 0, &err);
    assert_non_null(s);
    const int64_t budgets[] = {150, 600, 5000};
    for (int bi = 0; bi < 3; bi++) {
        DfBatcher b;
        assert_int_equal(df_batcher_init(&b, s, BLOCK, 280, budgets[bi], 3, &err), 0);
        int64_t total = 0;
        for (int64_t e = 0; e < 3; e++) {
            check_epoch(&f, &b, e, budgets[bi], 280);
            DfEpochPlan p;
            df_batcher_plan_epoch(&b, e, &p);
            total += p.n_batches;
            df_epoch_plan_free(&p);
        }
        assert_int_equal(df_batcher_total_batches(&b, 3), total);
        df_batcher_free(&b);
    }
    /* a budget of 150 leaves samples longer than it alone in their batch */
    int longer = 0;
    for (int i = 0; i < f.n; i++) longer += usable(&f, i, 280) && f.len[i] > 150;
    assert_true(longer > 0);
    df_token_store_close(s);
    free_fixture(&f);
}

static void test_epochs_differ(void **state) {
    (void)state;
    Fixture f = make_store(200, 100, 3);
    DfError err = {{0}};
    DfTokenStore *s = df_token_store_open(f.path, 0, &err);
    assert_non_null(s);
    DfBatcher b;
    assert_int_equal(df_batcher_init(&b, s, BLOCK, 1000, 400, 5, &err), 0);
    DfEpochPlan p0, p1;
    df_batcher_plan_epoch(&b, 0, &p0);
    df_batcher_plan_epoch(&b, 1, &p1);
    assert_memory_not_equal(p0.samples, p1.samples, (size_t)b.n_usable * sizeof(int64_t));
    df_epoch_plan_free(&p0);
    df_epoch_plan_free(&p1);
    df_batcher_free(&b);
    df_token_store_close(s);
    free_fixture(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usable_samples_and_counts),
        cmocka_unit_test(test_shuffle_is_a_uniform_permutation),
        cmocka_unit_test(test_epoch_batches),
        cmocka_unit_test(test_epochs_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
