/* The run record and what starts a run: OUTPUT/args.json holds every
 * option as resolved (defaults included), the version and the device
 * that ran it (for a GPU its kernel tier), and `train
 * --config args.json` makes the same run (bit-identical losses on the CPU),
 * with flags on the command line winning; bad config files are refused by
 * name; --keep-checkpoints keeps that many; --init-from a finished run's
 * final/ starts at its weights, and a drafter of another shape is refused
 * naming what differs. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY_OPTIONS DF_TEST_TINY_TRAIN_OPTIONS

typedef DfTestRunDir Fixture;

static int setup(void **state) { return df_test_run_dir_setup(state, "runrecord"); }
static int teardown(void **state) { return df_test_run_dir_teardown(state); }

/* dflash train ARGS in the fixture's directory; the exit status. */
static int train_args(Fixture *f, const char *args, int expect_ok) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "train %s", args);
    int rc = df_test_dflash_in(f, 2, cmd);
    if (expect_ok && rc != 0) fail_msg("train %s exited %d:\n%s", args, rc, f->out);
    return rc;
}

static void train(Fixture *f, const char *output, const char *extra) {
    char args[4096];
    snprintf(args, sizeof args, "--target '%s' --data '%s' --output %s " TINY_OPTIONS " %s",
             df_test_path("assets/coder-tiny"), f->data, output, extra);
    train_args(f, args, 1);
}

static cJSON *record_of(const Fixture *f, const char *run) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/args.json", run);
    char *text = df_test_read_in(f, rel);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static double number(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("args.json: \"%s\" is not a number", key);
    return v->valuedouble;
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

static int count_checkpoints(const Fixture *f, const char *run) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/checkpoints", f->dir, run);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, "step-", 5) == 0;
    closedir(d);
    return n;
}

static void test_record_round_trips(void **state) {
    Fixture *f = *state;
    train(f, "a", "--steps 6 --save-every 2 --keep-checkpoints 1");
    assert_int_equal(count_checkpoints(f, "a"), 1);
    cJSON *rec = record_of(f, "a");
    assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rec, "dflash_version")));
    const cJSON *device = cJSON_GetObjectItemCaseSensitive(rec, "device_description"); /* the device that ran it */
    assert_true(cJSON_IsString(device) && strncmp(device->valuestring, "CPU, ", 5) == 0);
    assert_int_equal(number(rec, "draft-layers"), 1);
    assert_int_equal(number(rec, "keep-checkpoints"), 1);
    assert_int_equal(number(rec, "max-length"), 3072);   /* a default */
    assert_int_equal(number(rec, "mask-token-id"), 8190); /* resolved from the tokenizer */
    assert_int_equal(number(rec, "draft-heads"), 4);      /* the target's */
    assert_true(number(rec, "lr") == 3e-3);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rec, "epochs")));
    cJSON_Delete(rec);

    /* the same run from the record alone (the output flag wins over the record's) */
    train_args(f, "--config a/args.json --output b", 1);
    char *la = losses_of(f, "a"), *lb = losses_of(f, "b");
    assert_string_equal(la, lb);
    free(lb);
    cJSON *b = record_of(f, "b");
    rec = record_of(f, "a");
    cJSON_ReplaceItemInObjectCaseSensitive(b, "output", cJSON_Duplicate(cJSON_GetObjectItem(rec, "output"), 1));
    assert_true(cJSON_Compare(rec, b, 1));
    cJSON_Delete(b);
    cJSON_Delete(rec);

    /* a flag after --config wins */
    train_args(f, "--config a/args.json --output c --lr 1e-3 --steps 2", 1);
    rec = record_of(f, "c");
    assert_true(number(rec, "lr") == 1e-3);
    assert_int_equal(number(rec, "steps"), 2);
    cJSON_Delete(rec);
    free(la);
}

static void test_bad_config(void **state) {
    Fixture *f = *state;
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.json", f->dir);
    df_test_write_file(path, "{\"lr\": 1e-3, \"learning-rate\": 2}");
    assert_int_not_equal(train_args(f, "--config bad.json", 0), 0);
    assert_non_null(strstr(f->out, "bad.json: \"learning-rate\" is not an option of dflash train"));
    df_test_write_file(path, "{\"draft-layers\": \"two\"}");
    assert_int_not_equal(train_args(f, "--config bad.json", 0), 0);
    assert_non_null(strstr(f->out, "\"draft-layers\" must be an integer"));
    df_test_write_file(path, "[1, 2]");
    assert_int_not_equal(train_args(f, "--config bad.json", 0), 0);
    assert_non_null(strstr(f->out, "not a JSON object"));
    assert_int_not_equal(train_args(f, "--config missing.json", 0), 0);
    assert_non_null(strstr(f->out, "missing.json"));
}

/* With a learning rate far below the bf16 weights' resolution, one step
 * leaves them as they were: the export equals the drafter it started from. */
static void test_init_from(void **state) {
    Fixture *f = *state;
    train(f, "a", "--steps 4");
    train(f, "b", "--steps 1 --lr 1e-15 --init-from a/final");
    assert_non_null(strstr(f->out, "starting from the weights of a/final"));
    size_t n = 0, m = 0;
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/a/final/model.safetensors", f->dir);
    snprintf(pb, sizeof pb, "%s/b/final/model.safetensors", f->dir);
    char *x = df_test_read_file(pa, &n), *y = df_test_read_file(pb, &m);
    assert_true(x && y);
    assert_true(n == m && memcmp(x, y, n) == 0);
    free(x), free(y);
    /* its first loss is the trained drafter's, far below a fresh start's */
    char *la = losses_of(f, "a"), *lb = losses_of(f, "b");
    double first_a = strtod(strstr(la, "\"loss\": ") + 8, NULL), first_b = strtod(strstr(lb, "\"loss\": ") + 8, NULL);
    assert_true(first_b < first_a - 5);
    free(la), free(lb);

    char args[4096];
    snprintf(args, sizeof args, "--target '%s' --data '%s' --output e " TINY_OPTIONS " --draft-layers 2 --steps 1 "
             "--init-from a/final", df_test_path("assets/coder-tiny"), f->data);
    assert_int_not_equal(train_args(f, args, 0), 0);
    assert_non_null(strstr(f->out, "num_hidden_layers"));
    assert_non_null(strstr(f->out, "--draft-layers"));
    fprintf(stderr, "refused as: %s", strstr(f->out, "dflash train:"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_record_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_from, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
