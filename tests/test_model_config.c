/* config.json: the two real configs (coder-tiny: Qwen3, rope_parameters
 * spelling, tied; llama3-random: Llama, rope_theta + rope_scaling llama3,
 * untied, eos list), defaults and alternative spellings, the malformed
 * catalogue under tests/malformed/config (each refused with a message naming
 * the file and the field), and the default feature taps against a
 * floating-point reimplementation of Python's round(). */
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/model_config.h"
#include "test_util.h"

static void test_coder_tiny(void **state) {
    (void)state;
    DfModelConfig c;
    DfError err = {0};
    /* The directory and the file name are both accepted. */
    if (df_model_config_load(&c, df_test_path("assets/coder-tiny"), &err) != 0) fail_msg("%s", err.msg);
    DfModelConfig c2;
    assert_int_equal(df_model_config_load(&c2, df_test_path("assets/coder-tiny/config.json"), &err), 0);
    assert_memory_equal(&c, &c2, sizeof c);
    assert_int_equal(c.arch, DF_ARCH_QWEN3);
    assert_string_equal(c.architecture_name, "Qwen3ForCausalLM");
    assert_int_equal(c.has_qk_norm, 1);
    assert_int_equal(c.hidden_size, 256);
    assert_int_equal(c.intermediate_size, 512);
    assert_int_equal(c.num_layers, 8);
    assert_int_equal(c.num_heads, 4);
    assert_int_equal(c.num_kv_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.vocab_size, 8192);
    assert_int_equal(c.max_position_embeddings, 4096);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_true(c.rope.theta == 1000000.0); /* from rope_parameters */
    assert_int_equal(c.rope.type, DF_ROPE_DEFAULT);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.attention_bias, 0);
    assert_int_equal(c.bos_token_id, 8187);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 8187);
    assert_string_equal(c.torch_dtype, "bfloat16"); /* "dtype" spelling */
}

static void test_llama3_random(void **state) {
    (void)state;
    DfModelConfig c;
    DfError err = {0};
    if (df_model_config_load(&c, df_test_path("tests/fixtures/target/llama3-random"), &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.arch, DF_ARCH_LLAMA);
    assert_int_equal(c.has_qk_norm, 0);
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(c.intermediate_size, 160);
    assert_int_equal(c.num_layers, 3);
    assert_int_equal(c.num_heads, 4);
    assert_int_equal(c.num_kv_heads, 2);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.vocab_size, 320);
    assert_true(c.rms_norm_eps == 1e-5);
    assert_true(c.rope.theta == 500000.0);
    assert_int_equal(c.rope.type, DF_ROPE_LLAMA3);
    assert_true(c.rope.factor == 8.0);
    assert_true(c.rope.low_freq_factor == 1.0);
    assert_true(c.rope.high_freq_factor == 4.0);
    assert_int_equal(c.rope.original_max_position_embeddings, 64);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.n_eos, 2);
    assert_int_equal(c.eos_token_ids[0], 2);
    assert_int_equal(c.eos_token_ids[1], 3);
    assert_string_equal(c.torch_dtype, "float16");
}

#define SIZES                                                                                                       \
    "\"hidden_size\": 96, \"intermediate_size\": 200, \"num_hidden_layers\": 2, \"num_attention_heads\": 6, "     \
    "\"vocab_size\": 50, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-5"

/* model_type fallback, and the defaults of every optional field. */
static void test_defaults(void **state) {
    (void)state;
    DfModelConfig c;
    DfError err = {0};
    if (df_test_load_config_text(&c, "{\"model_type\": \"qwen3\", " SIZES ", \"bos_token_id\": null}", &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.arch, DF_ARCH_QWEN3);
    assert_string_equal(c.architecture_name, "Qwen3ForCausalLM");
    assert_int_equal(c.has_qk_norm, 1);
    assert_int_equal(c.num_kv_heads, 6);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.n_eos, 0);
    assert_true(c.rope.theta == 10000.0);
    assert_int_equal(c.rope.type, DF_ROPE_DEFAULT);
    assert_string_equal(c.torch_dtype, "");

    assert_int_equal(df_test_load_config_text(&c, "{\"model_type\": \"llama\", " SIZES ", \"torch_dtype\": \"float32\"}", &err), 0);
    assert_int_equal(c.arch, DF_ARCH_LLAMA);
    assert_int_equal(c.has_qk_norm, 0);
    assert_string_equal(c.torch_dtype, "float32");
}

