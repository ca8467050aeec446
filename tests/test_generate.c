/* Plain generation with the KV cache on coder-tiny: greedy output equals
 * transformers' greedy generate (tests/ref/generate_ref.py, fp32) token for
 * token at batch 1 and batch 4; the decode path's logits equal the packed
 * full forward's; sampling is reproducible and batch-independent; prompts
 * prefilled in slices (chunked prefill) give the same tokens, and so do
 * records that wait for pages of a paged KV cache too small for every slot
 * (greedy and sampled), while a cache too small for a record is refused;
 * `dflash generate` resumes an interrupted output file; and with
 * --random-target-weights it generates from random weights of the target's
 * shape, the same for a seed, and says so in its settings file. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "infer/generate.h"
#include "target/target.h"

#define MAX_FIXTURES 16

typedef DfGreedyFixture Fixture;



typedef struct Model {
    DfBackend *be;
    DfTargetModel m;
    DfGenerateOptions opt;
} Model;

static void load_model(Model *md) {
    DfError err;
    memset(md, 0, sizeof *md);
    md->be = df_backend_cpu_create(&err);
    assert_non_null(md->be);
    const char *dir = df_test_path("assets/coder-tiny");
    if (df_target_load(&md->m, md->be, dir, 8, 1, &err)) fail_msg("%s", err.msg);
    md->opt.top_p = 1.0;
    if (df_generation_eos_ids(dir, &md->m.cfg, md->opt.eos_ids, &md->opt.n_eos, &err)) fail_msg("%s", err.msg);
    assert_int_equal(md->opt.n_eos, 1);
    assert_int_equal(md->opt.eos_ids[0], 8187);
}

static void free_model(Model *md) {
    df_target_free(&md->m);
    df_backend_destroy(md->be);
}

/* Generates fixtures [0, n) with `batch` cache slots (continuous batching)
 * in a paged KV cache of n_pages pages (0: contiguous slots); the forward
 * passes it took. */
static int generate_paged(Model *md, Fixture *f, int n, int batch, int n_pages, DfI32Vec *out) {
    DfError err;
    DfTargetDecoder d;
    int cap = 0;
    const int32_t *prompts[MAX_FIXTURES];
    int lens[MAX_FIXTURES];
    for (int i = 0; i < n; i++) {
        prompts[i] = f[i].prompt.data;
        lens[i] = (int)f[i].prompt.len;
        if (lens[i] + md->opt.max_new_tokens > cap) cap = lens[i] + md->opt.max_new_tokens;
    }
    if (df_target_decoder_init_paged(&d, &md->m, batch, cap, n_pages, NULL, 0, &err)) fail_msg("%s", err.msg);
    int steps = 0;
    if (df_generate_batch(&d, n, prompts, lens, &md->opt, out, &steps, &err)) fail_msg("%s", err.msg);
    df_target_decoder_free(&d);
    return steps;
}

static int generate_counting_steps(Model *md, Fixture *f, int n, int batch, DfI32Vec *out) {
    return generate_paged(md, f, n, batch, 0, out);
}

static void generate_all(Model *md, Fixture *f, int n, int batch, DfI32Vec *out) {
    int steps = generate_counting_steps(md, f, n, batch, out);
    /* slots run side by side: fewer forward passes than one prompt at a time */
    if (batch > 1) assert_true(steps < n * md->opt.max_new_tokens / 2);
}

