/* Chat templates against transformers (tests/ref/chat_ref.py): for ~30
 * conversations and the real Qwen3 and Llama-3 tokenizers, the rendered text,
 * the generation prompts and the token ids equal apply_chat_template's; the
 * assistant-only loss mask covers each assistant message's answer and the
 * end-of-turn token after it. Template sources, kwargs, the date and errors
 * (naming the file and the template's line) on scratch configs. The seed
 * family's own templates (Qwen3.5, Qwen3.6, tests/fixtures/chat_templates/)
 * through --chat-template and --chat-template-kwargs: the generation prompt
 * with thinking on and off, and the loss mask of a conversation with
 * reasoning and a tool call. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mapped_file.h"
#include "text/chat_template.h"
#include "text/tokenizer_offsets.h"
#include "text/tokenizer.h"

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
        out[n++] = (DfChatMessage){(DfChatRole)r, content, strlen(content), NULL};
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

/* Bytes of the whitespace character at p (or ending at e): ASCII, U+00A0, U+3000; 0 if none. */
static size_t space_at(const char *p, const char *e) {
    if (p < e && strchr(" \n\t\r", *p) && *p) return 1;
    if (e - p >= 2 && memcmp(p, "\xc2\xa0", 2) == 0) return 2;
    if (e - p >= 3 && memcmp(p, "\xe3\x80\x80", 3) == 0) return 3;
    return 0;
}
static size_t space_before(const char *p, const char *e) {
    if (e > p && strchr(" \n\t\r", e[-1]) && e[-1]) return 1;
    if (e - p >= 2 && memcmp(e - 2, "\xc2\xa0", 2) == 0) return 2;
    if (e - p >= 3 && memcmp(e - 3, "\xe3\x80\x80", 3) == 0) return 3;
    return 0;
}

/* The masked run at or after *k, decoded into dec (the caller frees it);
 * *k moves past it. 0 when no masked token is left. */
static int next_masked_run(const DfTokenizer *tok, const DfI32Vec *ids, const DfByteBuf *mask, size_t *k,
                           DfByteBuf *dec) {
    while (*k < ids->len && !mask->data[*k]) (*k)++;
    if (*k >= ids->len) return 0;
    size_t e = *k;
    while (e < ids->len && mask->data[e]) e++;
    DfError err = {{0}};
    *dec = (DfByteBuf){0};
    if (df_tokenizer_decode(tok, ids->data + *k, e - *k, dec, &err)) fail_msg("%s", err.msg);
    *k = e;
    return 1;
}

/* The loss mask, checked against the messages: one masked run per assistant
 * message, holding its answer (the content after any </think>, stripped) and
 * ending with the template's end-of-turn token. */
static void check_mask(const DfTokenizer *tok, const DfChatMessage *msgs, int n, const DfI32Vec *ids,
                       const DfByteBuf *mask, const char *eot, const char *family, int c) {
    int run = 0, next = 0;
    size_t k = 0;
    for (DfByteBuf dec; next_masked_run(tok, ids, mask, &k, &dec);) {
        DfError err = {{0}};
        while (next < n && msgs[next].role != DF_ROLE_ASSISTANT) next++;
        if (next >= n) fail_msg("%s conversation %d: masked run %d (%s) but no assistant message left", family, c, run, dec.data);
        const char *answer = msgs[next].content, *end = answer + msgs[next].content_len, *think;
        for (const char *p = answer; (think = strstr(p, "</think>")) && think < end; p = think + 1) answer = think + 8;
        DfByteBuf norm = {0};
        if (df_tokenizer_normalize(tok, answer, (size_t)(end - answer), &norm, &err)) fail_msg("%s", err.msg);
        const char *w = norm.data ? norm.data : "", *we = w + norm.len;
        for (size_t sp; (sp = space_at(w, we)) > 0;) w += sp;
        for (size_t sp; we > w && (sp = space_before(w, we)) > 0;) we -= sp;
        char want[4096];
        snprintf(want, sizeof want, "%.*s", (int)(we - w), w);
        df_bytebuf_free(&norm);
        size_t el = strlen(eot);
        if (!strstr(dec.data, want) || dec.len < el || strcmp(dec.data + dec.len - el, eot) != 0)
            fail_msg("%s conversation %d: masked run %d is [%s]; want the answer [%s] and %s at its end", family, c,
                     run, dec.data, want, eot);
        df_bytebuf_free(&dec);
        run++;
        next++;
    }
    while (next < n && msgs[next].role != DF_ROLE_ASSISTANT) next++;
    if (next < n) fail_msg("%s conversation %d: assistant message %d has no masked run", family, c, next);
}

