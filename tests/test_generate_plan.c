/* The generate job's batch and KV cache pages (infer/generate_plan.h) from
 * given memory figures: the page and slot sizes at the Qwen3-8B and
 * Qwen3.6-27B shapes against hand-counted bytes from their config.json, the
 * search over slots with the workspace's doubling, the pool beside them, the
 * bounds (the memory, the cap, the records, the CPU's cap, --batch) and the
 * error when not even one sequence fits. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#include "infer/generate_plan.h"
#include "target/model_config.h"

#define GIB ((size_t)1 << 30)

static const char *const QWEN3_8B =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": 4096, "
    "\"intermediate_size\": 12288, \"num_hidden_layers\": 36, \"num_attention_heads\": 32, "
    "\"num_key_value_heads\": 8, \"head_dim\": 128, \"vocab_size\": 151936, \"rms_norm_eps\": 1e-6, "
    "\"rope_theta\": 1000000.0, \"max_position_embeddings\": 40960, \"tie_word_embeddings\": false, "
    "\"bos_token_id\": 151643, \"eos_token_id\": 151645}";

static void load(DfModelConfig *c, const char *json) {
    DfError err;
    if (df_test_load_config_text(c, json, &err)) fail_msg("%s", err.msg);
}

/* A plan for Qwen3-8B in bf16, slots of 1024 prompt + 256 new tokens, on a
 * 141 GiB GPU with `available` free. */
static DfGeneratePlanInput qwen3_8b_input(const DfModelConfig *c, size_t available) {
    DfGeneratePlanInput in = {c, "cuda:0", 2, 1280, 256, 4000, 0};
    in.memory = (DfMemoryInfo){.available = available, .total = 141 * GIB, .in_use = 16 * GIB};
    return in;
}

/* The search alone: b * per_slot + per_row * (16 doubled up to b + min(b * prompt_rows, step prompt tokens))
 * <= room. */
static void test_slots_that_fit(void **state) {
    (void)state;
    assert_int_equal(df_generate_slots_that_fit(1000, 100, 0, 10, 2048, 256), 10);
    assert_int_equal(df_generate_slots_that_fit(1000, 100, 0, 10, 2048, 4), 4);
    assert_int_equal(df_generate_slots_that_fit(99, 100, 0, 10, 2048, 256), 0);
    assert_int_equal(df_generate_slots_that_fit(SIZE_MAX, 100, 1, 10, 2048, 256), 256);
    /* per slot 100 bytes, 1 byte a workspace row, prompts of 10: 4 slots = 400 + 64 (44 rows -> 64),
     * 5 slots = 500 + 64 (55), 6 = 600 + 128 (66 -> 128), 7 = 700 + 128 (77) */
    assert_int_equal(df_generate_slots_that_fit(564, 100, 1, 10, 2048, 256), 5);
    assert_int_equal(df_generate_slots_that_fit(563, 100, 1, 10, 2048, 256), 4);
    assert_int_equal(df_generate_slots_that_fit(827, 100, 1, 10, 2048, 256), 6);
    assert_int_equal(df_generate_slots_that_fit(828, 100, 1, 10, 2048, 256), 7);
    /* a workspace row too many for one slot's 16 rows (11) */
    assert_int_equal(df_generate_slots_that_fit(100 + 15, 100, 1, 10, 2048, 256), 0);
    /* prompts of 1000, 64 prompt tokens a step: 4 slots = 400 + 128 (68 rows -> 128), where whole prompts
     * a step would take 4004 rows -> 4096 */
    assert_int_equal(df_generate_slots_that_fit(528, 100, 1, 1000, 64, 256), 4);
    assert_int_equal(df_generate_slots_that_fit(527, 100, 1, 1000, 64, 256), 3);
    assert_int_equal(df_generate_slots_that_fit(528, 100, 1, 1000, 1 << 20, 256), 0);
}

/* Qwen3-8B: a page is 2 (K, V) x 36 layers x 64 rows x 8 kv heads x 128 x 2 bytes; a slot of the records'
 * mean length (here every record's 1280 tokens: 20 pages, the longest) holds 20 pages, its logits row
 * 151936 x 2 bytes and its choice 4. */
