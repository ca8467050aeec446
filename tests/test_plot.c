/* dflash plot and OUTPUT/curves.png: the file decodes as a PNG of the
 * documented size with the curves drawn in it (from synthetic metrics with
 * a non-finite step, held-out tau and a torn last line); a bad line fails
 * naming file:line; a missing metrics.jsonl is named; train writes
 * curves.png. */
#include "test_util.h"

#include <cairo/cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot/plot_run.h"

#define OUT_CAP 16384

static int setup(void **state) {
    *state = df_test_tmpdir("plot");
    return 0;
}

static int teardown(void **state) {
    df_test_rmtree(*state);
    free(*state);
    return 0;
}

/* n metrics lines shaped as the trainer's (train/trainer.h), step 7's loss null; torn: a cut last line. */
static void write_metrics(const char *dir, int n, int torn) {
    char path[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 1; i <= n; i++) {
        double loss = 8 * exp(-i / 60.0) + 2 + 0.5 * sin(i * 1.7), tau = 1 + 2 * (1 - exp(-i / 80.0));
        char loss_text[32];
        snprintf(loss_text, sizeof loss_text, "%.6f", loss);
        fprintf(fp,
                "{\"step\": %d, \"epoch\": 0, \"loss\": %s, \"train_tau\": %.5f, \"acc\": [0.5], \"lr\": %.8f, "
                "\"grad_norm\": 1, \"tokens\": 900, \"samples\": 2, \"tokens_per_s\": %.1f, \"seqs_per_s\": 1, "
                "\"step_s\": 0.1, \"stage_ms\": {\"load\": 0.2, \"wait\": 0, \"upload\": 0.01, \"target\": %.2f, "
                "\"drafter\": 40, \"reduce\": 0, \"optimizer\": 2, \"host\": 0.3}, \"busy\": 0.9, \"elapsed_s\": %d}\n",
                i, i == 7 ? "null" : loss_text, tau, 1e-3 * fmin(1.0, i / 20.0), 5000 + 300 * sin(i / 9.0),
                60 + 5 * cos(i / 4.0), i);
    }
    if (torn) fputs("{\"step\": 9999, \"loss\": 1.", fp);
    fclose(fp);
}

/* The share of pixels whose colour is (r, g, b) within tol (0..255). */
static double colour_share(cairo_surface_t *s, int r, int g, int b, int tol) {
    unsigned char *d = cairo_image_surface_get_data(s);
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    long hits = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const unsigned char *p = d + (size_t)y * stride + 4 * x; /* little-endian xRGB: B, G, R */
            hits += abs(p[2] - r) <= tol && abs(p[1] - g) <= tol && abs(p[0] - b) <= tol;
        }
    return (double)hits / ((double)w * h);
}

static cairo_surface_t *decode(const char *path) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS)
        fail_msg("%s does not decode as PNG: %s", path, cairo_status_to_string(cairo_surface_status(s)));
    assert_int_equal(cairo_image_surface_get_width(s), DF_PLOT_WIDTH);
    assert_int_equal(cairo_image_surface_get_height(s), DF_PLOT_HEIGHT);
    return s;
}

static int run(const char *args, char *out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s", df_test_path("dflash"), args);
    return df_test_run(cmd, out, OUT_CAP);
}

static void test_plot_decodes(void **state) {
    const char *dir = *state;
    write_metrics(dir, 300, 1);
    char path[1024], eval[1024], args[4096], out[OUT_CAP];
    snprintf(eval, sizeof eval, "%s/eval.jsonl", dir);
    df_test_write_file(eval, "{\"step\": 100, \"tau\": 1.8}\n{\"step\": 200, \"tau\": 2.4}\n{\"step\": 300, \"tau\": 2.6}\n");
    snprintf(path, sizeof path, "%s/picture.png", dir);
    snprintf(args, sizeof args, "plot '%s' --output '%s'", dir, path);
    if (run(args, out) != 0) fail_msg("dflash plot failed: %s", out);
    size_t n = 0;
    char *bytes = df_test_read_file(path, &n);
    assert_true(n > 8 && memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0);
    free(bytes);
    cairo_surface_t *s = decode(path);
    /* the curves' colours are there: the loss (blue), eval tau (green), learning rate (purple) */
    assert_true(colour_share(s, 31, 89, 191, 12) > 1e-4);
    assert_true(colour_share(s, 26, 153, 64, 12) > 1e-5);
    assert_true(colour_share(s, 128, 64, 166, 12) > 1e-4);
    cairo_surface_destroy(s);
    /* the default output is RUN_DIR/curves.png */
    snprintf(args, sizeof args, "plot '%s'", dir);
    if (run(args, out) != 0) fail_msg("dflash plot failed: %s", out);
    snprintf(path, sizeof path, "%s/curves.png", dir);
    cairo_surface_destroy(decode(path));
}

static void test_plot_errors(void **state) {
    const char *dir = *state;
    char args[4096], out[OUT_CAP], path[1024];
    snprintf(args, sizeof args, "plot '%s'", dir);
    assert_int_not_equal(run(args, out), 0);
    assert_non_null(strstr(out, "metrics.jsonl: cannot open"));
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    df_test_write_file(path, "{\"step\": 1, \"loss\": 2}\nnot json\n{\"step\": 3, \"loss\": 2}\n");
    assert_int_not_equal(run(args, out), 0);
    assert_non_null(strstr(out, "metrics.jsonl:2: not a JSON object"));
}

static void test_train_writes_curves(void **state) {
    const char *dir = *state;
    char data[1024], cmd[4096], out[OUT_CAP], path[1024];
    snprintf(data, sizeof data, "%s/slice.jsonl", dir);
    df_test_write_data_slice(data, 6);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=2 '%s' train --target '%s' --data '%s' --output '%s/run' --draft-layers 1 "
             "--intermediate-size 128 --num-taps 1 --block-size 8 --num-anchors 8 --token-budget 1100 --steps 3",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), data, dir);
    if (df_test_run(cmd, out, sizeof out) != 0) fail_msg("train failed: %s", out);
    snprintf(path, sizeof path, "%s/run/curves.png", dir);
    cairo_surface_destroy(decode(path));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plot_decodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plot_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_train_writes_curves, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
