/* The trainer's pipeline (train/step_loader.h, train/step_timing.h):
 *   - the loader hands over the plan's steps in order, each batch packed
 *     from the store; with depth 1 it assembles step n+1 only once step n's
 *     batch is given back (lock-step), with depth 3 it runs ahead; stopping
 *     it while it waits returns at once; its failure reaches the compute
 *     side with its message;
 *   - dflash train with --queue-depth 1 and 4 gives bit-identical metrics
 *     and checkpoints;
 *   - metrics lines carry the stage times and rates, stages.json the table;
 *   - SIGTERM with a deep queue: exit 75 (stopped, resumable), a checkpoint, no hang. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "formats/token_store.h"
#include "train/batcher.h"
#include "train/step_loader.h"
#include "train/step_timing.h"

#define SLICE_RECORDS 12
#define TINY_OPTIONS                                                                                                   \
    "--draft-layers 1 --intermediate-size 256 --num-taps 2 --block-size 8 --num-anchors 12 --token-budget 1100 "      \
    "--lr 3e-3 --warmup 0.1 --seed 7"

typedef struct Fixture {
    char *dir;
    char store[512];
    char out[65536];
} Fixture;

static int setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    f->dir = df_test_tmpdir("train_pipeline");
    df_test_prepare_data_slice(f->dir, SLICE_RECORDS, f->store, sizeof f->store);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    df_test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* ---- the loader ------------------------------------------------------------ */

typedef struct LoaderRig {
    DfTokenStore *store;
    DfBatcher batcher;
    DfStepLoaderConfig cfg;
} LoaderRig;

static void rig_open(LoaderRig *r, const Fixture *f, int depth, int64_t steps) {
    DfError err = {{0}};
    r->store = df_token_store_open(f->store, 0, &err);
    assert_non_null(r->store);
    assert_int_equal(df_batcher_init(&r->batcher, r->store, 8, 3072, 1100, 7, &err), 0);
    r->cfg = (DfStepLoaderConfig){.store = r->store, .batcher = &r->batcher, .num_anchors = 12, .seed = 7,
                                  .rank = 0, .world = 1, .depth = depth, .first_step = 1, .last_step = steps};
}

static void rig_close(LoaderRig *r) {
    df_batcher_free(&r->batcher);
    df_token_store_close(r->store);
}

/* The rows of a batch as the drafter would build them itself. */
static void assert_rows_of(const DfStepBatch *b, const DfDrafterConfig *dc) {
    assert_true(b->has_rows);
    DfDrafterBatch share = {.n_seqs = b->n_seqs, .seq_starts = b->seq_starts, .ids = b->ids, .loss_mask = b->mask,
                            .anchor_starts = b->anchor_starts, .anchors = b->anchors};
    DfDrafterRows want = {0};
    df_drafter_rows_build(&want, dc, &share);
    const DfDrafterRows *got = &b->rows;
    assert_int_equal(got->n_ctx, b->tokens);
    assert_int_equal(got->n_blocks, b->anchor_starts[b->n_seqs]);
    assert_int_equal(got->n_q, want.n_q);
    assert_int_equal(got->n_loss, want.n_loss);
    assert_int_equal(got->max_pos, want.max_pos);
    assert_true(got->weight_sum == want.weight_sum && got->weight_sum > 0);
    size_t q = (size_t)want.n_q, n = (size_t)want.n_loss;
    assert_memory_equal(got->block_ids, want.block_ids, q * sizeof *want.block_ids);
    assert_memory_equal(got->labels, want.labels, q * sizeof *want.labels);
    assert_memory_equal(got->weights, want.weights, q * sizeof *want.weights);
    assert_memory_equal(got->valid, want.valid, q);
    assert_memory_equal(got->kpos, want.kpos, ((size_t)want.n_ctx + q) * sizeof *want.kpos);
    assert_memory_equal(got->loss_rows, want.loss_rows, n * sizeof *want.loss_rows);
    assert_memory_equal(got->loss_slot, want.loss_slot, q * sizeof *want.loss_slot);
    df_drafter_rows_free(&want);
}

