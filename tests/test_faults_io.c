/* Inputs and outputs made wrong the way a user makes them, through ./dflash
 * in real processes:
 * - a NUL character (\u0000) in a JSON string or key: a record with one is a
 *   bad record named by file:line and field, a prompt, a config or a
 *   tokenizer with one is refused naming the file and the field (an escaped
 *   backslash before "u0000" is text, and taken);
 * - export --output replaces only an empty directory or a previous export,
 *   never a directory holding other files or the source;
 * - an output that is an input (the same path, another spelling, a symbolic
 *   or hard link, a file inside an input directory) is refused with exit 2
 *   naming both options, before any work, the input unchanged;
 * - stdout, stderr or stdin closed at start-up: no log line lands in an
 *   output;
 * - plot fails on a metrics.jsonl or eval.jsonl it cannot read. */
#define _GNU_SOURCE
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/token_store.h"

#define LOG_CAP 65536

static char *g_dir;
static char g_tgt[1024];

static int setup(void **state) {
    g_dir = df_test_tmpdir("faults-io");
    snprintf(g_tgt, sizeof g_tgt, "%s", df_test_path("assets/coder-tiny"));
    return 0;
}

static int teardown(void **state) {
    df_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static int run_in_dir(const char *args, char *log, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && timeout 120 %s %s", g_dir, df_test_path("dflash"), args);
    return df_test_run(cmd, log, cap);
}

/* Runs `dflash ARGS`; asserts exit `want_rc` and that the output names each of the NULL-ended wants. */
static void expect_exit(int want_rc, const char *args, ...) {
    char log[LOG_CAP];
    int rc = run_in_dir(args, log, sizeof log);
    if (rc != want_rc) fail_msg("exit %d (want %d) for: %s\n%s", rc, want_rc, args, log);
    va_list ap;
    va_start(ap, args);
    for (const char *want; (want = va_arg(ap, const char *)) != NULL;)
        if (!strstr(log, want)) fail_msg("no '%s' in the output of: %s\n%s", want, args, log);
    va_end(ap);
}

static char *path_in(const char *name) {
    static char buf[4][1024];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 1024, "%s/%s", g_dir, name);
    return p;
}

static void sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) fail_msg("failed: %s", cmd);
}

/* The whole file, for comparing before and after a refused command. */
static char *contents(const char *name, size_t *n) {
    char *text = df_test_read_file(path_in(name), n);
    assert_non_null(text);
    return text;
}

static void assert_unchanged(const char *name, const char *before, size_t n_before) {
    size_t n;
    char *after = contents(name, &n);
    assert_int_equal(n, n_before);
    assert_memory_equal(after, before, n);
    free(after);
}

/* ---- a NUL inside a JSON string ----------------------------------------------- */

