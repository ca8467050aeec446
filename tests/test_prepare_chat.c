/* dflash prepare on chat and Arrow inputs, and dflash inspect on the store:
 * the same 13 conversations as JSONL messages, JSONL ShareGPT, Arrow stream
 * (LZ4), Arrow file (ZSTD) and Arrow ShareGPT all give the samples that
 * transformers gives (tests/fixtures/chat/qwen3.json, made by chat_ref.py)
 * with the loss mask of df_chat_tokenize (checked in test_chat_template);
 * pre-tokenized datasets folders and labels columns give the pyarrow
 * fixture's values; inspect --dump prints the store back exactly. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "formats/token_store.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#define OUT_CAP 65536

/* The loss mask df_chat_tokenize gives conversation conv, as a JSON array. */
static cJSON *library_mask(const cJSON *conv) {
    DfError err = {{0}};
    const char *dir = df_test_path("tests/.cache/tokenizers/qwen3");
    DfTokenizer *tok = df_tokenizer_load(dir, &err);
    DfChatTemplate *t = tok ? df_chat_template_load(dir, &err) : NULL;
    if (!t) fail_msg("%s", err.msg);
    DfChatMessage msgs[32];
    int n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, conv) {
        const char *role = cJSON_GetObjectItem(m, "role")->valuestring, *content = cJSON_GetObjectItem(m, "content")->valuestring;
        assert_true(n < 32);
        msgs[n++] = (DfChatMessage){(DfChatRole)df_chat_role_parse(role, strlen(role)), content, strlen(content), m};
    }
    DfI32Vec ids = {0};
    DfByteBuf mask = {0};
    if (df_chat_tokenize(t, tok, msgs, n, &ids, &mask, &err)) fail_msg("%s", err.msg);
    cJSON *out = cJSON_CreateArray();
    for (size_t k = 0; k < mask.len; k++) cJSON_AddItemToArray(out, cJSON_CreateNumber(mask.data[k]));
    df_i32vec_free(&ids);
    df_bytebuf_free(&mask);
    df_chat_template_free(t);
    df_tokenizer_free(tok);
    return out;
}

static void prepare(const char *input_rel, const char *store, char *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' prepare --tokenizer '%s' --input '%s' --output '%s' --threads 2", df_test_path("dflash"),
             df_test_path("tests/.cache/tokenizers/qwen3"), df_test_path(input_rel), store);
    int rc = df_test_run(cmd, out, OUT_CAP);
    if (rc != 0) fail_msg("prepare %s failed: %s", input_rel, out);
}

/* Sample i of the store equals the JSON arrays ids and mask (mask: 0/1 or, with labels, != -100). */
static void check_sample(const DfTokenStore *s, int64_t i, const cJSON *ids, const cJSON *mask, int labels) {
    const int32_t *got_ids;
    const uint8_t *got_mask;
    int64_t len;
    DfError err = {{0}};
    assert_int_equal(df_token_store_sample(s, i, &got_ids, &got_mask, &len, &err), 0);
    assert_int_equal(len, cJSON_GetArraySize(ids));
    int64_t k = 0;
    for (const cJSON *a = ids->child, *b = mask->child; a; a = a->next, b = b->next, k++) {
        assert_int_equal(got_ids[k], a->valueint);
        assert_int_equal(got_mask[k], labels ? b->valueint != -100 : b->valueint);
    }
}

static void test_chat_inputs_match_transformers(void **state) {
    (void)state;
    cJSON *ref = df_test_load_json("tests/fixtures/chat/qwen3.json"), *chosen = df_test_load_json("tests/fixtures/arrow/prepare_chat.json");
    cJSON *convs = df_test_load_json("tests/fixtures/chat/conversations.json");
    const cJSON *results = cJSON_GetObjectItem(ref, "results"), *indices = cJSON_GetObjectItem(chosen, "indices");
    const char *inputs[] = {"tests/fixtures/arrow/messages.jsonl", "tests/fixtures/arrow/sharegpt.jsonl",
                            "tests/fixtures/arrow/messages_stream_lz4.arrow", "tests/fixtures/arrow/messages_file_zstd.arrow",
                            "tests/fixtures/arrow/sharegpt.arrow"};
    char *dir = df_test_tmpdir("prepare_chat");
    char store[1024], *out = malloc(OUT_CAP);
    snprintf(store, sizeof store, "%s/s.store", dir);
    for (int in = 0; in < 5; in++) {
        prepare(inputs[in], store, out);
        DfError err = {{0}};
        DfTokenStore *s = df_token_store_open(store, 1, &err);
        assert_non_null(s);
        assert_int_equal(df_token_store_num_samples(s), cJSON_GetArraySize(indices));
        int64_t i = 0;
        for (const cJSON *ix = indices->child; ix; ix = ix->next, i++) {
            const cJSON *want = cJSON_GetArrayItem(results, ix->valueint);
            cJSON *mask = library_mask(cJSON_GetArrayItem(cJSON_GetObjectItem(convs, "conversations"), ix->valueint));
            check_sample(s, i, cJSON_GetObjectItem(want, "ids"), mask, 0);
            cJSON_Delete(mask);
        }
        df_token_store_close(s);
    }
    df_test_rmtree(dir);
    free(dir);
    free(out);
    cJSON_Delete(ref);
    cJSON_Delete(chosen);
    cJSON_Delete(convs);
}

