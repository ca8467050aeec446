/* Reliability of long runs, through ./dflash in real processes:
 * - SIGKILL at 20 random moments (during steps and checkpoint writes), each
 *   time resumed with --resume: the final weights equal an uninterrupted
 *   run's byte for byte, and a resume never fails;
 * - SIGTERM: exit 75 (stopped, resumable) with a checkpoint of the step reached (and the run
 *   resumes to the same weights); a second signal exits at once (143)
 *   leaving a loadable checkpoint; SIGTERM during dflash prepare leaves no
 *   store;
 * - non-finite steps (NaN features through the test seam of the step's
 *   features, base/test_seam.h, in this process): the update is skipped (weights unchanged), reported with the
 *   sample ids, and max_bad_steps stops the run with an error;
 * - resource errors: a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) while
 *   writing a checkpoint, an output path that cannot be a directory or is
 *   not writable, a run too large for memory: clear messages, non-zero exit,
 *   the previous checkpoint intact and loadable;
 * - the malformed-input catalogues of the token store and tokenizer.json
 *   (tests/malformed/<parser>/, one file per case with its .expected error),
 *   and the regression inputs of the fuzzers (tests/malformed/fuzz/).
 *
 * The training runs use a tiny drafter on coder-tiny and short pretokenized
 * samples, so that a run of 24 steps takes about a second on two cores. */
#define _GNU_SOURCE
#include "test_util.h"

#include "base/clock.h"
#include "base/test_seam.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data/prepare_record.h"
#include "formats/safetensors.h"
#include "formats/token_store.h"
#include "text/tokenizer.h"
#include "train/trainer.h"

#define OUT_CAP 65536
#define STEPS 24
#define KILLS 20

/* block size 4: samples need 8 loss tokens; 128 tokens: about 3 samples a batch */
#define TINY_OPTIONS                                                                                                   \
    "--draft-layers 1 --intermediate-size 64 --num-taps 1 --block-size 4 --num-anchors 4 --token-budget 128 "        \
    "--lr 3e-3 --warmup 0.1 --seed 7 --max-length 64"

typedef struct Fixture {
    char *dir;
    char data[512];
    char out[OUT_CAP];
} Fixture;

/* Short pretokenized records (28..44 tokens, the first 6..12 without loss)
 * from a fixed generator: no tokenizer work, tiny batches. */
static void write_short_records(const char *path, int n) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int len = 28 + (int)(x % 17), prompt = 6 + (int)((x >> 8) % 7);
        fputs("{\"input_ids\": [", fp);
        for (int k = 0; k < len; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            fprintf(fp, "%s%d", k ? ", " : "", 100 + (int)(x % 7900));
        }
        fputs("], \"loss_mask\": [", fp);
        for (int k = 0; k < len; k++) fprintf(fp, "%s%d", k ? ", " : "", k >= prompt);
        fputs("]}\n", fp);
    }
    assert_int_equal(fclose(fp), 0);
}

static int train_ok(Fixture *f, const char *run, const char *extra);

/* One directory for the group, with the data and the uninterrupted reference
 * run (reference/final/model.safetensors) that several tests compare with;
 * each test uses its own run directories in it. */
static int group_setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    f->dir = df_test_tmpdir("reliability");
    snprintf(f->data, sizeof f->data, "%s/short.jsonl", f->dir);
    write_short_records(f->data, 24);
    *state = f;
    return train_ok(f, "reference", "--steps 24 --save-every 1") == 0 ? 0 : -1;
}

