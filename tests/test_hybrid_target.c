/* The hybrid Qwen3.5 / Qwen3.6 target (Gated DeltaNet + gated attention) on
 * the CPU backend: its config.json fields (both layouts: Qwen3_5ForCausalLM
 * and the released checkpoints' Qwen3_5ForConditionalGeneration with
 * text_config), refusals of what the dense family does not define, and the
 * forward against the fixture of tests/fixtures/hybrid (each layer's output
 * and the logits, fp32 relative error < 1e-3), only the needed layers for
 * taps, and a packed batch equal to its sequences run one at a time (within
 * 1e-5, or 3x what another summation order alone does: the packed batch on
 * one thread instead of the test's).
 * Fixtures: tests/ref/hybrid_ref.py (transformers 5.17 on the GPU machine). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "target/model_config.h"
#include "formats/safetensors.h"
#include "target/target_decode.h"
#include "target/target.h"

#define PARITY_TOL 1e-3
#define MODEL_DIR "tests/fixtures/hybrid/qwen35-random"
#define VL_MODEL_DIR "tests/fixtures/hybrid/qwen35-vl-random"
#define FIXTURE "tests/fixtures/hybrid/qwen35-random.safetensors"

typedef DfTargetReference Reference;

static void load_config(DfModelConfig *c, const char *dir) {
    DfError err;
    if (df_model_config_load(c, df_test_path(dir), &err)) fail_msg("%s", err.msg);
}

static void free_model(DfTargetModel *m, DfBackend *be) {
    df_target_free(m);
    df_backend_destroy(be);
}

/* ---- config ---------------------------------------------------------------- */

static void check_common_fields(const DfModelConfig *c) {
    assert_int_equal(c->arch, DF_ARCH_QWEN3_5);
    assert_true(c->is_hybrid);
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->intermediate_size, 64);
    assert_int_equal(c->num_layers, 4);
    assert_int_equal(c->num_heads, 4);
    assert_int_equal(c->num_kv_heads, 2);
    assert_int_equal(c->head_dim, 16);
    assert_int_equal(c->vocab_size, 256);
    assert_int_equal(c->rotary_dim, 4); /* 16 * partial_rotary_factor 0.25 */
    assert_true(c->rope.theta == 1000000.0);
    const unsigned char linear[4] = {1, 1, 0, 1};
    assert_memory_equal(c->layer_is_linear, linear, sizeof linear);
    assert_int_equal(c->linear.num_key_heads, 2);
    assert_int_equal(c->linear.num_value_heads, 4);
    assert_int_equal(c->linear.key_head_dim, 16);
    assert_int_equal(c->linear.value_head_dim, 24);
    assert_int_equal(c->linear.conv_kernel, 4);
    assert_true(c->attn_output_gate);
    assert_true(c->norm_unit_offset);
    assert_true(c->has_qk_norm);
    assert_int_equal(c->tie_word_embeddings, 0);
    assert_int_equal(c->bos_token_id, 1);
    assert_string_equal(c->torch_dtype, "float32");
}

static void test_config_causal_lm(void **state) {
    (void)state;
    DfModelConfig c;
    load_config(&c, MODEL_DIR);
    check_common_fields(&c);
    assert_string_equal(c.architecture_name, "Qwen3_5ForCausalLM");
    assert_string_equal(c.weight_prefix, "model.");
    assert_int_equal(c.n_eos, 2);
    assert_int_equal(c.eos_token_ids[1], 3);
}

/* text_config, full_attention_interval instead of layer_types, mrope keys. */
static void test_config_conditional_generation(void **state) {
    (void)state;
    DfModelConfig c;
    load_config(&c, VL_MODEL_DIR);
    check_common_fields(&c);
    assert_string_equal(c.architecture_name, "Qwen3_5ForConditionalGeneration");
    assert_string_equal(c.weight_prefix, "model.language_model.");
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 3);
}

