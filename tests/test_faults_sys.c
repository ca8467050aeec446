/* Faults the system makes, made as a user makes them: a file-size limit
 * (ulimit -f) while prepare and train write, a low address-space limit
 * (ulimit -v) at start-up, a tokenizer.json whose Split regex backtracks
 * polynomially, a token store truncated while train has it mapped. Each
 * runs ./dflash in a child process with the limit set there (setrlimit,
 * then exec), and checks the exit status, the message and what is left on
 * disk. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "test_util.h"

/* An AddressSanitizer build cannot start at all under an address-space limit:
 * its shadow memory reserves terabytes before main runs. The limit cases run
 * in the normal build (make test) and are skipped, saying so, in that one. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_BUILD 1
#endif
#endif
#ifndef ASAN_BUILD
#define ASAN_BUILD 0
#endif

static void skip_under_asan(void) {
    if (!ASAN_BUILD) return;
    print_message("skipped: an AddressSanitizer build cannot start under an address-space limit\n");
    skip();
}

#define TINY_TRAIN                                                                                                     \
    "--draft-layers 1 --intermediate-size 64 --num-taps 1 --block-size 4 --num-anchors 4 --token-budget 128 "        \
    "--max-length 1024"

/* CMD with stdout and stderr to log; when resource >= 0 its limit is set to
 * `limit` in the child first (SIGXFSZ at its default, as in a user's shell):
 * its status (df_test_wait). */
static int run_limited(int resource, rlim_t limit, const char *cmd, const char *log, double timeout_s) {
    DfTestSpawn how = {.resource = resource, .limit = (long long)limit};
    return df_test_wait(df_test_spawn(cmd, log, &how), timeout_s);
}

static void assert_log_has(const char *log, const char *what, int status) {
    char *text = df_test_read_file(log, NULL);
    assert_non_null(text);
    if (!strstr(text, what)) fail_msg("exit %d, no '%s' in:\n%s", status, what, text);
    free(text);
}

/* No name in dir contains `part` (a temporary, a lock). */
static void assert_no_entry_with(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, part)) fail_msg("%s/%s left behind", dir, e->d_name);
    closedir(d);
}

/* ------------------------------------------------------ file-size limit */

static void test_file_size_limit_prepare(void **state) {
    char *dir = df_test_tmpdir("fsize-prepare");
    char slice[512], store[512], log[512], cmd[4096];
    snprintf(slice, sizeof slice, "%s/slice.jsonl", dir);
    snprintf(store, sizeof store, "%s/limited.store", dir);
    snprintf(log, sizeof log, "%s/prepare.log", dir);
    df_test_write_data_slice(slice, 64); /* a store of about 160 KB */
    snprintf(cmd, sizeof cmd, "'%s' prepare --tokenizer '%s' --input '%s' --output '%s'", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), slice, store);
    int status = run_limited(RLIMIT_FSIZE, 64 << 10, cmd, log, 300);
    if (status != 1) assert_log_has(log, "(expected exit 1)", status);
    assert_log_has(log, store, status);
    assert_log_has(log, "File too large", status);
    assert_false(df_test_file_exists(store));
    assert_no_entry_with(dir, "limited.store"); /* nor its temporary */
    df_test_rmtree(dir);
    free(dir);
}

static void test_file_size_limit_train(void **state) {
    char *dir = df_test_tmpdir("fsize-train");
    char store[512], run[512], log[512], cmd[4096], ckpt[600];
    df_test_prepare_data_slice(dir, 64, store, sizeof store);
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(log, sizeof log, "%s/train.log", dir);
    snprintf(cmd, sizeof cmd,
             "env OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive '%s' train --target '%s' --data '%s' --output '%s' "
             "--steps 2 " TINY_TRAIN,
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), store, run);
    /* room for args.json and the metrics, not for a checkpoint (about 1.3 MB) */
    int status = run_limited(RLIMIT_FSIZE, 256 << 10, cmd, log, 600);
    if (status != 1) assert_log_has(log, "(expected exit 1)", status);
    assert_log_has(log, "checkpoints/step-00000002.safetensors", status);
    assert_log_has(log, "File too large", status);
    assert_no_entry_with(run, "train.lock");
    snprintf(ckpt, sizeof ckpt, "%s/checkpoints", run);
    assert_no_entry_with(ckpt, ".tmp.");
    df_test_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------- address-space limit */

