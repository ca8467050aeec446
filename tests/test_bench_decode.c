/* bench --decode --batch LIST: the list's parsing and its refusals, a
 * decode step's FLOPs against a count from the weights' sizes, and the
 * figures at each listed batch on the CPU (coder-tiny, a few steps), each
 * beside its limit: the lower of the bandwidth's and the GEMM peak's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#include "bench/bench.h"
#include "target/model_config.h"
#include "target/target.h"
#include "target/target_memory.h"

static void test_parse_batches(void **state) {
    (void)state;
    int b[DF_BENCH_MAX_BATCHES], n = 0;
    DfError err;
    assert_int_equal(df_bench_parse_batches("1,64,256,512", b, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_int_equal(b[0], 1), assert_int_equal(b[1], 64), assert_int_equal(b[2], 256), assert_int_equal(b[3], 512);
    assert_int_equal(df_bench_parse_batches("4096", b, &n, &err), 0);
    assert_int_equal(n, 1), assert_int_equal(b[0], 4096);
    assert_int_equal(df_bench_parse_batches(DF_BENCH_DECODE_BATCHES, b, &n, &err), 0);
    assert_int_equal(n, 2), assert_int_equal(b[0], 1), assert_int_equal(b[1], 64);
    const struct {
        const char *text, *says;
    } bad[] = {
        {"", "empty"},           {"1,,2", "separated by commas"}, {"1,", "separated by commas"},
        {",1", "separated by commas"}, {"1;2", "separated by commas"}, {"x", "separated by commas"},
        {" 1", "separated by commas"}, {"0", "outside 1..4096"},      {"4097", "outside 1..4096"},
        {"-3", "outside 1..4096"},     {"8,16,8", "listed twice"},
        {"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "more than 16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        if (df_bench_parse_batches(bad[i].text, b, &n, &err) != -1) fail_msg("'%s' was accepted", bad[i].text);
        if (!strstr(err.msg, bad[i].says) || !strstr(err.msg, "--batch"))
            fail_msg("'%s': \"%s\" does not say \"%s\"", bad[i].text, err.msg, bad[i].says);
    }
}

/* Per token: 2 flops per weight of every matrix (the parameters less the embedding, which is gathered,
 * and the norms) and per head 4 * keys * head_dim in each attention layer. */
static void test_decode_flops(void **state) {
    (void)state;
    DfModelConfig c;
    DfError err;
    if (df_test_load_config_text(&c,
                                 "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", "
                                 "\"hidden_size\": 4096, \"intermediate_size\": 12288, \"num_hidden_layers\": 36, "
                                 "\"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128, "
                                 "\"vocab_size\": 151936, \"tie_word_embeddings\": false, \"rms_norm_eps\": 1e-6, "
                                 "\"rope_theta\": 1000000.0, \"max_position_embeddings\": 40960}",
                                 &err))
        fail_msg("%s", err.msg);
    double params = (double)df_target_weight_bytes(&c, 36, 1, 1); /* one byte an element: the parameters */
    double matrices = params - 151936.0 * 4096 - 36 * (2 * 4096 + 2 * 128) - 4096;
    for (int keys = 1; keys <= 4096; keys *= 8) {
        double want = 64 * (2 * matrices + 36 * 4.0 * keys * 32 * 128), got = df_target_decode_flops(&c, 64, keys);
        if (fabs(got - want) > 1e-9 * want) fail_msg("keys %d: %.6g flops, counted %.6g", keys, got, want);
    }
    /* Qwen3-8B's 8.19 G parameters less its 0.62 G embedding, twice: 15.1 GFLOP a token at a short context */
    assert_true(df_target_decode_flops(&c, 1, 1) > 15.1e9 && df_target_decode_flops(&c, 1, 1) < 15.2e9);
}

static double number(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!cJSON_IsNumber(v)) fail_msg("the bench JSON has no number %s", name);
    return v->valuedouble;
}

/* The command on the CPU: the listed batches (and no others), each beside the lower of its two limits. */
static void test_bench_command(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("bench_decode");
    char json_path[512], cmd[2048], log[16384];
    snprintf(json_path, sizeof json_path, "%s/decode.json", dir);
    snprintf(cmd, sizeof cmd,
             "cd %s && %s bench --decode --batch 3,1 --prompt-len 16 --new-tokens 16 --target assets/coder-tiny "
             "--json %s",
             df_test_path("."), df_test_path("dflash"), json_path);
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("bench --decode failed: %s", log);
    assert_non_null(strstr(log, "batch    3"));
    assert_non_null(strstr(log, "GEMM peak"));
    char *text = df_test_read_file(json_path, NULL);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_true(number(j, "decode_gemm_peak_tflops") > 0 && number(j, "decode_bandwidth_gbs") > 0);
    for (int b = 1; b <= 3; b += 2) {
        char key[128];
        double v[5];
        const char *names[] = {"tokens_per_s", "limit_tokens_per_s", "bandwidth_limit_tokens_per_s",
                               "compute_limit_tokens_per_s", "fraction_of_limit"};
        for (int i = 0; i < 5; i++) {
            snprintf(key, sizeof key, "decode_target_b%d_%s", b, names[i]);
            v[i] = number(j, key);
        }
        assert_true(v[0] > 0 && v[2] > 0 && v[3] > 0);
        assert_true(v[1] == (v[2] < v[3] ? v[2] : v[3]));
        assert_true(fabs(v[4] - v[0] / v[1]) < 1e-9);
    }
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "decode_target_b64_tokens_per_s")); /* not listed */
    cJSON_Delete(j);
    free(text);
    /* bad lists are a bad command line (exit 2) with the reason */
    const char *bad[][2] = {{"--decode --batch 1,,2", "separated by commas"},
                            {"--decode --batch 0", "outside 1..4096"},
                            {"--batch 4", "needs --decode"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s bench %s", df_test_path("dflash"), bad[i][0]);
        int rc = df_test_run(cmd, log, sizeof log);
        if (rc != 2 || !strstr(log, bad[i][1])) fail_msg("bench %s: exit %d, %s", bad[i][0], rc, log);
    }
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_batches),
        cmocka_unit_test(test_decode_flops),
        cmocka_unit_test(test_bench_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