static void test_pretokenized_arrow(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("prepare_arrow");
    char store[1024], *out = malloc(OUT_CAP);
    snprintf(store, sizeof store, "%s/s.store", dir);
    DfError err = {{0}};

    cJSON *ds = df_test_load_json("tests/fixtures/arrow/dataset.json");
    const cJSON *cols = cJSON_GetObjectItem(ds, "columns");
    prepare("tests/fixtures/arrow/dataset", store, out);
    DfTokenStore *s = df_token_store_open(store, 1, &err);
    assert_non_null(s);
    const cJSON *ids = cJSON_GetObjectItem(cols, "input_ids")->child, *mask = cJSON_GetObjectItem(cols, "loss_mask")->child;
    int64_t i = 0;
    for (; ids; ids = ids->next, mask = mask->next, i++) check_sample(s, i, ids, mask, 0);
    assert_int_equal(df_token_store_num_samples(s), i);
    df_token_store_close(s);
    cJSON_Delete(ds);

    /* labels.arrow (written by arrow_ref.py): -100 masked; the last row has no loss tokens and is skipped */
    prepare("tests/fixtures/arrow/labels.arrow", store, out);
    assert_non_null(strstr(out, "no loss tokens: 1"));
    assert_non_null(strstr(out, "labels.arrow:row 2"));
    cJSON *want = cJSON_Parse("[[[1,2,3,4,5],[-100,-100,3,4,5]],[[6,7,8],[-100,7,-100]]]");
    s = df_token_store_open(store, 1, &err);
    assert_non_null(s);
    assert_int_equal(df_token_store_num_samples(s), 2);
    for (i = 0; i < 2; i++) {
        const cJSON *row = cJSON_GetArrayItem(want, (int)i);
        check_sample(s, i, cJSON_GetArrayItem(row, 0), cJSON_GetArrayItem(row, 1), 1);
    }
    df_token_store_close(s);
    cJSON_Delete(want);

    /* prompt/response strings: the null prompt row is reported with its row number */
    prepare("tests/fixtures/arrow/prompt_response.arrow", store, out);
    assert_non_null(strstr(out, "wrote 3 samples"));
    assert_non_null(strstr(out, "prompt_response.arrow:row 2: prompt is null"));
    df_test_rmtree(dir);
    free(dir);
    free(out);
}

static void test_inspect_dump_round_trip(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("inspect_dump");
    char store[1024], cmd[4096], *out = malloc(OUT_CAP);
    snprintf(store, sizeof store, "%s/s.store", dir);
    prepare("tests/fixtures/arrow/messages.jsonl", store, out);
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s'", df_test_path("dflash"), store);
    assert_int_equal(df_test_run(cmd, out, OUT_CAP), 0);
    DfError err = {{0}};
    DfTokenStore *s = df_token_store_open(store, 1, &err);
    char line[128];
    snprintf(line, sizeof line, "samples: %lld\n", (long long)df_token_store_num_samples(s));
    assert_non_null(strstr(out, line));
    snprintf(line, sizeof line, "loss tokens: %lld (", (long long)df_token_store_num_loss_tokens(s));
    assert_non_null(strstr(out, line));
    assert_non_null(strstr(out, "length histogram:"));

    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' --dump 5", df_test_path("dflash"), store);
    assert_int_equal(df_test_run(cmd, out, OUT_CAP), 0);
    int64_t i = 0;
    for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1, i++) {
        *nl = '\0';
        cJSON *j = cJSON_Parse(p);
        assert_non_null(j);
        check_sample(s, i, cJSON_GetObjectItem(j, "input_ids"), cJSON_GetObjectItem(j, "loss_mask"), 0);
        cJSON_Delete(j);
    }
    assert_int_equal(i, 5);
    df_token_store_close(s);

    snprintf(cmd, sizeof cmd, "'%s' inspect '%s'", df_test_path("dflash"), df_test_path("tests/fixtures/arrow/dataset"));
    assert_int_equal(df_test_run(cmd, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "rows: 5\nbatches: 2\n"));
    assert_non_null(strstr(out, "list<int32>"));
    df_test_rmtree(dir);
    free(dir);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_inputs_match_transformers),
        cmocka_unit_test(test_pretokenized_arrow),
        cmocka_unit_test(test_inspect_dump_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
