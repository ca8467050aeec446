/* Drafter inference with sliding-window layers (drafter_infer.c), checked
 * against an independent consequence of RoPE: attention scores depend only
 * on relative positions, and every layer's context K/V come from the
 * features alone. So a drafter whose layers all slide with window W, given S
 * > W context rows, must propose exactly what the same drafter without a
 * window proposes from only the last W rows (placed at positions 0..W-1).
 * The same unwindowed drafter given all S rows must differ (the window
 * matters), and with S <= W the window must change nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "infer/drafter_infer.h"
#include "model/drafter.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

enum { S = 40, W = 13, B = 8, VOCAB = 300, HID = 64 };

/* fp32 both ways; only the rope angles of other absolute positions differ */
#define SAME_TOL 1e-4

typedef struct Setup {
    DfBackend *be;
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params, *features;
    DfBuffer embed;
} Setup;

static void setup_drafter(Setup *s) {
    DfError err = {{0}};
    s->be = df_backend_cpu_create(&err);
    assert_non_null(s->be);
    DfModelConfig t;
    memset(&t, 0, sizeof t);
    t.num_layers = 8, t.hidden_size = HID, t.num_heads = 4, t.head_dim = 16, t.num_kv_heads = 2;
    t.intermediate_size = 96, t.vocab_size = VOCAB, t.rms_norm_eps = 1e-6, t.rope.theta = 1e4;
    t.max_position_embeddings = 512;
    DfDrafterOptions dopt = {.num_layers = 2, .block_size = B, .mask_token_id = 290};
    assert_int_equal(df_drafter_config_from_target(&s->cfg, &t, &dopt, &err), 0);
    df_drafter_layout_build(&s->layout, &s->cfg);
    s->params = df_test_random_array(s->layout.total, 11, 0.4f);
    s->features = df_test_random_array((size_t)S * s->cfg.n_taps * HID, 12, 1.0f);
    float *embed = df_test_random_array((size_t)VOCAB * HID, 13, 1.0f);
    s->embed = df_test_upload(s->be, embed, (size_t)VOCAB * HID, DF_BUF_ACT);
    free(embed);
}

static void teardown_drafter(Setup *s) {
    df_buffer_free(s->be, &s->embed);
    df_drafter_layout_free(&s->layout);
    free(s->params), free(s->features);
    df_backend_destroy(s->be);
}

/* Logits [B, VOCAB] of one proposal after `rows` context rows starting at feature row `first`. */
static float *propose(Setup *s, const DfDrafterConfig *cfg, int first, int rows) {
    DfError err = {{0}};
    DfDrafterRunner r;
    if (df_drafter_runner_init(&r, s->be, cfg, s->params, s->embed, s->embed, 1, S + B, &err)) fail_msg("%s", err.msg);
    size_t nf = (size_t)cfg->n_taps * HID;
    if (df_drafter_append_context(&r, 0, s->features + (size_t)first * nf, rows, &err)) fail_msg("%s", err.msg);
    int32_t ids[B], argmax[B];
    ids[0] = 17;
    for (int k = 1; k < B; k++) ids[k] = cfg->mask_token_id;
    if (df_drafter_propose(&r, 0, ids, B, argmax, &err)) fail_msg("%s", err.msg);
    const float *got = df_drafter_logits(&r, &err);
    if (!got) fail_msg("%s", err.msg);
    float *logits = malloc((size_t)B * VOCAB * sizeof *logits);
    memcpy(logits, got, (size_t)B * VOCAB * sizeof *logits);
    df_drafter_runner_free(&r);
    return logits;
}

static void test_window_is_the_last_rows(void **state) {
    (void)state;
    Setup s;
    setup_drafter(&s);
    DfError err = {{0}};
    DfDrafterConfig sliding = s.cfg;
    assert_int_equal(df_drafter_set_sliding(&sliding, W, "all", &err), 0);
    float *windowed = propose(&s, &sliding, 0, S);
    float *last_rows = propose(&s, &s.cfg, S - W, W);
    float *everything = propose(&s, &s.cfg, 0, S);
    size_t n = (size_t)B * VOCAB;
    double same = df_rel_error(windowed, last_rows, n), differ = df_rel_error(windowed, everything, n);
    printf("  window %d over %d rows: %.2e against the last %d rows alone, %.2e against all rows unwindowed\n", W, S,
           same, W, differ);
    if (!(same < SAME_TOL)) fail_msg("windowed drafter vs the last rows alone: relative error %g", same);
    if (!(differ > 100 * SAME_TOL)) fail_msg("the window changed nothing (relative difference %g)", differ);
    free(windowed), free(last_rows), free(everything);
    teardown_drafter(&s);
}

/* Only layer 0 slides: different from both all-full and all-sliding; a
 * context no longer than the window is unaffected. */
static void test_mixed_layers_and_short_context(void **state) {
    (void)state;
    Setup s;
    setup_drafter(&s);
    DfError err = {{0}};
    DfDrafterConfig first = s.cfg, all = s.cfg;
    assert_int_equal(df_drafter_set_sliding(&first, W, "0", &err), 0);
    assert_int_equal(df_drafter_set_sliding(&all, W, "all", &err), 0);
    size_t n = (size_t)B * VOCAB;
    float *mixed = propose(&s, &first, 0, S), *full = propose(&s, &s.cfg, 0, S), *slid = propose(&s, &all, 0, S);
    if (!(df_rel_error(mixed, full, n) > 100 * SAME_TOL)) fail_msg("layer 0's window changed nothing");
    if (!(df_rel_error(mixed, slid, n) > 100 * SAME_TOL)) fail_msg("layer 1 slid although it is full_attention");
    free(mixed), free(full), free(slid);
    float *short_windowed = propose(&s, &all, 0, W), *short_full = propose(&s, &s.cfg, 0, W);
    assert_memory_equal(short_windowed, short_full, n * sizeof *short_full);
    free(short_windowed), free(short_full);
    teardown_drafter(&s);
}

/* The cost model's block-attention term with windows (spec section 8: a
 * block sees min(anchor, W) context rows): S = 1000 uniform anchors, W = 250
 * gives a mean of (1000*250 - 250^2/2) / 1000 = 218.75 rows instead of 500. */
static void test_flops_with_window(void **state) {
    (void)state;
    Setup s;
    setup_drafter(&s);
    DfError err = {{0}};
    DfDrafterConfig wide = s.cfg, narrow = s.cfg;
    assert_int_equal(df_drafter_set_sliding(&wide, 1000, "all", &err), 0);
    assert_int_equal(df_drafter_set_sliding(&narrow, 250, "0", &err), 0);
    double full = df_drafter_forward_flops(&s.cfg, 1000, 64);
    assert_true(df_drafter_forward_flops(&wide, 1000, 64) == full);
    double qd = (double)s.cfg.num_heads * s.cfg.head_dim, saved = 4.0 * B * (500 - 218.75) * qd * 64;
    double got = df_drafter_forward_flops(&narrow, 1000, 64);
    if (!(fabs(full - got - saved) < 1e-9 * full)) fail_msg("flops: %.17g saved, expected %.17g", full - got, saved);
    teardown_drafter(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_is_the_last_rows),
        cmocka_unit_test(test_mixed_layers_and_short_context),
        cmocka_unit_test(test_flops_with_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