/* A number after `key` in the log, -1 when absent. */
static long log_number_after(const char *log, const char *key) {
    char *text = df_test_read_file(log, NULL);
    assert_non_null(text);
    const char *at = strstr(text, key);
    long v = at ? strtol(at + strlen(key), NULL, 10) : -1;
    free(text);
    return v;
}

static void test_address_space_limit(void **state) {
    skip_under_asan();
    char *dir = df_test_tmpdir("vlimit");
    char log[512], cmd[1024], blas_cmd[1024];
    snprintf(log, sizeof log, "%s/version.log", dir);
    snprintf(cmd, sizeof cmd, "'%s' --version", df_test_path("dflash"));
    /* ulimit -v 800000: OpenBLAS's workers used to retry their buffers for ever */
    int status = run_limited(RLIMIT_AS, (rlim_t)800000 << 10, cmd, log, 60);
    if (status != 0) assert_log_has(log, "(expected exit 0)", status);
    assert_log_has(log, "dflash ", status);
    /* a command that calls BLAS (forward: the fit comes before its options are read), more threads asked
     * for than 2 GiB fits: lowered, and said with what the program maps at start */
    snprintf(blas_cmd, sizeof blas_cmd,
             "env OPENBLAS_NUM_THREADS=64 OMP_NUM_THREADS=64 '%s' forward --target '%s/none' --input x --output y",
             df_test_path("dflash"), dir);
    status = run_limited(RLIMIT_AS, (rlim_t)2048 << 20, blas_cmd, log, 60);
    assert_true(status != DF_TEST_TIMED_OUT);
    assert_log_has(log, "fits", status);
    long at_start = log_number_after(log, "MiB, ");
    assert_true(at_start > 0);
    /* 100 MiB beyond that: not even one thread's buffer; refused with the figure, promptly */
    status = run_limited(RLIMIT_AS, (rlim_t)(at_start + 100) << 20, blas_cmd, log, 60);
    if (status != 1) assert_log_has(log, "(expected exit 1)", status);
    assert_log_has(log, "raise the limit to at least", status);
    /* --version makes no BLAS call: it runs there */
    status = run_limited(RLIMIT_AS, (rlim_t)(at_start + 100) << 20, cmd, log, 60);
    if (status != 0) assert_log_has(log, "(expected exit 0)", status);
    df_test_rmtree(dir);
    free(dir);
}

/* A BLAS-using command under a limit that fits: the CPU target's forward. */
static void test_address_space_limit_forward(void **state) {
    skip_under_asan();
    char *dir = df_test_tmpdir("vlimit-forward");
    char ids[512], out[512], log[512], cmd[4096];
    snprintf(ids, sizeof ids, "%s/ids.jsonl", dir);
    snprintf(out, sizeof out, "%s/features.safetensors", dir);
    snprintf(log, sizeof log, "%s/forward.log", dir);
    df_test_write_file(ids, "{\"ids\": [1, 2, 3, 4, 5, 6, 7, 8]}\n");
    snprintf(cmd, sizeof cmd, "env OMP_NUM_THREADS=8 OMP_WAIT_POLICY=passive '%s' forward --target '%s' --input '%s' "
                              "--output '%s'",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), ids, out);
    /* about 2 GB: room for the target beside what the program maps at start (a CUDA build its libraries, 700 MB) */
    int status = run_limited(RLIMIT_AS, (rlim_t)2000 << 20, cmd, log, 300);
    if (status != 0) assert_log_has(log, "(expected exit 0)", status);
    assert_true(df_test_file_exists(out));
    df_test_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------- regex backtracking */

/* coder-tiny's tokenizer.json with its Split regex replaced by `regex` (JSON-escaped). */
static void write_tokenizer_with_split(const char *path, const char *regex) {
    char *text = df_test_read_file(df_test_path("assets/coder-tiny/tokenizer.json"), NULL);
    assert_non_null(text);
    const char *key = "\"Regex\": \"";
    char *at = strstr(text, key);
    assert_non_null(at);
    at += strlen(key);
    char *end = at;
    while (*end && !(*end == '"' && end[-1] != '\\')) end++;
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "%.*s%s%s", (int)(at - text), text, regex, end);
    assert_int_equal(fclose(fp), 0);
    free(text);
}