static int group_teardown(void **state) {
    Fixture *f = *state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null", f->dir); /* the permission test's leftovers */
    if (system(cmd) != 0) fprintf(stderr, "warning: chmod failed\n");
    df_test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* The dflash train command line for run directory f->dir/run. Passive
 * OpenMP waiting: on a loaded machine spinning threads make a run ten times
 * slower (the results do not depend on it). */
static void train_command(const Fixture *f, const char *run, const char *extra, char *cmd, size_t cap) {
    snprintf(cmd, cap, "OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive '%s' train --target '%s' --data '%s' --output '%s/%s' " TINY_OPTIONS " %s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->data, f->dir, run, extra);
}

/* Runs to the end; returns the exit status with the output in f->out. */
static int train(Fixture *f, const char *run, const char *extra) {
    char cmd[4096];
    train_command(f, run, extra, cmd, sizeof cmd);
    return df_test_run(cmd, f->out, sizeof f->out);
}

static int train_ok(Fixture *f, const char *run, const char *extra) {
    int rc = train(f, run, extra);
    if (rc != 0) fprintf(stderr, "dflash train %s exited %d:\n%s\n", extra, rc, f->out);
    return rc;
}

/* Starts a command in its own process, output appended to log;
 * fsize_limit > 0 sets RLIMIT_FSIZE in the child with SIGXFSZ ignored, so
 * that a write past it fails with EFBIG. */
static pid_t spawn(const char *cmd, const char *log, long fsize_limit) {
    DfTestSpawn how = {.append = 1, .resource = fsize_limit > 0 ? RLIMIT_FSIZE : -1, .limit = fsize_limit,
                       .ignore_sigxfsz = fsize_limit > 0};
    return df_test_spawn(cmd, log, &how);
}

/* Asserts that two files are byte-identical. */
static void assert_same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = df_test_read_file(a, &na), *y = df_test_read_file(b, &nb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, na);
    free(x);
    free(y);
}

static void path_in(const Fixture *f, const char *rel, char *out, size_t cap) { snprintf(out, cap, "%s/%s", f->dir, rel); }

static int count_lines(const char *path) {
    char *text = df_test_read_file(path, NULL);
    if (!text) return 0;
    int n = 0;
    for (char *p = text; *p; p++) n += *p == '\n';
    free(text);
    return n;
}

/* The "params" tensor bytes of a checkpoint (caller frees). */
static char *checkpoint_params(const char *path, size_t *n) {
    DfSafetensors st;
    DfError err = {{0}};
    if (df_safetensors_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    const DfTensorInfo *t = df_safetensors_find(&st, "params");
    assert_non_null(t);
    char *copy = malloc(t->nbytes);
    memcpy(copy, t->data, t->nbytes);
    *n = t->nbytes;
    df_safetensors_close(&st);
    return copy;
}

/* No file of the directory is a leftover temporary ("NAME.tmp.PID"). */
static void assert_no_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) fail_msg("%s: temporary file %s left behind", dir, e->d_name);
    closedir(d);
}

/* ------------------------------------------------------------ kill -9 */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* 100 steps, a checkpoint after each. The kill delays scale with the
 * uninterrupted run's time R: uniform in [20 ms, 20 ms + R/12], so a launch
 * dies in its start-up (loading, resuming), inside a step or inside a
 * checkpoint write, and 20 launches advance the run by a third or so. */
#define KILL_RUN "--steps 100 --save-every 1"

static void test_sigkill_and_resume_is_identical(void **state) {
    Fixture *f = *state;
    double t0 = now_ms();
    assert_int_equal(train_ok(f, "kill-reference", KILL_RUN), 0);
    int span_ms = (int)((now_ms() - t0) / 12) + 1;
    const char *seed_text = getenv("DFLASH_KILL_SEED");
    unsigned seed = seed_text ? (unsigned)strtoul(seed_text, NULL, 10) : (unsigned)time(NULL);
    fprintf(stderr, "kill test: DFLASH_KILL_SEED=%u\n", seed);
    srand(seed);
    char cmd[4096], log[1024], ckpt[1024], final_path[1024];
    path_in(f, "killed.log", log, sizeof log);
    path_in(f, "killed/checkpoints", ckpt, sizeof ckpt);
    path_in(f, "killed/final/model.safetensors", final_path, sizeof final_path);
    int kills = 0, finished = 0, launches = 0;
    while (!finished) {
        assert_true(++launches < 200);
        struct stat st;
        int have_ckpt = stat(ckpt, &st) == 0; /* a checkpoints/ directory: resume (it fails if none is valid) */
        train_command(f, "killed", have_ckpt ? KILL_RUN " --resume" : KILL_RUN, cmd, sizeof cmd);
        pid_t pid = spawn(cmd, log, 0);
        if (kills < KILLS) {
            df_sleep_seconds((20 + rand() % span_ms) / 1000.0);
            kill(pid, SIGKILL);
        }
        int status = df_test_wait(pid, -1);
        if (status == 1000 + SIGKILL) {
            kills++;
            continue;
        }
        if (status != 0) {
            char *text = df_test_read_file(log, NULL);
            fail_msg("launch %d (after %d kills) exited %d:\n%s", launches, kills, status, text ? text : "");
        }
        finished = df_test_file_exists(final_path);
    }
    fprintf(stderr, "kill test: %d kills in %d launches\n", kills, launches);
    assert_no_temporaries(ckpt); /* those of killed writers were removed */
    assert_int_equal(kills, KILLS);
    char ref[1024];
    path_in(f, "kill-reference/final/model.safetensors", ref, sizeof ref);
    assert_same_file(ref, final_path);
    path_in(f, "killed/metrics.jsonl", ref, sizeof ref);
    assert_int_equal(count_lines(ref), 100);
}

