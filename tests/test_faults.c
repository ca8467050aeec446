/* Faults and bad values through ./dflash in real processes: every
 * case exits 1 or 2 (never 0, never a signal) with a message naming the
 * option or file, creates or replaces no file and leaves no temporary.
 * - numeric options: NaN, infinities, out-of-range and "unset" sentinels
 *   (-1, 0) given on purpose are refused, naming the option and its range;
 * - special files: a FIFO as an input is refused at once (never blocks), a
 *   FIFO or device at an output is refused and left as it is, a symlink at
 *   an output is written through (the link stays a link);
 * - write errors on stdout (/dev/full) fail the command;
 * - one writer per output: a second train or generate on the same output is
 *   refused naming the holder's pid while the first finishes normally;
 * - resume checks what it resumes: generate with other settings, into its
 *   own input or into a file it did not write; train --resume after the
 *   JSONL source changed: refused, the output byte-identical;
 * - stale temporaries of dead processes are removed by the next write;
 * - duplicate JSON keys take the last value; a drafter config's explicit
 *   mask_token_id -1 and a block_size of 100000 are refused. */
#define _GNU_SOURCE
#include "test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/drafter_io.h"

#define LOG_CAP 65536

static char *g_dir;

static int setup(void **state) {
    g_dir = df_test_tmpdir("faults");
    return 0;
}

static int teardown(void **state) {
    df_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Runs `dflash ARGS`; asserts exit 1 or 2 and that the output names `want`. */
static void expect_refused(const char *args, const char *want) {
    char cmd[8192], log[LOG_CAP];
    snprintf(cmd, sizeof cmd, "cd %s && timeout 60 %s %s", g_dir, df_test_path("dflash"), args);
    int rc = df_test_run(cmd, log, sizeof log);
    if (rc != 1 && rc != 2) fail_msg("exit %d (want 1 or 2) for: %s\n%s", rc, args, log);
    if (!strstr(log, want)) fail_msg("no '%s' in the message of: %s\n%s", want, args, log);
}

static void expect_ok(const char *args) {
    char cmd[8192], log[LOG_CAP];
    snprintf(cmd, sizeof cmd, "cd %s && timeout 120 %s %s", g_dir, df_test_path("dflash"), args);
    int rc = df_test_run(cmd, log, sizeof log);
    if (rc != 0) fail_msg("exit %d for: %s\n%s", rc, args, log);
}

static char *path_in(const char *name) {
    static char buf[4][1024];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 1024, "%s/%s", g_dir, name);
    return p;
}

/* No entry of the test directory is a temporary (NAME.tmp.PID). */
static void assert_no_temporaries(void) {
    char cmd[2048], log[4096];
    snprintf(cmd, sizeof cmd, "find %s -name '*.tmp.*'", g_dir);
    df_test_run(cmd, log, sizeof log);
    if (log[0]) fail_msg("temporaries left: %s", log);
}

/* Short pretokenized records (ids 100.., loss after the first 6 tokens). */
static void write_records(const char *path, int n, int salt) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < n; i++) {
        fputs("{\"input_ids\": [", fp);
        for (int k = 0; k < 32; k++) fprintf(fp, "%s%d", k ? ", " : "", 100 + (i * 37 + k * 11 + salt) % 7000);
        fputs("], \"loss_mask\": [", fp);
        for (int k = 0; k < 32; k++) fprintf(fp, "%s%d", k ? ", " : "", k >= 6);
        fputs("]}\n", fp);
    }
    assert_int_equal(fclose(fp), 0);
}

#define TARGET "--target %s "
#define TINY                                                                                                           \
    "--draft-layers 1 --intermediate-size 64 --num-taps 1 --block-size 4 --num-anchors 4 --token-budget 128 "        \
    "--max-length 64"

/* ---- options ----------------------------------------------------------- */

