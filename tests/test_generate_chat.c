/* `dflash generate` on conversations, on coder-tiny given a chat template: a
 * test target directory links coder-tiny's config and weights and carries
 * its tokenizer_config.json plus the real Qwen3 chat template (from
 * tests/.cache/tokenizers/qwen3, whose <|im_start|> / <|im_end|> coder-tiny's
 * vocabulary has as added tokens).
 *   - Every regenerated turn equals what the plain prompt path generates for
 *     df_chat_render_prompt of the conversation before it (built here from
 *     the output, independently of the command's own turn bookkeeping), cut
 *     at the end-of-turn token; system and user turns come back unchanged,
 *     ShareGPT input comes back as ShareGPT, a conversation ending with a
 *     user turn gets one more turn; --batch changes nothing.
 *   - An interrupted run (a torn last line) resumed equals an uninterrupted
 *     one, greedy and sampled.
 *   - Bad records are reported with file:line; a target without a template
 *     we render, or without the template's end-of-turn token, is refused
 *     naming the file or the token. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#include "infer/chat_turns.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#define LOG_CAP 8192

/* Input conversations: messages with a system prompt and two assistant
 * turns; ShareGPT ending with a user turn; a prompt record between them; a
 * single user turn; an assistant greeting before the first user turn (kept). */
static const char *const INPUT[] = {
    "{\"id\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"You write Python.\"}, "
    "{\"role\": \"user\", \"content\": \"def add(a, b):\"}, {\"role\": \"assistant\", \"content\": \"old answer\"}, "
    "{\"role\": \"user\", \"content\": \"import os\\nimport sys\"}, {\"role\": \"assistant\", \"content\": \"old 2\"}]}",
    "{\"id\": 7, \"conversations\": [{\"from\": \"human\", \"value\": \"class Stack:\"}, "
    "{\"from\": \"gpt\", \"value\": \"old\"}, {\"from\": \"human\", \"value\": \"    def push(self, x):\"}]}",
    "{\"id\": \"p\", \"prompt\": \"def main():\"}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"for i in range(10):\"}]}",
    "{\"id\": \"g\", \"messages\": [{\"role\": \"assistant\", \"content\": \"Hello!\"}, "
    "{\"role\": \"user\", \"content\": \"while True:\"}, {\"role\": \"assistant\", \"content\": \"x\"}]}",
};
#define N_INPUT ((int)(sizeof INPUT / sizeof INPUT[0]))

typedef struct Env {
    char *dir;
    char target[512], input[512];
} Env;

static cJSON *load_json(const char *path) {
    char *text = df_test_read_file(path, NULL);
    if (!text) fail_msg("cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

/* dir/target: coder-tiny with `template` (a tokenizer_config.json from the
 * cache) as its chat template. */
static void make_target(const char *target, const char *template_config) {
    assert_int_equal(mkdir(target, 0755), 0);
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"};
    char src[1024], dst[1024];
    for (int i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "assets/coder-tiny/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", target, files[i]);
        assert_int_equal(symlink(df_test_path(src), dst), 0);
    }
    cJSON *cfg = load_json(df_test_path("assets/coder-tiny/tokenizer_config.json"));
    cJSON *with = load_json(df_test_path(template_config));
    cJSON_AddItemToObject(cfg, "chat_template", cJSON_Duplicate(cJSON_GetObjectItem(with, "chat_template"), 1));
    cJSON *bos = cJSON_GetObjectItem(with, "bos_token");
    if (bos) cJSON_AddItemToObject(cfg, "bos_token", cJSON_Duplicate(bos, 1));
    char *text = cJSON_Print(cfg);
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", target);
    df_test_write_file(dst, text);
    free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(with);
}

static void write_lines(const char *path, const char *const *lines, int n) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < n; i++) fprintf(fp, "%s\n", lines[i]);
    fclose(fp);
}

static void env_init(Env *e) {
    e->dir = df_test_tmpdir("generate_chat");
    snprintf(e->target, sizeof e->target, "%s/target", e->dir);
    snprintf(e->input, sizeof e->input, "%s/in.jsonl", e->dir);
    make_target(e->target, "tests/.cache/tokenizers/qwen3/tokenizer_config.json");
    write_lines(e->input, INPUT, N_INPUT);
}

static void env_free(Env *e) {
    df_test_rmtree(e->dir);
    free(e->dir);
}

/* Runs dflash generate; returns its exit status, the log in log. */
static int generate(const char *target, const char *input, const char *output, const char *extra, char *log) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' generate --target '%s' --input '%s' --output '%s' --max-new-tokens 12 %s",
             df_test_path("dflash"), target, input, output, extra);
    return df_test_run(cmd, log, LOG_CAP);
}