/* ------------------------------------------------------------ SIGTERM */

/* Waits until the run's metrics.jsonl has at least n lines (or 20 s). */
static void wait_for_steps(const Fixture *f, const char *run, int n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", f->dir, run);
    for (int i = 0; i < 2000 && count_lines(path) < n; i++) df_sleep_seconds(0.01);
    assert_true(count_lines(path) >= n);
}

/* Waits until the file contains the text (or 20 s). */
static void wait_for_text(const char *path, const char *needle) {
    for (int i = 0; i < 2000; i++) {
        char *text = df_test_read_file(path, NULL);
        int found = text && strstr(text, needle);
        free(text);
        if (found) return;
        df_sleep_seconds(0.01);
    }
    fail_msg("%s never showed \"%s\"", path, needle);
}

static void test_sigterm_checkpoints_and_exits_75(void **state) {
    Fixture *f = *state;
    char cmd[4096], log[1024], path[1200];
    path_in(f, "term.log", log, sizeof log);
    /* no periodic checkpoints: the one after the signal is the signal's */
    train_command(f, "term", "--steps 24", cmd, sizeof cmd);
    pid_t pid = spawn(cmd, log, 0);
    wait_for_steps(f, "term", 2);
    kill(pid, SIGTERM);
    assert_int_equal(df_test_wait(pid, -1), 75);
    char *text = df_test_read_file(log, NULL);
    const char *msg = strstr(text, "SIGTERM received: stopped after step ");
    assert_non_null(msg);
    int step = atoi(msg + strlen("SIGTERM received: stopped after step "));
    assert_true(step >= 2 && step < STEPS);
    snprintf(path, sizeof path, "%s/term/checkpoints/step-%08d.safetensors", f->dir, step);
    assert_non_null(strstr(text, path)); /* the message says where */
    assert_true(df_test_file_exists(path));
    free(text);
    path_in(f, "term/metrics.jsonl", path, sizeof path);
    assert_int_equal(count_lines(path), step);
    /* continued, it ends where the uninterrupted run ends */
    assert_int_equal(train_ok(f, "term", "--steps 24 --resume"), 0);
    char a[1024], b[1024];
    path_in(f, "reference/final/model.safetensors", a, sizeof a);
    path_in(f, "term/final/model.safetensors", b, sizeof b);
    assert_same_file(a, b);

    /* two signals: the second exits at once (143); what was saved still loads */
    path_in(f, "term2.log", log, sizeof log);
    train_command(f, "term2", "--steps 24 --save-every 1", cmd, sizeof cmd);
    pid = spawn(cmd, log, 0);
    wait_for_steps(f, "term2", 3);
    kill(pid, SIGTERM);
    wait_for_text(log, "SIGTERM: stopping cleanly"); /* the first was handled: the second is not merged with it */
    kill(pid, SIGTERM);
    int status = df_test_wait(pid, -1);
    text = df_test_read_file(log, NULL);
    if (status != 143 && !strstr(text, "stopped after step")) fail_msg("exit %d after two SIGTERMs:\n%s", status, text);
    fprintf(stderr, "two SIGTERMs: exit %d%s\n", status, status == 143 ? " (at once)" : " (the step ended between them)");
    free(text);
    assert_int_equal(train_ok(f, "term2", "--steps 24 --save-every 1 --resume"), 0);
    assert_non_null(strstr(f->out, "resuming from"));
    path_in(f, "term2/final/model.safetensors", b, sizeof b);
    assert_same_file(a, b);
}