/* Batches in plan order, packed from the store as the plan says, with the
 * block rows of the drafter config the loader was given. */
static void test_loader_follows_the_plan(void **state) {
    Fixture *f = *state;
    LoaderRig rig;
    rig_open(&rig, f, 3, 9);
    DfDrafterConfig dc = {.block_size = 8, .mask_token_id = 8190, .gamma = 4.0};
    rig.cfg.drafter = &dc;
    DfEpochPlan plan;
    df_batcher_plan_epoch(&rig.batcher, 0, &plan);
    DfStepLoader l;
    DfError err = {{0}};
    assert_int_equal(df_step_loader_start(&l, &rig.cfg, &err), 0);
    int64_t epoch = 0, bi = 0;
    for (int64_t step = 1; step <= 9; step++) {
        if (bi == plan.n_batches) {
            df_epoch_plan_free(&plan);
            df_batcher_plan_epoch(&rig.batcher, ++epoch, &plan);
            bi = 0;
        }
        DfStepBatch *b;
        assert_int_equal(df_step_loader_next(&l, &b, &err), DF_QUEUE_OK);
        assert_int_equal(b->step, step);
        assert_int_equal(b->epoch, epoch);
        assert_int_equal(b->batch_in_epoch, bi);
        int n = (int)(plan.starts[bi + 1] - plan.starts[bi]);
        assert_int_equal(b->n_samples, n);
        assert_int_equal(b->n_seqs, n); /* one rank: the whole batch */
        int64_t at = 0;
        for (int i = 0; i < n; i++) {
            int64_t sample = plan.samples[plan.starts[bi] + i], len;
            const int32_t *ids;
            const uint8_t *mask;
            assert_int_equal(b->samples[i], sample);
            assert_int_equal(df_token_store_sample(rig.store, sample, &ids, &mask, &len, &err), 0);
            assert_int_equal(b->seq_starts[i], at);
            assert_memory_equal(b->ids + at, ids, (size_t)len * sizeof *ids);
            assert_memory_equal(b->mask + at, mask, (size_t)len);
            at += len;
        }
        assert_int_equal(b->tokens, at);
        assert_int_equal(b->global_tokens, at);
        assert_rows_of(b, &dc);
        df_step_loader_release(&l, b);
        bi++;
    }
    DfStepBatch *b;
    assert_int_equal(df_step_loader_next(&l, &b, &err), DF_QUEUE_CLOSED); /* after the last step */
    df_step_loader_free(&l);
    df_epoch_plan_free(&plan);
    rig_close(&rig);
}

/* Depth 1: nothing is assembled while the step holds its batch; depth 3:
 * three steps are ready before the first is taken. */
static void test_loader_depth(void **state) {
    Fixture *f = *state;
    for (int depth = 1; depth <= 3; depth += 2) {
        LoaderRig rig;
        rig_open(&rig, f, depth, 6);
        DfStepLoader l;
        DfError err = {{0}};
        assert_int_equal(df_step_loader_start(&l, &rig.cfg, &err), 0);
        df_sleep_seconds(0.2);
        DfQueueStats q;
        df_step_loader_queue_stats(&l, &q);
        assert_int_equal(q.pushed, depth); /* as far ahead as it may go, and no further */
        DfStepBatch *b;
        assert_int_equal(df_step_loader_next(&l, &b, &err), DF_QUEUE_OK);
        df_sleep_seconds(0.2);
        df_step_loader_queue_stats(&l, &q);
        assert_int_equal(q.pushed, depth); /* step 1 still holds its batch */
        df_step_loader_release(&l, b);
        df_sleep_seconds(0.2);
        df_step_loader_queue_stats(&l, &q);
        assert_int_equal(q.pushed, depth + 1);
        double t0 = df_now_seconds();
        df_step_loader_free(&l); /* the thread waits on a full queue: stopping must not hang */
        assert_true(df_now_seconds() - t0 < 1.0);
        rig_close(&rig);
    }
}