static void check_family(const char *family) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/.cache/tokenizers/%s", family);
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path(rel), &err);
    if (!tok) fail_msg("%s", err.msg);
    DfChatTemplate *t = df_chat_template_load(df_test_path(rel), &err);
    if (!t) fail_msg("%s", err.msg);
    cJSON *convs = df_test_load_json("tests/fixtures/chat/conversations.json");
    snprintf(rel, sizeof rel, "tests/fixtures/chat/%s.json", family);
    cJSON *ref = df_test_load_json(rel);
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
        const cJSON *want_ids = cJSON_GetObjectItem(want, "ids");
        assert_int_equal(ids.len, cJSON_GetArraySize(want_ids));
        assert_int_equal(mask.len, ids.len);
        size_t k = 0;
        for (const cJSON *a = want_ids->child; a; a = a->next, k++)
            if (ids.data[k] != a->valueint) fail_msg("%s conversation %d: id %zu is %d, want %d", family, c, k, ids.data[k], a->valueint);
        for (k = 0; k < mask.len; k++) masked += mask.data[k];
        check_mask(tok, msgs, n, &ids, &mask, strcmp(family, "qwen3") == 0 ? "<|im_end|>" : "<|eot_id|>", family, c);
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

static DfChatTemplate *open_config(const char *dir, const char *config_json, const char *file, const char *kwargs,
                                   DfError *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    df_test_write_file(path, config_json);
    return df_chat_template_open(dir, file, kwargs, err);
}

static void expect_render(DfChatTemplate *t, const char *want) {
    DfChatMessage msgs[2] = {{DF_ROLE_USER, " hi ", 4, NULL}, {DF_ROLE_ASSISTANT, "yo", 2, NULL}};
    DfByteBuf text = {0};
    DfError err = {{0}};
    if (df_chat_render(t, msgs, 2, &text, NULL, &err) != 0) fail_msg("%s", err.msg);
    assert_string_equal(text.data, want);
    df_bytebuf_free(&text);
}

/* date_string: the template's own default (today's through strftime_now, as
 * transformers renders it) unless a date is set. */
static void test_date(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("chat_date");
    DfError err = {{0}};
    DfChatTemplate *t = open_config(dir,
        "{\"chat_template\": \"{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
        "{%- endif %}Today Date: {{ date_string }}{% for m in messages %}|{{ m.role }}:{{ m.content | trim }}{% endfor %}\"}",
        NULL, NULL, &err);
    if (!t) fail_msg("%s", err.msg);
    char today[32], want[128];
    time_t now = time(NULL);
    struct tm local;
    localtime_r(&now, &local);
    strftime(today, sizeof today, "%d %b %Y", &local);
    snprintf(want, sizeof want, "Today Date: %s|user:hi|assistant:yo", today);
    assert_null(df_chat_template_date(t));
    expect_render(t, want);
    assert_int_equal(df_chat_template_set_date(t, "1 Jan 2030", &err), 0);
    assert_string_equal(df_chat_template_date(t), "1 Jan 2030");
    expect_render(t, "Today Date: 1 Jan 2030|user:hi|assistant:yo");
    assert_int_equal(df_chat_template_set_date(t, "two\nlines", &err), -1);
    assert_int_equal(df_chat_template_set_date(t, "", &err), -1);
    df_chat_template_free(t);
    df_test_rmtree(dir);
    free(dir);
}

/* Where the template comes from: the config's string or its list's "default",
 * chat_template.jinja beside it, or an explicit file; kwargs reach it. */