/* Waits until a file whose name holds `stem` (a writer's temporary) appears in
 * dir while pid is still running; 0 if pid ended or timeout_s passed first. */
static int wait_for_temporary(const char *dir, const char *stem, pid_t pid, double timeout_s) {
    double start = df_now_seconds();
    while (df_now_seconds() - start < timeout_s) {
        if (waitpid(pid, NULL, WNOHANG) != 0) return 0;
        DIR *d = opendir(dir);
        assert_non_null(d);
        int seen = 0;
        for (struct dirent *e; (e = readdir(d));) seen |= strstr(e->d_name, stem) != NULL;
        closedir(d);
        if (seen) return 1;
        df_sleep_seconds(0.01);
    }
    return 0;
}

static void test_sigterm_during_prepare_leaves_no_store(void **state) {
    Fixture *f = *state;
    /* many copies of the training data: long enough to be interrupted */
    char cmd[16384], log[1024], store[1024];
    path_in(f, "prepare.log", log, sizeof log);
    path_in(f, "big.store", store, sizeof store);
    int at = snprintf(cmd, sizeof cmd, "'%s' prepare --threads 1 --tokenizer '%s' --output '%s'", df_test_path("dflash"),
                      df_test_path("assets/coder-tiny"), store);
    for (int i = 0; i < 40; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --input '%s'", df_test_path("assets/data/code-train.jsonl"));
    pid_t pid = spawn(cmd, log, 0);
    /* signal once prepare is writing its temporary store: after its handlers are
     * installed however slowly the process started, and well before it ends */
    assert_true(wait_for_temporary(f->dir, "big.store.tmp.", pid, 60.0));
    kill(pid, SIGTERM);
    int status = df_test_wait(pid, -1);
    char *text = df_test_read_file(log, NULL);
    if (status != 143) fail_msg("prepare exited %d:\n%s", status, text);
    assert_non_null(strstr(text, "interrupted by SIGTERM"));
    free(text);
    assert_false(df_test_file_exists(store));
    DIR *d = opendir(f->dir);
    for (struct dirent *e; (e = readdir(d));) assert_null(strstr(e->d_name, "big.store")); /* no temporary left */
    closedir(d);
}

/* ------------------------------------------------------- non-finite steps */

/* NaN features for steps first..last, through the test seam of the step's
 * features (DF_SEAM_TRAIN_FEATURES). */
typedef struct Poison {
    int64_t first, last;
    int calls;
} Poison;

static int poison_features(void *ctx, DfSeamPoint point, void *data, DfError *err) {
    Poison *p = ctx;
    const DfTrainFeaturesSeam *seam = data;
    if (point != DF_SEAM_TRAIN_FEATURES || seam->step < p->first || seam->step > p->last) return 0;
    p->calls++;
    DfBackend *be = seam->be;
    DfBuffer features = seam->features;
    float *nan_rows = malloc(features.count * sizeof *nan_rows);
    assert_non_null(nan_rows);
    for (size_t i = 0; i < features.count; i++) nan_rows[i] = NAN;
    int rc = be->ops->upload_f32(be, features, nan_rows, err);
    free(nan_rows);
    return rc;
}

/* The seam's callback goes with the test that installed it, even when an
 * assertion ends the test early. */
static int remove_seam(void **state) {
    df_test_seam_set(NULL, NULL);
    return 0;
}

/* The options of TINY_OPTIONS for run directory f->dir/run, in process: the
 * data the reference run prepared, its mask token. */
static void nan_run_options(Fixture *f, const char *run, DfTrainOptions *o, char *output, char *store, size_t cap) {
    char path[1200];
    path_in(f, "reference/args.json", path, sizeof path);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    cJSON *args = cJSON_Parse(text);
    free(text);
    const cJSON *mask = cJSON_GetObjectItemCaseSensitive(args, "mask-token-id");
    assert_true(cJSON_IsNumber(mask));
    df_train_options_default(o);
    o->mask_token_id = (int)mask->valuedouble;
    cJSON_Delete(args);
    path_in(f, run, output, cap);
    path_in(f, "reference/data.store", store, cap);
    o->target_dir = df_test_path("assets/coder-tiny");
    o->data_source = f->data;
    o->data_store = store;
    o->output_dir = output;
    o->draft_layers = 1, o->intermediate_size = 64, o->num_taps = 1, o->block_size = 4, o->num_anchors = 4;
    o->token_budget = 128, o->lr = 3e-3, o->warmup = 0.1, o->seed = 7, o->max_length = 64, o->steps = STEPS;
}

/* df_train with its stderr in f->out; its return code. */
static int train_in_process(Fixture *f, const DfTrainOptions *o, DfTrainSummary *s, DfError *err) {
    char log[1024];
    path_in(f, "in-process.log", log, sizeof log);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2), close(fd);
    int rc = df_train(o, s, err);
    fflush(stderr);
    dup2(saved, 2), close(saved);
    char *text = df_test_read_file(log, NULL);
    snprintf(f->out, sizeof f->out, "%s", text ? text : "");
    free(text);
    return rc;
}