static void test_greedy_matches_transformers(int batch) {
    Fixture f[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(f, MAX_FIXTURES);
    Model md;
    load_model(&md);
    md.opt.max_new_tokens = f[0].max_new_tokens;
    DfI32Vec out[MAX_FIXTURES] = {{0}};
    generate_all(&md, f, n, batch, out);
    int some_stopped_early = 0;
    for (int i = 0; i < n; i++) {
        if (out[i].len != f[i].output.len)
            fail_msg("batch %d, prompt %s: %zu tokens, transformers %zu", batch, f[i].id, out[i].len, f[i].output.len);
        for (size_t t = 0; t < out[i].len; t++)
            if (out[i].data[t] != f[i].output.data[t])
                fail_msg("batch %d, prompt %s, token %zu: %d, transformers %d", batch, f[i].id, t, out[i].data[t],
                         f[i].output.data[t]);
        some_stopped_early |= (int)f[i].output.len < f[i].max_new_tokens;
        df_i32vec_free(&out[i]);
    }
    (void)some_stopped_early;
    df_test_free_greedy_fixtures(f, n);
    free_model(&md);
}

static void test_greedy_batch1(void **state) {
    (void)state;
    test_greedy_matches_transformers(1);
}

static void test_greedy_batch4(void **state) {
    (void)state;
    test_greedy_matches_transformers(4);
}

/* Pages of the longest fixture's prompt + max new tokens. */
static int longest_pages(const Fixture *f, int n, int max_new) {
    int most = 0;
    for (int i = 0; i < n; i++) {
        int pages = df_kv_pages_for((int)f[i].prompt.len + max_new);
        most = pages > most ? pages : most;
    }
    return most;
}

/* Four slots over a pool of the longest sequence's pages and one more: the
 * records wait for pages (more steps than with a page for every slot's
 * longest) and give the same tokens, greedy and sampled. */
static void test_paged_cache_waits_same_tokens(void **state) {
    (void)state;
    Fixture f[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(f, MAX_FIXTURES);
    Model md;
    load_model(&md);
    md.opt.max_new_tokens = f[0].max_new_tokens;
    int pool = longest_pages(f, n, md.opt.max_new_tokens) + 1;
    for (int sampled = 0; sampled < 2; sampled++) {
        md.opt.temperature = sampled ? 1.0 : 0.0;
        md.opt.top_p = sampled ? 0.9 : 1.0;
        md.opt.seed = 5;
        DfI32Vec full[MAX_FIXTURES] = {{0}}, small[MAX_FIXTURES] = {{0}};
        int full_steps = generate_paged(&md, f, n, 4, 4 * (pool - 1), full);
        int small_steps = generate_paged(&md, f, n, 4, pool, small);
        assert_true(small_steps > full_steps);
        for (int i = 0; i < n; i++) {
            assert_int_equal(small[i].len, full[i].len);
            assert_memory_equal(small[i].data, full[i].data, full[i].len * sizeof(int32_t));
            if (!sampled && (full[i].len != f[i].output.len ||
                             memcmp(full[i].data, f[i].output.data, full[i].len * sizeof(int32_t))))
                fail_msg("prompt %s: the paged cache's greedy tokens differ from transformers'", f[i].id);
            df_i32vec_free(&full[i]), df_i32vec_free(&small[i]);
        }
    }
    /* a pool smaller than the longest record's pages: refused, naming the record and the pages */
    DfTargetDecoder d;
    DfError err;
    const int32_t *prompts[1] = {f[0].prompt.data};
    int lens[1] = {(int)f[0].prompt.len};
    md.opt.max_new_tokens = 2 * DF_KV_PAGE_ROWS; /* at least 3 pages */
    if (df_target_decoder_init_paged(&d, &md.m, 2, lens[0] + md.opt.max_new_tokens, 2, NULL, 0, &err))
        fail_msg("%s", err.msg);
    DfI32Vec out[1] = {{0}};
    assert_int_equal(df_generate_batch(&d, 1, prompts, lens, &md.opt, out, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "record 1 needs"));
    assert_non_null(strstr(err.msg, "the cache has 2 pages"));
    df_i32vec_free(&out[0]);
    df_target_decoder_free(&d);
    df_test_free_greedy_fixtures(f, n);
    free_model(&md);
}

/* Prefill of part of a sequence, then single tokens, then a block of 5:
 * every row's logits and tap features equal the packed full forward's. */
static void test_decode_logits_equal_full_forward(void **state) {
    (void)state;
    Fixture f[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(f, MAX_FIXTURES);
    Model md;
    load_model(&md);
    DfError err;
    int taps[3] = {1, 3, 5}, hid = md.m.cfg.hidden_size, vocab = md.m.cfg.vocab_size;
    /* two sequences decoded side by side: fixture 0 and fixture 1 (prompt + output) */
    DfI32Vec seq[2] = {{0}};
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < f[s].prompt.len; i++) df_i32vec_push(&seq[s], f[s].prompt.data[i]);
        for (size_t i = 0; i < f[s].output.len && i < 12; i++) df_i32vec_push(&seq[s], f[s].output.data[i]);
    }
    int len[2] = {(int)seq[0].len, (int)seq[1].len};
    float *ref_logits[2], *ref_feat[2];
    for (int s = 0; s < 2; s++) {
        ref_logits[s] = malloc((size_t)len[s] * vocab * sizeof(float));
        ref_feat[s] = malloc((size_t)len[s] * 3 * hid * sizeof(float));
        int32_t starts[2] = {0, len[s]};
        if (df_target_forward(&md.m, seq[s].data, starts, 1, taps, 3, ref_feat[s], ref_logits[s], &err))
            fail_msg("%s", err.msg);
    }
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &md.m, 3, 512, taps, 3, &err)) fail_msg("%s", err.msg);
    /* chunks per step: prefill to len-12 (seq 0) / len-9 (seq 1), then 1, 1, 5, rest */
    int done[2] = {0, 0};
    int32_t slots[2] = {2, 0}; /* slots need not be 0..n-1 */
    float *logits = malloc((size_t)1024 * vocab * sizeof(float)), *feat = malloc((size_t)1024 * 3 * hid * sizeof(float));
    int32_t ids[1024], starts[3];
    for (int stepno = 0; done[0] < len[0] || done[1] < len[1]; stepno++) {
        int32_t sl[2];
        int ns = 0, rows = 0, first[2];
        starts[0] = 0;
        for (int s = 0; s < 2; s++) {
            if (done[s] >= len[s]) continue;
            int want = stepno == 0 ? len[s] - 12 + 3 * s : stepno <= 2 ? 1 : stepno == 3 ? 5 : len[s] - done[s];
            if (want > len[s] - done[s]) want = len[s] - done[s];
            memcpy(ids + rows, seq[s].data + done[s], (size_t)want * sizeof *ids);
            first[ns] = s;
            sl[ns] = slots[s];
            rows += want;
            starts[++ns] = rows;
        }
        DfDecodeStep step = {ns, sl, ids, starts, DF_LOGITS_ALL, logits, NULL, feat, 0};
        if (df_target_decode(&d, &step, &err)) fail_msg("%s", err.msg);
        for (int j = 0; j < ns; j++) {
            int s = first[j], n_new = starts[j + 1] - starts[j];
            assert_int_equal(d.cache.lens[slots[s]], done[s] + n_new);
            double el = df_rel_error(logits + (size_t)starts[j] * vocab, ref_logits[s] + (size_t)done[s] * vocab,
                                     (size_t)n_new * vocab);
            double ef = df_rel_error(feat + (size_t)starts[j] * 3 * hid, ref_feat[s] + (size_t)done[s] * 3 * hid,
                                     (size_t)n_new * 3 * hid);
            if (el > 1e-4 || ef > 1e-4)
                fail_msg("step %d seq %d: logits error %.3g, features error %.3g", stepno, s, el, ef);
            done[s] += n_new;
        }
    }
    /* rollback: truncate seq 0 by 4 and rerun those 4 tokens: same logits */
    df_kv_cache_truncate(&d.cache, slots[0], len[0] - 4);
    int32_t sl0 = slots[0], st[2] = {0, 4};
    DfDecodeStep step = {1, &sl0, seq[0].data + len[0] - 4, st, DF_LOGITS_ALL, logits, NULL, NULL, 0};
    if (df_target_decode(&d, &step, &err)) fail_msg("%s", err.msg);
    assert_true(df_rel_error(logits, ref_logits[0] + (size_t)(len[0] - 4) * vocab, (size_t)4 * vocab) <= 1e-4);
    df_target_decoder_free(&d);
    for (int s = 0; s < 2; s++) free(ref_logits[s]), free(ref_feat[s]), df_i32vec_free(&seq[s]);
    free(logits);
    free(feat);
    df_test_free_greedy_fixtures(f, n);
    free_model(&md);
}

