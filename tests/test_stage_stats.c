/* Stage statistics: hand-computed count, total, mean, median (odd and even
 * counts), maximum and busy fraction from known durations; host timing
 * around a sleep; four threads recording into one stage lose nothing; the
 * printed table and the JSON report (read back with cJSON) carry the same
 * numbers, queues included. */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "pipeline/stage_stats.h"
#include "test_util.h"

static const char *const NAMES[3] = {"target forward", "drafter fwd/bwd", "optimizer"};

static void fill_known(DfStageTable *t) {
    df_stage_record(t, 0, 0.010);
    df_stage_record(t, 0, 0.030);
    df_stage_record(t, 0, 0.020);
    const double b[4] = {0.001, 0.010, 0.002, 0.003};
    for (int i = 0; i < 4; i++) df_stage_record(t, 1, b[i]);
}

static void test_known_durations(void **state) {
    (void)state;
    DfStageTable t;
    DfError err;
    assert_int_equal(df_stage_table_init(&t, NAMES, 3, &err), 0);
    fill_known(&t);
    df_stage_record(&t, 2, -1.0); /* a clock hiccup counts as 0 */
    df_stage_record(&t, 7, 1.0);  /* no such stage: ignored */
    DfStageSummary s;
    df_stage_summary(&t, 0, 0.5, &s);
    assert_string_equal(s.name, "target forward");
    assert_int_equal(s.count, 3);
    assert_true(fabs(s.total_s - 0.060) < 1e-12);
    assert_true(fabs(s.mean_s - 0.020) < 1e-12);
    assert_true(fabs(s.p50_s - 0.020) < 1e-12);
    assert_true(fabs(s.max_s - 0.030) < 1e-12);
    assert_true(fabs(s.busy - 0.12) < 1e-12);
    df_stage_summary(&t, 1, 0.5, &s);
    assert_int_equal(s.count, 4);
    assert_true(fabs(s.p50_s - 0.0025) < 1e-12); /* (2 + 3) / 2 ms */
    assert_true(fabs(s.mean_s - 0.004) < 1e-12);
    assert_true(fabs(s.max_s - 0.010) < 1e-12);
    df_stage_summary(&t, 2, 0.5, &s);
    assert_int_equal(s.count, 1);
    assert_true(s.total_s == 0 && s.max_s == 0);
    df_stage_table_free(&t);
    assert_int_equal(df_stage_table_init(&t, NAMES, 0, &err), -1);
}

static void test_host_timing(void **state) {
    (void)state;
    DfStageTable t;
    DfError err;
    assert_int_equal(df_stage_table_init(&t, NAMES, 1, &err), 0);
    double t0 = df_stage_begin();
    df_sleep_seconds(0.02);
    df_stage_end(&t, 0, t0);
    DfStageSummary s;
    df_stage_summary(&t, 0, 0, &s); /* wall since init */
    assert_true(s.total_s >= 0.02 && s.total_s < 2);
    assert_true(s.busy > 0.5 && s.busy <= 1.0); /* the sleep was nearly all the wall time */
    df_stage_table_free(&t);
}

static void *record_many(void *arg) {
    for (int i = 0; i < 1000; i++) df_stage_record(arg, 0, 1.0 / 1024); /* exact in binary */
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    DfStageTable t;
    DfError err;
    assert_int_equal(df_stage_table_init(&t, NAMES, 1, &err), 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, record_many, &t);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    DfStageSummary s;
    df_stage_summary(&t, 0, 1.0, &s);
    assert_int_equal(s.count, 4000);
    assert_true(s.total_s == 4000.0 / 1024);
    df_stage_table_free(&t);
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static void test_report(void **state) {
    (void)state;
    DfStageTable t;
    DfError err;
    assert_int_equal(df_stage_table_init(&t, NAMES, 3, &err), 0);
    fill_known(&t);
    DfQueueStats q = {.name = "batches", .capacity = 4, .pushed = 9, .popped = 8, .mean_depth = 2.5,
                      .max_depth = 4, .producer_wait_s = 1.25, .consumer_wait_s = 0.5};

    char *dir = df_test_tmpdir("stage_stats");
    char path[512];
    snprintf(path, sizeof path, "%s/table.txt", dir);
    FILE *f = fopen(path, "w");
    df_stage_report_print(f, &t, 0.5, &q, 1);
    fclose(f);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(strstr(text, "target forward"));
    /* items, total, mean, p50, max, busy of stage 0 */
    assert_non_null(strstr(text, "       3      0.060    20.000    20.000    30.000   12.0%"));
    assert_non_null(strstr(text, "wall 0.500 s"));
    assert_non_null(strstr(text, "batches"));
    free(text);

    snprintf(path, sizeof path, "%s/stages.json", dir);
    assert_int_equal(df_stage_report_write_json(path, &t, 0.5, &q, 1, &err), 0);
    text = df_test_read_file(path, NULL);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    assert_true(num(root, "wall_s") == 0.5);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    assert_int_equal(cJSON_GetArraySize(stages), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *o = cJSON_GetArrayItem(stages, i);
        DfStageSummary s;
        df_stage_summary(&t, i, 0.5, &s);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring, NAMES[i]);
        assert_true(num(o, "count") == (double)s.count);
        assert_true(num(o, "total_s") == s.total_s);
        assert_true(num(o, "p50_s") == s.p50_s);
        assert_true(num(o, "max_s") == s.max_s);
        assert_true(num(o, "busy") == s.busy);
    }
    const cJSON *qo = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "queues"), 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(qo, "name")->valuestring, "batches");
    assert_true(num(qo, "mean_depth") == 2.5 && num(qo, "max_depth") == 4 && num(qo, "producer_wait_s") == 1.25);
    cJSON_Delete(root);
    free(text);

    /* an unwritable place fails with the path, leaving nothing */
    assert_int_equal(df_stage_report_write_json("/nonexistent-dir/stages.json", &t, 0.5, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent-dir"));
    df_test_rmtree(dir);
    free(dir);
    df_stage_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_durations),
        cmocka_unit_test(test_host_timing),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
