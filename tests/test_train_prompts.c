/* train --prompts: the regenerated file is what `dflash generate` writes for
 * the same prompts and options, the training that follows is `train --data`
 * on that file (identical losses), a rerun regenerates nothing that is done,
 * and --prompt-cuts cuts each text at line boundaries as its header says;
 * with --random-target-weights the regeneration runs the random target too. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infer/prompt_cuts.h"

#define TINY_OPTIONS DF_TEST_TINY_TRAIN_OPTIONS
#define GEN_OPTIONS "--max-new-tokens 24 --batch 3"
#define N_PROMPTS 4

typedef DfTestRunDir Fixture;

static int setup(void **state) {
    int rc = df_test_run_dir_setup(state, "trainprompts");
    Fixture *f = *state;
    char path[1024];
    snprintf(path, sizeof path, "%s/prompts.jsonl", f->dir);
    df_test_write_data_slice(path, N_PROMPTS);
    return rc;
}
static int teardown(void **state) { return df_test_run_dir_teardown(state); }

static int dflash(Fixture *f, const char *args, int expect_ok) {
    int rc = df_test_dflash_in(f, 2, args);
    if (expect_ok && rc != 0) fail_msg("dflash %s exited %d:\n%s", args, rc, f->out);
    return rc;
}

static void train_prompts(Fixture *f, const char *output, const char *extra) {
    char args[4096];
    snprintf(args, sizeof args, "train --target '%s' --prompts prompts.jsonl --output %s " TINY_OPTIONS " " GEN_OPTIONS
             " --steps 3 %s", df_test_path("assets/coder-tiny"), output, extra);
    dflash(f, args, 1);
}

/* The metrics lines up to the timing fields (wall-clock dependent). */
static char *losses_of(const Fixture *f, const char *run) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/metrics.jsonl", run);
    char *text = df_test_read_in(f, rel), *out = calloc(1, strlen(text) + 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *cut = strstr(line, ", \"tokens_per_s\"");
        assert_non_null(cut);
        *cut = '\0';
        strcat(strcat(out, line), "\n");
    }
    free(text);
    return out;
}

