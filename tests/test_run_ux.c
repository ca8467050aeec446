/* What a user meets around a run, through ./dflash: inspect of a run's own
 * export (the drafter's config, tap ids as config.json has them) and of a
 * checkpoint (the drafter's parameter count, equal to the export's, without
 * the optimizer moments, and the step); the "evaluate it with:" hint names
 * the program as started and the run's held-out data; Hugging Face option
 * names mean what ours do (the same losses), and those whose meaning differs
 * are refused with what to give instead; --adam-beta1, --weight-decay and
 * --max-grad-norm reach the optimizer and the run record; with held-out
 * data the best eval's drafter is kept: its checkpoint outlives
 * --keep-checkpoints 1, best/ holds it (equal to the export of that
 * checkpoint) and final/ is it (--select-by tau, the default). One run (6
 * steps, a checkpoint and a held-out eval every 2, whose held-out tau peaks
 * at step 4) is shared by the tests. OUTPUT/train.log holds every line the
 * run printed; a run that fails leaves no empty directory it created. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TINY_OPTIONS DF_TEST_TINY_TRAIN_OPTIONS

typedef struct Fixture {
    DfTestRunDir run;
    char first_out[DF_TEST_RUN_OUT]; /* what the shared run printed */
} Fixture;

static int train_in(Fixture *f, const char *output, const char *extra, int expect_ok) {
    char args[4096];
    snprintf(args, sizeof args, "train --target '%s' --data '%s' --output %s " TINY_OPTIONS " %s",
             df_test_path("assets/coder-tiny"), f->run.data, output, extra);
    int rc = df_test_dflash_in(&f->run, 2, args);
    if (expect_ok && rc != 0) fail_msg("dflash %s exited %d:\n%s", args, rc, f->run.out);
    return rc;
}

static int group_setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    DfTestRunDir *r;
    df_test_run_dir_setup((void **)&r, "runux");
    f->run = *r;
    free(r);
    *state = f;
    char extra[1024];
    snprintf(extra, sizeof extra,
             "--steps 6 --save-every 2 --keep-checkpoints 1 --eval-data '%s' --eval-every 2 --eval-prompts 2 "
             "--eval-max-new-tokens 16",
             f->run.data);
    train_in(f, "a", extra, 1);
    memcpy(f->first_out, f->run.out, sizeof f->first_out);
    return 0;
}

static int group_teardown(void **state) {
    Fixture *f = *state;
    df_test_rmtree(f->run.dir);
    free(f->run.dir);
    free(f);
    return 0;
}

/* The number after `key` in text (the test fails when it is absent). */
static long long number_after(const char *text, const char *key) {
    const char *p = strstr(text, key);
    if (!p) fail_msg("no \"%s\" in:\n%s", key, text);
    return atoll(p + strlen(key));
}

static void test_inspect_export(void **state) {
    Fixture *f = *state;
    assert_int_equal(df_test_dflash_in(&f->run, 2, "inspect --summary a/final"), 0);
    assert_non_null(strstr(f->run.out, "drafter: DFlashDraftModel, 1 layers"));
    /* the tap ids as config.json states them (dflash_config.target_layer_ids) */
    char *text = df_test_read_in(&f->run, "a/final/config.json");
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    assert_non_null(cfg);
    const cJSON *taps = cJSON_GetObjectItem(cJSON_GetObjectItem(cfg, "dflash_config"), "target_layer_ids");
    assert_true(cJSON_IsArray(taps));
    char want[256] = "taps (target_layer_ids):";
    const cJSON *t;
    cJSON_ArrayForEach(t, taps) snprintf(want + strlen(want), sizeof want - strlen(want), " %d", t->valueint);
    strcat(want, "\n");
    cJSON_Delete(cfg);
    if (!strstr(f->run.out, want)) fail_msg("no \"%s\" in:\n%s", want, f->run.out);
}

static void test_inspect_checkpoint(void **state) {
    Fixture *f = *state;
    assert_int_equal(df_test_dflash_in(&f->run, 2, "inspect --summary a/final"), 0);
    long long exported = number_after(f->run.out, "parameters: ");
    assert_int_equal(df_test_dflash_in(&f->run, 2, "inspect --summary a/checkpoints/step-00000006.safetensors"), 0);
    assert_int_equal(number_after(f->run.out, "parameters: "), exported); /* the moments are not parameters */
    assert_int_equal(number_after(f->run.out, "training state after step "), 6);
    assert_non_null(strstr(f->run.out, "drafter: DFlashDraftModel"));
}

static void test_eval_hint(void **state) {
    Fixture *f = *state;
    char want[2048];
    snprintf(want, sizeof want, "evaluate it with:\n  %s eval --target %s --draft a/final --input %s ",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->run.data);
    if (!strstr(f->first_out, want)) fail_msg("no \"%s\" in:\n%s", want, f->first_out);
}

