/* The training memory plan (train/memory_plan.h) on made-up devices:
 * - the micro-batch it sizes is the largest whose work fits beside the rest
 *   (one more block would not), and its parts add up to its total;
 * - the drafter's state is its parameter count times the bytes of weights,
 *   gradients, master weights and moments (spec section 4 step 7);
 * - a given --max-drafter-tokens is kept when it fits and refused, naming
 *   the largest that fits, when it does not;
 * - a run that cannot fit one block fails with the sizes and what to lower;
 * - the held-out eval's decoding (train --eval-data) adds its bytes to the
 *   total, and they bound what its target decoder and drafter runner
 *   allocate on the CPU backend (measured over a real speculative decode of
 *   the bundled target), within 30%;
 * - the seed's configuration (a Qwen3.6-27B-shaped target, 5-layer drafter
 *   of the published shape, 16384-token steps) fits an H200 in
 *   micro-batches, and Qwen3-8B at the defaults an 80 GB card. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/drafter_infer.h"
#include "infer/speculative.h"
#include "target/target_decode.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"
#include "target/target_memory.h"
#include "train/memory_plan.h"

static const size_t GIB = (size_t)1 << 30;

static const char *QWEN3_8B =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": 4096, "
    "\"intermediate_size\": 12288, \"num_hidden_layers\": 36, \"num_attention_heads\": 32, "
    "\"num_key_value_heads\": 8, \"head_dim\": 128, \"vocab_size\": 151936, \"rms_norm_eps\": 1e-6, "
    "\"rope_theta\": 1000000.0, \"max_position_embeddings\": 40960, \"tie_word_embeddings\": false}";

/* Qwen3.6-27B's text model: every fourth layer full attention. */
static void qwen36_27b(char *json, size_t cap) {
    char layers[2048] = "";
    for (int i = 0; i < 64; i++)
        snprintf(layers + strlen(layers), sizeof layers - strlen(layers), "%s\"%s\"", i ? ", " : "",
                 (i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    snprintf(json, cap,
             "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\", \"hidden_size\": 5120, "
             "\"intermediate_size\": 17408, \"num_hidden_layers\": 64, \"layer_types\": [%s], "
             "\"num_attention_heads\": 24, \"num_key_value_heads\": 4, \"head_dim\": 256, "
             "\"linear_num_key_heads\": 16, \"linear_num_value_heads\": 48, \"linear_key_head_dim\": 128, "
             "\"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, \"vocab_size\": 248320, "
             "\"rms_norm_eps\": 1e-6, \"partial_rotary_factor\": 0.25, \"rope_parameters\": {\"rope_type\": "
             "\"default\", \"rope_theta\": 10000000.0, \"partial_rotary_factor\": 0.25}, "
             "\"max_position_embeddings\": 262144, \"tie_word_embeddings\": false}",
             layers);
}

typedef struct Case {
    DfModelConfig target;
    DfDrafterConfig drafter;
    DfMemoryPlanInput in;
} Case;

/* A GPU (bf16) of `gib` GiB with 1 GiB already taken by the backend, a
 * 5-layer drafter, steps of `tokens` tokens of ~500-token records with 512
 * anchors each at most (about 400 a record: their responses). */
static void make_case(Case *c, const char *json, double gib, int64_t tokens) {
    DfError err;
    memset(c, 0, sizeof *c);
    if (df_test_load_config_text(&c->target, json, &err)) fail_msg("%s", err.msg);
    DfDrafterOptions o = {.num_layers = 5, .block_size = 16, .mask_token_id = 1};
    if (df_drafter_config_from_target(&c->drafter, &c->target, &o, &err)) fail_msg("%s", err.msg);
    int deepest = c->drafter.target_layer_ids[c->drafter.n_taps - 1];
    size_t total = (size_t)(gib * (double)GIB);
    c->in = (DfMemoryPlanInput){.target = &c->target, .drafter = &c->drafter, .device = "cuda:0", .act_elem = 2,
                                .target_layers = deepest + 1, .with_head = 1, .runs_drafter = 1,
                                .step_tokens = tokens, .step_seqs = tokens / 500, .max_seq_len = 3072,
                                .step_block_rows = tokens / 500 * 400 * 16,
                                .memory = {.total = total, .in_use = GIB, .available = total - GIB,
                                           .op_scratch = GIB}};
}

static size_t parts_sum(const DfMemoryPlan *p) {
    return p->backend + p->target_weights + p->target_workspace + p->drafter_state + p->step_inputs + p->op_scratch +
           p->drafter_work;
}

static void check_sized(const Case *c, const DfMemoryPlan *p) {
    assert_true(p->sized);
    assert_int_equal(p->block_rows % c->drafter.block_size, 0);
    assert_true(p->block_rows >= c->drafter.block_size);
    assert_true(p->total == parts_sum(p));
    assert_true(p->total <= p->capacity);
    if (p->block_rows < c->in.step_block_rows) { /* one more block would not fit */
        size_t more = df_memory_plan_drafter_work(&c->drafter, c->in.step_tokens, p->block_rows + 16, 2);
        assert_true(p->total - p->drafter_work + more > p->capacity);
        assert_int_equal(p->micro_batches, (c->in.step_block_rows + p->block_rows - 1) / p->block_rows);
    } else {
        assert_int_equal(p->micro_batches, 1);
    }
}

static void test_drafter_state_bytes(void **state) {
    (void)state;
    Case c;
    make_case(&c, QWEN3_8B, 141.0, 8192);
    DfMemoryPlan p;
    DfError err;
    assert_int_equal(df_memory_plan_make(&c.in, &p, &err), 0);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &c.drafter);
    /* bf16 weights, fp32 gradients, master weights and two moments */
    assert_true(p.drafter_state == layout.total * (2 + 4 * 4));
    df_drafter_layout_free(&layout);
    assert_true(p.target_weights == df_target_weight_bytes(&c.target, c.in.target_layers, 1, 2));
    assert_true(p.step_inputs == (size_t)8192 * 4 + (size_t)8192 * c.drafter.n_taps * 4096 * 2);
}

static void test_seed_configuration_fits_an_h200(void **state) {
    (void)state;
    char json[8192];
    qwen36_27b(json, sizeof json);
    Case c;
    make_case(&c, json, 139.8, 16384);
    assert_int_equal(c.drafter.num_heads, 32); /* the published drafter shape of this family */
    assert_int_equal(c.drafter.head_dim, 128);
    DfMemoryPlan p;
    DfError err;
    if (df_memory_plan_make(&c.in, &p, &err)) fail_msg("%s", err.msg);
    df_memory_plan_print(&p, "cuda:0 (an H200, made up)", stderr);
    check_sized(&c, &p);
    assert_true(p.micro_batches > 1); /* the step's ~210K block rows do not fit at once */
    assert_true(p.target_weights > 45 * GIB && p.target_weights < 55 * GIB);
}

static void test_qwen3_8b_defaults_fit_80gb(void **state) {
    (void)state;
    Case c;
    make_case(&c, QWEN3_8B, 79.6, 8192);
    DfMemoryPlan p;
    DfError err;
    if (df_memory_plan_make(&c.in, &p, &err)) fail_msg("%s", err.msg);
    df_memory_plan_print(&p, "cuda:0 (an 80 GB card, made up)", stderr);
    check_sized(&c, &p);
}

static void test_given_bound(void **state) {
    (void)state;
    Case c;
    make_case(&c, QWEN3_8B, 79.6, 8192);
    DfMemoryPlan auto_plan, p;
    DfError err;
    assert_int_equal(df_memory_plan_make(&c.in, &auto_plan, &err), 0);
    c.in.max_drafter_tokens = 4100; /* rounded down to whole blocks */
    assert_int_equal(df_memory_plan_make(&c.in, &p, &err), 0);
    assert_false(p.sized);
    assert_int_equal(p.block_rows, 4096);
    c.in.max_drafter_tokens = auto_plan.block_rows + 16;
    if (auto_plan.block_rows < c.in.step_block_rows) {
        assert_int_equal(df_memory_plan_make(&c.in, &p, &err), -1);
        assert_non_null(strstr(err.msg, "--max-drafter-tokens"));
        char largest[64];
        snprintf(largest, sizeof largest, "at most %lld fit", (long long)auto_plan.block_rows);
        assert_non_null(strstr(err.msg, largest));
    }
}

static void test_cannot_fit(void **state) {
    (void)state;
    char json[8192];
    qwen36_27b(json, sizeof json);
    Case c;
    make_case(&c, json, 79.6, 16384); /* 27B weights and a 1.7 B drafter's state: more than 80 GB */
    DfMemoryPlan p;
    DfError err;
    assert_int_equal(df_memory_plan_make(&c.in, &p, &err), -1);
    assert_non_null(strstr(err.msg, "cannot fit"));
    assert_non_null(strstr(err.msg, "target's weights"));
    assert_non_null(strstr(err.msg, "--token-budget"));
    assert_non_null(strstr(err.msg, "split layout"));
}

static size_t cpu_in_use(DfBackend *be) {
    DfMemoryInfo m;
    df_backend_memory_info(be, &m);
    return m.in_use;
}

static void test_eval_bytes_bound_the_decoding(void **state) {
    (void)state;
    DfTargetModel m;
    DfBackend *be;
    DfModelConfig cfg;
    DfError err = {{0}};
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    df_test_load_cpu_target(&m, &be, "assets/coder-tiny", cfg.num_layers, 1);
    DfDrafterConfig d;
    DfDrafterOptions o = {.num_layers = 2, .intermediate_size = 256, .block_size = 8, .n_taps = 2, .mask_token_id = 1};
    if (df_drafter_config_from_target(&d, &m.cfg, &o, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &d);
    float *host = df_test_random_array(layout.total, 5, 0.05f);
    DfBuffer params = df_test_upload(be, host, layout.total, DF_BUF_ACT);
    free(host);
    enum { PROMPT = 150, NEW = 40 };
    int rows = PROMPT + NEW + d.block_size;
    size_t before = cpu_in_use(be);
    DfTargetDecoder dec;
    DfDrafterRunner r;
    if (df_target_decoder_init(&dec, &m, 1, rows, d.target_layer_ids, d.n_taps, &err) ||
        df_drafter_runner_init_on(&r, be, &d, params, m.embed, m.lm_head_tied ? m.embed : m.lm_head, 1, rows, &err))
        fail_msg("%s", err.msg);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = 100 + (i * 37) % 5000;
    DfSpecOptions spec = {.max_new_tokens = NEW, .block_size = d.block_size};
    DfSpecResult res = {0};
    if (df_speculative_generate(&dec, &r, 0, prompt, PROMPT, &spec, &res, &err)) fail_msg("%s", err.msg);
    size_t used = cpu_in_use(be) - before, planned = df_memory_plan_eval_bytes(&m.cfg, &d, rows, PROMPT, 4);
    fprintf(stderr, "eval decoding: %zu bytes allocated, %zu planned\n", used, planned);
    assert_true(planned >= used);
    assert_true((double)planned <= 1.3 * (double)used);
    df_spec_result_free(&res);
    df_drafter_runner_free(&r);
    df_target_decoder_free(&dec);
    df_buffer_free(be, &params);
    df_drafter_layout_free(&layout);
    df_target_free(&m);
    df_backend_destroy(be);
}

static void test_eval_adds_to_the_plan(void **state) {
    (void)state;
    Case c;
    make_case(&c, QWEN3_8B, 141.0, 8192);
    DfMemoryPlan without, with;
    DfError err;
    c.in.target_layers = c.target.num_layers;
    assert_int_equal(df_memory_plan_make(&c.in, &without, &err), 0);
    c.in.eval_slot_rows = 2048 + 128 + 16;
    c.in.eval_prompt_rows = 2048;
    assert_int_equal(df_memory_plan_make(&c.in, &with, &err), 0);
    size_t eval = df_memory_plan_eval_bytes(&c.target, &c.drafter, c.in.eval_slot_rows, 2048, 2);
    assert_true(eval > 0 && with.eval == eval && without.eval == 0);
    assert_true(with.total - with.drafter_work == without.total - without.drafter_work + eval);
    /* 36 layers of 8 KV heads of 128, bf16, K and V, 2192 rows: the target decoder's cache alone */
    assert_true(eval > (size_t)36 * 2 * 2192 * 8 * 128 * 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drafter_state_bytes),
        cmocka_unit_test(test_seed_configuration_fits_an_h200),
        cmocka_unit_test(test_qwen3_8b_defaults_fit_80gb),
        cmocka_unit_test(test_given_bound),
        cmocka_unit_test(test_cannot_fit),
        cmocka_unit_test(test_eval_adds_to_the_plan),
        cmocka_unit_test(test_eval_bytes_bound_the_decoding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
