/* dflash prepare, end to end through the binary: prompt/response records give
 * exactly the tokenizer's ids with the loss mask on the response, input_ids
 * records round trip, several inputs concatenate in order, and every kind of
 * bad record in tests/malformed/jsonl/ is reported by file:line, skipped or
 * fatal. Also the JSONL line reader that prepare reads with. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "formats/jsonl.h"
#include "formats/token_store.h"
#include "text/tokenizer.h"

enum { OUT_CAP = 1 << 16 };

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Runs `dflash prepare` with the coder-tiny tokenizer and the given extra
 * arguments; returns the exit status and the combined output in out. */
static int run_prepare(const char *args, char *out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' prepare --tokenizer '%s' %s", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), args);
    return df_test_run(cmd, out, OUT_CAP);
}

static DfTokenStore *open_store(const char *path) {
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(path, 1, &err);
    if (!st) fail_msg("%s", err.msg);
    return st;
}

/* ---- JSONL reader ------------------------------------------------------- */

typedef struct Line {
    char *text;
    int64_t no;
} Line;

static int read_all_lines(const char *path, Line *lines, int cap, uint64_t *bytes) {
    DfJsonlReader r;
    DfError err = {{0}};
    assert_int_equal(df_jsonl_open(&r, path, &err), 0);
    int n = 0, rc;
    const char *line;
    size_t len;
    int64_t no;
    while ((rc = df_jsonl_next(&r, &line, &len, &no, &err)) == 1) {
        assert_true(n < cap);
        assert_int_equal(strlen(line), len);
        lines[n].text = strdup(line);
        lines[n++].no = no;
    }
    assert_int_equal(rc, 0);
    *bytes = df_jsonl_bytes_read(&r);
    assert_true(*bytes == df_jsonl_file_size(&r));
    df_jsonl_close(&r);
    return n;
}

static void test_jsonl_line_endings_and_numbers(void **state) {
    char *dir = df_test_tmpdir("jsonl");
    char path[512];
    snprintf(path, sizeof path, "%s/a.jsonl", dir);
    /* BOM, CRLF, blank and whitespace-only lines, no final newline. */
    df_test_write_file(path, "\xEF\xBB\xBF{\"a\":1}\r\n\r\n   \n{\"b\":2}\n\t\n{\"c\":3}");
    Line lines[8];
    uint64_t bytes;
    int n = read_all_lines(path, lines, 8, &bytes);
    assert_int_equal(n, 3);
    assert_string_equal(lines[0].text, "{\"a\":1}");
    assert_int_equal(lines[0].no, 1);
    assert_string_equal(lines[1].text, "{\"b\":2}");
    assert_int_equal(lines[1].no, 4);
    assert_string_equal(lines[2].text, "{\"c\":3}");
    assert_int_equal(lines[2].no, 6);
    for (int i = 0; i < n; i++) free(lines[i].text);

    df_test_write_file(path, "");
    assert_int_equal(read_all_lines(path, lines, 8, &bytes), 0);
    df_test_write_file(path, "\n\n");
    assert_int_equal(read_all_lines(path, lines, 8, &bytes), 0);

    DfJsonlReader r;
    DfError err = {{0}};
    snprintf(path, sizeof path, "%s/missing.jsonl", dir);
    assert_int_equal(df_jsonl_open(&r, path, &err), -1);
    assert_non_null(strstr(err.msg, path));
    df_test_rmtree(dir);
    free(dir);
}

/* Lines longer than the reader's buffer, and many lines spanning refills. */
static void test_jsonl_long_lines(void **state) {
    char *dir = df_test_tmpdir("jsonl");
    char path[512];
    snprintf(path, sizeof path, "%s/long.jsonl", dir);
    size_t lens[5] = {3u << 20, 5, (1u << 20) - 1, 1u << 20, 7000001};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t total = 0;
    for (int i = 0; i < 5; i++) {
        for (size_t k = 0; k < lens[i]; k++) fputc('a' + (int)((k + (size_t)i) % 26), f);
        fputs(i % 2 ? "\r\n" : "\n", f);
        total += lens[i] + (i % 2 ? 2 : 1);
    }
    fclose(f);
    Line lines[8];
    uint64_t bytes;
    assert_int_equal(read_all_lines(path, lines, 8, &bytes), 5);
    assert_true(bytes == total);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(strlen(lines[i].text), lens[i]);
        assert_int_equal(lines[i].no, i + 1);
        for (size_t k = 0; k < lens[i]; k += 4099) assert_int_equal(lines[i].text[k], 'a' + (int)((k + (size_t)i) % 26));
        free(lines[i].text);
    }
    df_test_rmtree(dir);
    free(dir);
}