static void test_nonfinite_step_is_skipped(void **state) {
    Fixture *f = *state;
    char a[1200], b[1200], output[1200], store[1200];
    DfTrainOptions o;
    DfTrainSummary s;
    DfError err = {{0}};
    nan_run_options(f, "nan", &o, output, store, sizeof output);
    o.stop_at = 2;
    if (train_in_process(f, &o, &s, &err)) fail_msg("%s\n%s", err.msg, f->out);
    /* step 3 poisoned: reported, no update */
    Poison p = {.first = 3, .last = 3};
    df_test_seam_set(poison_features, &p);
    o.stop_at = 3, o.resume = 1;
    if (train_in_process(f, &o, &s, &err)) fail_msg("%s\n%s", err.msg, f->out);
    assert_int_equal(p.calls, 1);
    assert_non_null(strstr(f->out, "step 3: non-finite loss"));
    assert_non_null(strstr(f->out, "update skipped"));
    assert_non_null(strstr(f->out, "batch sample ids ["));
    assert_int_equal(s.bad_steps, 1);
    path_in(f, "nan/checkpoints/step-00000002.safetensors", a, sizeof a);
    path_in(f, "nan/checkpoints/step-00000003.safetensors", b, sizeof b);
    size_t na, nb;
    char *pa = checkpoint_params(a, &na), *pb = checkpoint_params(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, na); /* the weights did not move */
    free(pa);
    free(pb);
    /* metrics: step 3 says so, with the sample ids; loss null (valid JSON) */
    path_in(f, "nan/metrics.jsonl", a, sizeof a);
    char *text = df_test_read_file(a, NULL);
    char *line3 = strstr(text, "{\"step\": 3,");
    assert_non_null(line3);
    *strchr(line3, '\n') = '\0';
    cJSON *j = cJSON_Parse(line3);
    assert_non_null(j);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "skipped_update")));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "nonfinite")->valuestring, "loss");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "loss")));
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "sample_ids");
    assert_true(cJSON_IsArray(ids));
    assert_int_equal(cJSON_GetArraySize(ids), (int)cJSON_GetObjectItemCaseSensitive(j, "samples")->valuedouble);
    cJSON_Delete(j);
    free(text);

    /* steps 5.. poisoned with max_bad_steps 3: stops at step 7 with an error, writing no final/ (the
     * stop_at 3 run wrote one: removed first) */
    path_in(f, "nan/final", a, sizeof a);
    df_test_rmtree(a);
    p = (Poison){.first = 5, .last = STEPS};
    o.stop_at = 0, o.save_every = 1, o.max_bad_steps = 3;
    assert_int_not_equal(train_in_process(f, &o, &s, &err), 0);
    assert_int_equal(p.calls, 3);
    assert_non_null(strstr(err.msg, "3 steps in a row (up to step 7)"));
    assert_non_null(strstr(err.msg, "--max-bad-steps 3"));
    assert_false(df_test_file_exists(a));
    /* the checkpoints are good: the run continues from them, to the end */
    memset(&err, 0, sizeof err);
    df_test_seam_set(NULL, NULL);
    if (train_in_process(f, &o, &s, &err)) fail_msg("%s\n%s", err.msg, f->out);
    assert_non_null(strstr(f->out, "resuming from"));
    assert_int_equal(s.first_step, 7);
    assert_true(s.finished);
    assert_int_equal(s.bad_steps, 0);
}

