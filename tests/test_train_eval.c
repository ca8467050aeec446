/* train --eval-data: held-out speculative decoding during training, on the
 * bundled target with a tiny drafter. An eval line appears every N steps
 * and at the last step, with the documented fields, lossless; at a step
 * with a checkpoint, the recorded tau, histogram and acceptance by position
 * equal `dflash eval` of that checkpoint exported with `dflash export` on
 * the same prompts (an independent path: the drafter read back from disk,
 * a target loaded by eval); the best step is named at the end; training
 * losses are the same as a run without eval; a resumed run keeps the lines
 * up to its checkpoint (dropping one past it, as a crash between an eval
 * and its checkpoint leaves) and records the same evals as the
 * uninterrupted run; bad combinations of options are refused. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef DfTestRunDir Fixture;

#define EVAL_PROMPTS 3
#define EVAL_NEW 24
#define BLOCK 8 /* DF_TEST_TINY_TRAIN_OPTIONS' */

static int setup(void **state) {
    if (df_test_run_dir_setup(state, "train-eval")) return -1;
    Fixture *f = *state;
    /* held-out: records 13..16 of code-dev.jsonl (the training slice is 1..12); eval.jsonl takes the first 3 */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "sed -n 13,16p '%s' > '%s/held-out.jsonl' && sed -n 13,15p '%s' > '%s/first3.jsonl'",
             df_test_path("assets/data/code-dev.jsonl"), f->dir, df_test_path("assets/data/code-dev.jsonl"), f->dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) { return df_test_run_dir_teardown(state); }

static int dflash(Fixture *f, const char *args, int expect_ok) {
    int rc = df_test_dflash_in(f, 2, args);
    if (expect_ok && rc != 0) fprintf(stderr, "dflash %s exited %d:\n%s\n", args, rc, f->out);
    return rc;
}

static int train(Fixture *f, const char *output, const char *extra, int expect_ok) {
    char args[4096];
    snprintf(args, sizeof args,
             "train --target '%s' --data '%s' --output %s " DF_TEST_TINY_TRAIN_OPTIONS " --steps 12 %s",
             df_test_path("assets/coder-tiny"), f->data, output, extra);
    return dflash(f, args, expect_ok);
}

#define EVAL_OPTIONS "--eval-data held-out.jsonl --eval-every 4 --eval-prompts 3 --eval-max-new-tokens 24"

/* The lines of run/eval.jsonl (a cJSON array of them; caller deletes). */
static cJSON *read_evals(Fixture *f, const char *run) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/eval.jsonl", f->dir, run);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    cJSON *all = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        cJSON_AddItemToArray(all, j);
    }
    free(text);
    return all;
}

static double number(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("eval line: \"%s\" is not a number", key);
    return v->valuedouble;
}

static void assert_same_array(const cJSON *a, const cJSON *b, const char *what) {
    assert_true(cJSON_IsArray(a) && cJSON_IsArray(b));
    assert_int_equal(cJSON_GetArraySize(a), cJSON_GetArraySize(b));
    for (int i = 0; i < cJSON_GetArraySize(a); i++)
        if (cJSON_GetArrayItem(a, i)->valuedouble != cJSON_GetArrayItem(b, i)->valuedouble)
            fail_msg("%s[%d]: %.17g against %.17g", what, i, cJSON_GetArrayItem(a, i)->valuedouble,
                     cJSON_GetArrayItem(b, i)->valuedouble);
}

/* Every line well formed and lossless; their steps are `steps`. */
static void check_lines(const cJSON *evals, const int *steps, int n) {
    assert_int_equal(cJSON_GetArraySize(evals), n);
    for (int i = 0; i < n; i++) {
        const cJSON *j = cJSON_GetArrayItem(evals, i);
        assert_int_equal((int)number(j, "step"), steps[i]);
        double tau = number(j, "tau");
        assert_true(tau >= 1.0 && tau <= BLOCK);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "lossless")));
        assert_int_equal((int)number(j, "mismatches"), 0);
        assert_int_equal((int)number(j, "prompts"), EVAL_PROMPTS);
        assert_true(number(j, "tokens") > 0 && number(j, "tokens") <= EVAL_PROMPTS * EVAL_NEW);
        assert_true(number(j, "seconds") > 0);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "accept_by_position")), BLOCK - 1);
        const cJSON *hist = cJSON_GetObjectItemCaseSensitive(j, "accepted_hist");
        assert_int_equal(cJSON_GetArraySize(hist), BLOCK);
        double cycles = 0, accepted = 0;
        for (int k = 0; k < BLOCK; k++) cycles += cJSON_GetArrayItem(hist, k)->valuedouble;
        for (int k = 0; k < BLOCK; k++) accepted += k * cJSON_GetArrayItem(hist, k)->valuedouble;
        assert_true(cycles == number(j, "cycles"));
        assert_true(tau == (accepted + cycles) / cycles); /* tau from its own histogram */
    }
}

/* The metrics lines' losses of a run. */
static void read_losses(Fixture *f, const char *run, double *loss, int n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", f->dir, run);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    int i = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), i++) {
        assert_true(i < n);
        cJSON *j = cJSON_Parse(line);
        loss[i] = number(j, "loss");
        cJSON_Delete(j);
    }
    assert_int_equal(i, n);
    free(text);
}