static void test_bad_numbers_refused(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    df_test_write_data_slice(path_in("p.jsonl"), 2);
    struct {
        const char *args, *want;
    } cases[] = {
        {"generate --temperature nan", "--temperature"},
        {"generate --temperature inf", "--temperature"},
        {"generate --temperature -1", "--temperature"},
        {"generate --top-p 0", "--top-p"},
        {"generate --top-p 1.5", "--top-p"},
        {"generate --batch 100000", "--batch"},
        {"generate --max-new-tokens 0", "--max-new-tokens"},
        {"generate --seed -1", "--seed"},
        {"train --lr inf", "--lr"},
        {"train --lr nan", "--lr"},
        {"train --lr -1", "--lr"},
        {"train --lr 1e999", "--lr"},
        {"train --steps -1", "--steps"},
        {"train --steps 99999999999", "--steps"},
        {"train --warmup nan", "--warmup"},
        {"train --warmup 2", "--warmup"},
        {"train --gamma 0", "--gamma"},
        {"train --stop-at 0", "--stop-at"},
        {"train --save-every 0", "--save-every"},
        {"train --block-size 100000", "--block-size"},
        {"train --mask-token-id -1", "--mask-token-id"},
        {"train --queue-depth 0", "--queue-depth"},
        {"train --grad-bucket-mib nan", "--grad-bucket-mib"},
        {"prepare --threads 100000", "--threads"},
        {"prepare --threads 0", "--threads"},
        {"prepare --max-length 0", "--max-length"},
        {"eval --block-size 0", "--block-size"},
        {"eval --block-size 100000", "--block-size"},
        {"inspect --dump -1 x", "--dump"},
        {"bench --seq-len 0", "--seq-len"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[4096];
        const char *cmd = cases[i].args;
        if (strncmp(cmd, "generate", 8) == 0)
            snprintf(args, sizeof args, "generate " TARGET "--input p.jsonl --output out%zu.jsonl%s", tgt, i, cmd + 8);
        else if (strncmp(cmd, "train", 5) == 0)
            snprintf(args, sizeof args, "train " TARGET "--data p.jsonl --output run%zu%s", tgt, i, cmd + 5);
        else if (strncmp(cmd, "prepare", 7) == 0)
            snprintf(args, sizeof args, "prepare --tokenizer %s --input p.jsonl --output s%zu.store%s", tgt, i, cmd + 7);
        else if (strncmp(cmd, "eval", 4) == 0)
            snprintf(args, sizeof args, "eval " TARGET "--draft %s --input p.jsonl%s", tgt, tgt, cmd + 4);
        else
            snprintf(args, sizeof args, "%s", cmd);
        expect_refused(args, cases[i].want);
        char name[64];
        snprintf(name, sizeof name, "out%zu.jsonl", i);
        assert_false(df_test_file_exists(path_in(name)));
        snprintf(name, sizeof name, "run%zu", i);
        assert_false(df_test_file_exists(path_in(name)));
        snprintf(name, sizeof name, "s%zu.store", i);
        assert_false(df_test_file_exists(path_in(name)));
    }
    assert_no_temporaries();
}

/* ---- special files ------------------------------------------------------- */

static void test_special_files(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    char args[4096];
    df_test_write_file(path_in("t.jsonl"), "{\"text\": \"hello\"}\n");
    df_test_write_data_slice(path_in("p.jsonl"), 2);
    assert_int_equal(mkfifo(path_in("fifo"), 0644), 0);
    /* a FIFO as an input: refused at once */
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input fifo", tgt);
    expect_refused(args, "fifo: not a regular file (a FIFO)");
    snprintf(args, sizeof args, "prepare --tokenizer %s --input fifo --output s.store", tgt);
    expect_refused(args, "not a regular file (a FIFO)");
    assert_false(df_test_file_exists(path_in("s.store")));
    snprintf(args, sizeof args, "generate --target %s --input fifo --output g.jsonl", tgt);
    expect_refused(args, "not a regular file (a FIFO)");
    /* a model directory whose config.json is a FIFO */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/m && cp %s/tokenizer.json %s/m/ && mkfifo %s/m/config.json", g_dir, tgt,
             g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    expect_refused("generate --target m --input p.jsonl --output g.jsonl", "config.json: not a regular file");
    /* a FIFO or a device at an output: refused and left as it is */
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl --output fifo", tgt);
    expect_refused(args, "is a FIFO, not a regular file");
    snprintf(args, sizeof args, "prepare --tokenizer %s --input p.jsonl --output fifo", tgt);
    expect_refused(args, "is a FIFO, not a regular file");
    snprintf(args, sizeof args, "generate --target %s --input p.jsonl --output fifo", tgt);
    expect_refused(args, "is a FIFO, not a regular file");
    struct stat st;
    assert_int_equal(lstat(path_in("fifo"), &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl --output /dev/null", tgt);
    expect_refused(args, "/dev/null exists and is a character device");
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    assert_int_equal(symlink("fifo", path_in("to_fifo")), 0);
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl --output to_fifo", tgt);
    expect_refused(args, "not to a regular file");
    /* a symlink to a regular file: written through, the link stays */
    df_test_write_file(path_in("real.jsonl"), "old\n");
    assert_int_equal(symlink("real.jsonl", path_in("link.jsonl")), 0);
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl --output link.jsonl", tgt);
    expect_ok(args);
    assert_int_equal(lstat(path_in("link.jsonl"), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *text = df_test_read_file(path_in("real.jsonl"), NULL);
    assert_non_null(strstr(text, "\"ids\""));
    free(text);
    assert_no_temporaries();
}

/* ---- stdout -------------------------------------------------------------- */

static void test_stdout_write_errors(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    char args[4096];
    df_test_write_file(path_in("t.jsonl"), "{\"text\": \"hello\"}\n");
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl > /dev/full", tgt);
    expect_refused(args, "No space left on device");
    expect_refused("--version > /dev/full", "standard output");
    snprintf(args, sizeof args, "prepare --tokenizer %s --input t.jsonl --output s.store > /dev/null", tgt);
    /* t.jsonl has no usable record shape for prepare: make a store from ids */
    df_test_write_file(path_in("ids.jsonl"), "{\"input_ids\": [1, 2, 3, 4], \"loss_mask\": [0, 1, 1, 1]}\n");
    snprintf(args, sizeof args, "prepare --tokenizer %s --input ids.jsonl --output s.store", tgt);
    expect_ok(args);
    expect_refused("inspect --dump 1 s.store > /dev/full", "standard output");
    expect_refused("inspect s.store > /dev/full", "standard output");
}

/* ---- one writer per output ------------------------------------------------- */

/* Starts `dflash ARGS` in the background; returns its pid. */
static pid_t start(const char *args, const char *log) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "cd %s && exec %s %s > %s 2>&1", g_dir, df_test_path("dflash"), args, log);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void wait_for_file(const char *path) {
    for (int i = 0; i < 3000 && !df_test_file_exists(path); i++) usleep(10000);
    assert_true(df_test_file_exists(path));
}

static void test_one_writer_per_output(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    char args[4096];
    write_records(path_in("lock.jsonl"), 24, 0);
    /* train: the first runs until SIGTERM, then checkpoints and exits 75 (stopped, resumable) */
    snprintf(args, sizeof args, "train " TARGET "--data lock.jsonl --output lockrun --steps 100000 " TINY, tgt);
    pid_t first = start(args, path_in("first.log"));
    wait_for_file(path_in("lockrun/metrics.jsonl"));
    expect_refused(args, "is in use by another run (pid");
    kill(first, SIGTERM);
    int status;
    assert_int_equal(waitpid(first, &status, 0), first);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 75);
    assert_false(df_test_file_exists(path_in("lockrun/train.lock")));

    /* generate: the second is refused while the first goes on to the end */
    df_test_write_data_slice(path_in("lockp.jsonl"), 6);
    snprintf(args, sizeof args, "generate " TARGET "--input lockp.jsonl --output lockg.jsonl --max-new-tokens 64", tgt);
    first = start(args, path_in("gfirst.log"));
    wait_for_file(path_in("lockg.jsonl.lock"));
    expect_refused(args, "is in use by another run (pid");
    assert_int_equal(waitpid(first, &status, 0), first);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_false(df_test_file_exists(path_in("lockg.jsonl.lock")));
    char *text = df_test_read_file(path_in("lockg.jsonl"), NULL);
    int lines = 0;
    for (char *p = text; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 6);
    free(text);
}

/* ---- resume checks what it resumes ----------------------------------------- */

static void test_generate_resume_checks(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    char args[4096];
    df_test_write_data_slice(path_in("r.jsonl"), 2);
    snprintf(args, sizeof args, "generate " TARGET "--input r.jsonl --output rg.jsonl --max-new-tokens 6", tgt);
    expect_ok(args);
    assert_true(df_test_file_exists(path_in("rg.jsonl.generate.json")));
    size_t n_before;
    char *before = df_test_read_file(path_in("rg.jsonl"), &n_before);
    const char *changes[] = {"--max-new-tokens 7", "--max-new-tokens 6 --temperature 0.5",
                             "--max-new-tokens 6 --seed 3", "--max-new-tokens 6 --top-p 0.5"};
    const char *named[] = {"--max-new-tokens is 7, was 6", "--temperature is", "--seed is", "--top-p is"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "generate " TARGET "--input r.jsonl --output rg.jsonl %s", tgt, changes[i]);
        expect_refused(args, named[i]);
        size_t n_after;
        char *after = df_test_read_file(path_in("rg.jsonl"), &n_after);
        assert_int_equal(n_after, n_before);
        assert_memory_equal(after, before, n_before);
        free(after);
    }
    free(before);
    /* its own input as the output, and an output generate did not write */
    snprintf(args, sizeof args, "generate " TARGET "--input r.jsonl --output r.jsonl", tgt);
    expect_refused(args, "--output r.jsonl is the same file as --input r.jsonl");
    df_test_write_data_slice(path_in("foreign.jsonl"), 2);
    snprintf(args, sizeof args, "generate " TARGET "--input r.jsonl --output foreign.jsonl", tgt);
    expect_refused(args, "not written by dflash generate");
    assert_no_temporaries();
}

static void test_train_resume_changed_source(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    char args[4096];
    write_records(path_in("src.jsonl"), 24, 0);
    snprintf(args, sizeof args, "train " TARGET "--data src.jsonl --output tr --steps 4 --save-every 1 --stop-at 2 " TINY,
             tgt);
    expect_ok(args);
    size_t n_store;
    char *store = df_test_read_file(path_in("tr/data.store"), &n_store);
    /* same size, same token count, other tokens */
    write_records(path_in("src.jsonl"), 24, 1);
    snprintf(args, sizeof args, "train " TARGET "--data src.jsonl --output tr --steps 4 --save-every 1 --resume " TINY,
             tgt);
    expect_refused(args, "the content of --data is");
    size_t n_after;
    char *after = df_test_read_file(path_in("tr/data.store"), &n_after);
    assert_int_equal(n_after, n_store);
    assert_memory_equal(after, store, n_store);
    free(after);
    free(store);
    /* the source restored: the resume goes on */
    write_records(path_in("src.jsonl"), 24, 0);
    expect_ok(args);
    assert_no_temporaries();
}

/* ---- litter ------------------------------------------------------------------ */

static void test_stale_temporaries_removed(void **state) {
    char tgt[1024];
    snprintf(tgt, sizeof tgt, "%s", df_test_path("assets/coder-tiny"));
    char args[4096];
    df_test_write_file(path_in("t.jsonl"), "{\"text\": \"hello\"}\n");
    /* a pid above the kernel's pid_max default: no such process */
    df_test_write_file(path_in("tok.jsonl.tmp.2147483000"), "partial");
    snprintf(args, sizeof args, "tokenize --tokenizer %s --input t.jsonl --output tok.jsonl", tgt);
    expect_ok(args);
    assert_false(df_test_file_exists(path_in("tok.jsonl.tmp.2147483000")));
    assert_no_temporaries();
}

/* ---- JSON ---------------------------------------------------------------------- */

static void test_duplicate_keys_take_the_last(void **state) {
    char *text = df_test_read_file(df_test_path("assets/coder-tiny/config.json"), NULL);
    char *brace = strchr(text, '{');
    assert_non_null(brace);
    size_t n = strlen(text) + 64;
    char *dup = malloc(n);
    snprintf(dup, n, "{\"hidden_size\": 1, %s", brace + 1);
    DfModelConfig cfg;
    DfError err;
    assert_int_equal(df_test_load_config_text(&cfg, dup, &err), 0);
    assert_int_not_equal(cfg.hidden_size, 1); /* the file's own, later value */
    free(dup);
    free(text);
}

/* A copy of coder-tiny whose config.json sets `field` to `value`. */
static const char *target_with(const char *name, const char *field, long long value) {
    char *dir = path_in(name), cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp %s/* '%s'/", dir, dir,
             df_test_path("assets/coder-tiny"), dir);
    assert_int_equal(system(cmd), 0);
    char *text = df_test_read_file(df_test_path("assets/coder-tiny/config.json"), NULL);
    char *brace = strrchr(text, '}'), path[1200];
    assert_non_null(brace);
    *brace = '\0';
    size_t n = strlen(text) + 128;
    char *json = malloc(n);
    snprintf(json, n, "%s, \"%s\": %lld}", text, field, value);
    snprintf(path, sizeof path, "%s/config.json", dir);
    df_test_write_file(path, json); /* a duplicate key: the later one, this, wins */
    free(json), free(text);
    return dir;
}

/* A config larger than its weights names the tensor and both shapes before
 * anything is allocated for it (not "out of memory allocating 2 TB"). */
static void test_config_larger_than_weights(void **state) {
    const char *fields[] = {"hidden_size", "intermediate_size", "vocab_size"};
    long long values[] = {1 << 20, 1 << 28, 1 << 28};
    for (int i = 0; i < 3; i++) {
        char name[64], args[4096];
        snprintf(name, sizeof name, "big-%s", fields[i]);
        const char *dir = target_with(name, fields[i], values[i]);
        df_test_write_data_slice(path_in("big-prompts.jsonl"), 1);
        snprintf(args, sizeof args, "generate --target '%s' --input '%s' --output '%s' --max-new-tokens 2", dir,
                 path_in("big-prompts.jsonl"), path_in("big-out.jsonl"));
        expect_refused(args, "config.json implies");
        assert_false(df_test_file_exists(path_in("big-out.jsonl")));
    }
}

static void test_drafter_config_ranges(void **state) {
    const char *base =
        "{\"architectures\": [\"DFlashDraftModel\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 32, "
        "\"vocab_size\": 1000, \"max_position_embeddings\": 512, \"num_target_layers\": 4, \"rms_norm_eps\": 1e-6, "
        "\"rope_theta\": 10000, %s}";
    struct {
        const char *extra, *want;
    } cases[] = {
        {"\"block_size\": 100000, \"dflash_config\": {\"target_layer_ids\": [1], \"mask_token_id\": 5}", "'block_size'"},
        {"\"block_size\": 4, \"dflash_config\": {\"target_layer_ids\": [1], \"mask_token_id\": -1}", "mask_token_id"},
        {"\"block_size\": 4, \"dflash_config\": {\"target_layer_ids\": [1], \"mask_token_id\": 1e12}", "mask_token_id"},
        {"\"block_size\": 4, \"rope_theta\": 1e400, \"dflash_config\": {\"target_layer_ids\": [1]}", "infinity"},
    };
    char json[4096];
    DfDrafterConfig cfg;
    DfError err;
    snprintf(json, sizeof json, base, "\"block_size\": 4, \"dflash_config\": {\"target_layer_ids\": [1]}");
    if (df_drafter_config_parse(json, "good.json", &cfg, &err)) fail_msg("the valid config: %s", err.msg);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json, base, cases[i].extra);
        assert_int_not_equal(df_drafter_config_parse(json, "bad.json", &cfg, &err), 0);
        if (!strstr(err.msg, cases[i].want)) fail_msg("case %zu: no '%s' in: %s", i, cases[i].want, err.msg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_numbers_refused),
        cmocka_unit_test(test_special_files),
        cmocka_unit_test(test_stdout_write_errors),
        cmocka_unit_test(test_one_writer_per_output),
        cmocka_unit_test(test_generate_resume_checks),
        cmocka_unit_test(test_train_resume_changed_source),
        cmocka_unit_test(test_stale_temporaries_removed),
        cmocka_unit_test(test_duplicate_keys_take_the_last),
        cmocka_unit_test(test_drafter_config_ranges),
        cmocka_unit_test(test_config_larger_than_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