/* rope_parameters holding llama3 scaling, with the "type" key; rope_scaling null. */
static void test_rope_spellings(void **state) {
    (void)state;
    DfModelConfig c;
    DfError err = {0};
    const char *json = "{\"architectures\": [\"LlamaForCausalLM\"], " SIZES
                       ", \"rope_scaling\": null, \"rope_parameters\": {\"rope_theta\": 250000.0, \"type\": \"llama3\","
                       " \"factor\": 32, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                       " \"original_max_position_embeddings\": 8192}}";
    if (df_test_load_config_text(&c, json, &err) != 0) fail_msg("%s", err.msg);
    assert_true(c.rope.theta == 250000.0);
    assert_int_equal(c.rope.type, DF_ROPE_LLAMA3);
    assert_true(c.rope.factor == 32.0);
    assert_int_equal(c.rope.original_max_position_embeddings, 8192);

    json = "{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_theta\": 5e5, \"rope_scaling\": null}";
    assert_int_equal(df_test_load_config_text(&c, json, &err), 0);
    assert_true(c.rope.theta == 500000.0);
    assert_int_equal(c.rope.type, DF_ROPE_DEFAULT);

    json = "{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]}";
    assert_int_equal(df_test_load_config_text(&c, json, &err), -1);
    assert_non_null(strstr(err.msg, "config.json: field 'eos_token_id' lists more than 8 ids"));
}

typedef struct MalformedCase {
    const char *file;  /* under tests/malformed/config */
    const char *fault; /* the field and what is wrong with it */
} MalformedCase;

static const MalformedCase CASES[] = {
    {"unknown_arch.json",
     "architecture 'MistralForCausalLM' is not supported (supported: Qwen3ForCausalLM, LlamaForCausalLM, "
     "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration)"},
    {"unknown_model_type.json", "model_type 'gemma' is not supported"},
    {"missing_hidden_size.json", "field 'hidden_size' is missing"},
    {"wrong_type.json", "field 'num_hidden_layers' must be an integer, not a string"},
    {"fractional_int.json", "field 'vocab_size' must be an integer, not 100.5"},
    {"rope_yarn.json", "rope type 'yarn' (rope_scaling.rope_type) is not supported"},
    {"rope_params_dynamic.json", "rope type 'dynamic' (rope_parameters.rope_type) is not supported"},
    {"llama3_missing_factor.json", "field 'rope_scaling.factor' is missing"},
    {"attention_bias.json", "field 'attention_bias' is true"},
    {"heads_not_divisible.json", "num_attention_heads 4 is not divisible by num_key_value_heads 3"},
    {"zero_layers.json", "field 'num_hidden_layers' must be positive"},
    {"eos_wrong_type.json", "field 'eos_token_id' must be an integer or a list of integers"},
    {"tie_wrong_type.json", "field 'tie_word_embeddings' must be true or false, not a string"},
    {"not_json.json", "not valid JSON"},
    {"not_object.json", "not a JSON object"},
    {"no_such_config.json", "cannot open"},
};

static void test_malformed_catalogue(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/malformed/config/%s", CASES[i].file);
        DfModelConfig c;
        DfError err = {0};
        if (df_model_config_load(&c, df_test_path(rel), &err) != -1) fail_msg("%s: accepted", rel);
        if (!strstr(err.msg, rel) || !strstr(err.msg, CASES[i].fault))
            fail_msg("%s: unexpected message: %s", rel, err.msg);
    }
}

/* Python's round(): nearest, ties to even, which is nearbyint in the default mode. */
static int python_round(double x) {
    assert_int_equal(fegetround(), FE_TONEAREST);
    return (int)nearbyint(x);
}

static void test_default_target_layer_ids(void **state) {
    (void)state;
    int ids[64];
    df_default_target_layer_ids(36, 5, ids);
    int want36[] = {1, 9, 17, 25, 33};
    assert_memory_equal(ids, want36, sizeof want36);
    df_default_target_layer_ids(8, 3, ids);
    int want8[] = {1, 3, 5};
    assert_memory_equal(ids, want8, sizeof want8);
    df_default_target_layer_ids(8, 1, ids);
    assert_int_equal(ids[0], 4);
    df_default_target_layer_ids(35, 1, ids);
    assert_int_equal(ids[0], 17);
    /* Ties: 1 + i*3/2 = 2.5 rounds to 2 and 1 + 1*1/2 = 1.5 to 2 (half to even). */
    df_default_target_layer_ids(7, 3, ids);
    assert_int_equal(ids[1], 2);
    df_default_target_layer_ids(5, 3, ids);
    assert_int_equal(ids[1], 2);
    for (int L = 2; L <= 80; L++)
        for (int n = 2; n <= 12; n++) {
            df_default_target_layer_ids(L, n, ids);
            for (int i = 0; i < n; i++) {
                int want = python_round(1.0 + (double)(i * (L - 4)) / (double)(n - 1));
                if (ids[i] != want) fail_msg("L=%d n=%d i=%d: %d, want %d", L, n, i, ids[i], want);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coder_tiny),
        cmocka_unit_test(test_llama3_random),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_rope_spellings),
        cmocka_unit_test(test_malformed_catalogue),
        cmocka_unit_test(test_default_target_layer_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
