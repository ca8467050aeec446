/* Tokenizer parity with Hugging Face `tokenizers` (fixtures made by
 * tests/ref/tokenizer_ref.py), special tokens, errors, threads, and the
 * `dflash tokenize` command. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/mapped_file.h"
#include "text/json_string.h"
#include "text/tokenizer.h"
#include "text/tokenizer_internal.h" /* for the ignore_merges test only */
#include "text/utf8.h"

#define FIXTURES "tests/fixtures/tokenizer/"

typedef struct Corpus {
    char **texts;
    size_t *lens;
    size_t n;
} Corpus;

/* Splits a file into lines (the newline removed); returns the count. */
static size_t read_lines(const char *path, char ***lines_out, size_t **lens_out) {
    DfError err = {0};
    size_t size = 0;
    char *data = df_read_text_file(path, &size, &err);
    if (!data) fail_msg("%s", err.msg);
    size_t n = 0, cap = 1024;
    char **lines = malloc(cap * sizeof *lines);
    size_t *lens = malloc(cap * sizeof *lens);
    for (size_t i = 0; i < size;) {
        char *nl = memchr(data + i, '\n', size - i);
        size_t end = nl ? (size_t)(nl - data) : size;
        if (n == cap) {
            cap *= 2;
            lines = realloc(lines, cap * sizeof *lines);
            lens = realloc(lens, cap * sizeof *lens);
        }
        lens[n] = end - i;
        lines[n] = malloc(lens[n] + 1);
        memcpy(lines[n], data + i, lens[n]);
        lines[n][lens[n]] = '\0';
        n++;
        i = end + 1;
    }
    free(data);
    *lines_out = lines;
    *lens_out = lens;
    return n;
}

static void free_lines(char **lines, size_t *lens, size_t n) {
    for (size_t i = 0; i < n; i++) free(lines[i]);
    free(lines);
    free(lens);
}

/* The "text" of each corpus record (texts may hold NULs: lengths are kept). */
static Corpus load_corpus(void) {
    char **lines;
    size_t *lens;
    size_t n = read_lines(df_test_path(FIXTURES "corpus.jsonl"), &lines, &lens);
    Corpus c = {malloc(n * sizeof(char *)), malloc(n * sizeof(size_t)), n};
    for (size_t i = 0; i < n; i++) {
        DfByteBuf b = {0};
        DfError err = {0};
        if (df_json_get_string(lines[i], lens[i], "text", &b, &err) != 0) fail_msg("corpus line %zu: %s", i + 1, err.msg);
        df_bytebuf_append(&b, "", 0);
        c.texts[i] = b.data;
        c.lens[i] = b.len;
    }
    free_lines(lines, lens, n);
    return c;
}

static void free_corpus(Corpus *c) {
    for (size_t i = 0; i < c->n; i++) free(c->texts[i]);
    free(c->texts);
    free(c->lens);
}

static DfTokenizer *load_tokenizer(const char *rel) {
    DfError err = {0};
    DfTokenizer *tok = df_tokenizer_load(df_test_path(rel), &err);
    if (!tok) fail_msg("%s", err.msg);
    return tok;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    char buf[4096];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 16 < sizeof buf; i++) o += (size_t)snprintf(buf + o, sizeof buf - o, "%d ", ids[i]);
    print_message("  %s: [%s]\n", label, buf);
}

/* Encodes the whole corpus and decodes the reference ids; every difference
 * is counted and the first few are shown. */