static void generate_ok(const char *target, const char *input, const char *output, const char *extra) {
    char log[LOG_CAP];
    if (generate(target, input, output, extra, log) != 0) fail_msg("dflash generate failed: %s", log);
}

static cJSON *read_jsonl(const char *path, int *n) {
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    cJSON *all = cJSON_CreateArray();
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), (*n)++) {
        cJSON *rec = cJSON_Parse(line);
        if (!rec) fail_msg("%s: line %d is not JSON", path, *n + 1);
        cJSON_AddItemToArray(all, rec);
    }
    free(text);
    return all;
}

/* The messages array of a conversation record and its key names. */
static const cJSON *conversation(const cJSON *rec, const char **role_key, const char **text_key) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(rec, "conversations");
    *role_key = c ? "from" : "role";
    *text_key = c ? "value" : "content";
    return c ? c : cJSON_GetObjectItemCaseSensitive(rec, "messages");
}

static const char *field(const cJSON *m, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

/* Output record `out` keeps the input's id, form, and system / user turns
 * (and assistant turns before the first user turn); one more message when
 * the input ends with a user turn. */
static void check_shape(const cJSON *in, const cJSON *out) {
    char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(out, "id"));
    const cJSON *in_id = cJSON_GetObjectItem(in, "id");
    char *b = in_id ? cJSON_PrintUnformatted(in_id) : NULL;
    if (b) assert_string_equal(a, b);
    cJSON_free(a);
    cJSON_free(b);
    if (cJSON_GetObjectItem(in, "prompt")) {
        assert_string_equal(field(out, "prompt"), field(in, "prompt"));
        assert_true(cJSON_IsString(cJSON_GetObjectItem(out, "response")));
        return;
    }
    const char *rk, *tk, *rk2, *tk2;
    const cJSON *ci = conversation(in, &rk, &tk), *co = conversation(out, &rk2, &tk2);
    assert_non_null(co);
    assert_string_equal(rk, rk2); /* ShareGPT stays ShareGPT */
    int n_in = cJSON_GetArraySize(ci), n_out = cJSON_GetArraySize(co);
    int ends_user = strcmp(field(cJSON_GetArrayItem(ci, n_in - 1), rk), "user") == 0 ||
                    strcmp(field(cJSON_GetArrayItem(ci, n_in - 1), rk), "human") == 0;
    assert_int_equal(n_out, n_in + ends_user);
    int seen_user = 0;
    for (int i = 0; i < n_in; i++) {
        const cJSON *mi = cJSON_GetArrayItem(ci, i), *mo = cJSON_GetArrayItem(co, i);
        const char *role = field(mi, rk);
        assert_string_equal(field(mo, rk), role);
        int assistant = strcmp(role, "assistant") == 0 || strcmp(role, "gpt") == 0;
        if (!assistant || !seen_user) assert_string_equal(field(mo, tk), field(mi, tk));
        else assert_string_not_equal(field(mo, tk), field(mi, tk)); /* "old ..." was replaced */
        seen_user |= !assistant && strcmp(role, "system") != 0;
    }
    if (ends_user) assert_string_equal(field(cJSON_GetArrayItem(co, n_in), rk), rk[0] == 'f' ? "gpt" : "assistant");
}

/* For each generated turn of each output conversation: the prompt
 * df_chat_render_prompt gives for the output's messages before it, as a
 * prompt record "rec/turn"; *want[i] gets the output's text of that turn. */
static int turn_prompts(const char *target, const cJSON *outputs, const char *path, char **want, int cap) {
    DfError err = {{0}};
    DfChatTemplate *t = df_chat_template_load(target, &err);
    if (!t) fail_msg("%s", err.msg);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    int n = 0, r = 0;
    for (const cJSON *rec = outputs->child; rec; rec = rec->next, r++) {
        const char *rk, *tk;
        const cJSON *conv = conversation(rec, &rk, &tk);
        if (!conv) continue;
        int len = cJSON_GetArraySize(conv), seen_user = 0;
        DfChatMessage *msgs = calloc((size_t)len, sizeof *msgs);
        for (int i = 0; i < len; i++) {
            const cJSON *m = cJSON_GetArrayItem(conv, i);
            msgs[i].role = (DfChatRole)df_chat_role_parse(field(m, rk), strlen(field(m, rk)));
            msgs[i].content = field(m, tk);
            msgs[i].content_len = strlen(msgs[i].content);
            if (msgs[i].role == DF_ROLE_ASSISTANT && seen_user) {
                DfByteBuf text = {0};
                if (df_chat_render_prompt(t, msgs, i, &text, &err)) fail_msg("%s", err.msg);
                df_bytebuf_append(&text, "", 1);
                cJSON *p = cJSON_CreateObject();
                char id[32];
                snprintf(id, sizeof id, "%d/%d", r, i);
                cJSON_AddStringToObject(p, "id", id);
                cJSON_AddStringToObject(p, "prompt", text.data);
                char *line = cJSON_PrintUnformatted(p);
                fprintf(fp, "%s\n", line);
                cJSON_free(line);
                cJSON_Delete(p);
                df_bytebuf_free(&text);
                assert_true(n < cap);
                want[n++] = strdup(msgs[i].content);
            }
            seen_user |= msgs[i].role == DF_ROLE_USER;
        }
        free(msgs);
    }
    fclose(fp);
    df_chat_template_free(t);
    return n;
}