/* A failure in the loader thread reaches the compute side with its message. */
static void test_loader_failure_reaches_the_trainer(void **state) {
    Fixture *f = *state;
    LoaderRig rig;
    rig_open(&rig, f, 2, 6);
    rig.cfg.batch_in_epoch = 1000000; /* past the epoch's plan */
    DfStepLoader l;
    DfError err = {{0}};
    assert_int_equal(df_step_loader_start(&l, &rig.cfg, &err), 0);
    DfStepBatch *b;
    assert_int_equal(df_step_loader_next(&l, &b, &err), DF_QUEUE_ABORTED);
    assert_null(b);
    assert_non_null(strstr(err.msg, "batch 1000000 of epoch 0 does not exist"));
    df_step_loader_free(&l);
    rig_close(&rig);
}

/* ---- dflash train ---------------------------------------------------------- */

static int train(Fixture *f, const char *output, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=2 '%s' train --target '%s' --data '%s' --output '%s/%s' " TINY_OPTIONS " %s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->store, f->dir, output, extra);
    int rc = df_test_run(cmd, f->out, sizeof f->out);
    if (rc != 0) fprintf(stderr, "dflash train exited %d:\n%s\n", rc, f->out);
    return rc;
}

static char *read_run_file(const Fixture *f, const char *output, const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", f->dir, output, name);
    char *text = df_test_read_file(path, len);
    assert_non_null(text);
    return text;
}

/* metrics.jsonl with each line cut before "tokens_per_s" (the timing fields
 * follow it); checks the timing fields on the way. */
static char *deterministic_metrics(const Fixture *f, const char *output, int *lines) {
    char *text = read_run_file(f, output, "metrics.jsonl", NULL);
    size_t cap = strlen(text) + 1;
    char *out = calloc(1, cap);
    *lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        const char *numbers[] = {"tokens_per_s", "seqs_per_s", "step_s", "busy", "queue_depth", "tflops", "eta_s",
                                 "elapsed_s"};
        for (size_t k = 0; k < sizeof numbers / sizeof *numbers; k++)
            assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, numbers[k])));
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "mfu"))); /* no peak on the CPU */
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stage_ms");
        double sum = 0;
        for (int i = 0; i < DF_STEP_STAGES; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, df_step_stage_name(i));
            assert_true(cJSON_IsNumber(v));
            assert_true(v->valuedouble >= 0);
            if (i != DF_STEP_LOAD) sum += v->valuedouble; /* load runs on the other thread */
        }
        /* the compute thread's stages make up the step's wall time */
        double step_ms = 1e3 * cJSON_GetObjectItemCaseSensitive(j, "step_s")->valuedouble;
        assert_true(sum <= step_ms + 0.01 && sum >= 0.95 * step_ms - 1.0);
        double busy = cJSON_GetObjectItemCaseSensitive(j, "busy")->valuedouble;
        assert_true(busy > 0 && busy <= 1.0001);
        cJSON_Delete(j);
        char *cut = strstr(line, ", \"tokens_per_s\"");
        assert_non_null(cut);
        *cut = '\0';
        strcat(out, line);
        strcat(out, "\n");
        (*lines)++;
    }
    free(text);
    return out;
}