/* A finite loss and gradient whose update still makes the weights
 * non-finite (a learning rate near FLT_MAX): the guard after the update
 * stops the run with the step named, and nothing of that step is saved. */
static void test_nonfinite_weights_stop_the_run(void **state) {
    Fixture *f = *state;
    char path[1200], output[1200], store[1200];
    DfTrainOptions o;
    DfTrainSummary s;
    DfError err = {{0}};
    nan_run_options(f, "inf", &o, output, store, sizeof output);
    o.lr = 3e38, o.warmup = 0, o.save_every = 1;
    assert_int_not_equal(train_in_process(f, &o, &s, &err), 0);
    assert_non_null(strstr(err.msg, "not finite after the update of step 1 "));
    assert_non_null(strstr(err.msg, "nothing of this step is saved"));
    path_in(f, "inf/checkpoints/step-00000001.safetensors", path, sizeof path);
    assert_false(df_test_file_exists(path));
    path_in(f, "inf/final", path, sizeof path);
    assert_false(df_test_file_exists(path));
}

/* ------------------------------------------------------ resource errors */

static void test_file_size_limit_keeps_previous_checkpoint(void **state) {
    Fixture *f = *state;
    assert_int_equal(train_ok(f, "full", "--steps 24 --save-every 1 --stop-at 2"), 0);
    char cmd[4096], log[1024], path[1200];
    path_in(f, "full.log", log, sizeof log);
    train_command(f, "full", "--steps 24 --save-every 1 --resume", cmd, sizeof cmd);
    /* 1 MiB: the metrics and the store fit, a checkpoint (3.7 MB) does not */
    int status = df_test_wait(spawn(cmd, log, 1 << 20), -1);
    char *text = df_test_read_file(log, NULL);
    if (status == 0 || status >= 1000) fail_msg("expected a clean failure, got %d:\n%s", status, text);
    assert_non_null(strstr(text, "writing the checkpoint of step 3"));
    assert_non_null(strstr(text, "File too large"));
    free(text);
    snprintf(path, sizeof path, "%s/full/checkpoints/step-00000003.safetensors", f->dir);
    assert_false(df_test_file_exists(path));
    path_in(f, "full/checkpoints", path, sizeof path);
    assert_no_temporaries(path);
    /* the previous checkpoint loads, and the run ends as the uninterrupted one */
    assert_int_equal(train_ok(f, "full", "--steps 24 --save-every 1 --resume"), 0);
    assert_non_null(strstr(f->out, "step-00000002.safetensors (step 2 of 24"));
    char a[1024], b[1024];
    path_in(f, "reference/final/model.safetensors", a, sizeof a);
    path_in(f, "full/final/model.safetensors", b, sizeof b);
    assert_same_file(a, b);
}

static void test_output_not_writable(void **state) {
    Fixture *f = *state;
    char path[1024], run[1200];
    /* a path under a regular file can never be a directory, even for root */
    path_in(f, "plain-file", path, sizeof path);
    df_test_write_file(path, "not a directory\n");
    assert_int_not_equal(train(f, "plain-file/run", "--steps 2"), 0);
    assert_non_null(strstr(f->out, "cannot create directory"));
    assert_non_null(strstr(f->out, "Not a directory"));
    if (geteuid() == 0) {
        fprintf(stderr, "output_not_writable: running as root, the permission cases are skipped\n");
        return;
    }
    /* a read-only parent */
    path_in(f, "read-only", path, sizeof path);
    assert_int_equal(mkdir(path, 0555), 0);
    assert_int_not_equal(train(f, "read-only/run", "--steps 2"), 0);
    assert_non_null(strstr(f->out, "Permission denied"));
    /* checkpoints/ made read-only mid-run: the next checkpoint fails, the previous loads */
    assert_int_equal(train_ok(f, "ro", "--steps 24 --save-every 1 --stop-at 2"), 0);
    path_in(f, "ro/checkpoints", run, sizeof run);
    assert_int_equal(chmod(run, 0555), 0);
    assert_int_not_equal(train(f, "ro", "--steps 24 --save-every 1 --stop-at 3 --resume"), 0);
    assert_non_null(strstr(f->out, "writing the checkpoint of step 3"));
    assert_int_equal(chmod(run, 0755), 0);
    assert_int_equal(train_ok(f, "ro", "--steps 24 --save-every 1 --stop-at 3 --resume"), 0);
    assert_non_null(strstr(f->out, "step-00000002.safetensors (step 2 of 24"));
}