#define TEXT_SIZES                                                                                                  \
    "\"hidden_size\": 64, \"intermediate_size\": 64, \"num_hidden_layers\": 8, \"num_attention_heads\": 4, "       \
    "\"num_key_value_heads\": 2, \"vocab_size\": 100, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6"

/* transformers' defaults: head_dim 256, every 4th layer full, linear sizes, partial rotary 0.25. */
static void test_config_defaults(void **state) {
    (void)state;
    DfModelConfig c;
    DfError err = {0};
    if (df_test_load_config_text(&c, "{\"model_type\": \"qwen3_5_text\", " TEXT_SIZES "}", &err)) fail_msg("%s", err.msg);
    assert_string_equal(c.architecture_name, "Qwen3_5ForCausalLM");
    assert_int_equal(c.head_dim, 256);
    assert_int_equal(c.rotary_dim, 64);
    const unsigned char linear[8] = {1, 1, 1, 0, 1, 1, 1, 0};
    assert_memory_equal(c.layer_is_linear, linear, sizeof linear);
    assert_int_equal(c.linear.num_key_heads, 16);
    assert_int_equal(c.linear.num_value_heads, 32);
    assert_int_equal(c.linear.key_head_dim, 128);
    assert_int_equal(c.linear.value_head_dim, 128);
    assert_int_equal(c.linear.conv_kernel, 4);
    /* older spelling: partial_rotary_factor at the top level */
    if (df_test_load_config_text(&c, "{\"model_type\": \"qwen3_5_text\", \"head_dim\": 32, \"partial_rotary_factor\": 0.5, " TEXT_SIZES "}",
                  &err))
        fail_msg("%s", err.msg);
    assert_int_equal(c.rotary_dim, 16);
    /* the other families keep a full rotation and no hybrid fields */
    if (df_test_load_config_text(&c, "{\"model_type\": \"qwen3\", " TEXT_SIZES "}", &err)) fail_msg("%s", err.msg);
    assert_false(c.is_hybrid);
    assert_int_equal(c.rotary_dim, c.head_dim);
    assert_string_equal(c.weight_prefix, "model.");
}

static void test_config_refusals(void **state) {
    (void)state;
    static const struct {
        const char *json, *fault;
    } cases[] = {
        {"{\"model_type\": \"qwen3_5_text\", \"layer_types\": [\"linear_attention\", \"sliding_attention\"], "
         "\"hidden_size\": 64, \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
         "\"vocab_size\": 100, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6}",
         "field 'layer_types[1]' is 'sliding_attention'"},
        {"{\"model_type\": \"qwen3_5_text\", \"layer_types\": [\"linear_attention\"], " TEXT_SIZES "}",
         "field 'layer_types' lists 1 layers, num_hidden_layers is 8"},
        {"{\"model_type\": \"qwen3_5_text\", \"attn_output_gate\": false, " TEXT_SIZES "}",
         "field 'attn_output_gate' is false"},
        {"{\"model_type\": \"qwen3_5_text\", \"hidden_act\": \"gelu\", " TEXT_SIZES "}",
         "field 'hidden_act' is 'gelu'"},
        {"{\"model_type\": \"qwen3_5_text\", \"linear_num_key_heads\": 3, " TEXT_SIZES "}",
         "linear_num_value_heads 32 is not a multiple of linear_num_key_heads 3"},
        {"{\"model_type\": \"qwen3_5_text\", \"head_dim\": 12, \"rope_parameters\": {\"partial_rotary_factor\": 0.25}, "
         TEXT_SIZES "}",
         "gives 3 rotary dims"},
        {"{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], " TEXT_SIZES "}",
         "Qwen3_5ForConditionalGeneration needs the object 'text_config'"},
        {"{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"text_config\": {\"hidden_size\": 64}}",
         "(text_config): field 'intermediate_size'"},
        {"{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], " TEXT_SIZES "}",
         "architecture 'Qwen3_5MoeForCausalLM' is not supported"},
        {"{\"model_type\": \"qwen3_5_moe\", " TEXT_SIZES "}", "model_type 'qwen3_5_moe' is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DfModelConfig c;
        DfError err = {0};
        if (df_test_load_config_text(&c, cases[i].json, &err) != -1) fail_msg("case %zu accepted", i);
        if (!strstr(err.msg, "config.json") || !strstr(err.msg, cases[i].fault))
            fail_msg("case %zu: unexpected message: %s", i, err.msg);
    }
}

/* ---- forward ----------------------------------------------------------------- */

/* All layers tapped plus logits over the packed fixture batch. */
static void check_full_parity(const char *model_dir) {
    DfModelConfig cfg;
    DfError err;
    load_config(&cfg, model_dir);
    Reference r;
    df_test_target_reference_load(&r, FIXTURE, &cfg);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, model_dir, cfg.num_layers, 1);
    int taps[4] = {0, 1, 2, 3};
    assert_int_equal(r.n_layers, 4);
    float *features = malloc((size_t)r.n_tokens * 4 * r.hidden * sizeof *features);
    float *logits = malloc((size_t)r.n_tokens * r.vocab * sizeof *logits);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 4, features, logits, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m.layers_run, 4);
    for (int l = 0; l < 4; l++) {
        double e = df_test_tap_error(features, 4, l, &r, l);
        print_message("%s layer %d (%s): rel error %.3g\n", model_dir, l, cfg.layer_is_linear[l] ? "linear" : "full", e);
        if (!(e < PARITY_TOL)) fail_msg("%s layer %d: relative error %g", model_dir, l, e);
    }
    double e = df_rel_error(logits, r.logits, (size_t)r.n_tokens * r.vocab);
    print_message("%s logits: rel error %.3g\n", model_dir, e);
    if (!(e < PARITY_TOL)) fail_msg("%s logits: relative error %g", model_dir, e);
    free(features), free(logits);
    free_model(&m, be);
    df_test_target_reference_free(&r);
}

