/* dflash eval on conversations: chat records (messages, ShareGPT
 * conversations) give the same per-prompt results and the same --json
 * summary as the prompt records of their renderings (the target's chat
 * template with its generation prompt, for the last assistant turn); a
 * target without a chat template is named. The target is coder-tiny with a
 * stand-in ChatML template (the family is told from the template's text;
 * the rendering is ours, tested against transformers in test_chat_template). */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/chat_template.h"

#define OUT_CAP 65536

static const char *const CHATS[] = {
    "{\"id\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"You write Python.\"}, "
    "{\"role\": \"user\", \"content\": \"def add(a, b):\"}, {\"role\": \"assistant\", \"content\": \"return a + b\"}, "
    "{\"role\": \"user\", \"content\": \"import os\"}, {\"role\": \"assistant\", \"content\": \"the reply\"}]}",
    "{\"id\": 7, \"conversations\": [{\"from\": \"human\", \"value\": \"class Stack:\"}, "
    "{\"from\": \"gpt\", \"value\": \"pass\"}, {\"from\": \"human\", \"value\": \"    def push(self, x):\"}]}",
};

/* The messages each prompt is rendered from: up to the last assistant turn, as given. */
static const DfChatMessage RENDERED_M[] = {
    {DF_ROLE_SYSTEM, "You write Python.", 17}, {DF_ROLE_USER, "def add(a, b):", 14},
    {DF_ROLE_ASSISTANT, "return a + b", 12},   {DF_ROLE_USER, "import os", 9},
};
static const DfChatMessage RENDERED_7[] = {
    {DF_ROLE_USER, "class Stack:", 12}, {DF_ROLE_ASSISTANT, "pass", 4}, {DF_ROLE_USER, "    def push(self, x):", 22}};

typedef struct Fixture {
    char *dir;
    char target[512], out[OUT_CAP];
} Fixture;

static void make_target(const char *target) {
    assert_int_equal(mkdir(target, 0755), 0);
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"};
    char src[1024], dst[1024];
    for (int i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "assets/coder-tiny/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", target, files[i]);
        assert_int_equal(symlink(df_test_path(src), dst), 0);
    }
    char *text = df_test_read_file(df_test_path("assets/coder-tiny/tokenizer_config.json"), NULL);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    assert_non_null(cfg);
    /* Qwen3's template (coder-tiny's tokenizer has its <|im_start|> and <|im_end|>) */
    char *qwen = df_test_read_file(df_test_path("tests/.cache/tokenizers/qwen3/tokenizer_config.json"), NULL);
    cJSON *qcfg = cJSON_Parse(qwen);
    free(qwen);
    assert_non_null(qcfg);
    cJSON_AddStringToObject(cfg, "chat_template", cJSON_GetObjectItem(qcfg, "chat_template")->valuestring);
    cJSON_Delete(qcfg);
    text = cJSON_Print(cfg);
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", target);
    df_test_write_file(dst, text);
    free(text);
    cJSON_Delete(cfg);
}

static int run(Fixture *f, const char *args, int expect_ok) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && OMP_NUM_THREADS=2 '%s' %s", f->dir, df_test_path("dflash"), args);
    int rc = df_test_run(cmd, f->out, sizeof f->out);
    if (expect_ok && rc != 0) fail_msg("dflash %s exited %d:\n%s", args, rc, f->out);
    return rc;
}

static int setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    f->dir = df_test_tmpdir("eval_chat");
    snprintf(f->target, sizeof f->target, "%s/target", f->dir);
    make_target(f->target);
    char path[1024], args[4096];
    snprintf(path, sizeof path, "%s/slice.jsonl", f->dir);
    df_test_write_data_slice(path, 8);
    snprintf(args, sizeof args,
             "train --target '%s' --data slice.jsonl --output run --draft-layers 1 --intermediate-size 128 "
             "--num-taps 2 --block-size 8 --num-anchors 8 --token-budget 1100 --steps 4 --lr 3e-3",
             df_test_path("assets/coder-tiny"));
    run(f, args, 1);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    df_test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* {"id": id_json, "prompt": the rendering of msgs with the generation prompt} */
static void write_rendered(FILE *fp, const DfChatTemplate *t, const char *id_json, const DfChatMessage *msgs, int n) {
    DfByteBuf text = {0};
    DfError err;
    if (df_chat_render_prompt(t, msgs, n, &text, &err)) fail_msg("%s", err.msg);
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddItemToObject(rec, "id", cJSON_Parse(id_json));
    cJSON_AddStringToObject(rec, "prompt", text.data);
    char *line = cJSON_PrintUnformatted(rec);
    fprintf(fp, "%s\n", line);
    free(line);
    cJSON_Delete(rec);
    df_bytebuf_free(&text);
}

/* The summary without the timing fields. */
static char *summary_of(const Fixture *f, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "lossless")));
    assert_true(cJSON_GetObjectItem(j, "tau")->valuedouble >= 1);
    const char *drop[] = {"tokens_per_s", "speedup", "cycle_ms", "greedy_step_ms", "input", "conversations"};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) cJSON_DeleteItemFromObject(j, drop[i]);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

static void test_chat_equals_rendered(void **state) {
    Fixture *f = *state;
    char path[1024], args[4096];
    snprintf(path, sizeof path, "%s/chat.jsonl", f->dir);
    FILE *fp = fopen(path, "w");
    for (int i = 0; i < 2; i++) fprintf(fp, "%s\n", CHATS[i]);
    fclose(fp);
    DfError err;
    DfChatTemplate *t = df_chat_template_load(f->target, &err);
    if (!t) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/rendered.jsonl", f->dir);
    fp = fopen(path, "w");
    write_rendered(fp, t, "\"m\"", RENDERED_M, 4);
    write_rendered(fp, t, "7", RENDERED_7, 3);
    fclose(fp);
    df_chat_template_free(t);

    const char *eval = "eval --target '%s' --draft run/final --input %s.jsonl --max-new-tokens 8 --output %s.out "
                       "--json %s.json";
    snprintf(args, sizeof args, eval, f->target, "chat", "chat", "chat");
    run(f, args, 1);
    assert_non_null(strstr(f->out, "prompts 2"));
    snprintf(args, sizeof args, eval, f->target, "rendered", "rendered", "rendered");
    run(f, args, 1);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/chat.out", f->dir);
    snprintf(b, sizeof b, "%s/rendered.out", f->dir);
    char *x = df_test_read_file(a, NULL), *y = df_test_read_file(b, NULL);
    assert_non_null(x);
    assert_non_null(y);
    assert_string_equal(x, y);
    free(x), free(y);
    char *sa = summary_of(f, "chat.json"), *sb = summary_of(f, "rendered.json");
    assert_string_equal(sa, sb);
    free(sa), free(sb);

    /* coder-tiny as it is has no chat template: said with the input's name */
    snprintf(args, sizeof args, eval, df_test_path("assets/coder-tiny"), "chat", "x", "x");
    assert_int_not_equal(run(f, args, 0), 0);
    assert_non_null(strstr(f->out, "chat.jsonl has 2 conversations"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chat_equals_rendered, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
