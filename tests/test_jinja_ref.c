/* Real chat templates rendered by dflash's Jinja engine, by Python's jinja2
 * (configured as transformers configures it: tests/jinja/render_ref.py) and
 * by @huggingface/jinja under node (tests/jinja/render_ref.mjs): the text of
 * every conversation of tests/jinja/conversations.json (system prompts,
 * several turns, reasoning content, tools, a closing user turn), with and
 * without the generation prompt and with enable_thinking absent, true and
 * false, must be equal; a conversation a template rejects must be rejected by
 * all three. The templates and @huggingface/jinja are fetched at test time
 * (scripts/fetch_test_chat_templates.sh); the test is skipped, saying so, only
 * when that fetch fails. */
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
    JVal d = jv_from_cjson(&a, vars, -1);
    int rc = df_jinja_render(t, &a, d.u.d, NULL, &o, &err);
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

static int compare(const char *name, const char *ref, const char *vars_path, int rc, const char *mine, const cJSON *want) {
    const cJSON *text = cJSON_GetObjectItem(want, "text"), *error = cJSON_GetObjectItem(want, "error");
    if (rc == 0 && cJSON_IsString(text) && strcmp(mine, text->valuestring) == 0) return 0;
    if (rc == DF_JINJA_RAISED && cJSON_IsString(error)) return 0;
    printf("%s, %s, %s: dflash %s\n[%s]\n%s %s\n[%s]\n", name, vars_path, ref, rc == 0 ? "rendered" : "failed", mine,
           ref, text ? "rendered" : "failed", text ? text->valuestring : error ? error->valuestring : "?");
    return 1;
}

static int check_template(const char *name, const cJSON *convs, char *dir, char *buf) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/tokenizer_config.json", df_test_path("tests/.cache/chat_templates"), name);
    cJSON *cfg = load_json(path);
    const char *src = cJSON_GetObjectItem(cfg, "chat_template")->valuestring;
    char tpl[1024];
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
                cJSON *v = make_vars(cfg, cJSON_GetObjectItem(convs, "tools"), conv, strcmp(conv->string, "tools") == 0,
                                     agp, think);
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
    cJSON *want_py = run_reference(py, tpl, paths, n, buf), *want_js = run_reference(js, tpl, paths, n, buf);
    int bad = 0, rendered = 0;
    for (int i = 0; i < n; i++) {
        bad += compare(name, "jinja2", paths[i], rcs[i], mine[i], cJSON_GetArrayItem(want_py, i));
        bad += compare(name, "@huggingface/jinja", paths[i], rcs[i], mine[i], cJSON_GetArrayItem(want_js, i));
        rendered += rcs[i] == 0;
        free(paths[i]);
        free(mine[i]);
    }
    printf("%s: %d renderings (%d rejected by the template), %d differences\n", name, n, n - rendered, bad);
    assert_true(rendered > n / 2);
    cJSON_Delete(want_py);
    cJSON_Delete(want_js);
    df_jinja_free(t);
    cJSON_Delete(cfg);
    return bad;
}

static void test_real_templates_match_references(void **state) {
    (void)state;
    char *buf = malloc(OUT_CAP), cmd[1024];
    snprintf(cmd, sizeof cmd, "bash '%s' 2>&1", df_test_path("scripts/fetch_test_chat_templates.sh"));
    if (df_test_run(cmd, buf, OUT_CAP) != 0) {
        printf("SKIPPED: the chat templates or @huggingface/jinja could not be fetched (offline?): %.500s\n", buf);
        free(buf);
        skip();
    }
    cJSON *convs = load_json(df_test_path("tests/jinja/conversations.json"));
    char *dir = df_test_tmpdir("jinja_ref");
    int bad = 0;
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++) bad += check_template(TEMPLATES[i], convs, dir, buf);
    df_test_rmtree(dir);
    free(dir);
    cJSON_Delete(convs);
    free(buf);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates_match_references),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
