/* The target forward on the CPU backend against transformers (fp32, eager,
 * each sequence run on its own): every decoder layer's output and the
 * logits, for coder-tiny (Qwen3, bf16, tied) and a random Llama-3 (fp16,
 * sharded, untied, llama3 rope scaling). Fixtures: tests/ref/target_ref.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "formats/safetensors.h"
#include "target/target.h"

#define PARITY_TOL 1e-3

typedef DfTargetReference Reference;

/* All layers tapped plus logits, packed batch: every layer and the logits match. */
static void check_full_parity(const char *model_dir, const char *fixture) {
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path(model_dir), &err)) fail_msg("%s", err.msg);
    Reference r;
    df_test_target_reference_load(&r, fixture, &cfg);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, model_dir, cfg.num_layers, 1);
    int *taps = malloc((size_t)r.n_layers * sizeof *taps);
    for (int l = 0; l < r.n_layers; l++) taps[l] = l;
    float *features = malloc((size_t)r.n_tokens * r.n_layers * r.hidden * sizeof *features);
    float *logits = malloc((size_t)r.n_tokens * r.vocab * sizeof *logits);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, r.n_layers, features, logits, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(m.layers_run, r.n_layers);
    for (int l = 0; l < r.n_layers; l++) {
        double e = df_test_tap_error(features, r.n_layers, l, &r, l);
        print_message("%s layer %d: rel error %.3g\n", model_dir, l, e);
        if (!(e < PARITY_TOL)) fail_msg("%s layer %d: relative error %g", model_dir, l, e);
    }
    double e = df_rel_error(logits, r.logits, (size_t)r.n_tokens * r.vocab);
    print_message("%s logits: rel error %.3g\n", model_dir, e);
    if (!(e < PARITY_TOL)) fail_msg("%s logits: relative error %g", model_dir, e);
    free(taps), free(features), free(logits);
    df_target_free(&m);
    df_backend_destroy(be);
    df_test_target_reference_free(&r);
}

static void test_coder_tiny_all_layers_and_logits(void **state) {
    (void)state;
    check_full_parity("assets/coder-tiny", "tests/fixtures/target/coder-tiny.safetensors");
}

static void test_llama3_all_layers_and_logits(void **state) {
    (void)state;
    check_full_parity("tests/fixtures/target/llama3-random", "tests/fixtures/target/llama3-random.safetensors");
}

/* Taps [1,3,5] without logits: only layers 0..5 are loaded and run. */
static void test_coder_tiny_default_taps_run_only_needed_layers(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    int taps[3];
    df_default_target_layer_ids(cfg.num_layers, 3, taps);
    assert_int_equal(taps[0], 1), assert_int_equal(taps[1], 3), assert_int_equal(taps[2], 5);
    int need = df_target_layers_needed(&cfg, taps, 3, 0);
    assert_int_equal(need, 6);
    Reference r;
    df_test_target_reference_load(&r, "tests/fixtures/target/coder-tiny.safetensors", &cfg);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, "assets/coder-tiny", need, 0);
    assert_int_equal(m.n_layers_loaded, 6);
    assert_false(m.has_head);
    float *features = malloc((size_t)r.n_tokens * 3 * r.hidden * sizeof *features);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 3, features, NULL, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m.layers_run, 6);
    for (int j = 0; j < 3; j++) {
        double e = df_test_tap_error(features, 3, j, &r, taps[j]);
        if (!(e < PARITY_TOL)) fail_msg("tap %d (layer %d): relative error %g", j, taps[j], e);
    }
    /* logits need the head, which was not loaded; a tap past the loaded layers is refused */
    float *logits = malloc((size_t)r.n_tokens * r.vocab * sizeof *logits);
    assert_int_equal(df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 3, NULL, logits, &err), -1);
    int deep = 6;
    assert_int_equal(df_target_forward(&m, r.ids, r.starts, r.n_seqs, &deep, 1, features, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "tap layer 6"));
    free(features), free(logits);
    df_target_free(&m);
    df_backend_destroy(be);
    df_test_target_reference_free(&r);
}

/* Packed batch equals each sequence run alone (positions restart at 0). */
/* The untied lm head loads with only the first layers (drafter training needs
 * it, not the last layers); logits are then refused, taps still work. */
static void test_head_without_all_layers(void **state) {
    (void)state;
    DfTargetModel m;
    DfBackend *be;
    DfError err;
    df_test_load_cpu_target(&m, &be, "tests/fixtures/target/llama3-random", 2, 1);
    assert_true(m.has_head);
    assert_int_equal(m.n_layers_loaded, 2);
    assert_false(m.lm_head_tied);
    assert_true(m.lm_head.ptr != m.embed.ptr);
    int32_t ids[3] = {5, 17, 300}, starts[2] = {0, 3};
    int tap = 1;
    float features[3 * 64], logits[3 * 320];
    assert_int_equal(df_target_forward(&m, ids, starts, 1, &tap, 1, features, NULL, &err), 0);
    assert_int_equal(df_target_forward(&m, ids, starts, 1, &tap, 1, NULL, logits, &err), -1);
    assert_non_null(strstr(err.msg, "logits need all 3 layers"));
    df_target_free(&m);
    df_backend_destroy(be);
}