static void test_qwen3_8b_slots(void **state) {
    (void)state;
    DfModelConfig c;
    load(&c, QWEN3_8B);
    DfGeneratePlan p;
    DfError err;
    DfGeneratePlanInput in = qwen3_8b_input(&c, 100 * GIB);
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.page_bytes, (size_t)2 * 36 * 64 * 1024 * 2);
    assert_int_equal(p.slot_state, 0);
    assert_int_equal(p.longest_pages, 20);
    assert_int_equal(p.seq_pages, 20);
    assert_int_equal(p.per_slot, 20 * p.page_bytes + 151936 * 2 + 4);
    assert_int_equal(p.prompt_rows, 1024);
    assert_int_equal(p.reserve, 141 * GIB / 100 * 3);
    /* the cap's 512 slots: 10,240 pages of 9 MiB (90 GiB) and a step of 2560 rows (4096 allocated) in the
     * 95.8 GiB beside the reserve */
    assert_int_equal(DF_GENERATE_GPU_MAX_BATCH, 512);
    assert_int_equal(p.batch, 512);
    assert_string_equal(p.why, "the cap");
    assert_int_equal(p.n_pages, 512 * 20); /* the pool never needs more than every slot's longest */
    assert_true(p.total <= p.available - p.reserve);
    /* 30 GiB free: b slots and a step of b + 2048 rows (4096 allocated up to b = 2048) fit, b + 1 do not */
    in = qwen3_8b_input(&c, 30 * GIB);
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_string_equal(p.why, "memory");
    assert_true(p.batch > 64);
    size_t beside = (size_t)p.batch * (151936 * 2 + 4) + (size_t)4096 * p.per_prefill_row;
    assert_int_equal(p.total, p.fixed + beside + (size_t)p.n_pages * p.page_bytes);
    assert_true(p.total <= 30 * GIB - p.reserve);
    assert_true(p.n_pages >= p.batch * 20 && p.n_pages < (p.batch + 1) * 20);
    size_t more = p.fixed + (size_t)(p.batch + 1) * p.per_slot + (size_t)4096 * p.per_prefill_row;
    assert_true(more > 30 * GIB - p.reserve);
    /* records of a mean length below the longest: a sequence of the mean holds fewer pages, so at 60 GiB
     * free the cap's 512 slots (8 pages each: 36 GiB) fit where 20 pages a slot (90 GiB) did not, and the
     * pool takes the rest of the memory */
    assert_true(p.batch < 512);
    in = qwen3_8b_input(&c, 60 * GIB);
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_string_equal(p.why, "memory");
    in.mean_rows = 400; /* 7 pages, one more for the last one's rounding */
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.seq_pages, 8);
    assert_int_equal(p.batch, 512);
    assert_string_equal(p.why, "the cap");
    assert_true(p.n_pages >= 512 * 8 && p.n_pages < 512 * 20);
    assert_true(p.total <= 60 * GIB - p.reserve);
    assert_true(p.total + p.page_bytes > 60 * GIB - p.reserve);
    /* fewer records than would fit: one slot each */
    in = qwen3_8b_input(&c, 100 * GIB);
    in.records = 10;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.batch, 10);
    assert_string_equal(p.why, "the records");
    assert_int_equal(p.n_pages, 10 * 20);
    /* --batch wins, even past the cap */
    in.batch = 600;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.batch, 600);
    assert_string_equal(p.why, "--batch");
    /* a backend that cannot tell its free memory: the cap, every slot's longest */
    in = qwen3_8b_input(&c, SIZE_MAX);
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.batch, DF_GENERATE_GPU_MAX_BATCH);
    assert_int_equal(p.n_pages, DF_GENERATE_GPU_MAX_BATCH * 20);
}

/* On the CPU (host memory, fp32): at most DF_GENERATE_CPU_MAX_BATCH, 10% of the host kept free. */
static void test_cpu_cap(void **state) {
    (void)state;
    DfModelConfig c;
    load(&c, QWEN3_8B);
    DfGeneratePlanInput in = {&c, "cpu", 4, 300, 256, 1000, 0};
    in.memory = (DfMemoryInfo){.available = 200 * GIB, .total = 256 * GIB, .host = 1};
    DfGeneratePlan p;
    DfError err;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.batch, DF_GENERATE_CPU_MAX_BATCH);
    assert_int_equal(p.reserve, 256 * GIB / 10);
    assert_int_equal(p.page_bytes, (size_t)2 * 36 * 64 * 1024 * 4);
    assert_int_equal(p.n_pages, DF_GENERATE_CPU_MAX_BATCH * 5); /* 300 tokens: 5 pages */
}