static void test_causal_lm_all_layers_and_logits(void **state) {
    (void)state;
    check_full_parity(MODEL_DIR);
}

/* Same weights in the released layout (model.language_model.*, vision and MTP tensors ignored). */
static void test_conditional_generation_all_layers_and_logits(void **state) {
    (void)state;
    check_full_parity(VL_MODEL_DIR);
}

/* Taps [0, 2] without logits: layers 0..2 loaded and run, the head not loaded. */
static void test_taps_run_only_needed_layers(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    load_config(&cfg, MODEL_DIR);
    const int taps[2] = {0, 2};
    int need = df_target_layers_needed(&cfg, taps, 2, 0);
    assert_int_equal(need, 3);
    Reference r;
    df_test_target_reference_load(&r, FIXTURE, &cfg);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, MODEL_DIR, need, 0);
    assert_false(m.has_head);
    float *features = malloc((size_t)r.n_tokens * 2 * r.hidden * sizeof *features);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 2, features, NULL, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m.layers_run, 3);
    for (int j = 0; j < 2; j++) {
        double e = df_test_tap_error(features, 2, j, &r, taps[j]);
        if (!(e < PARITY_TOL)) fail_msg("tap %d (layer %d): relative error %g", j, taps[j], e);
    }
    free(features);
    free_model(&m, be);
    df_test_target_reference_free(&r);
}

/* The packed batch (recurrent state and convolution window restarting at
 * each boundary) equals each sequence run alone, also in another order. */