/* metrics.jsonl's losses, one a line. */
static char *losses_of(Fixture *f, const char *run) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/metrics.jsonl", run);
    char *text = df_test_read_in(&f->run, rel), *out = calloc(1, strlen(text) + 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *loss = strstr(line, "\"loss\": ");
        assert_non_null(loss);
        size_t n = strcspn(loss, ",");
        strncat(out, loss, n);
        strcat(out, "\n");
    }
    free(text);
    return out;
}

static void test_hugging_face_names(void **state) {
    Fixture *f = *state;
    train_in(f, "ours", "--lr 2e-3 --steps 2 --warmup 0.5", 1);
    train_in(f, "hf", "--learning_rate 2e-3 --max_steps 2 --warmup_ratio 0.5", 1);
    char *a = losses_of(f, "ours"), *b = losses_of(f, "hf");
    assert_string_equal(a, b);
    free(a);
    free(b);
    assert_int_equal(train_in(f, "bad", "--steps 2 --per_device_train_batch_size 4", 0), 2);
    assert_non_null(strstr(f->run.out, "--per_device_train_batch_size"));
    assert_non_null(strstr(f->run.out, "--token-budget"));
}

static double record_number(Fixture *f, const char *run, const char *key) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/args.json", run);
    char *text = df_test_read_in(&f->run, rel);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("%s/args.json: \"%s\" is not a number", run, key);
    double x = v->valuedouble;
    cJSON_Delete(j);
    return x;
}

/* Each optimizer option changes the third step's loss (the first is before
 * any update; Adam's first update does not depend on beta1 or on a uniform
 * gradient scale such as clipping's) and is recorded; the defaults are
 * recorded as such. */
static void test_optimizer_options(void **state) {
    Fixture *f = *state;
    static const struct {
        const char *run, *flag, *key;
        double value;
    } cases[] = {
        {"beta1", "--adam-beta1 0.5", "adam-beta1", 0.5},
        {"noclip", "--max_grad_norm 0", "max-grad-norm", 0},
        {"decay", "--weight-decay 3", "weight-decay", 3},
    };
    train_in(f, "base", "--steps 3", 1);
    char *base = losses_of(f, "base");
    assert_true(record_number(f, "base", "adam-beta1") == 0.9);
    assert_true(record_number(f, "base", "adam-beta2") == 0.999);
    assert_true(record_number(f, "base", "max-grad-norm") == 1.0);
    assert_true(record_number(f, "base", "weight-decay") == 0.0);
    char *third_base = strchr(strchr(base, '\n') + 1, '\n') + 1;
    size_t first_len = (size_t)(strchr(base, '\n') - base);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char extra[256];
        snprintf(extra, sizeof extra, "--steps 3 %s", cases[i].flag);
        train_in(f, cases[i].run, extra, 1);
        char *l = losses_of(f, cases[i].run), *third = strchr(strchr(l, '\n') + 1, '\n') + 1;
        assert_memory_equal(l, base, first_len); /* step 1: no update yet */
        if (strcmp(third, third_base) == 0) fail_msg("%s left step 3's loss as it was: %s", cases[i].flag, third);
        assert_true(record_number(f, cases[i].run, cases[i].key) == cases[i].value);
        free(l);
    }
    free(base);
}

static void assert_same_file(const Fixture *f, const char *rel_a, const char *rel_b) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s", f->run.dir, rel_a);
    snprintf(b, sizeof b, "%s/%s", f->run.dir, rel_b);
    size_t na = 0, nb = 0;
    char *x = df_test_read_file(a, &na), *y = df_test_read_file(b, &nb);
    if (!x || !y) fail_msg("cannot read %s or %s", a, b);
    if (na != nb || memcmp(x, y, na) != 0) fail_msg("%s and %s differ", a, b);
    free(x);
    free(y);
}

/* The step of the first highest tau in eval.jsonl, and the last line's best_step. */
static int64_t best_eval_step(Fixture *f, int64_t *logged_best) {
    char *text = df_test_read_in(&f->run, "a/eval.jsonl");
    int64_t best = -1;
    double best_tau = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        double tau = cJSON_GetObjectItem(j, "tau")->valuedouble;
        int64_t step = (int64_t)cJSON_GetObjectItem(j, "step")->valuedouble;
        if (best < 0 || tau > best_tau) best = step, best_tau = tau;
        *logged_best = (int64_t)cJSON_GetObjectItem(j, "best_step")->valuedouble;
        cJSON_Delete(j);
    }
    free(text);
    return best;
}