static void test_eval_records_match_dflash_eval(void **state) {
    Fixture *f = *state;
    assert_int_equal(train(f, "run", "--save-every 4 --keep-checkpoints 0 " EVAL_OPTIONS, 1), 0);
    cJSON *evals = read_evals(f, "run");
    const int steps[] = {4, 8, 12};
    check_lines(evals, steps, 3);
    /* the best step is named, and is the best line's */
    int best = 0;
    for (int i = 1; i < 3; i++)
        if (number(cJSON_GetArrayItem(evals, i), "tau") > number(cJSON_GetArrayItem(evals, best), "tau")) best = i;
    char want[256];
    snprintf(want, sizeof want, "best %.3f at step %d", number(cJSON_GetArrayItem(evals, best), "tau"), steps[best]);
    if (!strstr(f->out, want)) fail_msg("'%s' not in the output:\n%s", want, f->out);
    assert_non_null(strstr(f->out, "eval at step 8: tau"));

    /* the eval of step 8 equals dflash eval of that checkpoint, exported, on the same prompts */
    assert_int_equal(dflash(f, "export run/checkpoints/step-00000008.safetensors --output step8", 1), 0);
    char args[2048];
    snprintf(args, sizeof args, "eval --target '%s' --draft step8 --input first3.jsonl --max-new-tokens %d --json e8.json",
             df_test_path("assets/coder-tiny"), EVAL_NEW);
    assert_int_equal(dflash(f, args, 1), 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/e8.json", f->dir);
    char *text = df_test_read_file(path, NULL);
    cJSON *ref = cJSON_Parse(text);
    free(text);
    assert_non_null(ref);
    const cJSON *at8 = cJSON_GetArrayItem(evals, 1);
    if (number(at8, "tau") != number(ref, "tau"))
        fail_msg("eval.jsonl tau %.17g at step 8, dflash eval %.17g", number(at8, "tau"), number(ref, "tau"));
    assert_true(number(at8, "tokens") == number(ref, "new_tokens"));
    assert_true(number(at8, "cycles") == number(ref, "cycles"));
    assert_same_array(cJSON_GetObjectItemCaseSensitive(at8, "accepted_hist"),
                      cJSON_GetObjectItemCaseSensitive(ref, "accepted_hist"), "accepted_hist");
    assert_same_array(cJSON_GetObjectItemCaseSensitive(at8, "accept_by_position"),
                      cJSON_GetObjectItemCaseSensitive(ref, "acceptance_by_position"), "acceptance by position");
    assert_true(number(at8, "greedy_passes") == cJSON_GetObjectItemCaseSensitive(
                                                    cJSON_GetObjectItemCaseSensitive(ref, "target_passes"), "greedy")
                                                    ->valuedouble);
    cJSON_Delete(ref);

    /* the evals do not touch the training: the losses of a run without them, bit for bit */
    assert_int_equal(train(f, "plain", "--save-every 4", 1), 0);
    double a[12], b[12];
    read_losses(f, "run", a, 12);
    read_losses(f, "plain", b, 12);
    assert_memory_equal(a, b, sizeof a);

    /* a resumed run: the lines up to its checkpoint stay, one past it (a crash between an eval and its
     * checkpoint) goes, and the later evals are the uninterrupted run's */
    assert_int_equal(train(f, "resumed", "--save-every 4 --stop-at 6 " EVAL_OPTIONS, 1), 0);
    cJSON *first = read_evals(f, "resumed");
    const int first_steps[] = {4, 6}; /* 6: the --stop-at step */
    check_lines(first, first_steps, 2);
    cJSON_Delete(first);
    snprintf(path, sizeof path, "%s/resumed/eval.jsonl", f->dir);
    FILE *fp = fopen(path, "a");
    assert_non_null(fp);
    fputs("{\"step\": 7, \"tau\": 7.5}\n", fp);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(train(f, "resumed", "--save-every 4 --resume " EVAL_OPTIONS, 1), 0);
    assert_null(strstr(f->out, "best 7.500")); /* the dropped line is not the best */
    cJSON *resumed = read_evals(f, "resumed");
    const int resumed_steps[] = {4, 6, 8, 12};
    check_lines(resumed, resumed_steps, 4);
    for (int i = 0; i < 3; i++) { /* steps 4, 8, 12 of both runs */
        const cJSON *x = cJSON_GetArrayItem(evals, i), *y = cJSON_GetArrayItem(resumed, i == 0 ? 0 : i + 1);
        assert_true(number(x, "tau") == number(y, "tau"));
        assert_same_array(cJSON_GetObjectItemCaseSensitive(x, "accepted_hist"),
                          cJSON_GetObjectItemCaseSensitive(y, "accepted_hist"), "resumed accepted_hist");
    }
    cJSON_Delete(resumed);
    cJSON_Delete(evals);
}

static void test_eval_options_refused(void **state) {
    Fixture *f = *state;
    assert_int_equal(train(f, "bad1", "--eval-data held-out.jsonl", 0), 2);
    assert_non_null(strstr(f->out, "--eval-data needs --eval-every"));
    assert_int_equal(train(f, "bad2", "--eval-every 4", 0), 2);
    assert_non_null(strstr(f->out, "go with --eval-data"));
    assert_int_not_equal(train(f, "bad3", "--eval-data missing.jsonl --eval-every 4", 0), 0);
    assert_non_null(strstr(f->out, "missing.jsonl"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_eval_records_match_dflash_eval, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_options_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
