/* dflash export and checkpoints as drafters: the export of a run's last
 * checkpoint equals its final/ to the bit; a --stop-at run writes final/
 * from its checkpoint, equal to the export of the same step of the whole
 * run; eval takes a checkpoint file and decodes losslessly with it, with
 * the same per-prompt results as with its export; an export's dflash.py
 * is src/model/dflash.py and parses as Python; what is not a checkpoint is
 * refused by name. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY_OPTIONS DF_TEST_TINY_TRAIN_OPTIONS " --steps 6"

typedef DfTestRunDir Fixture;

static int setup(void **state) { return df_test_run_dir_setup(state, "export"); }
static int teardown(void **state) { return df_test_run_dir_teardown(state); }

static int run(Fixture *f, const char *fmt, const char *arg1, const char *arg2, int expect_ok) {
    char args[4096];
    snprintf(args, sizeof args, fmt, arg1, arg2);
    int rc = df_test_dflash_in(f, 2, args);
    if (expect_ok && rc != 0) fail_msg("'%s' exited %d:\n%s", args, rc, f->out);
    return rc;
}

static void train(Fixture *f, const char *output, const char *extra) {
    char args[2048];
    snprintf(args, sizeof args, "--target '%s' --data '%s' --output '%s/%s' " TINY_OPTIONS " %s",
             df_test_path("assets/coder-tiny"), f->data, f->dir, output, extra);
    run(f, "train %s%s", args, "", 1);
}

/* Two files with the same bytes. */
static void assert_same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = df_test_read_file(a, &na), *y = df_test_read_file(b, &nb);
    if (!x || !y) fail_msg("cannot read %s or %s", a, b);
    if (na != nb || memcmp(x, y, na) != 0) fail_msg("%s and %s differ", a, b);
    free(x);
    free(y);
}

static const char *const EXPORT_FILES[] = {"config.json", "model.safetensors", "dflash.py"};

static void assert_same_drafter(const Fixture *f, const char *dir_a, const char *dir_b) {
    for (size_t i = 0; i < sizeof EXPORT_FILES / sizeof *EXPORT_FILES; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s/%s", f->dir, dir_a, EXPORT_FILES[i]);
        snprintf(b, sizeof b, "%s/%s/%s", f->dir, dir_b, EXPORT_FILES[i]);
        assert_same_file(a, b);
    }
}

static void test_export_equals_final(void **state) {
    Fixture *f = *state;
    train(f, "whole", "--save-every 3");
    run(f, "export whole/checkpoints/step-00000006.safetensors --output %s%s", "last", "", 1);
    assert_non_null(strstr(f->out, "step 6"));
    assert_same_drafter(f, "last", "whole/final");
    /* dflash.py is the module of the source tree, and Python parses it */
    char py[1024], cmd[2048];
    snprintf(py, sizeof py, "%s/last/dflash.py", f->dir);
    assert_same_file(py, df_test_path("src/model/dflash.py"));
    snprintf(cmd, sizeof cmd, "! command -v python3 >/dev/null || python3 -c \"import ast, sys; "
             "ast.parse(open(sys.argv[1]).read())\" '%s'", py);
    if (df_test_run(cmd, f->out, sizeof f->out) != 0) fail_msg("dflash.py does not parse:\n%s", f->out);

    /* a --stop-at run's final/ is its checkpoint's drafter, the whole run's at that step */
    train(f, "stopped", "--stop-at 3");
    assert_non_null(strstr(f->out, "the drafter of step 3 written to"));
    run(f, "export stopped/checkpoints/step-00000003.safetensors --output %s%s", "stop3", "", 1);
    assert_same_drafter(f, "stop3", "stopped/final");
    run(f, "export whole/checkpoints/step-00000003.safetensors --output %s%s", "whole3", "", 1);
    assert_same_drafter(f, "whole3", "stopped/final");

    /* eval of the checkpoint file: lossless (eval fails otherwise), the same results as its export's */
    char prompts[1024], a[1024], b[1024];
    snprintf(prompts, sizeof prompts, "%s/prompts.jsonl", f->dir);
    df_test_write_file(prompts, "{\"id\": 1, \"prompt\": \"def add(a, b):\\n\"}\n"
                                "{\"id\": 2, \"prompt\": \"import os\\n\\ndef main():\\n\"}\n");
    const char *eval = "eval --target %s --input prompts.jsonl --max-new-tokens 12 %s";
    snprintf(a, sizeof a, "--draft whole/checkpoints/step-00000006.safetensors --output %s/ckpt.jsonl", f->dir);
    run(f, eval, df_test_path("assets/coder-tiny"), a, 1);
    assert_non_null(strstr(f->out, "tau "));
    snprintf(b, sizeof b, "--draft last --output %s/dir.jsonl", f->dir);
    run(f, eval, df_test_path("assets/coder-tiny"), b, 1);
    snprintf(a, sizeof a, "%s/ckpt.jsonl", f->dir);
    snprintf(b, sizeof b, "%s/dir.jsonl", f->dir);
    assert_same_file(a, b);
}

static void test_not_a_checkpoint(void **state) {
    Fixture *f = *state;
    assert_int_not_equal(run(f, "export %s --output %s/x", f->data, f->dir, 0), 0);
    assert_non_null(strstr(f->out, "not a training checkpoint"));
    assert_non_null(strstr(f->out, "slice.jsonl"));
    assert_int_not_equal(run(f, "export %s/missing --output %s/x", f->dir, f->dir, 0), 0);
    assert_non_null(strstr(f->out, "missing: cannot open"));
    assert_int_not_equal(run(f, "export --output %s/x%s", f->dir, "", 0), 0);
    assert_non_null(strstr(f->out, "CHECKPOINT"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_export_equals_final, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_checkpoint, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