static void check_parity(const char *tokenizer_rel, const char *ids_fixture) {
    Corpus corpus = load_corpus();
    DfTokenizer *tok = load_tokenizer(tokenizer_rel);
    char **lines;
    size_t *lens;
    size_t n = read_lines(df_test_path(ids_fixture), &lines, &lens);
    assert_int_equal(n, corpus.n);
    size_t id_diffs = 0, text_diffs = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *rec = cJSON_ParseWithLength(lines[i], lens[i]);
        cJSON *jids = cJSON_GetObjectItemCaseSensitive(rec, "ids");
        assert_true(cJSON_IsArray(jids));
        DfI32Vec ref = {0}, ours = {0};
        for (cJSON *e = jids->child; e; e = e->next) df_i32vec_push(&ref, (int32_t)e->valuedouble);
        cJSON_Delete(rec);
        DfError err = {0};
        if (df_tokenizer_encode(tok, corpus.texts[i], corpus.lens[i], &ours, &err) < 0) fail_msg("%s", err.msg);
        if (ours.len != ref.len || (ref.len && memcmp(ours.data, ref.data, ref.len * sizeof(int32_t)) != 0)) {
            if (id_diffs++ < 5) {
                print_message("%s line %zu: ids differ for text \"%s\"\n", ids_fixture, i + 1, corpus.texts[i]);
                print_ids("ours", ours.data, ours.len);
                print_ids("reference", ref.data, ref.len);
            }
        }
        DfByteBuf want = {0}, got = {0};
        assert_int_equal(df_json_get_string(lines[i], lens[i], "decoded", &want, &err), 0);
        if (df_tokenizer_decode(tok, ref.data, ref.len, &got, &err) < 0) fail_msg("%s", err.msg);
        if (got.len != want.len || (want.len && memcmp(got.data, want.data, want.len) != 0)) {
            if (text_diffs++ < 5)
                print_message("%s line %zu: decoded \"%s\", reference \"%s\"\n", ids_fixture, i + 1, got.data,
                              want.data);
        }
        df_bytebuf_free(&want);
        df_bytebuf_free(&got);
        df_i32vec_free(&ref);
        df_i32vec_free(&ours);
    }
    print_message("%s: %zu strings, %zu id differences, %zu decode differences\n", tokenizer_rel, n, id_diffs,
                  text_diffs);
    assert_int_equal(id_diffs, 0);
    assert_int_equal(text_diffs, 0);
    free_lines(lines, lens, n);
    df_tokenizer_free(tok);
    free_corpus(&corpus);
}

static void test_parity_coder_tiny(void **state) {
    check_parity("assets/coder-tiny/tokenizer.json", FIXTURES "ids_coder-tiny.jsonl");
}
static void test_parity_qwen3(void **state) {
    check_parity("tests/.cache/tokenizers/qwen3/tokenizer.json", FIXTURES "ids_qwen3.jsonl");
}
static void test_parity_llama3(void **state) {
    check_parity("tests/.cache/tokenizers/llama3/tokenizer.json", FIXTURES "ids_llama3.jsonl");
}

static void test_special_tokens_in_text(void **state) {
    DfTokenizer *tok = load_tokenizer("tests/.cache/tokenizers/qwen3/tokenizer.json");
    int32_t start = df_tokenizer_token_to_id(tok, "<|im_start|>"), end = df_tokenizer_token_to_id(tok, "<|im_end|>");
    assert_true(start >= 0 && end >= 0 && start != end);
    const char *text = "<|im_start|>user\nhi<|im_end|>";
    DfI32Vec ids = {0};
    DfError err = {0};
    assert_int_equal(df_tokenizer_encode(tok, text, strlen(text), &ids, &err), 0);
    assert_true(ids.len >= 3);
    assert_int_equal(ids.data[0], start);
    assert_int_equal(ids.data[ids.len - 1], end);
    for (size_t i = 1; i + 1 < ids.len; i++) assert_true(ids.data[i] != start && ids.data[i] != end);
    DfByteBuf back = {0};
    assert_int_equal(df_tokenizer_decode(tok, ids.data, ids.len, &back, &err), 0);
    assert_string_equal(back.data, text);
    /* a special token split by other text is not one */
    df_i32vec_free(&ids);
    assert_int_equal(df_tokenizer_encode(tok, "<|im_st art|>", 13, &ids, &err), 0);
    for (size_t i = 0; i < ids.len; i++) assert_true(ids.data[i] != start);
    df_i32vec_free(&ids);
    df_bytebuf_free(&back);
    df_tokenizer_free(tok);
}