static void test_queue_depths_train_identically(void **state) {
    Fixture *f = *state;
    assert_int_equal(train(f, "q1", "--steps 6 --save-every 3 --queue-depth 1"), 0);
    assert_int_equal(train(f, "q4", "--steps 6 --save-every 3 --queue-depth 4 --log-every 2"), 0);
    assert_non_null(strstr(f->out, "where the time went (queue depth 4"));
    assert_non_null(strstr(f->out, "step 2/6"));
    assert_non_null(strstr(f->out, "busy"));
    int n1, n4;
    char *m1 = deterministic_metrics(f, "q1", &n1), *m4 = deterministic_metrics(f, "q4", &n4);
    assert_int_equal(n1, 6);
    assert_int_equal(n4, 6);
    assert_string_equal(m1, m4);
    free(m1), free(m4);
    const char *ckpts[] = {"checkpoints/step-00000003.safetensors", "checkpoints/step-00000006.safetensors"};
    for (int i = 0; i < 2; i++) {
        size_t l1, l4;
        char *a = read_run_file(f, "q1", ckpts[i], &l1), *b = read_run_file(f, "q4", ckpts[i], &l4);
        assert_int_equal(l1, l4);
        assert_memory_equal(a, b, l1);
        free(a), free(b);
    }
    char *json = read_run_file(f, "q4", "stages.json", NULL);
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    assert_int_equal(cJSON_GetArraySize(stages), DF_STEP_STAGES);
    const cJSON *target = cJSON_GetArrayItem(stages, DF_STEP_TARGET);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(target, "name")->valuestring, df_step_stage_label(DF_STEP_TARGET));
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(target, "count")->valuedouble, 6);
    assert_true(cJSON_GetObjectItemCaseSensitive(target, "total_s")->valuedouble > 0);
    const cJSON *q = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "queues"), 0);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(q, "capacity")->valuedouble, 4);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(q, "popped")->valuedouble, 6);
    cJSON_Delete(j);
    free(json);
}

/* SIGTERM while the loader is ahead: the step under way ends, its
 * checkpoint is written, the loader stops, exit 75 (stopped, resumable). */
static void test_sigterm_with_a_deep_queue(void **state) {
    Fixture *f = *state;
    char cmd[4096], log[1024], metrics[1024];
    snprintf(log, sizeof log, "%s/term.log", f->dir);
    snprintf(metrics, sizeof metrics, "%s/term/metrics.jsonl", f->dir);
    snprintf(cmd, sizeof cmd,
             "exec env OMP_NUM_THREADS=2 '%s' train --target '%s' --data '%s' --output '%s/term' " TINY_OPTIONS
             " --steps 400 --queue-depth 6 > '%s' 2>&1",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->store, f->dir, log);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    double until = df_now_seconds() + 120;
    while (df_now_seconds() < until) {
        char *m = df_test_read_file(metrics, NULL);
        int lines = 0;
        for (char *p = m; p && *p; p++) lines += *p == '\n';
        free(m);
        if (lines >= 2) break;
        df_sleep_seconds(0.05);
    }
    assert_int_equal(kill(pid, SIGTERM), 0);
    double t0 = df_now_seconds();
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0 && df_now_seconds() - t0 < 30) df_sleep_seconds(0.02);
    double took = df_now_seconds() - t0;
    char *text = df_test_read_file(log, NULL);
    fprintf(stderr, "exit after SIGTERM in %.2f s\n", took);
    assert_true(took < 30);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 75) fprintf(stderr, "%s\n", text);
    assert_int_equal(WEXITSTATUS(status), 75);
    const char *msg = strstr(text, "SIGTERM received: stopped after step ");
    assert_non_null(msg);
    int step = atoi(msg + strlen("SIGTERM received: stopped after step "));
    char ckpt[1200];
    snprintf(ckpt, sizeof ckpt, "%s/term/checkpoints/step-%08d.safetensors", f->dir, step);
    assert_true(df_test_file_exists(ckpt));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loader_follows_the_plan),
        cmocka_unit_test(test_loader_depth),
        cmocka_unit_test(test_loader_failure_reaches_the_trainer),
        cmocka_unit_test(test_queue_depths_train_identically),
        cmocka_unit_test(test_sigterm_with_a_deep_queue),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