static void test_template_sources_and_kwargs(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("chat_sources");
    char path[1024];
    DfError err = {{0}};
    const char *chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    DfChatTemplate *t = open_config(dir,
        "{\"chat_template\": \"{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}\"}",
        NULL, NULL, &err);
    if (!t) fail_msg("%s", err.msg);
    expect_render(t, "<|im_start|>user\n hi <|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
    df_chat_template_free(t);
    t = open_config(dir,
        "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", "
        "\"template\": \"{{ messages | length }}{{ enable_thinking is defined }}{{ extra }}\"}]}",
        NULL, "{\"enable_thinking\": false, \"extra\": [1, \"x\"]}", &err);
    if (!t) fail_msg("%s", err.msg);
    expect_render(t, "2True[1, 'x']");
    df_chat_template_free(t);
    assert_null(open_config(dir, "{\"chat_template\": \"x\"}", NULL, "[1]", &err));
    if (!strstr(err.msg, "--chat-template-kwargs")) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    df_test_write_file(path, "beside:{{ messages[1].content }}");
    t = open_config(dir, "{\"chat_template\": \"config\"}", NULL, NULL, &err);
    if (!t) fail_msg("%s", err.msg);
    expect_render(t, "beside:yo");
    df_chat_template_free(t);
    snprintf(path, sizeof path, "%s/mine.jinja", dir);
    df_test_write_file(path, chatml);
    t = open_config(dir, "{}", path, NULL, &err);
    if (!t) fail_msg("%s", err.msg);
    assert_string_equal(df_chat_template_source(t), path);
    df_chat_template_free(t);
    df_test_rmtree(dir);
    free(dir);
}

/* Errors name the file, and the line and column in the template. */
static void test_errors(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("chat_errors");
    DfError err = {{0}};
    const struct { const char *config, *want; } cases[] = {
        {"{\"eos_token\": \"x\"}", "tokenizer_config.json: no chat_template"},
        {"not json", "tokenizer_config.json: not valid JSON"},
        {"{\"chat_template\": \"a\\n{% for m in messages %}\"}", "tokenizer_config.json (chat_template): template line 2"},
        {"{\"chat_template\": \"{% include 'x' %}\"}", "the 'include' tag is not supported"},
        /* a template cut at a NUL would render something else without a word */
        {"{\"chat_template\": \"{{ bos_token }}\\u0000{{ messages }}\"}", "field 'chat_template' holds a NUL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_null(open_config(dir, cases[i].config, NULL, NULL, &err));
        if (!strstr(err.msg, cases[i].want)) fail_msg("'%s' does not say '%s'", err.msg, cases[i].want);
    }
    DfChatTemplate *t = open_config(dir,
        "{\"chat_template\": \"{% if messages[0].role != 'system' %}{{ raise_exception('System first!') }}{% endif %}\"}",
        NULL, NULL, &err);
    if (!t) fail_msg("%s", err.msg);
    DfChatMessage msgs[1] = {{DF_ROLE_USER, "hi", 2, NULL}};
    DfByteBuf text = {0};
    assert_int_equal(df_chat_render(t, msgs, 1, &text, NULL, &err), -1);
    assert_string_equal(err.msg, "the chat template rejected the conversation: System first!");
    df_bytebuf_free(&text);
    df_chat_template_free(t);
    df_test_rmtree(dir);
    free(dir);
}

/* The messages of a conversation given as JSON, each keeping its object so
 * that reasoning_content and tool_calls reach the template. */
static int json_messages(const cJSON *conv, DfChatMessage *out, int cap) {
    int n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, conv) {
        assert_true(n < cap);
        const char *role = cJSON_GetObjectItem(m, "role")->valuestring;
        const cJSON *c = cJSON_GetObjectItem(m, "content");
        int r = df_chat_role_parse(role, strlen(role));
        assert_true(r >= 0);
        out[n++] = (DfChatMessage){(DfChatRole)r, cJSON_IsString(c) ? c->valuestring : "",
                                   cJSON_IsString(c) ? strlen(c->valuestring) : 0, m};
    }
    return n;
}

/* The committed Qwen3.5 / Qwen3.6 template NAME set on the Qwen3 tokenizer
 * with --chat-template and --chat-template-kwargs KWARGS. */
static DfChatTemplate *open_qwen35(const char *name, const char *kwargs) {
    char file[256];
    snprintf(file, sizeof file, "tests/fixtures/chat_templates/%s.jinja", name);
    DfError err = {{0}};
    DfChatTemplate *t = df_chat_template_open(df_test_path("tests/.cache/tokenizers/qwen3"), df_test_path(file), kwargs, &err);
    if (!t) fail_msg("%s: %s", name, err.msg);
    return t;
}

static void expect_prompt(const char *name, const char *kwargs, const char *want) {
    DfChatTemplate *t = open_qwen35(name, kwargs);
    DfChatMessage msgs[2] = {{DF_ROLE_SYSTEM, "You are helpful.", 16, NULL}, {DF_ROLE_USER, "Hi", 2, NULL}};
    DfByteBuf text = {0};
    DfError err = {{0}};
    if (df_chat_render_prompt(t, msgs, 2, &text, &err) != 0) fail_msg("%s: %s", name, err.msg);
    char full[256];
    snprintf(full, sizeof full, "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n%s", want);
    if (strcmp(text.data, full) != 0)
        fail_msg("%s with kwargs %s: the prompt is\n[%s]\nwant\n[%s]", name, kwargs ? kwargs : "(none)", text.data, full);
    df_bytebuf_free(&text);
    df_chat_template_free(t);
}

/* The seed family's templates through dflash's own path: thinking on by
 * default (Qwen3.5 4B and larger, Qwen3.6), off by default (Qwen3.5 2B and
 * smaller), and enable_thinking from the chat-template kwargs switching it. */
static void test_qwen35_generation_prompt(void **state) {
    (void)state;
    const char *think = "<|im_start|>assistant\n<think>\n", *no_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    expect_prompt("Qwen-Qwen3.5", NULL, think);
    expect_prompt("Qwen-Qwen3.5", "{\"enable_thinking\": true}", think);
    expect_prompt("Qwen-Qwen3.5", "{\"enable_thinking\": false}", no_think);
    expect_prompt("Qwen-Qwen3.6", NULL, think);
    expect_prompt("Qwen-Qwen3.6", "{\"enable_thinking\": false}", no_think);
    expect_prompt("Qwen-Qwen3.5-2B", NULL, no_think);
    expect_prompt("Qwen-Qwen3.5-2B", "{\"enable_thinking\": true}", think);
}

static const char QWEN35_CONVERSATION[] =
    "[{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    " {\"role\": \"user\", \"content\": \"What is 2+2?\"},"
    " {\"role\": \"assistant\", \"reasoning_content\": \"Two and two.\", \"content\": \"4\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    " {\"role\": \"assistant\", \"reasoning_content\": \"Ask the tool.\", \"content\": \"\", \"tool_calls\": [{\"type\": "
    "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\"},"
    " {\"role\": \"assistant\", \"reasoning_content\": \"It said 21.\", \"content\": \"It is 21 C.\"}]";

/* The masked runs of a rendering, decoded, joined by '|'. */
static void masked_runs(const DfTokenizer *tok, const DfI32Vec *ids, const DfByteBuf *mask, char *out, size_t cap) {
    size_t len = 0, k = 0;
    out[0] = '\0';
    for (DfByteBuf dec; next_masked_run(tok, ids, mask, &k, &dec);) {
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? "|" : "", dec.data);
        assert_true(len < cap);
        df_bytebuf_free(&dec);
    }
}

/* The loss mask of a Qwen3.5 conversation: each assistant message's answer,
 * its reasoning where the template renders it (after the last user query, or
 * everywhere with Qwen3.6's preserve_thinking) and its tool calls, through
 * the <|im_end|> that closes its turn (after a tool call, past the template's
 * closing tags); never a role header, the user's or the tool's turns. */
static void test_qwen35_loss_mask(void **state) {
    (void)state;
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path("tests/.cache/tokenizers/qwen3"), &err);
    if (!tok) fail_msg("%s", err.msg);
    cJSON *conv = cJSON_Parse(QWEN35_CONVERSATION);
    assert_non_null(conv);
    DfChatMessage msgs[8];
    int n = json_messages(conv, msgs, 8);
    static const char TOOL_TURN[] = "Ask the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                                    "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call><|im_end|>";
    static const char LAST_TURN[] = "It said 21.\n</think>\n\nIt is 21 C.<|im_end|>";
    char latest[512], preserved[512];
    snprintf(latest, sizeof latest, "4<|im_end|>|%s|%s", TOOL_TURN, LAST_TURN);
    snprintf(preserved, sizeof preserved, "Two and two.\n</think>\n\n4<|im_end|>|%s|%s", TOOL_TURN, LAST_TURN);
    const struct { const char *name, *kwargs, *want; } cases[] = {
        {"Qwen-Qwen3.5", NULL, latest},
        {"Qwen-Qwen3.5", "{\"enable_thinking\": false}", latest},
        {"Qwen-Qwen3.5-2B", NULL, latest},
        {"Qwen-Qwen3.6", NULL, latest},
        {"Qwen-Qwen3.6", "{\"preserve_thinking\": true}", preserved},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DfChatTemplate *t = open_qwen35(cases[i].name, cases[i].kwargs);
        DfI32Vec ids = {0};
        DfByteBuf mask = {0};
        if (df_chat_tokenize(t, tok, msgs, n, &ids, &mask, &err) != 0) fail_msg("%s: %s", cases[i].name, err.msg);
        assert_int_equal(mask.len, ids.len);
        char runs[2048];
        masked_runs(tok, &ids, &mask, runs, sizeof runs);
        if (strcmp(runs, cases[i].want) != 0)
            fail_msg("%s with kwargs %s: the masked runs are\n[%s]\nwant\n[%s]", cases[i].name,
                     cases[i].kwargs ? cases[i].kwargs : "(none)", runs, cases[i].want);
        df_i32vec_free(&ids);
        df_bytebuf_free(&mask);
        df_chat_template_free(t);
    }
    cJSON_Delete(conv);
    df_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_date),
        cmocka_unit_test(test_template_sources_and_kwargs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_qwen35_generation_prompt),
        cmocka_unit_test(test_qwen35_loss_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