static void test_too_large_for_memory_fails_before_training(void **state) {
    Fixture *f = *state;
    /* a drafter state of hundreds of GiB; one whose MLP rows alone outgrow the host's memory for a
     * single block (the memory plan, train/memory_plan.h; its sizes are tested in test_memory_plan) */
    const char *cases[] = {"--steps 2 --intermediate-size 2000000000 --draft-layers 8",
                           "--steps 2 --intermediate-size 200000000 --draft-layers 1"};
    for (int i = 0; i < 2; i++) {
        /* the options after TINY_OPTIONS win */
        int rc = train(f, "huge", cases[i]);
        if (rc == 0 || rc >= 128) fail_msg("%s: expected a clean failure, got %d:\n%s", cases[i], rc, f->out);
        assert_non_null(strstr(f->out, "memory plan for cpu: the run cannot fit"));
        assert_non_null(strstr(f->out, "GiB usable"));
        assert_non_null(strstr(f->out, "--draft-layers or --intermediate-size"));
        assert_null(strstr(f->out, "step 1/")); /* before the first step */
    }
}

/* ------------------------------------------------- malformed catalogues */

/* Each FILE.<ext> of tests/malformed/<folder> with FILE.expected: open() must
 * fail with a message containing the expected text ("OK": must succeed). */
typedef int (*OpenFn)(const char *path, DfError *err);

static int open_store(const char *path, DfError *err) {
    DfTokenStore *s = df_token_store_open(path, 1, err);
    if (!s) return -1;
    df_token_store_close(s);
    return 0;
}

static int open_tokenizer(const char *path, DfError *err) {
    DfTokenizer *t = df_tokenizer_load(path, err);
    if (!t) return -1;
    df_tokenizer_free(t);
    return 0;
}

static int run_catalogue(const char *folder, const char *ext, OpenFn open_fn) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", df_test_path(folder));
    DIR *d = opendir(dir);
    assert_non_null(d);
    int cases = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name), k = strlen(ext);
        if (n <= k || strcmp(e->d_name + n - k, ext) != 0) continue;
        char path[2048], expected_path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(expected_path, sizeof expected_path, "%s/%.*s.expected", dir, (int)(n - k), e->d_name);
        char *expected = df_test_read_file(expected_path, NULL);
        if (!expected) fail_msg("%s has no .expected file", path);
        expected[strcspn(expected, "\n")] = '\0';
        DfError err = {{0}};
        int rc = open_fn(path, &err);
        if (strcmp(expected, "OK") == 0) {
            if (rc != 0) fail_msg("%s: expected to load, got: %s", e->d_name, err.msg);
        } else {
            if (rc == 0) fail_msg("%s: loaded, expected the error \"%s\"", e->d_name, expected);
            if (!strstr(err.msg, expected)) fail_msg("%s: error \"%s\" lacks \"%s\"", e->d_name, err.msg, expected);
            if (!strstr(err.msg, e->d_name)) fail_msg("%s: error \"%s\" does not name the file", e->d_name, err.msg);
        }
        free(expected);
        cases++;
    }
    closedir(d);
    return cases;
}

static void test_malformed_token_stores(void **state) {
    assert_true(run_catalogue("tests/malformed/token_store", ".store", open_store) >= 15);
}

static void test_malformed_tokenizers(void **state) {
    assert_true(run_catalogue("tests/malformed/tokenizer", ".json", open_tokenizer) >= 15);
}

/* The inputs that crashed a fuzz target (tests/malformed/fuzz/<target>/),
 * through the same calls as the target: under the sanitizers (make
 * test-sanitize) a regression is caught again. */