/* Chunked prefill: prompts cut into slices of 1, 7 or 64 tokens a step
 * (DfGenerateOptions.step_prompt_tokens), run beside the other slots'
 * decoding, give the tokens of whole-prompt steps, greedy and sampled, in
 * more steps the finer the slices. */
static void test_chunked_prefill_same_tokens(void **state) {
    (void)state;
    Fixture f[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(f, MAX_FIXTURES);
    Model md;
    load_model(&md);
    md.opt.max_new_tokens = 16;
    const int budgets[] = {1, 7, 64};
    for (int sampled = 0; sampled < 2; sampled++) {
        md.opt.temperature = sampled ? 1.0 : 0.0, md.opt.top_p = sampled ? 0.9 : 1.0, md.opt.seed = 7;
        DfI32Vec whole[MAX_FIXTURES] = {{0}};
        md.opt.step_prompt_tokens = 0;
        int whole_steps = generate_counting_steps(&md, f, n, 3, whole), longest = 0;
        for (int i = 0; i < n; i++) longest = (int)f[i].prompt.len > longest ? (int)f[i].prompt.len : longest;
        assert_true(longest > 7); /* the slices of 1 and 7 cut some prompt */
        for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
            DfI32Vec cut[MAX_FIXTURES] = {{0}};
            md.opt.step_prompt_tokens = budgets[b];
            int steps = generate_counting_steps(&md, f, n, 3, cut);
            if (budgets[b] < longest && steps <= whole_steps)
                fail_msg("slices of %d: %d steps, whole prompts %d", budgets[b], steps, whole_steps);
            for (int i = 0; i < n; i++) {
                if (cut[i].len != whole[i].len || memcmp(cut[i].data, whole[i].data, cut[i].len * sizeof(int32_t)))
                    fail_msg("%s, slices of %d, prompt %s: other tokens than whole-prompt steps",
                             sampled ? "sampled" : "greedy", budgets[b], f[i].id);
                df_i32vec_free(&cut[i]);
            }
        }
        for (int i = 0; i < n; i++) df_i32vec_free(&whole[i]);
    }
    df_test_free_greedy_fixtures(f, n);
    free_model(&md);
}