/* ---- prompt / response -------------------------------------------------- */

static void test_prompt_response_matches_tokenizer(void **state) {
    char *dir = df_test_tmpdir("prepare");
    char store[512], args[2048], out[OUT_CAP];
    snprintf(store, sizeof store, "%s/dev.store", dir);
    const char *input = df_test_path("assets/data/code-dev.jsonl");
    snprintf(args, sizeof args, "--input '%s' --output '%s' --threads 2", input, store);
    int rc = run_prepare(args, out);
    if (rc != 0) fail_msg("prepare failed (%d): %s", rc, out);

    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path("assets/coder-tiny"), &err);
    if (!tok) fail_msg("%s", err.msg);
    DfTokenStore *st = open_store(store);
    assert_int_equal(df_token_store_vocab_size(st), df_tokenizer_vocab_size(tok));
    assert_true(df_token_store_fingerprint(st) == df_tokenizer_fingerprint(tok));

    size_t size;
    char *text = df_read_text_file(input, &size, &err);
    assert_non_null(text);
    int64_t sample = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), sample++) {
        cJSON *rec = cJSON_Parse(line);
        assert_non_null(rec);
        const char *prompt = cJSON_GetObjectItem(rec, "prompt")->valuestring;
        const char *response = cJSON_GetObjectItem(rec, "response")->valuestring;
        DfI32Vec p = {0}, r = {0};
        assert_int_equal(df_tokenizer_encode(tok, prompt, strlen(prompt), &p, &err), 0);
        assert_int_equal(df_tokenizer_encode(tok, response, strlen(response), &r, &err), 0);
        const int32_t *ids;
        const uint8_t *mask;
        int64_t len;
        assert_int_equal(df_token_store_sample(st, sample, &ids, &mask, &len, &err), 0);
        assert_int_equal(len, (int64_t)(p.len + r.len));
        assert_memory_equal(ids, p.data, p.len * sizeof(int32_t));
        assert_memory_equal(ids + p.len, r.data, r.len * sizeof(int32_t));
        for (size_t k = 0; k < p.len + r.len; k++) assert_int_equal(mask[k], k >= p.len);
        df_i32vec_free(&p);
        df_i32vec_free(&r);
        cJSON_Delete(rec);
    }
    assert_int_equal(df_token_store_num_samples(st), sample);
    assert_int_equal(sample, 64);
    assert_non_null(strstr(out, "wrote 64 samples"));
    assert_non_null(strstr(out, store));
    free(text);
    df_token_store_close(st);
    df_tokenizer_free(tok);
    df_test_rmtree(dir);
    free(dir);
}

/* ---- input_ids ---------------------------------------------------------- */

typedef struct IdRecords {
    int n;
    int len[64];
    int32_t ids[64][40];
    uint8_t mask[64][40];
} IdRecords;

/* Random input_ids records (ids below 8000, at least one loss token each),
 * written to `path` as JSONL with some blank lines in between. */
static void write_id_records(const char *path, IdRecords *R, int n, uint64_t seed) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    R->n = n;
    for (int i = 0; i < n; i++) {
        R->len[i] = 1 + (int)(next_random(&s) % 40);
        fputs("{\"input_ids\": [", f);
        for (int k = 0; k < R->len[i]; k++) {
            R->ids[i][k] = (int32_t)(next_random(&s) % 8000);
            fprintf(f, "%s%d", k ? ", " : "", R->ids[i][k]);
        }
        fputs("], \"loss_mask\": [", f);
        for (int k = 0; k < R->len[i]; k++) {
            R->mask[i][k] = k == R->len[i] - 1 ? 1 : (uint8_t)(next_random(&s) & 1);
            fprintf(f, "%s%d", k ? ", " : "", R->mask[i][k]);
        }
        fputs("], \"id\": \"extra fields are ignored\"}\n", f);
        if (i % 7 == 3) fputs("\n", f);
    }
    fclose(f);
}

