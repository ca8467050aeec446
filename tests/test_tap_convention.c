/* The tap convention of docs/DFLASH.md section 2: target_layer_ids name
 * decoder layers whose OUTPUTS the drafter reads, transformers'
 * hidden_states[id + 1]. Shown on coder-tiny (8 layers) end to end:
 * - the drafter config a run derives lists the spec's build_target_layer_ids
 *   ([1, 3, 5] for n = 3), never one layer twice for any layer count and any
 *   allowed tap count, and an export writes exactly those ids (and
 *   num_target_layers) into config.json's dflash_config, which loads back;
 *   the drafter `dflash train` exported (tests/fixtures/export/drafter)
 *   holds the same ids;
 * - the target forward's tap j equals transformers' hidden_states[ids[j] + 1]
 *   (the layer outputs tests/ref/target_ref.py wrote) and stands clearly
 *   apart from the neighbouring layers' outputs, so an off-by-one fails here;
 * - the decoder that generate, eval and train's held-out eval run taps the
 *   same rows as the forward.
 * The z-lab side, DFlashDraftModel reading these features: test_export_parity
 * (its logits from tests/ref/export_ref.py, on the CPU) and, on the GPU
 * machine, tests/ref/check_dflash_py.py (the exported directory loaded by
 * transformers' AutoModel). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "target/target_decode.h"
#include "model/drafter_config.h"
#include "model/drafter_io.h"
#include "model/drafter_layout.h"

#define TINY "assets/coder-tiny"
#define REFERENCE "tests/fixtures/target/coder-tiny.safetensors"
#define PARITY_TOL 1e-3
#define APART 0.05 /* the least relative distance to a neighbouring layer's output that counts as apart */

static DfDrafterConfig derived(const DfModelConfig *t, int layers, int taps) {
    DfDrafterOptions o = {.num_layers = layers, .block_size = 8, .n_taps = taps, .mask_token_id = 8190};
    DfDrafterConfig c;
    DfError err;
    if (df_drafter_config_from_target(&c, t, &o, &err)) fail_msg("%s", err.msg);
    return c;
}

static void test_derived_ids_are_the_spec_and_distinct(void **state) {
    (void)state;
    DfModelConfig t;
    DfError err;
    if (df_model_config_load(&t, df_test_path(TINY), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig c = derived(&t, 3, 0);
    int want[] = {1, 3, 5};
    assert_int_equal(c.n_taps, 3);
    assert_memory_equal(c.target_layer_ids, want, sizeof want);
    /* six drafter layers on eight target layers: capped at the five distinct default ids */
    c = derived(&t, 6, 0);
    int five[] = {1, 2, 3, 4, 5};
    assert_int_equal(c.n_taps, 5);
    assert_memory_equal(c.target_layer_ids, five, sizeof five);
    DfDrafterOptions o = {.num_layers = 1, .block_size = 8, .n_taps = 6, .mask_token_id = 8190};
    assert_int_not_equal(df_drafter_config_from_target(&c, &t, &o, &err), 0);
    if (!strstr(err.msg, "--num-taps") || !strstr(err.msg, "1..5")) fail_msg("%s", err.msg);
    /* every layer count, every allowed count: ids in [0, L), increasing, so no layer twice */
    for (int layers = 1; layers <= 80; layers++) {
        t.num_layers = layers;
        for (int n = 1; n <= df_drafter_max_taps(&t); n++) {
            int ids[DF_MAX_TAPS];
            df_default_target_layer_ids(layers, n, ids);
            for (int i = 0; i < n; i++) {
                if (ids[i] < 0 || ids[i] >= layers || (i && ids[i] <= ids[i - 1]))
                    fail_msg("L = %d, n = %d: id %d is %d", layers, n, i, ids[i]);
            }
        }
        int n = df_drafter_max_taps(&t) + 1, ids[DF_MAX_TAPS + 1];
        if (n > DF_MAX_TAPS) continue;
        df_default_target_layer_ids(layers, n, ids); /* one more would repeat a layer: the bound is tight */
        int repeated = 0;
        for (int i = 1; i < n; i++) repeated |= ids[i] == ids[i - 1];
        if (layers > 4 && !repeated) fail_msg("L = %d: %d taps are still distinct", layers, n);
    }
}

static void check_exported_ids(const char *dir, const int *want, int n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = df_test_read_file(path, NULL);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "dflash_config"),
                                                        "target_layer_ids");
    assert_true(cJSON_IsArray(ids));
    assert_int_equal(cJSON_GetArraySize(ids), n);
    for (int i = 0; i < n; i++) assert_int_equal(cJSON_GetArrayItem(ids, i)->valueint, want[i]);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(root, "num_target_layers")->valueint, 8);
    cJSON_Delete(root);
    free(text);
    DfDrafterConfig back;
    DfDrafterLayout layout;
    float *params;
    DfError err;
    if (df_drafter_load(dir, &back, &layout, &params, &err)) fail_msg("%s", err.msg);
    assert_int_equal(back.n_taps, n);
    assert_memory_equal(back.target_layer_ids, want, (size_t)n * sizeof *want);
    df_drafter_layout_free(&layout);
    free(params);
}