/* Same seed: same tokens, whatever the batch; another seed: different. */
static void test_sampling_reproducible(void **state) {
    (void)state;
    Fixture f[MAX_FIXTURES];
    int n_loaded = df_test_load_greedy_fixtures(f, MAX_FIXTURES), n = n_loaded < 4 ? n_loaded : 4;
    Model md;
    load_model(&md);
    md.opt.max_new_tokens = 24;
    md.opt.temperature = 1.0;
    md.opt.top_p = 0.9;
    md.opt.seed = 7;
    DfI32Vec a[MAX_FIXTURES] = {{0}}, b[MAX_FIXTURES] = {{0}}, c[MAX_FIXTURES] = {{0}};
    generate_all(&md, f, n, 1, a);
    generate_all(&md, f, n, 4, b);
    md.opt.seed = 8;
    generate_all(&md, f, n, 4, c);
    int differs_from_other_seed = 0, differs_from_greedy = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(a[i].len, b[i].len);
        assert_memory_equal(a[i].data, b[i].data, a[i].len * sizeof(int32_t));
        differs_from_other_seed |= a[i].len != c[i].len || memcmp(a[i].data, c[i].data, a[i].len * sizeof(int32_t));
        differs_from_greedy |= a[i].len > f[i].output.len ||
                               memcmp(a[i].data, f[i].output.data, a[i].len * sizeof(int32_t)) != 0;
        df_i32vec_free(&a[i]), df_i32vec_free(&b[i]), df_i32vec_free(&c[i]);
    }
    assert_true(differs_from_other_seed);
    assert_true(differs_from_greedy);
    df_test_free_greedy_fixtures(f, n_loaded);
    free_model(&md);
}