static void expect_sample(const DfTokenStore *st, int64_t i, const IdRecords *R, int r) {
    const int32_t *ids;
    const uint8_t *mask;
    int64_t len;
    DfError err = {{0}};
    assert_int_equal(df_token_store_sample(st, i, &ids, &mask, &len, &err), 0);
    assert_int_equal(len, R->len[r]);
    assert_memory_equal(ids, R->ids[r], (size_t)len * sizeof(int32_t));
    assert_memory_equal(mask, R->mask[r], (size_t)len);
}

static void test_input_ids_round_trip(void **state) {
    char *dir = df_test_tmpdir("prepare");
    char input[512], store[512], args[2048], out[OUT_CAP];
    snprintf(input, sizeof input, "%s/ids.jsonl", dir);
    snprintf(store, sizeof store, "%s/ids.store", dir);
    IdRecords *R = calloc(1, sizeof *R);
    write_id_records(input, R, 50, 7);
    snprintf(args, sizeof args, "--input '%s' --output '%s' --on-bad-record fail", input, store);
    int rc = run_prepare(args, out);
    if (rc != 0) fail_msg("prepare failed (%d): %s", rc, out);
    DfTokenStore *st = open_store(store);
    assert_int_equal(df_token_store_num_samples(st), R->n);
    for (int i = 0; i < R->n; i++) expect_sample(st, i, R, i);
    df_token_store_close(st);
    free(R);
    df_test_rmtree(dir);
    free(dir);
}

static void test_several_inputs_concatenate_in_order(void **state) {
    char *dir = df_test_tmpdir("prepare");
    char in1[512], in2[512], in3[512], store[512], args[4096], out[OUT_CAP];
    snprintf(in1, sizeof in1, "%s/one.jsonl", dir);
    snprintf(in2, sizeof in2, "%s/two.jsonl", dir);
    snprintf(in3, sizeof in3, "%s/three.jsonl", dir);
    snprintf(store, sizeof store, "%s/all.store", dir);
    IdRecords *R1 = calloc(1, sizeof *R1), *R2 = calloc(1, sizeof *R2), *R3 = calloc(1, sizeof *R3);
    write_id_records(in1, R1, 30, 1);
    write_id_records(in2, R2, 11, 2);
    write_id_records(in3, R3, 64, 3);
    snprintf(args, sizeof args, "--input '%s' --input '%s' --input '%s' --output '%s' --threads 2", in2, in3, in1, store);
    int rc = run_prepare(args, out);
    if (rc != 0) fail_msg("prepare failed (%d): %s", rc, out);
    DfTokenStore *st = open_store(store);
    assert_int_equal(df_token_store_num_samples(st), R1->n + R2->n + R3->n);
    int64_t at = 0;
    for (int i = 0; i < R2->n; i++) expect_sample(st, at++, R2, i);
    for (int i = 0; i < R3->n; i++) expect_sample(st, at++, R3, i);
    for (int i = 0; i < R1->n; i++) expect_sample(st, at++, R1, i);
    df_token_store_close(st);
    free(R1), free(R2), free(R3);
    df_test_rmtree(dir);
    free(dir);
}

/* ---- malformed records -------------------------------------------------- */

/* Each tests/malformed/jsonl/CASE.jsonl holds two good records and one bad
 * one; CASE.expected holds the message expected for it (file:line: text) and
 * the line of the skip summary that counts it. */