static void write_run_of(const char *path, char c, size_t n) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"text\": \"", fp);
    for (size_t i = 0; i < n; i++) fputc(c, fp);
    fputs("\"}\n", fp);
    assert_int_equal(fclose(fp), 0);
}

static void test_regex_backtracking_bounded(void **state) {
    char *dir = df_test_tmpdir("regex");
    char tok[512], text[512], log[512], cmd[4096];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    snprintf(text, sizeof text, "%s/text.jsonl", dir);
    snprintf(log, sizeof log, "%s/tokenize.log", dir);
    snprintf(cmd, sizeof cmd, "'%s' tokenize --tokenizer '%s' --input '%s'", df_test_path("dflash"), tok, text);
    /* cubic backtracking in one match attempt: 12 KB took minutes */
    write_tokenizer_with_split(tok, "a*a*a*b|\\\\s+|.");
    write_run_of(text, 'a', 12000);
    double t0 = df_now_seconds();
    int status = run_limited(-1, 0, cmd, log, 120);
    double took = df_now_seconds() - t0;
    if (status != 1) assert_log_has(log, "(expected exit 1)", status);
    assert_log_has(log, "pre_tokenizer.pretokenizers[0].pattern.Regex", status);
    assert_log_has(log, "backtracks", status);
    print_message("a*a*a*b over 12 KB refused in %.1f s\n", took);
    assert_true(took < 30);
    /* linear per search but a search per character, each rescanning the rest of the text four times:
     * quadratic, about 60 s over 100 KB, past the text's CPU-time budget (10.5 s) on any machine */
    write_tokenizer_with_split(tok, "a*b|a*c|a*d|a*e|\\\\s+|.");
    write_run_of(text, 'a', 100000);
    t0 = df_now_seconds();
    status = run_limited(-1, 0, cmd, log, 300);
    took = df_now_seconds() - t0;
    if (status != 1) assert_log_has(log, "(expected exit 1)", status);
    assert_log_has(log, "pre_tokenizer.pretokenizers[0].pattern.Regex", status);
    assert_log_has(log, "of CPU time on a 100000-byte text", status);
    print_message("a*b|a*c|a*d|a*e over 100 KB refused in %.1f s\n", took);
    /* the same regex on a text that does not backtrack: encoded */
    write_run_of(text, 'b', 100000);
    status = run_limited(-1, 0, cmd, log, 300);
    if (status != 0) assert_log_has(log, "(expected exit 0)", status);
    assert_log_has(log, "{\"ids\": [", status);
    df_test_rmtree(dir);
    free(dir);
}

/* ------------------------------------------ truncated while mapped */

static void test_store_truncated_during_train(void **state) {
    char *dir = df_test_tmpdir("truncated");
    char store[512], run[512], log[512], cmd[4096];
    df_test_prepare_data_slice(dir, 64, store, sizeof store);
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(log, sizeof log, "%s/train.log", dir);
    snprintf(cmd, sizeof cmd,
             "env OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive '%s' train --target '%s' --data '%s' --output '%s' "
             "--steps 100000 " TINY_TRAIN,
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), store, run);
    pid_t pid = df_test_spawn(cmd, log, &(DfTestSpawn){.resource = -1});
    int started = 0;
    for (double until = df_now_seconds() + 300; !started && df_now_seconds() < until;) {
        df_sleep_seconds(0.2);
        char *text = df_test_read_file(log, NULL);
        started = text && strstr(text, "step 1/");
        free(text);
    }
    if (!started) {
        int status = df_test_wait(pid, 0);
        assert_log_has(log, "(train never reached step 1)", status);
    }
    assert_int_equal(truncate(store, 4096), 0);
    int status = df_test_wait(pid, 120);
    if (status != 1) assert_log_has(log, "(expected exit 1)", status);
    assert_log_has(log, "data.store changed or truncated while in use", status);
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_size_limit_prepare),
        cmocka_unit_test(test_file_size_limit_train),
        cmocka_unit_test(test_address_space_limit),
        cmocka_unit_test(test_address_space_limit_forward),
        cmocka_unit_test(test_regex_backtracking_bounded),
        cmocka_unit_test(test_store_truncated_during_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