static void test_packed_equals_one_at_a_time(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    Reference r;
    df_test_target_reference_load(&r, "tests/fixtures/target/coder-tiny.safetensors", &cfg);
    assert_true(r.n_seqs >= 2);
    DfTargetModel m;
    DfBackend *be;
    const int taps[2] = {0, 7};
    df_test_load_cpu_target(&m, &be, "assets/coder-tiny", cfg.num_layers, 0);
    size_t row = 2 * (size_t)r.hidden;
    float *packed = malloc((size_t)r.n_tokens * row * sizeof *packed);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 2, packed, NULL, &err)) fail_msg("%s", err.msg);
    for (int s = 0; s < r.n_seqs; s++) {
        int len = r.starts[s + 1] - r.starts[s];
        int32_t one[2] = {0, len};
        float *alone = malloc((size_t)len * row * sizeof *alone);
        if (df_target_forward(&m, r.ids + r.starts[s], one, 1, taps, 2, alone, NULL, &err)) fail_msg("%s", err.msg);
        double e = df_rel_error(alone, packed + (size_t)r.starts[s] * row, (size_t)len * row);
        if (!(e < 1e-5)) fail_msg("sequence %d alone differs from packed: %g", s, e);
        free(alone);
    }
    free(packed);
    df_target_free(&m);
    df_backend_destroy(be);
    df_test_target_reference_free(&r);
}

static void test_bad_token_id_is_refused(void **state) {
    (void)state;
    DfTargetModel m;
    DfBackend *be;
    DfError err;
    df_test_load_cpu_target(&m, &be, "tests/fixtures/target/llama3-random", 1, 0);
    int32_t ids[4] = {1, 2, 320, 4}, starts[2] = {0, 4};
    int tap = 0;
    float out[4 * 64];
    assert_int_equal(df_target_forward(&m, ids, starts, 1, &tap, 1, out, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "position 2"));
    df_target_free(&m);
    df_backend_destroy(be);
}

static void test_flop_count_matches_spec_formula(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    /* coder-tiny: H 256, 4 heads x 64, 2 kv heads, I 512: P_layer = 256*256*2 + 256*128*2 + 3*256*512 */
    const double p_layer = 589824.0;
    int lens[2] = {100, 7};
    double want = 0;
    for (int i = 0; i < 2; i++) want += 2.0 * 6 * p_layer * lens[i] + 2.0 * 6 * lens[i] * lens[i] * 256;
    assert_true(df_target_forward_flops(&cfg, lens, 2, 6, 0) == want);
    double head = 2.0 * 107 * 256 * 8192;
    assert_true(df_target_forward_flops(&cfg, lens, 2, 6, 1) == want + head);
}

/* dflash forward: JSONL records in, default taps [1,3,5] and logits out. */
static void test_forward_command(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    Reference r;
    df_test_target_reference_load(&r, "tests/fixtures/target/coder-tiny.safetensors", &cfg);
    char *dir = df_test_tmpdir("forward");
    char in_path[512], out_path[512], cmd[2048], log[4096];
    snprintf(in_path, sizeof in_path, "%s/ids.jsonl", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    FILE *fp = fopen(in_path, "w");
    assert_non_null(fp);
    for (int s = 0; s < r.n_seqs; s++) {
        fprintf(fp, "{\"ids\": [");
        for (int i = r.starts[s]; i < r.starts[s + 1]; i++) fprintf(fp, "%s%d", i > r.starts[s] ? ", " : "", r.ids[i]);
        fprintf(fp, "]}\n");
    }
    fclose(fp);
    snprintf(cmd, sizeof cmd, "%s forward --target %s --input %s --output %s --logits", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), in_path, out_path);
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("dflash forward failed: %s", log);
    DfSafetensors st;
    if (df_safetensors_open(&st, out_path, &err)) fail_msg("%s", err.msg);
    int n_ids;
    int32_t *layer_ids = df_test_copy_i32(&st, "target_layer_ids", &n_ids);
    assert_int_equal(n_ids, 3);
    int64_t fshape[2] = {r.n_tokens, 3 * r.hidden}, lshape[2] = {r.n_tokens, r.vocab};
    float *features = df_safetensors_load_f32(&st, "features", 2, fshape, &err);
    float *logits = df_safetensors_load_f32(&st, "logits", 2, lshape, &err);
    assert_non_null(features);
    assert_non_null(logits);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(layer_ids[j], 2 * j + 1);
        double e = df_test_tap_error(features, 3, j, &r, layer_ids[j]);
        if (!(e < PARITY_TOL)) fail_msg("command tap %d: relative error %g", j, e);
    }
    double e = df_rel_error(logits, r.logits, (size_t)r.n_tokens * r.vocab);
    if (!(e < PARITY_TOL)) fail_msg("command logits: relative error %g", e);
    df_safetensors_close(&st);
    free(layer_ids), free(features), free(logits);

    /* a bad record fails with its line number and leaves no output */
    char bad_out[512];
    snprintf(bad_out, sizeof bad_out, "%s/bad.safetensors", dir);
    fp = fopen(in_path, "w");
    fprintf(fp, "{\"ids\": [1, 2, 3]}\n{\"ids\": [1, 99999]}\n");
    fclose(fp);
    snprintf(cmd, sizeof cmd, "%s forward --target %s --input %s --output %s", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), in_path, bad_out);
    assert_int_not_equal(df_test_run(cmd, log, sizeof log), 0);
    assert_non_null(strstr(log, "ids.jsonl:2"));
    assert_false(df_test_file_exists(bad_out));
    df_test_rmtree(dir);
    free(dir);
    df_test_target_reference_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coder_tiny_all_layers_and_logits),
        cmocka_unit_test(test_llama3_all_layers_and_logits),
        cmocka_unit_test(test_coder_tiny_default_taps_run_only_needed_layers),
        cmocka_unit_test(test_head_without_all_layers),
        cmocka_unit_test(test_packed_equals_one_at_a_time),
        cmocka_unit_test(test_bad_token_id_is_refused),
        cmocka_unit_test(test_flop_count_matches_spec_formula),
        cmocka_unit_test(test_forward_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