static void test_nul_in_records(void **state) {
    char args[4096];
    df_test_write_file(path_in("p.jsonl"), "{\"prompt\": \"def f(x):\", \"response\": \" return x\"}\n"
                                           "{\"prompt\": \"def foo(x):\\u0000 tail\", \"response\": \" pass\"}\n");
    snprintf(args, sizeof args, "prepare --target %s --input p.jsonl --output p.store --on-bad-record fail", g_tgt);
    expect_exit(1, args, "p.jsonl:2", "field 'prompt' holds a NUL character", NULL);
    assert_false(df_test_file_exists(path_in("p.store")));
    /* skipped as a bad record: only the good one is written */
    snprintf(args, sizeof args, "prepare --target %s --input p.jsonl --output p.store", g_tgt);
    expect_exit(0, args, "p.jsonl:2", "skipped 1 of 2 records", NULL);
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(path_in("p.store"), 0, &err);
    assert_non_null(st);
    assert_int_equal(df_token_store_num_samples(st), 1);
    df_token_store_close(st);

    /* inside a conversation, and in a response (upper-case hex digits are the same escape) */
    df_test_write_file(path_in("c.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                           "{\"role\": \"assistant\", \"content\": \"a\\u0000b\"}]}\n");
    snprintf(args, sizeof args, "prepare --target %s --input c.jsonl --output c.store --on-bad-record fail", g_tgt);
    expect_exit(1, args, "c.jsonl:1", "field 'messages[1].content' holds a NUL", NULL);
    df_test_write_file(path_in("r.jsonl"), "{\"prompt\": \"x\", \"response\": \"y\\u0000\"}\n");
    snprintf(args, sizeof args, "prepare --target %s --input r.jsonl --output r.store --on-bad-record fail", g_tgt);
    expect_exit(1, args, "r.jsonl:1", "field 'response'", NULL);

    /* an escaped backslash followed by u0000 is six characters of text, not a NUL */
    df_test_write_file(path_in("ok.jsonl"), "{\"prompt\": \"s = '\\\\u0000'\", \"response\": \" ok\"}\n");
    snprintf(args, sizeof args, "prepare --target %s --input ok.jsonl --output ok.store --on-bad-record fail", g_tgt);
    expect_exit(0, args, NULL);
}

static void test_nul_in_prompts_and_configs(void **state) {
    char args[4096];
    df_test_write_file(path_in("q.jsonl"), "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"b\", \"prompt\": \"y\\u0000z\"}\n");
    snprintf(args, sizeof args, "generate --target %s --input q.jsonl --output g.jsonl --max-new-tokens 2", g_tgt);
    expect_exit(1, args, "q.jsonl:2", "field 'prompt' holds a NUL", NULL);
    assert_false(df_test_file_exists(path_in("g.jsonl")));
    /* an id is a string too */
    df_test_write_file(path_in("i.jsonl"), "{\"id\": \"a\\u0000\", \"prompt\": \"x\"}\n");
    snprintf(args, sizeof args, "generate --target %s --input i.jsonl --output g.jsonl --max-new-tokens 2", g_tgt);
    expect_exit(1, args, "i.jsonl:1", "field 'id'", NULL);

    /* an options file */
    df_test_write_file(path_in("opts.json"), "{\n  \"steps\": 2,\n  \"output\": \"run\\u0000x\"\n}\n");
    expect_exit(2, "train --config opts.json", "opts.json:3", "field 'output' holds a NUL", NULL);
    assert_false(df_test_file_exists(path_in("run")));

    /* a target's config.json (the weights linked, not copied) */
    sh("mkdir -p %s/m && cp %s/tokenizer.json %s/tokenizer_config.json %s/generation_config.json %s/m/ && "
       "ln -s %s/model.safetensors %s/m/ && sed 's/\"model_type\": *\"qwen3\"/\"model_type\": \"qwen3\\\\u0000x\"/' "
       "%s/config.json > %s/m/config.json && grep -q 'u0000' %s/m/config.json",
       g_dir, g_tgt, g_tgt, g_tgt, g_dir, g_tgt, g_dir, g_tgt, g_dir, g_dir);
    expect_exit(1, "generate --target m --input q.jsonl --output g.jsonl", "config.json", "field 'model_type'", NULL);
}

static void test_nul_in_tokenizer(void **state) {
    df_test_write_file(path_in("t.jsonl"), "{\"text\": \"qqzz <|im_start|>\"}\n");
    /* an added token: "qqzz" would have become a special token */
    sh("mkdir -p %s/ta && sed 's/\"content\": \"<|im_start|>\"/\"content\": \"qqzz\\\\u0000<|im_start|>\"/' "
       "%s/tokenizer.json > %s/ta/tokenizer.json && grep -q 'qqzz' %s/ta/tokenizer.json",
       g_dir, g_tgt, g_dir, g_dir);
    expect_exit(1, "tokenize --tokenizer ta --input t.jsonl", "tokenizer.json:", "field 'added_tokens[1].content'",
                "NUL", NULL);
    /* a vocab key */
    sh("mkdir -p %s/tv && sed 's/^      \"!\": 0,/      \"!\\\\u0000\": 0,/' %s/tokenizer.json > %s/tv/tokenizer.json && "
       "grep -q '!.u0000' %s/tv/tokenizer.json",
       g_dir, g_tgt, g_dir, g_dir);
    expect_exit(1, "tokenize --tokenizer tv --input t.jsonl", "the key 'model.vocab.!", "NUL", NULL);
    /* the chat template's tokenizer_config.json, read by prepare for conversations */
    sh("mkdir -p %s/tc && cp %s/tokenizer.json %s/tc/ && sed 's/\"eos_token\": *\"/\"eos_token\": \"\\\\u0000/' "
       "%s/tokenizer_config.json > %s/tc/tokenizer_config.json && grep -q 'u0000' %s/tc/tokenizer_config.json",
       g_dir, g_tgt, g_dir, g_tgt, g_dir, g_dir);
    df_test_write_file(path_in("conv.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                              "{\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
    expect_exit(1, "prepare --target tc --input conv.jsonl --output tc.store --on-bad-record fail",
                "tokenizer_config.json", "field 'eos_token'", NULL);
}

/* ---- export --output ------------------------------------------------------------ */

static void test_export_replaces_only_exports(void **state) {
    char args[4096];
    const char *src = df_test_path("tests/fixtures/export/drafter");
    /* new, then again over its own previous export, then over an empty directory */
    snprintf(args, sizeof args, "export %s --output out", src);
    expect_exit(0, args, NULL);
    expect_exit(0, args, NULL);
    assert_true(df_test_file_exists(path_in("out/dflash.py")));
    sh("mkdir %s/empty", g_dir);
    snprintf(args, sizeof args, "export %s --output empty", src);
    expect_exit(0, args, NULL);
    assert_true(df_test_file_exists(path_in("empty/model.safetensors")));

    /* a directory with other files: refused, naming them, and left as it was */
    sh("mkdir -p %s/run/checkpoints && echo '{}' > %s/run/args.json && echo x > %s/run/metrics.jsonl", g_dir, g_dir,
       g_dir);
    snprintf(args, sizeof args, "export %s --output run", src);
    expect_exit(2, args, "--output run holds", "args.json", "metrics.jsonl", NULL);
    assert_true(df_test_file_exists(path_in("run/args.json")));
    assert_false(df_test_file_exists(path_in("run/model.safetensors")));
    /* an export with a file added to it is no longer only an export */
    sh("echo notes > %s/out/NOTES.md", g_dir);
    snprintf(args, sizeof args, "export %s --output out/", src);
    expect_exit(2, args, "NOTES.md", NULL);
    assert_true(df_test_file_exists(path_in("out/NOTES.md")));
    /* part of an export */
    sh("mkdir %s/part && echo '{}' > %s/part/config.json", g_dir, g_dir);
    snprintf(args, sizeof args, "export %s --output part", src);
    expect_exit(2, args, "only part of a drafter export", NULL);

    /* the directory that holds the source, even when it looks like an export */
    sh("mkdir -p %s/run2/checkpoints && cp %s/model.safetensors %s/config.json %s/run2/checkpoints/", g_dir, src, src,
       g_dir);
    expect_exit(2, "export run2/checkpoints --output run2", "--output run2 holds", "CHECKPOINT run2/checkpoints", NULL);
    assert_true(df_test_file_exists(path_in("run2/checkpoints/model.safetensors")));
    sh("cp -r %s %s/self", src, g_dir);
    expect_exit(2, "export self --output ./self", "--output ./self is the same file as CHECKPOINT self", NULL);
    assert_true(df_test_file_exists(path_in("self/model.safetensors")));
}

/* ---- an output that is an input --------------------------------------------------- */

static void test_output_is_an_input(void **state) {
    char args[4096];
    size_t n;
    df_test_write_data_slice(path_in("d.jsonl"), 2);
    char *data = contents("d.jsonl", &n);
    /* the same path, another spelling, a symbolic link and a hard link */
    snprintf(args, sizeof args, "prepare --target %s --input d.jsonl --output d.jsonl", g_tgt);
    expect_exit(2, args, "--output d.jsonl is the same file as --input d.jsonl", NULL);
    snprintf(args, sizeof args, "prepare --target %s --input d.jsonl --output ./../%s/d.jsonl", g_tgt,
             strrchr(g_dir, '/') + 1);
    expect_exit(2, args, "is the same file as --input d.jsonl", NULL);
    assert_int_equal(symlink("d.jsonl", path_in("link.store")), 0);
    snprintf(args, sizeof args, "prepare --target %s --input d.jsonl --output link.store", g_tgt);
    expect_exit(2, args, "--output link.store is the same file as --input d.jsonl", NULL);
    assert_int_equal(link(path_in("d.jsonl"), path_in("hard.jsonl")), 0);
    snprintf(args, sizeof args, "generate --target %s --input d.jsonl --output hard.jsonl", g_tgt);
    expect_exit(2, args, "--output hard.jsonl is the same file as --input d.jsonl", NULL);
    df_test_write_file(path_in("t.jsonl"), "{\"text\": \"hello\"}\n");
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl --output t.jsonl", g_tgt);
    expect_exit(2, args, "--output t.jsonl is the same file as --input t.jsonl", NULL);
    assert_unchanged("d.jsonl", data, n);
    free(data);

    /* a file inside an input directory: the target's weights, a drafter's config */
    sh("mkdir -p %s/m && cp %s/config.json %s/tokenizer.json %s/m/ && cp %s/model.safetensors %s/m/", g_dir, g_tgt,
       g_tgt, g_dir, g_tgt, g_dir);
    char *weights = contents("m/model.safetensors", &n);
    df_test_write_file(path_in("ids.jsonl"), "{\"ids\": [1, 2, 3]}\n");
    expect_exit(2, "forward --target m --input ids.jsonl --output m/model.safetensors",
                "--output m/model.safetensors is the same file as --target m", NULL);
    assert_unchanged("m/model.safetensors", weights, n);
    free(weights);
    sh("cp -r %s %s/draft", df_test_path("tests/fixtures/export/drafter"), g_dir);
    char *cfg = contents("draft/config.json", &n);
    snprintf(args, sizeof args, "eval --target %s --draft draft --input d.jsonl --json draft/config.json", g_tgt);
    expect_exit(2, args, "--json draft/config.json is the same file as --draft draft", NULL);
    assert_unchanged("draft/config.json", cfg, n);
    free(cfg);
    /* a run directory that is the target's directory; plot over its own metrics */
    snprintf(args, sizeof args, "train --target m --data d.jsonl --output m/ --steps 1");
    expect_exit(2, args, "--output m/ is the same file as --target m", NULL);
    /* a new run into a directory whose final/ it starts from: final/ is replaced at the end */
    sh("mkdir -p %s/r/final && cp %s/config.json %s/model.safetensors %s/r/final/", g_dir,
       df_test_path("tests/fixtures/export/drafter"), df_test_path("tests/fixtures/export/drafter"), g_dir);
    snprintf(args, sizeof args, "train --target %s --data d.jsonl --output r --init-from r/final --steps 1", g_tgt);
    expect_exit(2, args, "--output r/final is the same file as --init-from r/final", NULL);
    snprintf(args, sizeof args, "train --target %s --data d.jsonl --output r --init-from r/final/model.safetensors",
             g_tgt);
    expect_exit(2, args, "--output r/final holds r/final/model.safetensors", NULL);
    sh("mkdir -p %s/pr && echo '{\"step\": 1, \"loss\": 2}' > %s/pr/metrics.jsonl", g_dir, g_dir);
    expect_exit(2, "plot pr --output pr/metrics.jsonl", "--output pr/metrics.jsonl is the same file as", NULL);
    /* the check leaves ordinary outputs alone */
    snprintf(args, sizeof args, "tokenize --tokenizer m --input t.jsonl --output m/t.out.jsonl");
    expect_exit(0, args, NULL);
}

/* ---- standard descriptors closed at start-up ----------------------------------------- */

static void test_closed_std_fds(void **state) {
    char cmd[8192];
    df_test_write_data_slice(path_in("d.jsonl"), 3);
    /* prepare with stderr and stdout closed: the store is whole */
    snprintf(cmd, sizeof cmd, "cd %s && %s prepare --target %s --input d.jsonl --output s.store >&- 2>&-", g_dir,
             df_test_path("dflash"), g_tgt);
    assert_int_equal(system(cmd), 0);
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(path_in("s.store"), 0, &err);
    if (!st) fail_msg("%s", err.msg);
    assert_int_equal(df_token_store_num_samples(st), 3);
    df_token_store_close(st);

    /* generate with both closed: every output line is one record */
    df_test_write_file(path_in("q.jsonl"), "{\"id\": 1, \"prompt\": \"def f(x):\"}\n{\"id\": 2, \"prompt\": \"x = \"}\n");
    snprintf(cmd, sizeof cmd,
             "cd %s && %s generate --target %s --input q.jsonl --output g.jsonl --max-new-tokens 3 >&- 2>&- <&-",
             g_dir, df_test_path("dflash"), g_tgt);
    assert_int_equal(system(cmd), 0);
    char *text = contents("g.jsonl", NULL);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsObject(j) || !cJSON_GetObjectItemCaseSensitive(j, "response"))
            fail_msg("not a record: %s", line);
        cJSON_Delete(j);
    }
    free(text);
    assert_int_equal(lines, 2);

    /* tokenize to stdout with stderr closed: the ids still reach stdout, and nothing else */
    df_test_write_file(path_in("t.jsonl"), "{\"text\": \"hello\"}\n");
    snprintf(cmd, sizeof cmd, "cd %s && %s tokenize --tokenizer %s --input t.jsonl 2>&- > ids.out", g_dir,
             df_test_path("dflash"), g_tgt);
    assert_int_equal(system(cmd), 0);
    size_t n;
    text = contents("ids.out", &n);
    assert_int_equal(strncmp(text, "{\"ids\":", 7), 0);
    assert_true(n > 0 && text[n - 1] == '\n' && strchr(text, '\n') == text + n - 1); /* one line */
    free(text);
}

/* ---- plot on an unreadable metrics.jsonl ------------------------------------------------ */

static void test_plot_read_errors(void **state) {
    sh("mkdir -p %s/r1/metrics.jsonl", g_dir);
    expect_exit(1, "plot r1", "r1/metrics.jsonl", "a directory", NULL);
    assert_false(df_test_file_exists(path_in("r1/curves.png")));
    sh("mkdir -p %s/r2/eval.jsonl && echo '{\"step\": 1, \"loss\": 2}' > %s/r2/metrics.jsonl", g_dir, g_dir);
    expect_exit(1, "plot r2", "r2/eval.jsonl", "a directory", NULL);
    sh("mkdir -p %s/r3", g_dir);
    expect_exit(1, "plot r3", "r3/metrics.jsonl", "cannot open", NULL);
    /* a readable run still plots */
    sh("mkdir -p %s/r4 && printf '{\"step\": 1, \"loss\": 2}\\n{\"step\": 2, \"loss\": 1.5}\\n' > %s/r4/metrics.jsonl",
       g_dir, g_dir);
    expect_exit(0, "plot r4", "r4/curves.png", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nul_in_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nul_in_prompts_and_configs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nul_in_tokenizer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_replaces_only_exports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_is_an_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_std_fds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plot_read_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