static void test_exported_config_holds_the_ids(void **state) {
    (void)state;
    DfModelConfig t;
    DfError err;
    if (df_model_config_load(&t, df_test_path(TINY), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig c = derived(&t, 1, 3);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &c);
    float *params = malloc((layout.total ? layout.total : 1) * sizeof *params);
    df_drafter_init_params(&layout, params, 5);
    char *dir = df_test_tmpdir("taps"), out[1200];
    snprintf(out, sizeof out, "%s/drafter", dir);
    if (df_drafter_export(out, &c, &layout, params, &err)) fail_msg("%s", err.msg);
    check_exported_ids(out, c.target_layer_ids, c.n_taps);
    check_exported_ids(df_test_path("tests/fixtures/export/drafter"), c.target_layer_ids, c.n_taps);
    df_drafter_layout_free(&layout);
    free(params);
    df_test_rmtree(dir);
    free(dir);
}

/* The forward's taps are hidden_states[id + 1], and the decoder's the same rows. */
static void test_taps_are_layer_outputs(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path(TINY), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig c = derived(&cfg, 3, 0);
    DfTargetReference r;
    df_test_target_reference_load(&r, REFERENCE, &cfg);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, TINY, cfg.num_layers, 1);
    int n = c.n_taps, *ids = c.target_layer_ids;
    size_t width = (size_t)n * r.hidden;
    float *features = malloc((size_t)r.n_tokens * width * sizeof *features);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, ids, n, features, NULL, &err)) fail_msg("%s", err.msg);
    for (int j = 0; j < n; j++) {
        double own = df_test_tap_error(features, n, j, &r, ids[j]);
        double below = df_test_tap_error(features, n, j, &r, ids[j] - 1);
        double above = df_test_tap_error(features, n, j, &r, ids[j] + 1);
        print_message("tap %d (layer %d): rel error %.2g; against layer %d %.2g, layer %d %.2g\n", j, ids[j], own,
                      ids[j] - 1, below, ids[j] + 1, above);
        if (!(own < PARITY_TOL)) fail_msg("tap %d: relative error %g to hidden_states[%d]", j, own, ids[j] + 1);
        if (!(below > APART && above > APART)) fail_msg("tap %d: a neighbouring layer's output is as close", j);
    }
    /* the decoder over the first sequence: the same rows */
    int len = r.starts[1] - r.starts[0];
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &m, 1, len + 8, ids, n, &err)) fail_msg("%s", err.msg);
    int32_t slot = 0, row_starts[2] = {0, len};
    float *decoded = malloc((size_t)len * width * sizeof *decoded);
    DfDecodeStep step = {1, &slot, r.ids, row_starts, DF_LOGITS_NONE, NULL, NULL, decoded, 0};
    if (df_target_decode(&d, &step, &err)) fail_msg("%s", err.msg);
    double e = df_rel_error(decoded, features, (size_t)len * width);
    print_message("decoder against forward: rel error %.2g\n", e);
    if (!(e < PARITY_TOL)) fail_msg("the decoder's taps differ from the forward's: relative error %g", e);
    df_target_decoder_free(&d);
    free(decoded);
    free(features);
    df_target_free(&m);
    df_backend_destroy(be);
    df_test_target_reference_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derived_ids_are_the_spec_and_distinct),
        cmocka_unit_test(test_exported_config_holds_the_ids),
        cmocka_unit_test(test_taps_are_layer_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