static void check_malformed_case(const char *dir, const char *name) {
    char input[1024], expected_path[1024], store[1024], args[4096], out[OUT_CAP];
    snprintf(input, sizeof input, "%s", df_test_path("tests/malformed/jsonl"));
    snprintf(input + strlen(input), sizeof input - strlen(input), "/%s", name);
    snprintf(expected_path, sizeof expected_path, "%.*s.expected", (int)(strlen(input) - 6), input);
    snprintf(store, sizeof store, "%s/%s.store", dir, name);
    DfError err = {{0}};
    char *expected = df_read_text_file(expected_path, NULL, &err);
    if (!expected) fail_msg("%s", err.msg);
    char *summary_line = strchr(expected, '\n');
    assert_non_null(summary_line);
    *summary_line++ = '\0';
    summary_line[strcspn(summary_line, "\n")] = '\0';

    /* skip: the bad record is counted and named, the two good ones written */
    snprintf(args, sizeof args, "--input '%s' --output '%s' --max-length 16", input, store);
    int rc = run_prepare(args, out);
    if (rc != 0) fail_msg("%s: skip mode failed (%d): %s", name, rc, out);
    if (!strstr(out, expected) || !strstr(out, summary_line))
        fail_msg("%s: expected \"%s\" and \"%s\" in:\n%s", name, expected, summary_line, out);
    assert_non_null(strstr(out, "skipped 1 of 3 records"));
    DfTokenStore *st = open_store(store);
    assert_int_equal(df_token_store_num_samples(st), 2);
    assert_int_equal(df_token_store_sample_length(st, 0), 4);
    assert_int_equal(df_token_store_sample_length(st, 1), 3);
    df_token_store_close(st);
    remove(store);

    /* fail: non-zero exit naming file:line, and no store at all */
    snprintf(args, sizeof args, "--input '%s' --output '%s' --max-length 16 --on-bad-record fail", input, store);
    rc = run_prepare(args, out);
    if (rc == 0 || !strstr(out, expected)) fail_msg("%s: fail mode exited %d, expected \"%s\" in:\n%s", name, rc, expected, out);
    assert_false(df_test_file_exists(store));
    free(expected);
}

static void test_malformed_catalogue(void **state) {
    char *dir = df_test_tmpdir("prepare-bad");
    DIR *d = opendir(df_test_path("tests/malformed/jsonl"));
    assert_non_null(d);
    int cases = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 6, ".jsonl") != 0) continue;
        check_malformed_case(dir, e->d_name);
        cases++;
    }
    closedir(d);
    assert_true(cases >= 6);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir); /* no store or temporary left behind */
    assert_int_equal(df_test_run(cmd, NULL, 0), 0);
    df_test_rmtree(dir);
    free(dir);
}

/* Only bad records, or a missing input: failure, and nothing written. */
static void test_nothing_usable_writes_nothing(void **state) {
    char *dir = df_test_tmpdir("prepare");
    char input[512], store[512], args[2048], out[OUT_CAP];
    snprintf(input, sizeof input, "%s/bad.jsonl", dir);
    snprintf(store, sizeof store, "%s/bad.store", dir);
    df_test_write_file(input, "not json\n{\"input_ids\": [], \"loss_mask\": []}\n");
    snprintf(args, sizeof args, "--input '%s' --output '%s'", input, store);
    assert_int_not_equal(run_prepare(args, out), 0);
    assert_non_null(strstr(out, "no usable records"));
    assert_non_null(strstr(out, "bad.jsonl:1:")); /* each kind's first example names its line */
    assert_non_null(strstr(out, "bad.jsonl:2:"));
    assert_false(df_test_file_exists(store));

    snprintf(args, sizeof args, "--input '%s/none.jsonl' --output '%s'", dir, store);
    assert_int_not_equal(run_prepare(args, out), 0);
    assert_non_null(strstr(out, "none.jsonl"));
    assert_false(df_test_file_exists(store));
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsonl_line_endings_and_numbers),
        cmocka_unit_test(test_jsonl_long_lines),
        cmocka_unit_test(test_prompt_response_matches_tokenizer),
        cmocka_unit_test(test_input_ids_round_trip),
        cmocka_unit_test(test_several_inputs_concatenate_in_order),
        cmocka_unit_test(test_malformed_catalogue),
        cmocka_unit_test(test_nothing_usable_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