static void test_turns_equal_plain_prompts(void **state) {
    (void)state;
    Env e;
    env_init(&e);
    char out[1024], out3[1024], prompts[1024], plain[1024];
    snprintf(out, sizeof out, "%s/out.jsonl", e.dir);
    snprintf(out3, sizeof out3, "%s/out3.jsonl", e.dir);
    snprintf(prompts, sizeof prompts, "%s/turns.jsonl", e.dir);
    snprintf(plain, sizeof plain, "%s/plain.jsonl", e.dir);
    generate_ok(e.target, e.input, out, "--batch 2");

    int n_out;
    cJSON *outputs = read_jsonl(out, &n_out), *inputs = read_jsonl(e.input, &n_out);
    assert_int_equal(cJSON_GetArraySize(outputs), N_INPUT);
    for (int i = 0; i < N_INPUT; i++) check_shape(cJSON_GetArrayItem(inputs, i), cJSON_GetArrayItem(outputs, i));
    const cJSON *no_id = cJSON_GetObjectItem(cJSON_GetArrayItem(outputs, 3), "id"); /* its 0-based index */
    assert_true(cJSON_IsNumber(no_id) && no_id->valueint == 3);

    /* each turn = the plain path's response to its rendered prompt (up to the
     * end-of-turn token, which ends a chat turn but not a plain prompt) */
    char *want[32];
    int n = turn_prompts(e.target, outputs, prompts, want, 32);
    assert_int_equal(n, 2 + 2 + 1 + 1);
    generate_ok(e.target, prompts, plain, "--batch 3");
    int n_plain;
    cJSON *got = read_jsonl(plain, &n_plain);
    assert_int_equal(n_plain, n);
    int some_differ = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *rec = cJSON_GetArrayItem(got, i);
        char *resp = strdup(field(rec, "response")), *eot = strstr(resp, "<|im_end|>");
        if (eot) *eot = '\0';
        if (strcmp(resp, want[i]) != 0)
            fail_msg("turn %s: chat generate gave\n%s\nthe plain prompt path\n%s", field(rec, "id"), want[i], resp);
        some_differ |= i > 0 && strcmp(want[i], want[0]) != 0;
        free(resp);
    }
    for (int i = 0; i < n; i++) free(want[i]);
    assert_true(some_differ);
    cJSON_Delete(got);

    /* --batch does not change the output */
    generate_ok(e.target, e.input, out3, "--batch 3");
    char *a = df_test_read_file(out, NULL), *b = df_test_read_file(out3, NULL);
    assert_string_equal(a, b);
    free(a);
    free(b);
    cJSON_Delete(outputs);
    cJSON_Delete(inputs);
    env_free(&e);
}

/* Interrupted after 2 records with a torn third line, then resumed: the
 * same file as one run. */