static void test_best_drafter_kept(void **state) {
    Fixture *f = *state;
    int64_t logged = -1, best = best_eval_step(f, &logged);
    assert_int_equal(logged, best);
    assert_true(best > 0 && best < 6); /* this run's tau peaks before the end */
    char rel[1024], ckpt[256];
    snprintf(ckpt, sizeof ckpt, "a/checkpoints/step-%08lld.safetensors", (long long)best);
    snprintf(rel, sizeof rel, "%s/%s", f->run.dir, ckpt);
    assert_true(df_test_file_exists(rel)); /* kept beside the newest, past --keep-checkpoints 1 */
    for (int step = 2; step < 6; step += 2) {
        snprintf(rel, sizeof rel, "%s/a/checkpoints/step-%08d.safetensors", f->run.dir, step);
        assert_int_equal(df_test_file_exists(rel), step == best);
    }
    char args[512];
    snprintf(args, sizeof args, "export %s --output best_export", ckpt);
    if (df_test_dflash_in(&f->run, 2, args) != 0) fail_msg("dflash %s:\n%s", args, f->run.out);
    assert_same_file(f, "best_export/model.safetensors", "a/best/model.safetensors");
    assert_same_file(f, "a/best/model.safetensors", "a/final/model.safetensors"); /* --select-by tau */
    assert_same_file(f, "a/best/config.json", "a/final/config.json");
    char want[256];
    snprintf(want, sizeof want, "a/final is the drafter of step %lld, the best held-out tau", (long long)best);
    if (!strstr(f->first_out, want)) fail_msg("no \"%s\" in:\n%s", want, f->first_out);
}

static void test_train_log(void **state) {
    Fixture *f = *state;
    char *log = df_test_read_in(&f->run, "a/train.log");
    char *out = strdup(f->first_out);
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), lines++)
        if (!strstr(log, line)) fail_msg("train.log lacks \"%s\"", line);
    assert_true(lines > 10);
    assert_non_null(strstr(log, "evaluate it with:"));  /* stdout */
    assert_non_null(strstr(log, "train: eval at step")); /* stderr */
    free(out);
    free(log);
}

static void test_failed_run_leaves_no_empty_dirs(void **state) {
    Fixture *f = *state;
    char path[1024];
    assert_int_equal(train_in(f, "new/deeper/run", "--steps 2 --data missing.jsonl", 0), 1);
    snprintf(path, sizeof path, "%s/new", f->run.dir);
    if (df_test_file_exists(path)) fail_msg("%s left behind by a failed run:\n%s", path, f->run.out);
    assert_non_null(strstr(f->run.out, "missing.jsonl"));
    snprintf(path, sizeof path, "%s/kept", f->run.dir); /* a directory that was there stays */
    assert_int_equal(mkdir(path, 0777), 0);
    assert_int_equal(train_in(f, "kept", "--steps 2 --data missing.jsonl", 0), 1);
    assert_true(df_test_file_exists(path));
}

/* The start line on an epoch's anchors, its counts checked against the
 * run's other figures: --num-anchors 1 draws one anchor from every trainable
 * sample (each has at least 2 x block size loss tokens); one above every
 * sample's candidates takes them all, which are the loss tokens the
 * preparation counted (no sample skipped, and none with a loss token among
 * its first two positions: the records have prompts); the shared run's 12
 * lie between. */
static void test_epoch_anchors_line(void **state) {
    Fixture *f = *state;
    const char *key = "train: an epoch's anchors: ";
    long long usable = number_after(f->first_out, "steps ("), shared = number_after(f->first_out, key);
    assert_int_equal(number_after(f->first_out, "; skipped "), 0);
    train_in(f, "one_anchor", "--steps 1 --num-anchors 1", 1);
    assert_int_equal(number_after(f->run.out, key), usable);
    char fresh[128];
    snprintf(fresh, sizeof fresh, "draws a fresh subset each epoch on %lld of the %lld samples", usable, usable);
    if (!strstr(f->run.out, fresh)) fail_msg("no \"%s\" in:\n%s", fresh, f->run.out);
    train_in(f, "all_anchors", "--steps 1 --num-anchors 1000000", 1);
    long long all = number_after(f->run.out, key), loss_tokens = number_after(f->run.out, "tokens (");
    assert_int_equal(all, loss_tokens);
    assert_non_null(strstr(f->run.out, "every candidate, since no sample has more than --num-anchors 1000000"));
    assert_true(shared > usable && shared < all);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inspect_export),     cmocka_unit_test(test_inspect_checkpoint),
        cmocka_unit_test(test_eval_hint),          cmocka_unit_test(test_hugging_face_names),
        cmocka_unit_test(test_optimizer_options),  cmocka_unit_test(test_best_drafter_kept),
        cmocka_unit_test(test_train_log),          cmocka_unit_test(test_failed_run_leaves_no_empty_dirs),
        cmocka_unit_test(test_epoch_anchors_line),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