static int count_lines(const char *text) {
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

static void test_regenerates_then_trains(void **state) {
    Fixture *f = *state;
    train_prompts(f, "a", "");
    char args[4096];
    snprintf(args, sizeof args, "generate --target '%s' --input prompts.jsonl --output g.jsonl " GEN_OPTIONS " --seed 7",
             df_test_path("assets/coder-tiny"));
    dflash(f, args, 1);
    char *ra = df_test_read_in(f, "a/regenerated.jsonl"), *rg = df_test_read_in(f, "g.jsonl");
    assert_int_equal(count_lines(ra), N_PROMPTS);
    assert_string_equal(ra, rg);
    char *sa = df_test_read_in(f, "a/regenerated.jsonl.generate.json"), *sg = df_test_read_in(f, "g.jsonl.generate.json");
    assert_string_equal(sa, sg);
    free(sa), free(sg), free(rg);

    snprintf(args, sizeof args, "train --target '%s' --data g.jsonl --output b " TINY_OPTIONS " --steps 3",
             df_test_path("assets/coder-tiny"));
    dflash(f, args, 1);
    char *la = losses_of(f, "a"), *lb = losses_of(f, "b");
    assert_int_equal(count_lines(la), 3);
    assert_string_equal(la, lb);
    free(la), free(lb);

    /* a rerun regenerates nothing that is done */
    train_prompts(f, "a", "--resume");
    assert_non_null(strstr(f->out, "already holds all 4 records"));
    assert_non_null(strstr(f->out, "already complete at step 3"));
    char *again = df_test_read_in(f, "a/regenerated.jsonl");
    assert_string_equal(again, ra);
    free(again);

    /* an interrupted regeneration continues after its last complete record,
     * keeping those (the first one changed in place stays as it is) */
    char *first_response = strstr(ra, "\"response\":\"");
    assert_non_null(first_response);
    first_response[12] = first_response[12] == 'x' ? 'y' : 'x';
    char *second = strchr(ra, '\n') + 1;
    strchr(second, '\n')[1] = '\0';
    char path[1024];
    snprintf(path, sizeof path, "%s/c", f->dir);
    assert_int_equal(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/c/regenerated.jsonl", f->dir);
    df_test_write_file(path, ra);
    char *settings = df_test_read_in(f, "a/regenerated.jsonl.generate.json");
    snprintf(path, sizeof path, "%s/c/regenerated.jsonl.generate.json", f->dir);
    df_test_write_file(path, settings);
    free(settings);
    train_prompts(f, "c", "");
    assert_non_null(strstr(f->out, "resuming after 2 of 4 records"));
    char *rc = df_test_read_in(f, "c/regenerated.jsonl");
    assert_int_equal(count_lines(rc), N_PROMPTS);
    assert_memory_equal(rc, ra, strlen(ra));
    free(rc);
    free(ra);
}

/* --random-target-weights: the responses are the random target's (generate
 * --random-target-weights with train's seed, not the real weights'), and
 * the settings file says so. */
static void test_random_target_regenerates(void **state) {
    Fixture *f = *state;
    train_prompts(f, "r", "--random-target-weights");
    char args[4096];
    snprintf(args, sizeof args,
             "generate --target '%s' --input prompts.jsonl --output g.jsonl " GEN_OPTIONS " --seed 7 --random-target-weights",
             df_test_path("assets/coder-tiny"));
    dflash(f, args, 1);
    snprintf(args, sizeof args, "generate --target '%s' --input prompts.jsonl --output real.jsonl " GEN_OPTIONS " --seed 7",
             df_test_path("assets/coder-tiny"));
    dflash(f, args, 1);
    char *rr = df_test_read_in(f, "r/regenerated.jsonl"), *rg = df_test_read_in(f, "g.jsonl");
    char *real = df_test_read_in(f, "real.jsonl");
    assert_int_equal(count_lines(rr), N_PROMPTS);
    assert_string_equal(rr, rg);
    assert_string_not_equal(rr, real);
    char *sr = df_test_read_in(f, "r/regenerated.jsonl.generate.json"), *sg = df_test_read_in(f, "g.jsonl.generate.json");
    assert_string_equal(sr, sg);
    assert_non_null(strstr(sr, "\"target_weights\":\"random\""));
    free(rr), free(rg), free(real), free(sr), free(sg);
}

static void test_refusals(void **state) {
    Fixture *f = *state;
    char args[4096];
    snprintf(args, sizeof args, "train --target '%s' --prompts prompts.jsonl --data '%s' --output a",
             df_test_path("assets/coder-tiny"), f->data);
    assert_int_equal(dflash(f, args, 0), 2);
    assert_non_null(strstr(f->out, "--data or --prompts"));
    snprintf(args, sizeof args, "train --target '%s' --data '%s' --output a --max-new-tokens 4",
             df_test_path("assets/coder-tiny"), f->data);
    assert_int_equal(dflash(f, args, 0), 2);
    assert_non_null(strstr(f->out, "--max-new-tokens goes with --prompts"));
}

/* Offsets worked out by hand: 5 lines, 4 boundaries (after "a\n" = 2,
 * "bb\n" = 5, "c\n" = 7, "dd\n" = 10); the trailing newline is none. */
static void test_cut_offsets(void **state) {
    const char *text = "a\nbb\nc\ndd\ne\n";
    size_t off[8];
    assert_int_equal(df_prompt_cut_offsets(text, strlen(text), 1, off), 1);
    assert_int_equal(off[0], 5); /* boundary round(4/2) = 2 */
    assert_int_equal(df_prompt_cut_offsets(text, strlen(text), 3, off), 3);
    assert_int_equal(off[0], 2), assert_int_equal(off[1], 5), assert_int_equal(off[2], 7);
    /* more cuts than boundaries: each boundary once */
    assert_int_equal(df_prompt_cut_offsets(text, strlen(text), 8, off), 4);
    assert_int_equal(off[3], 10);
    assert_int_equal(df_prompt_cut_offsets("one line", 8, 3, off), 0);
}

static void test_prompt_cuts(void **state) {
    Fixture *f = *state;
    char in[1024], out[1024];
    snprintf(in, sizeof in, "%s/mixed.jsonl", f->dir);
    snprintf(out, sizeof out, "%s/cut.jsonl", f->dir);
    df_test_write_file(in, "{\"id\": \"r\", \"prompt\": \"a\\nbb\\n\", \"response\": \"c\\ndd\\ne\\n\"}\n"
                           "{\"prompt\": \"no newline\"}\n"
                           "{\"id\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
    DfError err = {{0}};
    int n = 0;
    assert_int_equal(df_prompt_cuts_write(in, 3, out, &n, &err), 0);
    assert_int_equal(n, 5);
    char *text = df_test_read_file(out, NULL);
    assert_string_equal(text, "{\"id\":\"r#1\",\"prompt\":\"a\\n\"}\n"
                              "{\"id\":\"r#2\",\"prompt\":\"a\\nbb\\n\"}\n"
                              "{\"id\":\"r#3\",\"prompt\":\"a\\nbb\\nc\\n\"}\n"
                              "{\"id\":\"1\",\"prompt\":\"no newline\"}\n"
                              "{\"id\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n");
    free(text);
    df_test_write_file(in, "{\"text\": \"a\\nb\"}\n");
    assert_int_not_equal(df_prompt_cuts_write(in, 3, out, &n, &err), 0);
    assert_non_null(strstr(err.msg, "mixed.jsonl:1"));

    /* through train: 4 records of many lines, 2 cuts each */
    train_prompts(f, "cuts", "--prompt-cuts 2");
    char *cut = df_test_read_in(f, "cuts/prompts.cut.jsonl"), *regen = df_test_read_in(f, "cuts/regenerated.jsonl");
    assert_int_equal(count_lines(cut), 2 * N_PROMPTS);
    assert_int_equal(count_lines(regen), 2 * N_PROMPTS);
    assert_non_null(strstr(regen, "#2\""));
    free(cut), free(regen);
    /* other cuts would be matched by id against the records of these: refused, nothing changed */
    char args[4096];
    snprintf(args, sizeof args, "train --target '%s' --prompts prompts.jsonl --output cuts " TINY_OPTIONS " " GEN_OPTIONS
             " --steps 3 --prompt-cuts 3 --resume", df_test_path("assets/coder-tiny"));
    assert_int_equal(dflash(f, args, 0), 1);
    assert_non_null(strstr(f->out, "--prompt-cuts 3: the prompts cut from"));
    cut = df_test_read_in(f, "cuts/prompts.cut.jsonl");
    assert_int_equal(count_lines(cut), 2 * N_PROMPTS);
    free(cut);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_regenerates_then_trains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_target_regenerates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test(test_cut_offsets),
        cmocka_unit_test_setup_teardown(test_prompt_cuts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