static void check_resume(Env *e, const char *extra_whole, const char *extra_first, const char *extra_rest) {
    char whole[1024], resumed[1024], first[1024];
    snprintf(whole, sizeof whole, "%s/whole.jsonl", e->dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.jsonl", e->dir);
    snprintf(first, sizeof first, "%s/first.jsonl", e->dir);
    unlink(whole), unlink(resumed);
    write_lines(first, INPUT, 2);
    generate_ok(e->target, e->input, whole, extra_whole);
    generate_ok(e->target, first, resumed, extra_first);
    char *expected = df_test_read_file(whole, NULL);
    char *third = expected;
    for (int i = 0; i < 2; i++) third = strchr(third, '\n') + 1;
    FILE *fp = fopen(resumed, "ab");
    fwrite(third, 1, 30, fp); /* the interrupted write of record 3 */
    fclose(fp);
    generate_ok(e->target, e->input, resumed, extra_rest);
    char *got = df_test_read_file(resumed, NULL);
    assert_string_equal(got, expected);
    free(got);
    char log[LOG_CAP];
    assert_int_equal(generate(e->target, e->input, resumed, extra_rest, log), 0); /* nothing redone */
    assert_non_null(strstr(log, "already holds all"));
    got = df_test_read_file(resumed, NULL);
    assert_string_equal(got, expected);
    free(got);
    free(expected);
}

static void test_resume(void **state) {
    (void)state;
    Env e;
    env_init(&e);
    check_resume(&e, "--batch 2", "--batch 1", "--batch 3");
    check_resume(&e, "--temperature 1.0 --top-p 0.95 --seed 3 --batch 4",
                 "--temperature 1.0 --top-p 0.95 --seed 3 --batch 1",
                 "--temperature 1.0 --top-p 0.95 --seed 3 --batch 2");
    /* an output of prompt records, not made by this run (no settings file beside it), does not resume a
     * run on conversations: refused naming it, and left as it was */
    char other[1024], log[LOG_CAP];
    snprintf(other, sizeof other, "%s/other.jsonl", e.dir);
    const char *record = "{\"id\": \"m\", \"prompt\": \"x\", \"response\": \"y\"}\n";
    df_test_write_file(other, record);
    assert_int_not_equal(generate(e.target, e.input, other, "", log), 0);
    assert_non_null(strstr(log, "other.jsonl"));
    char *left = df_test_read_file(other, NULL);
    assert_string_equal(left, record);
    free(left);
    env_free(&e);
}

static void expect_error_with(const char *target, const char *input, const char *record, const char *extra,
                              const char *want) {
    char log[LOG_CAP], out[1024];
    df_test_write_file(input, record);
    snprintf(out, sizeof out, "%s.out", input);
    if (generate(target, input, out, extra, log) == 0) fail_msg("should have failed: %s", record);
    if (!strstr(log, want)) fail_msg("for %s: expected \"%s\" in\n%s", record, want, log);
    assert_false(df_test_file_exists(out));
}

static void expect_error(const char *target, const char *input, const char *record, const char *want) {
    expect_error_with(target, input, record, "", want);
}

static void test_bad_records(void **state) {
    (void)state;
    Env e;
    env_init(&e);
    char in[1024], where[1200];
    snprintf(in, sizeof in, "%s/bad.jsonl", e.dir);
    const char *ok = "{\"prompt\": \"x\"}\n";
    struct { const char *record, *why; } cases[] = {
        {"{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}",
         "no user turn"},
        {"{\"conversations\": [{\"from\": \"narrator\", \"value\": \"s\"}]}", "conversations[0]: unknown role \"narrator\""},
        {"{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", "messages[0]"},
        {"{\"messages\": [], \"conversations\": []}", "both"},
        {"{\"messages\": {}}", "not an array"},
        {"[1]", "not a JSON object"},
        {"{\"id\": [], \"prompt\": \"x\"}", "\"id\""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s%s\n", ok, ok, cases[c].record); /* the bad one on line 3 */
        snprintf(where, sizeof where, "%s:3: ", in);
        expect_error(e.target, in, text, where);
        expect_error(e.target, in, text, cases[c].why);
    }
    /* coder-tiny as it is has no chat template: the error names its config */
    write_lines(in, INPUT, 2);
    expect_error(df_test_path("assets/coder-tiny"), in, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n",
                 "coder-tiny/tokenizer_config.json: no chat_template");
    /* a Llama-3 template on coder-tiny: no <|eot_id|> token to end a turn */
    char llama[1024];
    snprintf(llama, sizeof llama, "%s/llama", e.dir);
    make_target(llama, "tests/.cache/tokenizers/llama3/tokenizer_config.json");
    expect_error(llama, in, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", "<|eot_id|>");
    /* chat-template kwargs must be a JSON object */
    expect_error_with(e.target, in, "{\"prompt\": \"x\"}\n", "--chat-template-kwargs '[1]'",
                      "--chat-template-kwargs: expected a JSON object");
    env_free(&e);
}

/* The end-of-turn token each template writes, by id in its tokenizer. */
static void test_end_of_turn_ids(void **state) {
    (void)state;
    Env e;
    env_init(&e);
    struct { const char *dir; int32_t want; } cases[] = {
        {e.target, 8189}, /* coder-tiny's <|im_end|> */
        {df_test_path("tests/.cache/tokenizers/qwen3"), 151645},
        {df_test_path("tests/.cache/tokenizers/llama3"), 128009},
        {df_test_path("tests/.cache/tokenizers/llama3.1"), 128009},
    };
    for (int c = 0; c < 4; c++) {
        DfError err = {{0}};
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", cases[c].dir);
        DfChatTemplate *t = df_chat_template_load(dir, &err);
        DfTokenizer *tok = df_tokenizer_load(dir, &err);
        if (!t || !tok) fail_msg("%s", err.msg);
        int32_t id;
        if (df_chat_end_of_turn_id(t, tok, &id, &err)) fail_msg("%s", err.msg);
        assert_int_equal(id, cases[c].want);
        df_chat_template_free(t);
        df_tokenizer_free(tok);
    }
    env_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turns_equal_plain_prompts),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_bad_records),
        cmocka_unit_test(test_end_of_turn_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
