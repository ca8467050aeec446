/* --quiet on every command: no progress lines and no notes, only errors and
 * the result lines (each command's output checked against the same command
 * without it, which has them); an option's older name (prepare --tokenizer)
 * is still accepted beside the consistent one (--target). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef DfTestRunDir Fixture;

static int setup(void **state) { return df_test_run_dir_setup(state, "quiet"); }
static int teardown(void **state) { return df_test_run_dir_teardown(state); }

static void run_ok(Fixture *f, const char *format, const char *extra) {
    char args[4096];
    snprintf(args, sizeof args, format, df_test_path("assets/coder-tiny"), extra);
    int rc = df_test_dflash_in(f, 2, args);
    if (rc != 0) fail_msg("dflash %s exited %d:\n%s", args, rc, f->out);
}

/* Every line of the output starts with one of the prefixes ("|"-separated). */
static void assert_only_lines(const char *out, const char *prefixes) {
    char *copy = strdup(out), *at_line = NULL, *at_prefix = NULL;
    for (char *line = strtok_r(copy, "\n", &at_line); line; line = strtok_r(NULL, "\n", &at_line)) {
        int ok = 0;
        char *list = strdup(prefixes);
        for (char *p = strtok_r(list, "|", &at_prefix); p && !ok; p = strtok_r(NULL, "|", &at_prefix)) ok = strncmp(line, p, strlen(p)) == 0;
        free(list);
        if (!ok) fail_msg("unexpected line under --quiet: '%s' in:\n%s", line, out);
    }
    free(copy);
}

#define TRAIN "train --target '%s' --data slice.jsonl " DF_TEST_TINY_TRAIN_OPTIONS " --steps 2 %s"
#define GENERATE "generate --target '%s' --input slice.jsonl --max-new-tokens 8 %s"
#define EVAL "eval --target '%s' --draft run/final --input two.jsonl --max-new-tokens 16 %s"

static void test_quiet_commands(void **state) {
    Fixture *f = *state;
    /* train: the plan, the progress lines and the stage table, or none of them */
    run_ok(f, TRAIN, "--output loud --log-every 1");
    assert_non_null(strstr(f->out, "step 1/2"));
    assert_non_null(strstr(f->out, "memory plan"));
    assert_non_null(strstr(f->out, "where the time went"));
    run_ok(f, TRAIN, "--output run --quiet");
    assert_only_lines(f->out, "prepare: wrote|train: steps 1..2 of 2|train: drafter written to");
    assert_non_null(strstr(f->out, "train: drafter written to"));

    run_ok(f, GENERATE, "--output g1.jsonl");
    assert_non_null(strstr(f->out, "generate: 12/12"));
    run_ok(f, GENERATE, "--output g2.jsonl --quiet");
    assert_only_lines(f->out, "generate: 12 records in g2.jsonl (12 new: ");
    run_ok(f, GENERATE, "--output g2.jsonl --quiet");
    assert_only_lines(f->out, "generate: 12 records in g2.jsonl (0 new");

    char path[1024];
    snprintf(path, sizeof path, "%s/two.jsonl", f->dir);
    df_test_write_data_slice(path, 2);
    run_ok(f, EVAL, "");
    assert_non_null(strstr(f->out, "eval: drafter"));
    run_ok(f, EVAL, "--quiet");
    assert_null(strstr(f->out, "eval:"));
    assert_non_null(strstr(f->out, "tau "));

    run_ok(f, "prepare --target '%s' --input slice.jsonl --output s.store %s", "--quiet");
    assert_only_lines(f->out, "prepare: wrote");
    /* the older name of prepare's --target */
    run_ok(f, "prepare --tokenizer '%s' --input slice.jsonl --output t.store %s", "");
    assert_non_null(strstr(f->out, "prepare: wrote 12 samples"));
    run_ok(f, "export %.0srun/checkpoints/step-00000002.safetensors --output e %s", "--quiet");
    assert_only_lines(f->out, "export: ");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_quiet_commands, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
