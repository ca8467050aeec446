/* The drafter's attention shape is its own (spec section 3):
 * - a dense target (coder-tiny) gives the target's heads, KV heads, head_dim;
 * - a hybrid Qwen3.5/3.6 target gives 32 query heads of 128 and 8 KV heads,
 *   the target's rope base and scaling over the drafter's whole head_dim
 *   (never the target's partial rotary_dim), and at the published 27B shape
 *   the published drafters' taps [1,16,31,46,61] of 64 layers, MLP 17408,
 *   vocabulary 248320;
 * - explicit options override the defaults; bad values are refused naming
 *   the option and its range;
 * - the inference drafter built for the hybrid fixture has rope tables of
 *   head_dim/2 columns, the full-rotary tables of the target's base, and
 *   df_drafter_fit_target accepts a shape that is not the target's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "infer/drafter_infer.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"
#include "target/rope.h"
#include "target/target.h"

#define HYBRID_DIR "tests/fixtures/hybrid/qwen35-random"

static DfModelConfig load_config(const char *dir) {
    DfModelConfig c;
    DfError err = {{0}};
    if (df_model_config_load(&c, df_test_path(dir), &err)) fail_msg("%s", err.msg);
    return c;
}

/* The public Qwen3.6-27B text config's sizes on the hybrid fixture's config:
 * 64 layers, hidden 5120, 24 heads of 256 (4 KV heads), rotary on 64 of
 * them, theta 1e7, MLP 17408, vocabulary 248320. */
static DfModelConfig qwen36_27b(void) {
    DfModelConfig c = load_config(HYBRID_DIR);
    c.num_layers = 64, c.hidden_size = 5120, c.num_heads = 24, c.num_kv_heads = 4, c.head_dim = 256;
    c.rotary_dim = 64, c.rope.theta = 1e7, c.intermediate_size = 17408, c.vocab_size = 248320;
    for (int i = 0; i < 64; i++) c.layer_is_linear[i] = (i + 1) % 4 != 0;
    return c;
}

static void expect_shape(const DfDrafterConfig *c, int heads, int kv_heads, int head_dim) {
    assert_int_equal(c->num_heads, heads);
    assert_int_equal(c->num_kv_heads, kv_heads);
    assert_int_equal(c->head_dim, head_dim);
}

static void test_dense_default_is_the_targets(void **state) {
    (void)state;
    DfModelConfig t = load_config("assets/coder-tiny");
    DfDrafterConfig c;
    DfError err = {{0}};
    DfDrafterOptions o = {.num_layers = 2, .block_size = 8, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&c, &t, &o, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, t.num_heads, t.num_kv_heads, t.head_dim);
    expect_shape(&c, 4, 2, 64);
    int heads, kv, hd;
    df_drafter_default_attention(&t, &heads, &kv, &hd);
    assert_int_equal(heads, 4);
    assert_int_equal(kv, 2);
    assert_int_equal(hd, 64);
}