static char *read_text(const char *path) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static void run_generate_with(const char *input, const char *output, const char *extra, int expect_ok) {
    char cmd[2048], log[4096];
    snprintf(cmd, sizeof cmd, "%s generate --target %s --input %s --output %s --max-new-tokens 12 %s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), input, output, extra);
    int rc = df_test_run(cmd, log, sizeof log);
    if (expect_ok && rc != 0) fail_msg("dflash generate failed: %s", log);
    if (!expect_ok && rc == 0) fail_msg("dflash generate should have failed: %s", log);
}

static void run_generate(const char *input, const char *output, int expect_ok) {
    run_generate_with(input, output, "--batch 2", expect_ok);
}

/* An interrupted run (3 of 6 records written, a torn 4th line) continues to
 * the same file as an uninterrupted one; an output of other records is
 * refused and left alone. */
static void test_generate_command_resumes(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("generate");
    char in3[512], in6[512], whole[512], resumed[512];
    snprintf(in3, sizeof in3, "%s/in3.jsonl", dir);
    snprintf(in6, sizeof in6, "%s/in6.jsonl", dir);
    snprintf(whole, sizeof whole, "%s/whole.jsonl", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.jsonl", dir);
    df_test_write_data_slice(in3, 3);
    df_test_write_data_slice(in6, 6);
    run_generate(in6, whole, 1);
    char *expected = read_text(whole);
    /* six lines, each {"id", "prompt", "response"} in input order */
    int lines = 0;
    for (char *p = expected; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 6);
    cJSON *first = cJSON_ParseWithLength(expected, strchr(expected, '\n') - expected);
    assert_non_null(first);
    assert_string_equal(cJSON_GetObjectItem(first, "id")->valuestring, "1-8000");
    assert_true(cJSON_IsString(cJSON_GetObjectItem(first, "prompt")) && cJSON_IsString(cJSON_GetObjectItem(first, "response")));
    cJSON_Delete(first);

    run_generate(in3, resumed, 1);
    char *fourth = expected;
    for (int i = 0; i < 3; i++) fourth = strchr(fourth, '\n') + 1;
    FILE *fp = fopen(resumed, "ab");
    fwrite(fourth, 1, 25, fp); /* the interrupted write of record 4 */
    fclose(fp);
    run_generate(in6, resumed, 1);
    char *got = read_text(resumed);
    assert_string_equal(got, expected);
    free(got);
    run_generate(in6, resumed, 1); /* complete already: nothing redone */
    got = read_text(resumed);
    assert_string_equal(got, expected);
    free(got);

    /* other input: the existing lines do not match its ids */
    char other[512];
    snprintf(other, sizeof other, "%s/other.jsonl", dir);
    df_test_write_file(other, "{\"id\": \"x\", \"prompt\": \"def f():\"}\n");
    run_generate(other, resumed, 0);
    got = read_text(resumed);
    assert_string_equal(got, expected);
    free(got);
    free(expected);

    /* sampled: the resumed records draw what they would have drawn in one run
     * (the key is the record's index in the input), whatever --batch */
    char s_whole[512], s_resumed[512];
    snprintf(s_whole, sizeof s_whole, "%s/s_whole.jsonl", dir);
    snprintf(s_resumed, sizeof s_resumed, "%s/s_resumed.jsonl", dir);
    run_generate_with(in6, s_whole, "--temperature 1.0 --top-p 0.95 --seed 5 --batch 4", 1);
    run_generate_with(in3, s_resumed, "--temperature 1.0 --top-p 0.95 --seed 5 --batch 1", 1);
    run_generate_with(in6, s_resumed, "--temperature 1.0 --top-p 0.95 --seed 5 --batch 3", 1);
    expected = read_text(s_whole);
    got = read_text(s_resumed);
    assert_string_equal(got, expected);
    free(got);
    got = read_text(whole);
    assert_string_not_equal(got, expected); /* sampling did change the responses */
    free(got);
    free(expected);
    df_test_rmtree(dir);
    free(dir);
}

/* --random-target-weights: the same output for the same seed (whatever
 * --batch), another for another seed, and not the real weights' output;
 * the settings file records the random weights (a real run's does not),
 * so that resuming the output with the real weights is refused. */
static void test_generate_random_weights(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("generate_random");
    char in[512], real[512], r1[512], r2[512], r3[512];
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(real, sizeof real, "%s/real.jsonl", dir);
    snprintf(r1, sizeof r1, "%s/r1.jsonl", dir);
    snprintf(r2, sizeof r2, "%s/r2.jsonl", dir);
    snprintf(r3, sizeof r3, "%s/r3.jsonl", dir);
    df_test_write_data_slice(in, 4);
    run_generate_with(in, real, "--batch 2", 1);
    run_generate_with(in, r1, "--batch 2 --random-target-weights", 1);
    run_generate_with(in, r2, "--batch 3 --random-target-weights", 1);
    run_generate_with(in, r3, "--batch 2 --random-target-weights --seed 1", 1);
    char *t_real = read_text(real), *t1 = read_text(r1), *t2 = read_text(r2), *t3 = read_text(r3);
    int lines = 0;
    for (char *p = t1; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 4);
    assert_string_equal(t1, t2);
    assert_string_not_equal(t1, t3);
    assert_string_not_equal(t1, t_real);
    free(t_real), free(t1), free(t2), free(t3);
    char settings[600];
    snprintf(settings, sizeof settings, "%s.generate.json", r1);
    char *s1 = read_text(settings);
    assert_non_null(strstr(s1, "\"target_weights\":\"random\""));
    free(s1);
    snprintf(settings, sizeof settings, "%s.generate.json", real);
    char *s_real = read_text(settings);
    assert_null(strstr(s_real, "target_weights"));
    free(s_real);
    /* random records are not continued by the real target, nor the reverse */
    run_generate_with(in, r1, "--batch 2", 0);
    run_generate_with(in, real, "--batch 2 --random-target-weights", 0);
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_batch1),
        cmocka_unit_test(test_greedy_batch4),
        cmocka_unit_test(test_paged_cache_waits_same_tokens),
        cmocka_unit_test(test_decode_logits_equal_full_forward),
        cmocka_unit_test(test_sampling_reproducible),
        cmocka_unit_test(test_chunked_prefill_same_tokens),
        cmocka_unit_test(test_generate_command_resumes),
        cmocka_unit_test(test_generate_random_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
