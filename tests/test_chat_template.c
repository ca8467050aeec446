/* Chat templates against transformers (tests/ref/chat_ref.py): for ~30
 * conversations and the real Qwen3 and Llama-3 tokenizers, the rendered text
 * and the token ids equal apply_chat_template's, and the assistant-only loss
 * mask equals the one derived in Python from the rendered text's spans.
 * Other templates are refused with an error naming tokenizer_config.json. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mapped_file.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

static cJSON *load_json(const char *rel) {
    DfError err = {{0}};
    size_t size;
    char *text = df_read_text_file(df_test_path(rel), &size, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

/* The messages of one conversation ([{"role", "content"}, ...]). */
static int to_messages(const cJSON *conv, DfChatMessage *out, int cap) {
    int n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, conv) {
        assert_true(n < cap);
        const char *role = cJSON_GetObjectItem(m, "role")->valuestring;
        const char *content = cJSON_GetObjectItem(m, "content")->valuestring;
        int r = df_chat_role_parse(role, strlen(role));
        assert_true(r >= 0);
        out[n++] = (DfChatMessage){(DfChatRole)r, content, strlen(content)};
    }
    return n;
}

/* The generation prompt of the conversation up to its last user message
 * against transformers' (null in the fixture when there is no user message). */
static void check_prompt(const DfChatTemplate *t, const DfChatMessage *msgs, int n, const cJSON *want,
                         const char *family, int c) {
    if (!want) fail_msg("%s conversation %d: the fixture has no prompt_text (remake it with tests/ref/chat_ref.py)",
                        family, c);
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (msgs[i].role == DF_ROLE_USER) last_user = i;
    if (last_user < 0) {
        assert_true(cJSON_IsNull(want));
        return;
    }
    DfByteBuf text = {0};
    DfError err = {{0}};
    if (df_chat_render_prompt(t, msgs, last_user + 1, &text, &err) != 0) fail_msg("%s", err.msg);
    if (strcmp(text.data, want->valuestring) != 0)
        fail_msg("%s conversation %d: generation prompt\n%s\nwant\n%s", family, c, text.data, want->valuestring);
    df_bytebuf_free(&text);
}

static void check_family(const char *family) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/.cache/tokenizers/%s", family);
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path(rel), &err);
    if (!tok) fail_msg("%s", err.msg);
    DfChatTemplate *t = df_chat_template_load(df_test_path(rel), &err);
    if (!t) fail_msg("%s", err.msg);
    assert_string_equal(df_chat_family_name(df_chat_template_family(t)), family);
    cJSON *convs = load_json("tests/fixtures/chat/conversations.json");
    snprintf(rel, sizeof rel, "tests/fixtures/chat/%s.json", family);
    cJSON *ref = load_json(rel);
    const cJSON *date = cJSON_GetObjectItem(ref, "date_string"); /* the date the reference was rendered with */
    if (date && df_chat_template_set_date(t, date->valuestring, &err) != 0) fail_msg("%s", err.msg);
    const cJSON *results = cJSON_GetObjectItem(ref, "results");
    const cJSON *conv = cJSON_GetObjectItem(convs, "conversations")->child;
    int c = 0, masked = 0;
    for (const cJSON *want = results->child; want; want = want->next, conv = conv->next, c++) {
        assert_non_null(conv);
        DfChatMessage msgs[16];
        int n = to_messages(conv, msgs, 16);
        DfByteBuf text = {0};
        assert_int_equal(df_chat_render(t, msgs, n, &text, NULL, &err), 0);
        const char *want_text = cJSON_GetObjectItem(want, "text")->valuestring;
        if (strcmp(text.data, want_text) != 0)
            fail_msg("%s conversation %d: rendered\n%s\nwant\n%s", family, c, text.data, want_text);
        check_prompt(t, msgs, n, cJSON_GetObjectItem(want, "prompt_text"), family, c);
        DfI32Vec ids = {0};
        DfByteBuf mask = {0};
        if (df_chat_tokenize(t, tok, msgs, n, &ids, &mask, &err) != 0) fail_msg("%s", err.msg);
        const cJSON *want_ids = cJSON_GetObjectItem(want, "ids"), *want_mask = cJSON_GetObjectItem(want, "mask");
        assert_int_equal(ids.len, cJSON_GetArraySize(want_ids));
        assert_int_equal(mask.len, ids.len);
        size_t k = 0;
        for (const cJSON *a = want_ids->child, *b = want_mask->child; a; a = a->next, b = b->next, k++) {
            if (ids.data[k] != a->valueint) fail_msg("%s conversation %d: id %zu is %d, want %d", family, c, k, ids.data[k], a->valueint);
            if (mask.data[k] != b->valueint)
                fail_msg("%s conversation %d: mask %zu is %d, want %d", family, c, k, mask.data[k], b->valueint);
            masked += mask.data[k];
        }
        df_i32vec_free(&ids);
        df_bytebuf_free(&mask);
        df_bytebuf_free(&text);
    }
    assert_true(c >= 30);
    assert_true(masked > 100);
    cJSON_Delete(ref);
    cJSON_Delete(convs);
    df_chat_template_free(t);
    df_tokenizer_free(tok);
}

