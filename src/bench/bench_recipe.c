#include "bench/bench_recipe.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train_data.h"

/* A fresh directory under $TMPDIR (or /tmp) into dir[cap]. */
static int make_temp_dir(char *dir, size_t cap, DfError *err) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, cap, "%s/dflash-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return df_fail_errno(err, "%s: cannot create a temporary directory", dir);
    return 0;
}

/* Removes dir and the files in it (train's data preparation makes no
 * folders there). */
static void remove_temp_dir(const char *dir) {
    DIR *d = opendir(dir);
    char path[4200];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* The data as train would resolve it (a JSONL file prepared into the
 * temporary directory), opened; the directory is gone when this returns
 * (the store's mapping stays valid). */
static DfTokenStore *open_data(DfBenchRecipe *r, DfError *err) {
    char dir[4096], store_path[4200];
    if (make_temp_dir(dir, sizeof dir, err)) return NULL;
    r->opt.output_dir = dir;
    DfTokenStore *s = NULL;
    if (df_train_resolve_data(&r->opt, store_path, sizeof store_path, err) == 0)
        s = df_token_store_open(store_path, 1, err);
    r->opt.output_dir = NULL;
    remove_temp_dir(dir);
    if (!s) df_context(err, "--train-data (read as train --data reads it)");
    return s;
}

/* What the trainer checks of its data before it trains on it. */
static int check_store(const DfBenchRecipe *r, const DfTokenStore *s, DfError *err) {
    const DfTrainOptions *o = &r->opt;
    if (df_token_store_vocab_size(s) > r->target.vocab_size)
        return df_fail(err, "--train-data %s: token ids go up to %d but the target %s has %d embedding rows",
                       o->data_source, df_token_store_vocab_size(s) - 1, o->target_dir, r->target.vocab_size);
    if (o->max_length + o->block_size > r->target.max_position_embeddings)
        return df_fail(err, "%s: train's default max length %lld plus the block size %d exceeds its "
                       "max_position_embeddings %d", o->target_dir, (long long)o->max_length, o->block_size,
                       r->target.max_position_embeddings);
    return 0;
}

int64_t df_bench_recipe_pick(const DfEpochPlan *plan, const DfTokenStore *store) {
    int64_t best = 0, best_tokens = -1;
    for (int64_t b = 0; b < plan->n_batches && b < DF_BENCH_RECIPE_CANDIDATES; b++) {
        int64_t tokens = 0;
        for (int64_t i = plan->starts[b]; i < plan->starts[b + 1]; i++)
            tokens += df_token_store_sample_length(store, plan->samples[i]);
        if (tokens > best_tokens) best = b, best_tokens = tokens;
    }
    return best;
}

/* Epoch 0's plan, its chosen batch filled as the loader fills it. */
static int fill_batch(DfBenchRecipe *r, const DfTokenStore *store, DfError *err) {
    const DfTrainOptions *o = &r->opt;
    DfBatcher batcher;
    if (df_batcher_init(&batcher, store, o->block_size, o->max_length, o->token_budget, o->seed, err))
        return df_context(err, "--train-data %s", o->data_source);
    DfEpochPlan plan = {0};
    df_batcher_plan_epoch(&batcher, 0, &plan);
    int64_t b = df_bench_recipe_pick(&plan, store);
    DfStepLoaderConfig cfg = {.store = store, .batcher = &batcher, .num_anchors = o->num_anchors, .seed = o->seed,
                              .rank = 0, .world = 1, .depth = 1, .first_step = 1, .last_step = 1};
    int n = (int)(plan.starts[b + 1] - plan.starts[b]);
    int rc = df_step_batch_fill(&r->batch, &cfg, plan.samples + plan.starts[b], n, 0, err);
    if (rc) df_context(err, "--train-data %s", o->data_source);
    r->batch.step = 1;
    r->batch.batch_in_epoch = b;
    r->batch.epoch_batches = plan.n_batches;
    r->anchors = rc ? 0 : r->batch.anchor_starts[r->batch.n_seqs];
    df_epoch_plan_free(&plan);
    df_batcher_free(&batcher);
    return rc;
}

int df_bench_recipe_load(DfBenchRecipe *r, const char *target_dir, const char *data, DfError *err) {
    memset(r, 0, sizeof *r);
    df_train_options_default(&r->opt);
    r->opt.target_dir = target_dir;
    r->opt.data_source = data;
    r->opt.quiet = 1; /* preparing: the report's counts, no progress */
    if (df_model_config_load(&r->target, target_dir, err)) return df_context(err, "--target");
    DfTokenStore *store = open_data(r, err);
    if (!store) return -1;
    int rc = check_store(r, store, err);
    if (rc == 0) rc = df_train_drafter_config(&r->drafter, &r->target, &r->opt, err);
    if (rc == 0) rc = fill_batch(r, store, err);
    df_token_store_close(store);
    return rc;
}

void df_bench_recipe_free(DfBenchRecipe *r) { df_step_batch_free(&r->batch); }