static void test_decode_out_of_range(void **state) {
    DfTokenizer *tok = load_tokenizer("assets/coder-tiny/tokenizer.json");
    int32_t ids[2] = {0, df_tokenizer_vocab_size(tok)};
    DfByteBuf out = {0};
    DfError err = {0};
    assert_int_equal(df_tokenizer_decode(tok, ids, 1, &out, &err), 0);
    assert_int_equal(df_tokenizer_decode(tok, ids, 2, &out, &err), -1);
    assert_non_null(strstr(err.msg, "position 1"));
    ids[1] = -5;
    assert_int_equal(df_tokenizer_decode(tok, ids, 2, &out, &err), -1);
    /* has_id says which ids decode: coder-tiny has 0..8189 (its config's vocabulary is padded to 8192) */
    assert_int_equal(df_tokenizer_vocab_size(tok), 8190);
    assert_true(df_tokenizer_has_id(tok, 0) && df_tokenizer_has_id(tok, 8189));
    assert_false(df_tokenizer_has_id(tok, 8190) || df_tokenizer_has_id(tok, 8191) || df_tokenizer_has_id(tok, -1));
    df_bytebuf_free(&out);
    df_tokenizer_free(tok);
}

/* model.ignore_merges (Llama-3 sets it): a pre-token that is itself in the
 * vocabulary is that token, whatever the merges would make of it. Checked on
 * every Llama-3 token whose text is one whole pre-token; the same tokenizer
 * with the flag cleared must differ on some of them, or the test proves nothing. */
static void test_ignore_merges(void **state) {
    DfTokenizer *tok = load_tokenizer("tests/.cache/tokenizers/llama3/tokenizer.json");
    assert_true(tok->bpe.ignore_merges);
    DfTokenizer without = *tok; /* shares every table; only read below */
    without.bpe.ignore_merges = 0;
    DfPreTokScratch pre = {0};
    DfI32Vec ids = {0};
    DfError err = {0};
    size_t checked = 0, differ_without = 0;
    for (int32_t id = 0; id < (int32_t)tok->bpe.vocab.count; id++) {
        const char *text = tok->decoded + tok->decoded_off[id];
        size_t len = tok->decoded_len[id];
        if (df_utf8_first_invalid((const unsigned char *)text, len) != len) continue;
        assert_int_equal(df_pretokenize(&tok->pre, text, len, &pre, &err), 0);
        if (pre.spans.len != 1) continue;
        ids.len = 0;
        assert_int_equal(df_tokenizer_encode(tok, text, len, &ids, &err), 0);
        if (ids.len != 1 || ids.data[0] != id) fail_msg("token %d ('%.*s') encodes to %zu ids", id, (int)len, text, ids.len);
        ids.len = 0;
        assert_int_equal(df_tokenizer_encode(&without, text, len, &ids, &err), 0);
        if (ids.len != 1 || ids.data[0] != id) differ_without++;
        checked++;
    }
    print_message("ignore_merges: %zu single-pre-token vocabulary entries, %zu would differ without the flag\n",
                  checked, differ_without);
    assert_true(checked > 100000);
    assert_true(differ_without > 0);
    df_i32vec_free(&ids);
    df_pretok_scratch_free(&pre);
    df_tokenizer_free(tok);
}

/* Ids whose bytes are not UTF-8 decode as Rust's from_utf8_lossy does: each
 * maximal invalid subpart becomes one U+FFFD (the fixtures, being encodings
 * of valid text, never exercise this). */
static void test_decode_invalid_utf8(void **state) {
    DfTokenizer *tok = load_tokenizer("assets/coder-tiny/tokenizer.json");
    /* byte-level tokens: U+00E4 stands for byte 0xE4 (a 3-byte lead), U+00F0 for 0xF0 */
    int32_t lead3 = df_tokenizer_token_to_id(tok, "\xC3\xA4"), lead4 = df_tokenizer_token_to_id(tok, "\xC3\xB0");
    int32_t a = df_tokenizer_token_to_id(tok, "a");
    assert_true(lead3 >= 0 && lead4 >= 0 && a >= 0);
    int32_t ids[4] = {lead3, a, lead3, lead4};
    DfByteBuf out = {0};
    DfError err = {0};
    assert_int_equal(df_tokenizer_decode(tok, ids, 4, &out, &err), 0);
    assert_string_equal(out.data, "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD" "\xEF\xBF\xBD");
    df_bytebuf_free(&out);
    df_tokenizer_free(tok);
}