static void test_fuzz_regressions(void **state) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", df_test_path("tests/malformed/fuzz/jsonl_record"));
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path("assets/coder-tiny"), &err);
    assert_non_null(tok);
    DfRecordRules rules = {.tok = tok, .vocab_size = df_tokenizer_vocab_size(tok), .max_length = 256,
                           .chat_error = "no chat template loaded"};
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *text = df_test_read_file(path, &len);
        DfPreparedRecord r = {0};
        df_prepare_record(&rules, text, len, &r);
        assert_true(r.bad == DF_RECORD_OK || r.msg[0] != '\0');
        df_prepared_record_free(&r);
        free(text);
        n++;
    }
    closedir(d);
    df_tokenizer_free(tok);
    snprintf(dir, sizeof dir, "%s", df_test_path("tests/malformed/fuzz/tokenizer_json"));
    d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        DfError e2 = {{0}};
        DfTokenizer *t = df_tokenizer_load(path, &e2);
        assert_true(t != NULL || e2.msg[0] != '\0');
        if (t) { /* as fuzz_tokenizer_json: encode and decode a text */
            DfI32Vec ids = {0};
            DfByteBuf back = {0};
            const char *sample = "Hello  world 123\n<|endoftext|> caf\xc3\xa9";
            if (df_tokenizer_encode(t, sample, strlen(sample), &ids, &e2) == 0)
                df_tokenizer_decode(t, ids.data, ids.len, &back, &e2);
            df_i32vec_free(&ids);
            df_bytebuf_free(&back);
        }
        df_tokenizer_free(t);
        n++;
    }
    closedir(d);
    assert_true(n >= 2);
}

/* The prepare record parser (data/prepare_record.h): a good record of
 * each kind and a bad one, checked against what the record says. */
static void test_prepare_record(void **state) {
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(df_test_path("assets/coder-tiny"), &err);
    assert_non_null(tok);
    DfRecordRules rules = {.tok = tok, .vocab_size = df_tokenizer_vocab_size(tok), .max_length = 8,
                           .chat_error = "no chat template loaded"};
    DfPreparedRecord r = {0};
    const char *pre = "{\"input_ids\": [5, 6, 7], \"loss_mask\": [0, true, 1]}";
    df_prepare_record(&rules, pre, strlen(pre), &r);
    assert_int_equal(r.bad, DF_RECORD_OK);
    assert_int_equal(r.ids.len, 3);
    assert_int_equal(r.ids.data[2], 7);
    assert_int_equal(r.mask.len, 3);
    assert_int_equal(r.mask.data[0] + 2 * r.mask.data[1] + 4 * r.mask.data[2], 6);
    const char *empty_prompt = "{\"prompt\": \"\", \"response\": \"x\"}";
    df_prepare_record(&rules, empty_prompt, strlen(empty_prompt), &r);
    assert_int_equal(r.bad, DF_RECORD_OK);
    assert_true(r.ids.len >= 1 && r.mask.len == r.ids.len && r.mask.data[0] == 1);
    const char *too_long = "{\"input_ids\": [1,1,1,1,1,1,1,1,1], \"loss_mask\": [1,1,1,1,1,1,1,1,1]}";
    df_prepare_record(&rules, too_long, strlen(too_long), &r);
    assert_int_equal(r.bad, DF_BAD_TOO_LONG);
    assert_string_equal(df_bad_record_name(r.bad), "too long");
    assert_non_null(strstr(r.msg, "--max-length 8"));
    df_prepared_record_free(&r);
    df_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_token_stores),
        cmocka_unit_test(test_malformed_tokenizers),
        cmocka_unit_test(test_fuzz_regressions),
        cmocka_unit_test(test_prepare_record),
        cmocka_unit_test(test_output_not_writable),
        cmocka_unit_test(test_too_large_for_memory_fails_before_training),
        cmocka_unit_test_teardown(test_nonfinite_step_is_skipped, remove_seam),
        cmocka_unit_test(test_nonfinite_weights_stop_the_run),
        cmocka_unit_test(test_file_size_limit_keeps_previous_checkpoint),
        cmocka_unit_test(test_sigterm_checkpoints_and_exits_75),
        cmocka_unit_test(test_sigterm_during_prepare_leaves_no_store),
        cmocka_unit_test(test_sigkill_and_resume_is_identical),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
