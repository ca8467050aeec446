/* Speculative decoding on coder-tiny: the drafter's inference forward
 * against the PyTorch reference (tests/ref/drafter_ref.py: argmax and loss of
 * every block of the training fixture, run here as cached context + block),
 * and losslessness: with an untrained drafter, and with a drafter forced to
 * propose the greedy continuation (tau = block size), the committed tokens
 * equal transformers' greedy output (tests/fixtures/generate/greedy.jsonl);
 * the max-new-tokens cut and an EOS stop fall on the same token as plain
 * greedy decoding; `dflash eval` end to end. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "base/test_seam.h"
#include "formats/safetensors.h"
#include "infer/speculative.h"
#include "model/drafter_io.h"
#include "target/target.h"

#define MAX_FIXTURES 16

typedef DfGreedyFixture Fixture;



typedef struct Setup {
    DfBackend *be;
    DfTargetModel target;
    DfTargetDecoder dec;
    DfDrafterRunner drafter;
    Fixture f[MAX_FIXTURES];
    int n;
    char *dir;
} Setup;

/* Target + an untrained drafter (2 layers, B = 8) written in the section 7
 * format with df_drafter_export and read back with df_drafter_load. */
static void setup(Setup *s, int block_size) {
    DfError err;
    memset(s, 0, sizeof *s);
    s->n = df_test_load_greedy_fixtures(s->f, MAX_FIXTURES);
    s->be = df_backend_cpu_create(&err);
    if (df_target_load(&s->target, s->be, df_test_path("assets/coder-tiny"), 8, 1, &err)) fail_msg("%s", err.msg);
    DfDrafterConfig cfg, loaded;
    DfDrafterOptions dopt = {.num_layers = 2, .block_size = block_size, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&cfg, &s->target.cfg, &dopt, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout, loaded_layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = malloc(layout.total * sizeof *params), *back = NULL;
    df_drafter_init_params(&layout, params, 1);
    s->dir = df_test_tmpdir("eval");
    char path[512];
    snprintf(path, sizeof path, "%s/drafter", s->dir);
    if (df_drafter_export(path, &cfg, &layout, params, &err)) fail_msg("%s", err.msg);
    if (df_drafter_load(path, &loaded, &loaded_layout, &back, &err)) fail_msg("%s", err.msg);
    if (df_drafter_fit_target(&loaded, &s->target.cfg, 8190, path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(loaded.mask_token_id, 8190);
    int cap = 0;
    for (int i = 0; i < s->n; i++)
        if ((int)s->f[i].prompt.len > cap) cap = (int)s->f[i].prompt.len;
    cap += 64 + block_size;
    if (df_target_decoder_init(&s->dec, &s->target, 1, cap, loaded.target_layer_ids, loaded.n_taps, &err) ||
        df_drafter_runner_init(&s->drafter, s->be, &loaded, back, s->target.embed, s->target.lm_head, 1, cap, &err))
        fail_msg("%s", err.msg);
    free(params);
    free(back);
    df_drafter_layout_free(&layout);
    df_drafter_layout_free(&loaded_layout);
}

static void teardown(Setup *s) {
    df_drafter_runner_free(&s->drafter);
    df_target_decoder_free(&s->dec);
    df_target_free(&s->target);
    df_backend_destroy(s->be);
    df_test_free_greedy_fixtures(s->f, s->n);
    df_test_rmtree(s->dir);
    free(s->dir);
}

static DfSpecOptions spec_options(int max_new, int block_size) {
    DfSpecOptions o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = max_new;
    o.block_size = block_size;
    o.eos_ids[0] = 8187;
    o.n_eos = 1;
    return o;
}

static void assert_same_tokens(const DfI32Vec *got, const int32_t *want, size_t n_want, const char *what, int i) {
    if (got->len != n_want) fail_msg("%s, prompt %d: %zu tokens, expected %zu", what, i, got->len, n_want);
    for (size_t t = 0; t < n_want; t++)
        if (got->data[t] != want[t]) fail_msg("%s, prompt %d, token %zu: %d, expected %d", what, i, t, got->data[t], want[t]);
}

static void test_untrained_drafter_is_lossless(void **state) {
    (void)state;
    Setup s;
    setup(&s, 8);
    DfError err;
    double tau_sum = 0;
    int cycles = 0;
    for (int i = 0; i < s.n; i++) {
        DfSpecOptions o = spec_options(s.f[i].max_new_tokens, 8);
        DfSpecResult r = {0};
        if (df_speculative_generate(&s.dec, &s.drafter, 0, s.f[i].prompt.data, (int)s.f[i].prompt.len, &o, &r, &err))
            fail_msg("%s", err.msg);
        assert_same_tokens(&r.tokens, s.f[i].output.data, s.f[i].output.len, "untrained drafter", i);
        assert_int_equal(r.target_passes, 1 + (int)r.accepted.len);
        tau_sum += df_spec_tau(&r) * (double)r.accepted.len;
        cycles += (int)r.accepted.len;
        df_spec_result_free(&r);
    }
    double tau = tau_sum / cycles;
    print_message("untrained drafter: tau %.3f over %d cycles\n", tau, cycles);
    assert_true(tau >= 1.0 && tau <= 1.3);
    teardown(&s);
}

/* Through the test seam of the drafted block: the draft replaced with the
 * known greedy continuation. */
typedef struct Oracle {
    const int32_t *greedy;
    size_t n;
} Oracle;

static int oracle_hook(void *ctx, DfSeamPoint point, void *data, DfError *err) {
    if (point != DF_SEAM_SPEC_DRAFT) return 0;
    const DfSpecDraftSeam *draft = data;
    int n_generated = draft->n_generated, block_size = draft->block_size;
    int32_t *block = draft->block;
    const Oracle *o = ctx;
    for (int k = 1; k < block_size; k++) {
        size_t idx = (size_t)n_generated + (size_t)k - 1;
        block[k] = idx < o->n ? o->greedy[idx] : 8187;
    }
    return 0;
}

static void test_perfect_drafts_accept_whole_blocks(void **state) {
    (void)state;
    Setup s;
    setup(&s, 8);
    DfError err;
    for (int i = 0; i < s.n; i++) {
        Oracle oracle = {s.f[i].output.data, s.f[i].output.len};
        DfSpecOptions o = spec_options(s.f[i].max_new_tokens, 8);
        df_test_seam_set(oracle_hook, &oracle);
        DfSpecResult r = {0};
        int rc = df_speculative_generate(&s.dec, &s.drafter, 0, s.f[i].prompt.data, (int)s.f[i].prompt.len, &o, &r, &err);
        df_test_seam_set(NULL, NULL);
        if (rc) fail_msg("%s", err.msg);
        assert_same_tokens(&r.tokens, s.f[i].output.data, s.f[i].output.len, "perfect drafts", i);
        /* every cycle but the last accepts the whole block: 1 + 8 * cycles tokens */
        for (size_t c = 0; c + 1 < r.accepted.len; c++) assert_int_equal(r.accepted.data[c], 7);
        if ((int)s.f[i].output.len == s.f[i].max_new_tokens)
            assert_int_equal(r.accepted.len, (s.f[i].max_new_tokens - 1 + 7) / 8);
        df_spec_result_free(&r);
    }
    teardown(&s);
}

/* max-new-tokens inside a block (13 = 1 + 8 + 4) and an EOS set to a token
 * of the greedy output: both cut exactly where greedy decoding stops. */
static void test_cut_at_max_new_tokens_and_eos(void **state) {
    (void)state;
    Setup s;
    setup(&s, 8);
    DfError err;
    int checked_eos = 0;
    for (int i = 0; i < s.n; i++) {
        if (s.f[i].output.len < 20) continue;
        Oracle oracle = {s.f[i].output.data, s.f[i].output.len};
        for (int use_oracle = 0; use_oracle < 2; use_oracle++) {
            DfSpecOptions o = spec_options(13, 8);
            df_test_seam_set(use_oracle ? oracle_hook : NULL, &oracle);
            DfSpecResult r = {0};
            int rc = df_speculative_generate(&s.dec, &s.drafter, 0, s.f[i].prompt.data, (int)s.f[i].prompt.len, &o, &r, &err);
            df_test_seam_set(NULL, NULL);
            if (rc) fail_msg("%s", err.msg);
            assert_same_tokens(&r.tokens, s.f[i].output.data, 13, "max-new-tokens 13", i);
            /* an artificial EOS: the token at index 10, cut before its first occurrence */
            int32_t eos = s.f[i].output.data[10];
            size_t first = 0;
            while (s.f[i].output.data[first] != eos) first++;
            o = spec_options(s.f[i].max_new_tokens, 8);
            o.eos_ids[1] = eos;
            o.n_eos = 2;
            df_test_seam_set(use_oracle ? oracle_hook : NULL, &oracle);
            rc = df_speculative_generate(&s.dec, &s.drafter, 0, s.f[i].prompt.data, (int)s.f[i].prompt.len, &o, &r, &err);
            df_test_seam_set(NULL, NULL);
            if (rc) fail_msg("%s", err.msg);
            assert_same_tokens(&r.tokens, s.f[i].output.data, first, "artificial eos", i);
            /* plain greedy decoding stops at the same place */
            DfGenerateOptions g = {0};
            g.max_new_tokens = s.f[i].max_new_tokens;
            g.top_p = 1;
            memcpy(g.eos_ids, o.eos_ids, sizeof g.eos_ids);
            g.n_eos = 2;
            DfI32Vec out = {0};
            const int32_t *p = s.f[i].prompt.data;
            int len = (int)s.f[i].prompt.len;
            if (df_generate_batch(&s.dec, 1, &p, &len, &g, &out, NULL, &err)) fail_msg("%s", err.msg);
            assert_same_tokens(&out, s.f[i].output.data, first, "greedy with artificial eos", i);
            df_i32vec_free(&out);
            df_spec_result_free(&r);
            checked_eos++;
        }
    }
    assert_true(checked_eos >= 2);
    teardown(&s);
}

/* tests/ref/drafter_ref.py's deterministic weights: splitmix64 of
 * (seed * 2^32 + i), top 24 bits to [0, 1), mapped to [-1, 1). */
static float det_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = (seed << 32) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(2.0 * ((double)(z >> 40) / (double)(1 << 24)) - 1.0);
}

static int32_t *fixture_i32(const DfSafetensors *st, const char *name) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    assert_non_null(t);
    assert_int_equal(t->dtype, DF_DTYPE_I32);
    int32_t *out = malloc(t->nbytes);
    memcpy(out, t->data, t->nbytes);
    return out;
}

/* Every block of the training fixture, run as inference: context features of
 * positions < anchor appended to the cache, then the block. The argmax of
 * every block position and the weighted loss equal PyTorch's. */
static void test_drafter_forward_matches_reference(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    DfTargetModel target = {0};
    if (df_target_load(&target, be, df_test_path("assets/coder-tiny"), 8, 1, &err)) fail_msg("%s", err.msg);
    DfDrafterConfig cfg;
    DfDrafterOptions dopt = {.num_layers = 2, .intermediate_size = 128,
                             .block_size = 8, .n_taps = 3, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&cfg, &target.cfg, &dopt, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = malloc(layout.total * sizeof *params);
    for (int p = 0; p < layout.n_params; p++) {
        const DfParamInfo *pi = &layout.params[p];
        for (size_t i = 0; i < pi->count; i++) {
            float u = det_uniform(1000 + (uint64_t)p, i);
            params[pi->offset + i] = pi->kind == DF_PARAM_LINEAR ? u * (float)(sqrt(3.0) * 0.05) : 1.0f + 0.1f * u;
        }
    }
    DfSafetensors st;
    if (df_safetensors_open(&st, df_test_path("tests/fixtures/drafter/step.safetensors"), &err)) fail_msg("%s", err.msg);
    int32_t *ids = fixture_i32(&st, "input_ids"), *starts = fixture_i32(&st, "seq_starts");
    int32_t *anchors = fixture_i32(&st, "anchors"), *astarts = fixture_i32(&st, "anchor_starts");
    int32_t *block_ids = fixture_i32(&st, "block_ids"), *ref_argmax = fixture_i32(&st, "argmax");
    int n_seqs = (int)df_safetensors_find(&st, "seq_starts")->shape[0] - 1;
    int T = starts[n_seqs], nf = 3 * cfg.hidden_size, B = 8, V = cfg.vocab_size;
    int64_t fshape[2] = {T, nf}, wshape[1] = {astarts[n_seqs] * B}, one[1] = {1};
    float *features = df_safetensors_load_f32(&st, "features", 2, fshape, &err);
    float *weights = df_safetensors_load_f32(&st, "weights", 1, wshape, &err);
    float *ref_loss = df_safetensors_load_f32(&st, "loss", 1, one, &err);
    assert_non_null(features), assert_non_null(weights), assert_non_null(ref_loss);
    DfDrafterRunner r;
    if (df_drafter_runner_init(&r, be, &cfg, params, target.embed, target.lm_head, 2, 128, &err)) fail_msg("%s", err.msg);
    double wce = 0, wsum = 0;
    int mismatches = 0;
    for (int s = 0; s < n_seqs; s++) {
        int slot = s, t0 = starts[s], len = starts[s + 1] - t0;
        for (int j = astarts[s]; j < astarts[s + 1]; j++) {
            int a = anchors[j], have = r.ctx.lens[slot];
            if (df_drafter_append_context(&r, slot, features + (size_t)(t0 + have) * nf, a - have, &err))
                fail_msg("%s", err.msg);
            assert_int_equal(block_ids[j * B], ids[t0 + a]);
            int32_t am[8];
            if (df_drafter_propose(&r, slot, block_ids + j * B, B, am, &err)) fail_msg("%s", err.msg);
            assert_int_equal(r.ctx.lens[slot], a);
            const float *logits = df_drafter_logits(&r, &err);
            if (!logits) fail_msg("%s", err.msg);
            for (int k = 0; k < B; k++) {
                mismatches += am[k] != ref_argmax[j * B + k];
                if (a + k >= len || weights[j * B + k] == 0) continue;
                const float *row = logits + (size_t)k * V;
                double mx = row[0], sum = 0;
                for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
                for (int v = 0; v < V; v++) sum += exp(row[v] - mx);
                wce += weights[j * B + k] * (mx + log(sum) - row[ids[t0 + a + k]]);
                wsum += weights[j * B + k];
            }
        }
    }
    assert_int_equal(mismatches, 0);
    double loss = wce / wsum;
    if (fabs(loss - ref_loss[0]) > 1e-4 * fabs(ref_loss[0])) fail_msg("loss %.7f, reference %.7f", loss, ref_loss[0]);
    df_drafter_runner_free(&r);
    df_safetensors_close(&st);
    free(ids), free(starts), free(anchors), free(astarts), free(block_ids), free(ref_argmax);
    free(features), free(weights), free(ref_loss), free(params);
    df_drafter_layout_free(&layout);
    df_target_free(&target);
    df_backend_destroy(be);
}

static char *read_all(const char *path) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, fp);
    assert_true(n > 0 && n < (1 << 16) - 1);
    fclose(fp);
    return buf;
}

