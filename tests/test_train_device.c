/* dflash train --device: a device that cannot train (no GPU, CUDA not built
 * in, or a backend without the drafter's training ops) is refused before any
 * data is read or prepared, with a message naming the device; an unknown
 * name is refused; a kernel variant the device lacks is refused before the data
 * too (a malformed one as a usage error); a CPU run reports the memory of each arena role;
 * --random-target-weights trains against a random target of the same shape. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_CAP 65536

static int run_train(const char *dir, const char *data, const char *extra, char *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && OMP_NUM_THREADS=2 '%s' train --target '%s' --data '%s' --output '%s/run' %s",
             dir, df_test_path("dflash"), df_test_path("assets/coder-tiny"), data, dir, extra);
    return df_test_run(cmd, out, OUT_CAP);
}

static void test_cuda_refused_before_the_data(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("train_device"), *out = malloc(OUT_CAP);
    /* the data does not exist: a device check that came after it would report the data */
    int rc = run_train(dir, "/nonexistent/records.jsonl", "--steps 2 --device cuda", out);
    /* with a GPU whose backend has every training op this would run, and fail on the data */
    if (strstr(out, "nonexistent") && !strstr(out, "--device")) skip();
    if (rc == 0 || rc >= 128) fail_msg("expected a clean failure, got %d:\n%s", rc, out);
    assert_non_null(strstr(out, "--device cuda"));
    assert_null(strstr(out, "nonexistent"));
    assert_null(strstr(out, "prepar"));
    df_test_rmtree(dir);
    free(dir), free(out);
}

static void test_unknown_device(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("train_device"), *out = malloc(OUT_CAP);
    int rc = run_train(dir, "/nonexistent/records.jsonl", "--steps 2 --device tpu", out);
    assert_true(rc != 0 && rc < 128);
    assert_non_null(strstr(out, "unknown device 'tpu'"));
    df_test_rmtree(dir);
    free(dir), free(out);
}

static void test_kernel_variant_refused_before_the_data(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("train_device"), *out = malloc(OUT_CAP);
    int rc = run_train(dir, "/nonexistent/records.jsonl", "--steps 2 --device cpu --kernel-variant gemm_search=1", out);
    if (rc == 0 || rc >= 128) fail_msg("expected a clean failure, got %d:\n%s", rc, out);
    assert_non_null(strstr(out, "--kernel-variant gemm_search=1"));
    assert_non_null(strstr(out, "no kernel variant 'gemm_search'"));
    assert_null(strstr(out, "nonexistent"));
    rc = run_train(dir, "/nonexistent/records.jsonl", "--steps 2 --kernel-variant gemm_search", out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "--kernel-variant 'gemm_search': expected NAME=VALUE"));
    df_test_rmtree(dir);
    free(dir), free(out);
}

static void test_cpu_run_reports_memory_per_role(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("train_device"), *out = malloc(OUT_CAP);
    int rc = run_train(dir, df_test_path("assets/data/code-dev.jsonl"),
                       "--steps 2 --device cpu --draft-layers 1 --intermediate-size 128 --num-taps 2 --block-size 8 "
                       "--num-anchors 4 --token-budget 600 --max-length 600",
                       out);
    if (rc != 0) fail_msg("dflash train exited %d:\n%s", rc, out);
    const char *line = strstr(out, "train: memory on cpu: weights ");
    assert_non_null(line);
    assert_non_null(strstr(line, "gradients "));
    assert_non_null(strstr(line, "optimizer state "));
    assert_non_null(strstr(line, "activations "));
    df_test_rmtree(dir);
    free(dir), free(out);
}

/* The first step's loss of the run in dir/run (metrics.jsonl's first line). */
static double first_loss(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/run/metrics.jsonl", dir);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    const char *field = strstr(text, "\"loss\":");
    assert_non_null(field);
    double loss = strtod(field + strlen("\"loss\":"), NULL);
    free(text);
    return loss;
}

/* Random target weights change the features, so the first loss, and are a
 * function of the seed: two runs with the same seed agree bit for bit. */
static void test_random_target_weights(void **state) {
    (void)state;
    const char *opts = "--steps 1 --device cpu --draft-layers 1 --intermediate-size 128 --num-taps 2 --block-size 8 "
                       "--num-anchors 4 --token-budget 600 --max-length 600 --seed 3";
    char random_opts[512];
    snprintf(random_opts, sizeof random_opts, "%s --random-target-weights", opts);
    const char *data = df_test_path("assets/data/code-dev.jsonl");
    double loss[3];
    const char *which[3] = {opts, random_opts, random_opts};
    char *out = malloc(OUT_CAP);
    for (int i = 0; i < 3; i++) {
        char *dir = df_test_tmpdir("train_random");
        int rc = run_train(dir, data, which[i], out);
        if (rc != 0) fail_msg("dflash train %s exited %d:\n%s", which[i], rc, out);
        loss[i] = first_loss(dir);
        df_test_rmtree(dir);
        free(dir);
    }
    printf("first loss: loaded weights %.6f, random weights %.6f and %.6f\n", loss[0], loss[1], loss[2]);
    assert_true(isfinite(loss[1]));
    assert_true(loss[0] != loss[1]);
    assert_true(loss[1] == loss[2]);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_refused_before_the_data),
        cmocka_unit_test(test_unknown_device),
        cmocka_unit_test(test_kernel_variant_refused_before_the_data),
        cmocka_unit_test(test_cpu_run_reports_memory_per_role),
        cmocka_unit_test(test_random_target_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