/* A tokenizer.json with the given model and pre-tokenizer, for error tests. */
static void write_tokenizer(const char *path, const char *model, const char *pre) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null, \"pre_tokenizer\": %s, "
             "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": %s}",
             pre, model);
    df_test_write_file(path, json);
}

static void expect_load_error(const char *path, const char *fragment) {
    DfError err = {0};
    DfTokenizer *tok = df_tokenizer_load(path, &err);
    if (tok) fail_msg("%s loaded, expected an error mentioning '%s'", path, fragment);
    if (!strstr(err.msg, path) || !strstr(err.msg, fragment))
        fail_msg("error '%s' does not name %s and '%s'", err.msg, path, fragment);
}

static void test_malformed_files(void **state) {
    char *dir = df_test_tmpdir("tokenizer");
    char path[512];
    const char *byte_level = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);

    write_tokenizer(path, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}",
                    byte_level);
    DfError err = {0};
    DfTokenizer *tok = df_tokenizer_load(dir, &err); /* a directory holding tokenizer.json */
    if (!tok) fail_msg("%s", err.msg);
    DfI32Vec ids = {0};
    assert_int_equal(df_tokenizer_encode(tok, "ab", 2, &ids, &err), 0);
    assert_int_equal(ids.len, 1);
    assert_int_equal(ids.data[0], 2);
    df_i32vec_free(&ids);
    df_tokenizer_free(tok);

    df_test_write_file(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,");
    expect_load_error(path, "invalid JSON");
    write_tokenizer(path, "{\"type\": \"BPE\", \"merges\": []}", byte_level);
    expect_load_error(path, "model.vocab");
    write_tokenizer(path, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}", byte_level);
    expect_load_error(path, "model.merges[0]");
    write_tokenizer(path, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}", byte_level);
    expect_load_error(path, "'ab' is not in model.vocab");
    write_tokenizer(path, "{\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}", byte_level);
    expect_load_error(path, "model.type");
    write_tokenizer(path, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}",
                    "{\"type\": \"Whitespace\"}");
    expect_load_error(path, "pre_tokenizer.type");
    write_tokenizer(path, "{\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}", byte_level);
    expect_load_error(path, "model.vocab[\"a\"]");
    expect_load_error("/nonexistent/dflash/tokenizer.json", "tokenizer.json");
    df_test_rmtree(dir);
    free(dir);
}

static void test_threads_match_single(void **state) {
    Corpus corpus = load_corpus();
    DfTokenizer *tok = load_tokenizer("tests/.cache/tokenizers/llama3/tokenizer.json");
    DfI32Vec *single = calloc(corpus.n, sizeof *single), *multi = calloc(corpus.n, sizeof *multi);
    for (size_t i = 0; i < corpus.n; i++) {
        DfError err = {0};
        assert_int_equal(df_tokenizer_encode(tok, corpus.texts[i], corpus.lens[i], &single[i], &err), 0);
    }
    int failures = 0;
#pragma omp parallel for num_threads(2) schedule(dynamic, 16) reduction(+ : failures)
    for (size_t i = 0; i < corpus.n; i++) {
        DfError err = {0};
        if (df_tokenizer_encode(tok, corpus.texts[i], corpus.lens[i], &multi[i], &err) < 0) failures++;
    }
    assert_int_equal(failures, 0);
    for (size_t i = 0; i < corpus.n; i++) {
        assert_int_equal(single[i].len, multi[i].len);
        assert_memory_equal(single[i].data, multi[i].data, single[i].len * sizeof(int32_t));
        df_i32vec_free(&single[i]);
        df_i32vec_free(&multi[i]);
    }
    free(single);
    free(multi);
    df_tokenizer_free(tok);
    free_corpus(&corpus);
}

