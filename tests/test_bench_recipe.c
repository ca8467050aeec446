/* The batch of the bench's recipe training step (bench/bench_recipe.h) is
 * the one `dflash train` trains on at its defaults: built by
 * df_bench_recipe_load from a JSONL file, it must equal, element by element
 * (ids, loss mask, sequence starts, anchors, sample order), the batch an
 * independent path gives: `dflash prepare` into a store, the batcher's
 * epoch-0 plan at train's defaults, the loader's fill of the batch that has
 * the most tokens among the plan's first 16 (found here from the plan). The
 * JSONL files: generated token-id records of lengths from a few hundred to
 * past the default max length (more than 16 batches, the fullest of them
 * past the 16th), and text records of assets/data/code-dev.jsonl; the
 * target assets/coder-tiny. A token store given is used as it is; the
 * temporary preparation leaves nothing behind. */
#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "bench/bench_recipe.h"
#include "text/tokenizer.h"

enum { CANDIDATES = 16 };

static uint64_t next_random(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* n records {"input_ids", "loss_mask"} of 200..3199 tokens (the longest
 * past train's max length: prepare drops them), a quarter prompt. */
static void write_id_records(const char *path, int n, uint64_t seed) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        int len = 200 + (int)(next_random(&s) % 3000);
        fputs("{\"input_ids\": [", f);
        for (int k = 0; k < len; k++) fprintf(f, "%s%d", k ? "," : "", (int)(next_random(&s) % 8000));
        fputs("], \"loss_mask\": [", f);
        for (int k = 0; k < len; k++) fprintf(f, "%s%d", k ? "," : "", k >= len / 4);
        fputs("]}\n", f);
    }
    assert_int_equal(fclose(f), 0);
}

/* `dflash prepare` of input into store at train's default max length. */
static void prepare_store(const char *input, const char *store, const DfTrainOptions *defaults) {
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' prepare --target '%s' --input '%s' --output '%s' --max-length %lld",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), input, store,
             (long long)defaults->max_length);
    int rc = df_test_run(cmd, out, sizeof out);
    if (rc != 0) fail_msg("prepare failed (%d): %s", rc, out);
}

static int64_t batch_tokens(const DfEpochPlan *plan, const DfTokenStore *store, int64_t b) {
    int64_t tokens = 0;
    for (int64_t i = plan->starts[b]; i < plan->starts[b + 1]; i++)
        tokens += df_token_store_sample_length(store, plan->samples[i]);
    return tokens;
}

/* The reference: the plan of epoch 0 at train's defaults; the fullest of
 * its first CANDIDATES batches (the first of equals) into *chosen, filled
 * into out; the fullest of all its batches into *fullest. */
static void reference_batch(const char *store_path, DfStepBatch *out, int64_t *chosen, int64_t *fullest,
                            int64_t *n_batches) {
    DfTrainOptions o;
    df_train_options_default(&o);
    DfError err = {{0}};
    DfTokenStore *store = df_token_store_open(store_path, 1, &err);
    if (!store) fail_msg("%s", err.msg);
    DfBatcher batcher;
    if (df_batcher_init(&batcher, store, o.block_size, o.max_length, o.token_budget, o.seed, &err))
        fail_msg("%s", err.msg);
    DfEpochPlan plan = {0};
    df_batcher_plan_epoch(&batcher, 0, &plan);
    *chosen = *fullest = 0;
    for (int64_t b = 1; b < plan.n_batches; b++) {
        int64_t t = batch_tokens(&plan, store, b);
        if (b < CANDIDATES && t > batch_tokens(&plan, store, *chosen)) *chosen = b;
        if (t > batch_tokens(&plan, store, *fullest)) *fullest = b;
    }
    *n_batches = plan.n_batches;
    DfStepLoaderConfig cfg = {.store = store, .batcher = &batcher, .num_anchors = o.num_anchors, .seed = o.seed,
                              .rank = 0, .world = 1, .depth = 1};
    int n = (int)(plan.starts[*chosen + 1] - plan.starts[*chosen]);
    if (df_step_batch_fill(out, &cfg, plan.samples + plan.starts[*chosen], n, 0, &err)) fail_msg("%s", err.msg);
    df_epoch_plan_free(&plan);
    df_batcher_free(&batcher);
    df_token_store_close(store);
}

static void expect_same_batch(const DfStepBatch *got, const DfStepBatch *want) {
    assert_int_equal(got->n_samples, want->n_samples);
    for (int i = 0; i < want->n_samples; i++) assert_int_equal(got->samples[i], want->samples[i]);
    assert_int_equal(got->n_seqs, want->n_seqs);
    assert_int_equal(got->tokens, want->tokens);
    for (int k = 0; k <= want->n_seqs; k++) {
        assert_int_equal(got->seq_starts[k], want->seq_starts[k]);
        assert_int_equal(got->anchor_starts[k], want->anchor_starts[k]);
    }
    for (int64_t t = 0; t < want->tokens; t++) {
        assert_int_equal(got->ids[t], want->ids[t]);
        assert_int_equal(got->mask[t], want->mask[t]);
    }
    for (int64_t a = 0; a < want->anchor_starts[want->n_seqs]; a++) assert_int_equal(got->anchors[a], want->anchors[a]);
}