static void test_hybrid_default(void **state) {
    (void)state;
    DfModelConfig t = load_config(HYBRID_DIR);
    assert_true(t.is_hybrid);
    assert_true(t.rotary_dim < t.head_dim); /* the fixture's rotary is partial: 4 of 16 */
    DfDrafterConfig c;
    DfError err = {{0}};
    DfDrafterOptions o = {.num_layers = 2, .block_size = 8, .mask_token_id = 255};
    if (df_drafter_config_from_target(&c, &t, &o, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, 32, 8, 128);
    assert_true(c.rope.theta == t.rope.theta);
    assert_int_equal(c.rope.type, DF_ROPE_DEFAULT);
    assert_int_equal(c.hidden_size, t.hidden_size);

    /* the published 27B shape */
    DfModelConfig big = qwen36_27b();
    DfDrafterOptions five = {.num_layers = 5, .block_size = 16, .mask_token_id = 248077};
    if (df_drafter_config_from_target(&c, &big, &five, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, 32, 8, 128);
    assert_true(c.rope.theta == 1e7);
    assert_int_equal(c.num_target_layers, 64);
    assert_int_equal(c.n_taps, 5);
    const int taps[5] = {1, 16, 31, 46, 61};
    assert_memory_equal(c.target_layer_ids, taps, sizeof taps);
    assert_int_equal(c.intermediate_size, 17408);
    assert_int_equal(c.vocab_size, 248320);
    assert_int_equal(c.hidden_size, 5120);

    /* full rotary: the frequencies span the drafter's 128 dims with the
     * target's base, not the target's 64 of 256 */
    float inv[64];
    df_rope_inv_freq(&c.rope, c.head_dim, inv);
    assert_float_equal(inv[0], 1.0f, 0);
    assert_float_equal(inv[63], (float)(1.0 / pow(1e7, 126.0 / 128.0)), 1e-12);
}

static void test_explicit_options_override(void **state) {
    (void)state;
    DfModelConfig dense = load_config("assets/coder-tiny"), hybrid = load_config(HYBRID_DIR);
    DfDrafterConfig c;
    DfError err = {{0}};
    DfDrafterOptions o = {.num_layers = 2, .block_size = 8, .mask_token_id = 255,
                          .num_heads = 8, .num_kv_heads = 4, .head_dim = 32};
    if (df_drafter_config_from_target(&c, &dense, &o, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, 8, 4, 32);
    if (df_drafter_config_from_target(&c, &hybrid, &o, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, 8, 4, 32);
    /* one option given, the others default */
    DfDrafterOptions heads_only = {.num_layers = 2, .block_size = 8, .mask_token_id = 255, .num_heads = 16};
    if (df_drafter_config_from_target(&c, &hybrid, &heads_only, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, 16, 8, 128);
    DfDrafterOptions dim_only = {.num_layers = 2, .block_size = 8, .mask_token_id = 255, .head_dim = 96};
    if (df_drafter_config_from_target(&c, &dense, &dim_only, &err)) fail_msg("%s", err.msg);
    expect_shape(&c, 4, 2, 96);
}

static void expect_refused(const DfModelConfig *t, int heads, int kv, int hd, const char *option, const char *also) {
    DfDrafterConfig c;
    DfError err = {{0}};
    DfDrafterOptions o = {.num_layers = 2, .block_size = 8, .mask_token_id = 255,
                          .num_heads = heads, .num_kv_heads = kv, .head_dim = hd};
    assert_int_equal(df_drafter_config_from_target(&c, t, &o, &err), -1);
    if (!strstr(err.msg, option) || (also && !strstr(err.msg, also)))
        fail_msg("%d/%d/%d: expected '%s' and '%s' in: %s", heads, kv, hd, option, also ? also : "", err.msg);
}

static void test_bad_values_refused(void **state) {
    (void)state;
    DfModelConfig dense = load_config("assets/coder-tiny"), hybrid = load_config(HYBRID_DIR);
    expect_refused(&dense, -1, 0, 0, "--draft-heads", "1..256");
    expect_refused(&dense, 257, 0, 0, "--draft-heads", "1..256");
    expect_refused(&dense, 0, -2, 0, "--draft-kv-heads", "1..256");
    expect_refused(&dense, 0, 0, -4, "--draft-head-dim", "1..256");
    expect_refused(&dense, 0, 0, 512, "--draft-head-dim", "1..256");
    expect_refused(&dense, 0, 0, 63, "--draft-head-dim", "even");
    expect_refused(&dense, 6, 4, 0, "--draft-heads 6", "--draft-kv-heads 4");
    /* a given value that the default does not fit says which one is the default */
    expect_refused(&hybrid, 12, 0, 0, "--draft-kv-heads 8 (the default)", "--draft-heads 12");
}

/* The inference drafter of the hybrid fixture with the default shape: its
 * rope tables are [capacity, 64], the full-rotary tables of the target's
 * base; df_drafter_fit_target accepts the shape. */
static void test_hybrid_runner_rope(void **state) {
    (void)state;
    DfError err = {{0}};
    DfBackend *be = df_backend_cpu_create(&err);
    assert_non_null(be);
    DfTargetModel m;
    DfModelConfig t = load_config(HYBRID_DIR);
    if (df_target_load(&m, be, df_test_path(HYBRID_DIR), t.num_layers, 1, &err)) fail_msg("%s", err.msg);
    DfDrafterConfig c;
    DfDrafterOptions o = {.num_layers = 1, .block_size = 4, .mask_token_id = 255};
    if (df_drafter_config_from_target(&c, &m.cfg, &o, &err)) fail_msg("%s", err.msg);
    if (df_drafter_fit_target(&c, &m.cfg, 250, "drafter", &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &c);
    float *params = df_test_random_array(layout.total, 5, 0.1f);
    DfDrafterRunner r;
    enum { CAP = 24 };
    if (df_drafter_runner_init(&r, be, &c, params, m.embed, m.lm_head, 1, CAP, &err)) fail_msg("%s", err.msg);
    size_t half = (size_t)c.head_dim / 2;
    assert_int_equal(r.rope_cos.count % half, 0);
    size_t n = r.rope_cos.count, rows = n / half;
    assert_true(rows >= CAP);
    float *got = malloc(n * sizeof *got), *cs = malloc(n * sizeof *cs), *sn = malloc(n * sizeof *sn);
    if (be->ops->download_f32(be, got, r.rope_cos, &err)) fail_msg("%s", err.msg);
    DfRopeConfig base = {.theta = t.rope.theta, .type = DF_ROPE_DEFAULT};
    df_rope_tables(&base, c.head_dim, (int)rows, cs, sn);
    assert_memory_equal(got, cs, n * sizeof *got);
    free(got), free(cs), free(sn), free(params);
    df_drafter_runner_free(&r);
    df_drafter_layout_free(&layout);
    df_target_free(&m);
    df_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_default_is_the_targets),
        cmocka_unit_test(test_hybrid_default),
        cmocka_unit_test(test_explicit_options_override),
        cmocka_unit_test(test_bad_values_refused),
        cmocka_unit_test(test_hybrid_runner_rope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