static void test_qwen3(void **state) { (void)state; check_family("qwen3"); }
static void test_llama3(void **state) { (void)state; check_family("llama3"); }
static void test_llama31(void **state) { (void)state; check_family("llama3.1"); }

/* A Llama-3.1 template in a scratch tokenizer_config.json. */
static DfChatTemplate *load_llama31_variant(const char *dir, const char *date_lines) {
    char path[1024], json[2048];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(json, sizeof json,
             "{\"bos_token\": \"<|begin_of_text|>\", \"chat_template\": \"{{- bos_token }}%s"
             "{{- 'Cutting Knowledge Date: December 2023' }}{{- '<|start_header_id|>' + m.role + "
             "'<|end_header_id|>' + m.content | trim + '<|eot_id|>' }}\"}",
             date_lines);
    df_test_write_file(path, json);
    DfError err = {{0}};
    DfChatTemplate *t = df_chat_template_load(dir, &err);
    if (!t) fail_msg("%s", err.msg);
    return t;
}

/* The date when none is given: today's where the template calls strftime_now
 * (transformers' rendering), else the template's own default; a set date wins. */
static void test_llama31_date(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("chat_date");
    DfChatTemplate *t = load_llama31_variant(dir, "{%- set date_string = strftime_now(\\\"%d %b %Y\\\") %}");
    char today[32];
    time_t now = time(NULL);
    struct tm local;
    localtime_r(&now, &local);
    strftime(today, sizeof today, "%d %b %Y", &local);
    assert_string_equal(df_chat_template_date(t), today);
    df_chat_template_free(t);
    t = load_llama31_variant(dir, "{%- set date_string = \\\"03 Mar 2025\\\" %}");
    assert_string_equal(df_chat_template_date(t), "03 Mar 2025");
    DfError err = {{0}};
    assert_int_equal(df_chat_template_set_date(t, "1 Jan 2030", &err), 0);
    DfChatMessage msgs[2] = {{DF_ROLE_USER, " hi ", 4}, {DF_ROLE_ASSISTANT, "yo", 2}};
    DfByteBuf text = {0};
    assert_int_equal(df_chat_render(t, msgs, 2, &text, NULL, &err), 0);
    assert_string_equal(text.data, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                                   "Cutting Knowledge Date: December 2023\nToday Date: 1 Jan 2030\n\n<|eot_id|>"
                                   "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                                   "<|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|>");
    assert_int_equal(df_chat_template_set_date(t, "two\nlines", &err), -1);
    assert_int_equal(df_chat_template_set_date(t, "", &err), -1);
    df_bytebuf_free(&text);
    df_chat_template_free(t);
    df_test_rmtree(dir);
    free(dir);
    /* families without a date refuse one */
    t = df_chat_template_load(df_test_path("tests/.cache/tokenizers/qwen3"), &err);
    if (!t) fail_msg("%s", err.msg);
    assert_null(df_chat_template_date(t));
    assert_int_equal(df_chat_template_set_date(t, "1 Jan 2030", &err), -1);
    df_chat_template_free(t);
}

static void test_refuses_other_templates(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("chat_template");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *configs[] = {
        "{\"chat_template\": \"{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}\"}",
        "{\"bos_token\": \"<s>\", \"chat_template\": \"{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}\"}",
        "{\"eos_token\": \"x\"}",
        "not json",
    };
    for (int i = 0; i < 4; i++) {
        df_test_write_file(path, configs[i]);
        DfError err = {{0}};
        assert_null(df_chat_template_load(dir, &err));
        if (!strstr(err.msg, "tokenizer_config.json")) fail_msg("the error does not name the file: %s", err.msg);
    }
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_llama31_date),
        cmocka_unit_test(test_refuses_other_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