static void test_packed_equals_one_at_a_time(void **state) {
    (void)state;
    DfModelConfig cfg;
    DfError err;
    load_config(&cfg, MODEL_DIR);
    Reference r;
    df_test_target_reference_load(&r, FIXTURE, &cfg);
    assert_true(r.n_seqs >= 3);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, MODEL_DIR, cfg.num_layers, 1);
    const int taps[2] = {1, 3};
    size_t row = 2 * (size_t)r.hidden, vocab = (size_t)r.vocab;
    float *packed = malloc((size_t)r.n_tokens * row * sizeof *packed);
    float *packed_logits = malloc((size_t)r.n_tokens * vocab * sizeof *packed_logits);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 2, packed, packed_logits, &err)) fail_msg("%s", err.msg);
    /* The yardstick: the same packed batch on one thread. The CPU ops split
     * their sums by the thread count, and a sequence alone has other matrix
     * shapes, so BLAS kernels add in another order; the gated norm of each
     * DeltaNet head rescales its output to unit size, which magnifies those
     * last bits where S^T q nearly cancels (AVX2 kernels, e.g. on AMD EPYC,
     * reach 1.2e-5 on the logits). */
    float *one_thread = malloc((size_t)r.n_tokens * row * sizeof *one_thread);
    float *one_thread_logits = malloc((size_t)r.n_tokens * vocab * sizeof *one_thread_logits);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    int rc = df_target_forward(&m, r.ids, r.starts, r.n_seqs, taps, 2, one_thread, one_thread_logits, &err);
    omp_set_num_threads(threads);
    if (rc) fail_msg("%s", err.msg);
    double order = df_rel_error(one_thread, packed, (size_t)r.n_tokens * row);
    double order_logits = df_rel_error(one_thread_logits, packed_logits, (size_t)r.n_tokens * vocab);
    double bound = 3 * order > 1e-5 ? 3 * order : 1e-5, bound_logits = 3 * order_logits > 1e-5 ? 3 * order_logits : 1e-5;
    print_message("summation order alone (one thread against %d): taps %.3g, logits %.3g\n", threads, order,
                  order_logits);
    free(one_thread), free(one_thread_logits);
    for (int s = r.n_seqs - 1; s >= 0; s--) {
        int len = r.starts[s + 1] - r.starts[s];
        int32_t one[2] = {0, len};
        float *alone = malloc((size_t)len * row * sizeof *alone);
        float *alone_logits = malloc((size_t)len * vocab * sizeof *alone_logits);
        if (df_target_forward(&m, r.ids + r.starts[s], one, 1, taps, 2, alone, alone_logits, &err))
            fail_msg("%s", err.msg);
        double e = df_rel_error(alone, packed + (size_t)r.starts[s] * row, (size_t)len * row);
        double el = df_rel_error(alone_logits, packed_logits + (size_t)r.starts[s] * vocab, (size_t)len * vocab);
        if (!(e <= bound) || !(el <= bound_logits))
            fail_msg("sequence %d alone differs from packed: %g, logits %g (bounds %g, %g)", s, e, el, bound, bound_logits);
        free(alone), free(alone_logits);
    }
    free(packed), free(packed_logits);
    free_model(&m, be);
    df_test_target_reference_free(&r);
}

/* Flops by the documented formula, worked out by hand for the fixture's
 * shapes (H 64, MLP 64, gated q 2*64, kv 32, DeltaNet qkv 160, value 96, 4
 * value heads of 16 x 24), one sequence of 10 tokens. */
static void test_forward_flops(void **state) {
    (void)state;
    DfModelConfig cfg;
    load_config(&cfg, MODEL_DIR);
    int len = 10;
    double linear = 2.0 * (64 * 160 + 2 * 64 * 96 + 2 * 64 * 4 + 3 * 64 * 64) * 10 + 6.0 * 4 * 16 * 24 * 10;
    double full = 2.0 * (3 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 64) * 10 + 2.0 * 10 * 64 * 10;
    assert_true(df_target_forward_flops(&cfg, &len, 1, 1, 0) == linear);
    assert_true(df_target_forward_flops(&cfg, &len, 1, 3, 0) == 2 * linear + full);
    assert_true(df_target_forward_flops(&cfg, &len, 1, 4, 1) == 3 * linear + full + 2.0 * 10 * 64 * 256);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_causal_lm),
        cmocka_unit_test(test_config_conditional_generation),
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_causal_lm_all_layers_and_logits),
        cmocka_unit_test(test_conditional_generation_all_layers_and_logits),
        cmocka_unit_test(test_taps_run_only_needed_layers),
        cmocka_unit_test(test_packed_equals_one_at_a_time),
        cmocka_unit_test(test_forward_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