/* dflash eval end to end: a random drafter exported in the section 7 format
 * (no mask_token_id in its config: derived from the tokenizer, 8190), two
 * prompts; the per-prompt output holds the fields and tau is about 1. */
static void test_eval_command(void **state) {
    (void)state;
    DfError err;
    DfModelConfig tcfg;
    if (df_model_config_load(&tcfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig cfg;
    DfDrafterOptions dopt = {.num_layers = 1, .intermediate_size = 128, .block_size = 4, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&cfg, &tcfg, &dopt, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = malloc(layout.total * sizeof *params);
    df_drafter_init_params(&layout, params, 3);
    char *dir = df_test_tmpdir("evalcmd");
    char draft[512], input[512], output[512], cmd[4096], log[8192];
    snprintf(draft, sizeof draft, "%s/draft", dir);
    snprintf(input, sizeof input, "%s/prompts.jsonl", dir);
    snprintf(output, sizeof output, "%s/eval.jsonl", dir);
    if (df_drafter_export(draft, &cfg, &layout, params, &err)) fail_msg("%s", err.msg);
    /* another trainer's config without dflash_config.mask_token_id: eval must derive it */
    char cfg_path[600];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", draft);
    char *text = read_all(cfg_path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(root, "dflash_config"), "mask_token_id");
    text = cJSON_Print(root);
    df_test_write_file(cfg_path, text);
    cJSON_free(text);
    cJSON_Delete(root);
    df_test_write_file(input, "{\"id\": \"a\", \"prompt\": \"def add(a, b):\\n\"}\n{\"id\": 7, \"prompt\": \"import os\\n\"}\n");
    snprintf(cmd, sizeof cmd, "%s eval --target %s --draft %s --input %s --output %s --max-new-tokens 20",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), draft, input, output);
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("dflash eval failed: %s", log);
    assert_non_null(strstr(log, "tau "));
    assert_non_null(strstr(log, "mask token 8190"));
    FILE *fp = fopen(output, "r");
    assert_non_null(fp);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        cJSON *rec = cJSON_Parse(line);
        assert_non_null(rec);
        const cJSON *id = cJSON_GetObjectItem(rec, "id"), *acc = cJSON_GetObjectItem(rec, "accepted");
        if (n == 0) assert_string_equal(id->valuestring, "a");
        else assert_int_equal(id->valueint, 7);
        assert_true(cJSON_IsString(cJSON_GetObjectItem(rec, "response")));
        double tau = cJSON_GetObjectItem(rec, "tau")->valuedouble;
        assert_true(tau >= 1.0 && tau <= 1.5);
        assert_true(cJSON_IsArray(acc) && cJSON_GetArraySize(acc) >= 1);
        cJSON_Delete(rec);
        n++;
    }
    fclose(fp);
    assert_int_equal(n, 2);
    free(params);
    df_drafter_layout_free(&layout);
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drafter_forward_matches_reference),
        cmocka_unit_test(test_untrained_drafter_is_lossless),
        cmocka_unit_test(test_perfect_drafts_accept_whole_blocks),
        cmocka_unit_test(test_cut_at_max_new_tokens_and_eos),
        cmocka_unit_test(test_eval_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
