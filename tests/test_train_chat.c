/* train --chat-template and --chat-template-kwargs: the conversations train
 * renders (the --data it prepares, the --prompts it regenerates, the
 * --eval-data it decodes) are rendered as `dflash prepare` and `dflash
 * generate` render them with the same options; args.json records both,
 * --config reads them back, and a --resume with other ones is refused. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY_OPTIONS DF_TEST_TINY_TRAIN_OPTIONS " --quiet"
#define GEN_OPTIONS "--max-new-tokens 16 --batch 3"
#define NO_THINKING "'{\"enable_thinking\": false}'"
#define THINKING "'{\"enable_thinking\": true}'"

typedef DfTestRunDir Fixture;

/* A ChatML template (coder-tiny has <|im_start|>/<|im_end|> but no template
 * of its own) whose assistant turns and generation prompt start with an
 * empty think block when enable_thinking is false, as Qwen3's prompt does. */
static const char TEMPLATE[] =
    "{%- for m in messages -%}\n"
    "<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor -%}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{%- endif -%}\n";

static const char CHATS[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Write a function that adds two numbers.\"}, "
    "{\"role\": \"assistant\", \"content\": \"def add(a, b):\\n    return a + b\\n\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Reverse a list in Python.\"}, "
    "{\"role\": \"assistant\", \"content\": \"def rev(xs):\\n    return xs[::-1]\\n\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Sum of a list.\"}, "
    "{\"role\": \"assistant\", \"content\": \"def total(xs):\\n    return sum(xs)\\n\"}]}\n";

static void write_in(const Fixture *f, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", f->dir, rel);
    df_test_write_file(path, text);
}

static int setup(void **state) {
    int rc = df_test_run_dir_setup(state, "trainchat");
    Fixture *f = *state;
    write_in(f, "chat.jsonl", CHATS);
    write_in(f, "chatml.jinja", TEMPLATE);
    /* the same template, refusing a rendering without enable_thinking */
    char need[sizeof TEMPLATE + 128];
    snprintf(need, sizeof need, "{%% if enable_thinking is not defined %%}{{ raise_exception('no enable_thinking') }}"
                                "{%% endif %%}%s", TEMPLATE);
    write_in(f, "needs_kwargs.jinja", need);
    return rc;
}
static int teardown(void **state) { return df_test_run_dir_teardown(state); }

/* dflash ARGS in the fixture's directory, with coder-tiny as the target after the command's name. */
static int dflash(Fixture *f, const char *command, const char *args, int expect_ok) {
    char line[4096];
    snprintf(line, sizeof line, "%s --target '%s' %s", command, df_test_path("assets/coder-tiny"), args);
    int rc = df_test_dflash_in(f, 2, line);
    if (expect_ok && rc != 0) fail_msg("dflash %s exited %d:\n%s", line, rc, f->out);
    return rc;
}

static void train_data(Fixture *f, const char *output, const char *kwargs, const char *extra) {
    char args[2048];
    snprintf(args, sizeof args,
             "--data chat.jsonl --output %s " TINY_OPTIONS " --steps 2 --chat-template chatml.jinja "
             "--chat-template-kwargs %s %s",
             output, kwargs, extra);
    dflash(f, "train", args, 1);
}

static int same_file(const Fixture *f, const char *a, const char *b) {
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/%s", f->dir, a);
    snprintf(pb, sizeof pb, "%s/%s", f->dir, b);
    size_t na = 0, nb = 0;
    char *x = df_test_read_file(pa, &na), *y = df_test_read_file(pb, &nb);
    assert_non_null(x);
    assert_non_null(y);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* The prepared data is prepare's with the same options, and another
 * enable_thinking gives other ids. */
static void test_prepared_data(void **state) {
    Fixture *f = *state;
    train_data(f, "off", NO_THINKING, "");
    train_data(f, "on", THINKING, "");
    dflash(f, "prepare",
           "--input chat.jsonl --output off.store --max-length 3072 --quiet --chat-template chatml.jinja "
           "--chat-template-kwargs " NO_THINKING,
           1);
    assert_true(same_file(f, "off/data.store", "off.store"));
    assert_false(same_file(f, "off/data.store", "on/data.store"));
    /* what the prepared data was made from holds them (the reuse key) */
    char *key = df_test_read_in(f, "off/data.store.source.json");
    assert_non_null(strstr(key, "\"chat_template_kwargs\":{\"enable_thinking\":false}"));
    assert_non_null(strstr(key, "\"chat_template_hash\""));
    free(key);
}

/* args.json holds both; --config reads them back; --resume with others is refused, naming the option. */
static void test_record_and_resume(void **state) {
    Fixture *f = *state;
    train_data(f, "off", NO_THINKING, "");
    char *record = df_test_read_in(f, "off/args.json");
    assert_non_null(strstr(record, "\"chat-template-kwargs\":\t\"{\\\"enable_thinking\\\": false}\""));
    assert_non_null(strstr(record, "/chatml.jinja\""));
    free(record);

    assert_int_equal(df_test_dflash_in(f, 2, "train --config off/args.json --resume"), 0);
    assert_non_null(strstr(f->out, "already complete at step 2"));

    char args[2048];
    snprintf(args, sizeof args,
             "--data chat.jsonl --output off " TINY_OPTIONS " --steps 2 --chat-template chatml.jinja "
             "--chat-template-kwargs " THINKING " --resume");
    assert_int_equal(dflash(f, "train", args, 0), 1);
    assert_non_null(strstr(f->out, "--chat-template-kwargs is {\"enable_thinking\":true}, was {\"enable_thinking\":false}"));
    snprintf(args, sizeof args,
             "--data chat.jsonl --output off " TINY_OPTIONS " --steps 2 --chat-template chatml.jinja --resume");
    assert_int_equal(dflash(f, "train", args, 0), 1);
    assert_non_null(strstr(f->out, "--chat-template-kwargs was {\"enable_thinking\":false}, is not given now"));

    /* a token store is not rendered again: the checkpoint's options refuse it */
    snprintf(args, sizeof args,
             "--data off/data.store --output s " TINY_OPTIONS " --steps 2 --chat-template chatml.jinja "
             "--chat-template-kwargs " NO_THINKING);
    dflash(f, "train", args, 1);
    snprintf(args, sizeof args,
             "--data off/data.store --output s " TINY_OPTIONS " --steps 2 --chat-template chatml.jinja "
             "--chat-template-kwargs " THINKING " --resume");
    assert_int_equal(dflash(f, "train", args, 0), 1);
    assert_non_null(strstr(f->out, "--resume: --chat-template-kwargs differs"));

    /* kwargs that are not a JSON object: a bad command line, nothing created */
    snprintf(args, sizeof args, "--data chat.jsonl --output bad --chat-template chatml.jinja --chat-template-kwargs '[1]'");
    assert_int_equal(dflash(f, "train", args, 0), 2);
    assert_non_null(strstr(f->out, "--chat-template-kwargs: expected a JSON object"));
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/bad", f->dir);
    assert_false(df_test_file_exists(bad));
}

/* --prompts regenerates what `dflash generate` does with the same options;
 * the other enable_thinking asks with another prompt, and gets other responses. */
static void test_regenerated_prompts(void **state) {
    Fixture *f = *state;
    char args[2048];
    const char *kwargs[2] = {NO_THINKING, THINKING}, *out[2] = {"off", "on"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args,
                 "--prompts chat.jsonl --output %s " TINY_OPTIONS " " GEN_OPTIONS
                 " --steps 1 --chat-template chatml.jinja --chat-template-kwargs %s",
                 out[i], kwargs[i]);
        dflash(f, "train", args, 1);
    }
    dflash(f, "generate",
           "--input chat.jsonl --output g.jsonl " GEN_OPTIONS " --seed 7 --quiet --chat-template chatml.jinja "
           "--chat-template-kwargs " NO_THINKING,
           1);
    assert_true(same_file(f, "off/regenerated.jsonl", "g.jsonl"));
    assert_true(same_file(f, "off/regenerated.jsonl.generate.json", "g.jsonl.generate.json"));
    assert_false(same_file(f, "off/regenerated.jsonl", "on/regenerated.jsonl"));
}

/* The held-out conversations are rendered with the template and its
 * variables: without them the template refuses them. */
static void test_eval_data(void **state) {
    Fixture *f = *state;
    dflash(f, "prepare", "--input chat.jsonl --output s.store --quiet --chat-template chatml.jinja", 1);
    const char *common = "--data s.store " TINY_OPTIONS " --steps 1 --eval-data chat.jsonl --eval-every 1 "
                         "--eval-max-new-tokens 8 --chat-template needs_kwargs.jinja";
    char args[2048];
    snprintf(args, sizeof args, "%s --output a", common);
    assert_int_equal(dflash(f, "train", args, 0), 1);
    assert_non_null(strstr(f->out, "--eval-data: chat.jsonl:1 (id 0): the chat template rejected the conversation: "
                                   "no enable_thinking"));
    snprintf(args, sizeof args, "%s --output b --chat-template-kwargs " NO_THINKING, common);
    dflash(f, "train", args, 1);
    char *eval = df_test_read_in(f, "b/eval.jsonl");
    assert_non_null(strstr(eval, "\"prompts\":3"));
    free(eval);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prepared_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_and_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regenerated_prompts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_data, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