/* `dflash tokenize` on the corpus: every output line equals the reference ids. */
static void test_cli_encode_file(void **state) {
    char *dir = df_test_tmpdir("tokenize-cli");
    char cmd[2048], out_path[512], msg[4096];
    snprintf(out_path, sizeof out_path, "%s/ids.jsonl", dir);
    snprintf(cmd, sizeof cmd, "'%s' tokenize --tokenizer '%s' --input '%s' --output '%s'", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), df_test_path(FIXTURES "corpus.jsonl"), out_path);
    if (df_test_run(cmd, msg, sizeof msg) != 0) fail_msg("%s failed: %s", cmd, msg);
    char **got, **want;
    size_t *got_lens, *want_lens;
    size_t n = read_lines(out_path, &got, &got_lens);
    size_t m = read_lines(df_test_path(FIXTURES "ids_coder-tiny.jsonl"), &want, &want_lens);
    assert_int_equal(n, m);
    for (size_t i = 0; i < n; i++) {
        cJSON *a = cJSON_ParseWithLength(got[i], got_lens[i]), *b = cJSON_ParseWithLength(want[i], want_lens[i]);
        assert_non_null(a);
        if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, "ids"), cJSON_GetObjectItemCaseSensitive(b, "ids"), 1))
            fail_msg("line %zu: %s", i + 1, got[i]);
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
    /* and back: --decode gives the reference decoded text */
    char text_path[512];
    snprintf(text_path, sizeof text_path, "%s/text.jsonl", dir);
    snprintf(cmd, sizeof cmd, "'%s' tokenize --decode --tokenizer '%s' --input '%s' --output '%s'",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), out_path, text_path);
    if (df_test_run(cmd, msg, sizeof msg) != 0) fail_msg("%s failed: %s", cmd, msg);
    char **texts;
    size_t *text_lens;
    assert_int_equal(read_lines(text_path, &texts, &text_lens), n);
    for (size_t i = 0; i < n; i++) {
        DfByteBuf a = {0}, b = {0};
        DfError err = {0};
        assert_int_equal(df_json_get_string(texts[i], text_lens[i], "text", &a, &err), 0);
        assert_int_equal(df_json_get_string(want[i], want_lens[i], "decoded", &b, &err), 0);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len);
        df_bytebuf_free(&a);
        df_bytebuf_free(&b);
    }
    free_lines(texts, text_lens, n);
    free_lines(got, got_lens, n);
    free_lines(want, want_lens, m);
    df_test_rmtree(dir);
    free(dir);
}

/* A bad line stops the command, names file and line, and leaves no output. */
static void test_cli_bad_line(void **state) {
    char *dir = df_test_tmpdir("tokenize-cli");
    char in_path[512], out_path[512], cmd[2048], msg[4096], expect[600];
    snprintf(in_path, sizeof in_path, "%s/bad.jsonl", dir);
    snprintf(out_path, sizeof out_path, "%s/out.jsonl", dir);
    const char *cases[][2] = {
        {"{\"text\": \"ok\"}\n\n{\"text\": \"fine\"}\n{\"text\": \"broken\"\n", ""},
        {"{\"text\": \"ok\"}\n{\"prompt\": \"x\"}\n", ""},
        {"{\"ids\": [1, 2]}\n{\"ids\": [1, 99999999]}\n", "--decode"},
    };
    const int bad_line[] = {4, 2, 2};
    for (int k = 0; k < 3; k++) {
        df_test_write_file(in_path, cases[k][0]);
        snprintf(cmd, sizeof cmd, "'%s' tokenize %s --tokenizer '%s' --input '%s' --output '%s'",
                 df_test_path("dflash"), cases[k][1], df_test_path("assets/coder-tiny"), in_path, out_path);
        int rc = df_test_run(cmd, msg, sizeof msg);
        assert_int_not_equal(rc, 0);
        snprintf(expect, sizeof expect, "%s:%d:", in_path, bad_line[k]);
        if (!strstr(msg, expect)) fail_msg("case %d: message '%s' does not name %s", k, msg, expect);
        assert_false(df_test_file_exists(out_path));
    }
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_coder_tiny),
        cmocka_unit_test(test_parity_qwen3),
        cmocka_unit_test(test_parity_llama3),
        cmocka_unit_test(test_special_tokens_in_text),
        cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_decode_out_of_range),
        cmocka_unit_test(test_decode_invalid_utf8),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_threads_match_single),
        cmocka_unit_test(test_cli_encode_file),
        cmocka_unit_test(test_cli_bad_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