/* The drafter is train's at its defaults, its mask token the first id past
 * the tokenizer's vocabulary. */
static void expect_default_drafter(const DfBenchRecipe *r) {
    DfTrainOptions o;
    df_train_options_default(&o);
    assert_int_equal(r->drafter.num_layers, o.draft_layers);
    assert_int_equal(r->drafter.block_size, o.block_size);
    assert_int_equal(r->drafter.intermediate_size, r->target.intermediate_size);
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path("assets/coder-tiny"), &err);
    if (!tok) fail_msg("%s", err.msg);
    assert_int_equal(r->drafter.mask_token_id, df_tokenizer_vocab_size(tok));
    df_tokenizer_free(tok);
}

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* df_bench_recipe_load of data (its temporary directory under tmp, left
 * empty), compared with the reference of store. */
static void check_recipe(const char *data, const char *store, const char *tmp, int64_t *chosen, int64_t *fullest,
                         int64_t *n_batches) {
    DfStepBatch want = {0};
    reference_batch(store, &want, chosen, fullest, n_batches);
    DfBenchRecipe r;
    DfError err = {{0}};
    setenv("TMPDIR", tmp, 1);
    int rc = df_bench_recipe_load(&r, df_test_path("assets/coder-tiny"), data, &err);
    unsetenv("TMPDIR");
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(entries(tmp), 0);
    assert_int_equal(r.batch.batch_in_epoch, *chosen);
    assert_int_equal(r.batch.epoch_batches, *n_batches);
    assert_int_equal(r.anchors, want.anchor_starts[want.n_seqs]);
    expect_same_batch(&r.batch, &want);
    expect_default_drafter(&r);
    df_bench_recipe_free(&r);
    df_step_batch_free(&want);
}

/* A test's files: the records (data), the reference store prepared from
 * them, and the temporary directory the bench prepares into. */
typedef struct Fixture {
    char *dir;
    char data[512], store[512], tmp[512];
    DfTrainOptions defaults;
} Fixture;

static void fixture_open(Fixture *f, const char *data_name) {
    f->dir = df_test_tmpdir("bench_recipe");
    snprintf(f->data, sizeof f->data, "%s/%s", f->dir, data_name);
    snprintf(f->store, sizeof f->store, "%s/ref.store", f->dir);
    snprintf(f->tmp, sizeof f->tmp, "%s/tmp", f->dir);
    assert_int_equal(mkdir(f->tmp, 0755), 0);
    df_train_options_default(&f->defaults);
}

static void fixture_close(Fixture *f) {
    df_test_rmtree(f->dir);
    free(f->dir);
}

/* Token-id records: more than 16 batches, the fullest of them past the
 * 16th, so that the choice among the first 16 is what is checked. */
static void test_id_records_give_the_trainers_batch(void **state) {
    (void)state;
    Fixture f;
    fixture_open(&f, "ids.jsonl");
    write_id_records(f.data, 130, 11);
    prepare_store(f.data, f.store, &f.defaults);
    int64_t chosen, fullest, n_batches;
    check_recipe(f.data, f.store, f.tmp, &chosen, &fullest, &n_batches);
    print_message("%lld batches, the fullest of the first %d: %lld, of all: %lld\n", (long long)n_batches,
                  CANDIDATES, (long long)chosen, (long long)fullest);
    assert_true(n_batches > CANDIDATES);
    assert_true(fullest >= CANDIDATES); /* the fixture tells the first 16 from all batches */
    assert_true(chosen > 0);            /* and the fullest from the first */
    /* the store given as it is: the same batch */
    check_recipe(f.store, f.store, f.tmp, &chosen, &fullest, &n_batches);
    fixture_close(&f);
}

/* Text records, tokenized as train tokenizes them. */
static void test_text_records_give_the_trainers_batch(void **state) {
    (void)state;
    Fixture f;
    fixture_open(&f, "slice.jsonl");
    df_test_write_data_slice(f.data, 64);
    prepare_store(f.data, f.store, &f.defaults);
    int64_t chosen, fullest, n_batches;
    check_recipe(f.data, f.store, f.tmp, &chosen, &fullest, &n_batches);
    assert_true(n_batches > 1);
    /* the store given as it is: the same batch */
    check_recipe(f.store, f.store, f.tmp, &chosen, &fullest, &n_batches);
    fixture_close(&f);
}

static void test_missing_data_names_the_file(void **state) {
    (void)state;
    DfBenchRecipe r;
    DfError err = {{0}};
    const char *missing = "/nonexistent/records.jsonl";
    assert_int_equal(df_bench_recipe_load(&r, df_test_path("assets/coder-tiny"), missing, &err), -1);
    assert_non_null(strstr(err.msg, missing));
    assert_non_null(strstr(err.msg, "--train-data"));
    df_bench_recipe_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_records_give_the_trainers_batch),
        cmocka_unit_test(test_text_records_give_the_trainers_batch),
        cmocka_unit_test(test_missing_data_names_the_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