/* Not even one slot: an error with the sizes and what to lower. */
static void test_none_fits(void **state) {
    (void)state;
    DfModelConfig c;
    load(&c, QWEN3_8B);
    DfGeneratePlanInput in = qwen3_8b_input(&c, 4 * GIB); /* less than the 4.23 GiB kept free */
    DfGeneratePlan p;
    DfError err;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), -1);
    assert_non_null(strstr(err.msg, "not even one sequence fits"));
    assert_non_null(strstr(err.msg, "1280 tokens"));
    assert_non_null(strstr(err.msg, "--max-new-tokens 256"));
    assert_non_null(strstr(err.msg, "GiB free"));
    /* a sequence too long for the room beside the reserve: 100,000 tokens of KV cache (13.7 GiB) in 10 GiB */
    in = qwen3_8b_input(&c, 14 * GIB);
    in.slot_rows = 100000;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), -1);
    assert_non_null(strstr(err.msg, "100000 tokens"));
    /* --batch is taken as given (the allocation reports what does not fit), with one longest sequence's pages */
    in.batch = 2;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    assert_int_equal(p.batch, 2);
    assert_int_equal(p.n_pages, 1563); /* 100,000 tokens */
}

/* Qwen3.6-27B's hybrid layout: 16 full-attention layers with a KV cache (4 kv heads of 256) and 48
 * Gated DeltaNet layers each keeping a convolution window of 3 x (2 x 16 x 128 + 48 x 128) values and
 * a delta-rule state of 48 x 128 x 128, F32. */
static void test_hybrid_slots(void **state) {
    (void)state;
    char json[2048], layers[1200] = "";
    for (int i = 0; i < 64; i++)
        strcat(layers, (i + 1) % 4 == 0 ? "\"full_attention\"," : "\"linear_attention\",");
    layers[strlen(layers) - 1] = '\0';
    snprintf(json, sizeof json,
             "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\", \"hidden_size\": 5120, "
             "\"intermediate_size\": 17408, \"num_hidden_layers\": 64, \"layer_types\": [%s], "
             "\"num_attention_heads\": 24, \"num_key_value_heads\": 4, \"head_dim\": 256, "
             "\"linear_num_key_heads\": 16, \"linear_num_value_heads\": 48, \"linear_key_head_dim\": 128, "
             "\"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, \"vocab_size\": 248320, "
             "\"rms_norm_eps\": 1e-6, \"partial_rotary_factor\": 0.25, \"rope_theta\": 10000000.0, "
             "\"max_position_embeddings\": 262144, \"tie_word_embeddings\": false}",
             layers);
    DfModelConfig c;
    load(&c, json);
    DfGeneratePlanInput in = {&c, "cuda:0", 2, 1280, 256, 4000, 0};
    in.memory = (DfMemoryInfo){.available = 80 * GIB, .total = 141 * GIB};
    DfGeneratePlan p;
    DfError err;
    assert_int_equal(df_generate_plan_make(&in, &p, &err), 0);
    size_t window = 3 * (2 * 16 * 128 + 48 * 128), rec = 48 * 128 * 128;
    assert_int_equal(p.slot_state, (size_t)48 * (window + rec) * 4);
    assert_int_equal(p.page_bytes, (size_t)2 * 16 * 64 * 1024 * 2);
    assert_int_equal(p.per_slot, p.slot_state + 20 * p.page_bytes + 248320 * 2 + 4);
    assert_int_equal(p.kv_layers, 16);
    assert_int_equal(p.linear_layers, 48);
    assert_true(p.batch >= 1 && p.total <= 80 * GIB - p.reserve);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_that_fit),
        cmocka_unit_test(test_qwen3_8b_slots),
        cmocka_unit_test(test_cpu_cap),
        cmocka_unit_test(test_none_fits),
        cmocka_unit_test(test_hybrid_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
