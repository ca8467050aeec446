/* Data-parallel training on the CPU: processes on loopback joined by the
 * TCP rendezvous (RANK, WORLD_SIZE, ... as torchrun sets them).
 *   - the host all-reduce sums in rank order: every rank gets the same bits,
 *     those of ((x0 + x1) + x2) computed here;
 *   - rank shares partition each batch, balanced by tokens;
 *   - 2 ranks x half the batch == 1 rank x the whole batch (loss per step
 *     within 1e-5 relative: only the summation order differs; final
 *     weights within 1e-5, or within 3x what another summation order alone
 *     does to them: the one-process run on one thread instead of two, see
 *     expect_same_weights);
 *   - a rank killed mid-run ends the other within 10 s, non-zero, with a
 *     message naming the lost rank;
 *   - a 2-rank checkpoint resumes in 1 rank and a 1-rank one in 2 ranks,
 *     continuing the same loss curve;
 *   - the split layout (--layout split): 1 target rank + 1 drafter rank, and
 *     1 target rank + 2 drafter ranks, give the one-process losses within
 *     1e-6 relative (the target forward runs on the same rows, only the
 *     thread count and the drafter ranks' summation order differ); a split
 *     run stopped at step 3 resumes with another number of drafter ranks;
 *     a killed drafter rank ends the target rank within 10 s; SIGTERM to the
 *     target rank stops every rank after the same step, with a checkpoint
 *     of it, exit 75 (the drafter ranks take the features sent ahead); with
 *     --random-target-weights the split run equals one process;
 *   - drafter micro-batches (--max-drafter-tokens) in both layouts: the
 *     split layout and 2 colocated ranks, each drafter rank cutting its
 *     share into micro-batches, give the one-process losses (1e-5) and
 *     weights (as above). */
#include "test_util.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/hash64.h"
#include "dist/rendezvous.h"
#include "formats/safetensors.h"
#include "train/rank_share.h"

#define SLICE_RECORDS 12
#define STEPS 6
#define TINY_OPTIONS                                                                                                   \
    "--draft-layers 1 --intermediate-size 256 --num-taps 2 --block-size 8 --num-anchors 12 --token-budget 1100 "      \
    "--lr 3e-3 --warmup 0.1 --seed 7 --log-every 1"

typedef struct Fixture {
    char *dir;
    char store[512];
} Fixture;

/* The first SLICE_RECORDS lines of code-dev.jsonl, prepared into a store
 * that every run of the file trains on. */
static int setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    f->dir = df_test_tmpdir("train_dist");
    df_test_prepare_data_slice(f->dir, SLICE_RECORDS, f->store, sizeof f->store);
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

/* Starts `dflash train` as rank `rank` of `world` (world 0: no group
 * environment at all), output to OUTPUT/../NAME.rankR.log; returns its pid. */
static pid_t start_rank_on(const Fixture *f, const char *output, int world, int rank, int port, const char *extra,
                           int threads) {
    char env[256] = "", cmd[8192];
    if (world > 0)
        snprintf(env, sizeof env, "RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d MASTER_ADDR=127.0.0.1 MASTER_PORT=%d ", rank,
                 world, rank, port);
    snprintf(cmd, sizeof cmd,
             "exec env %sOMP_NUM_THREADS=%d '%s' train --target '%s' --data '%s' --output '%s/%s' " TINY_OPTIONS
             " %s > '%s/%s.rank%d.log' 2>&1",
             env, threads, df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->store, f->dir,
             output, extra, f->dir, output, rank);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* two cores: one thread per rank of a group */
static pid_t start_rank(const Fixture *f, const char *output, int world, int rank, int port, const char *extra) {
    return start_rank_on(f, output, world, rank, port, extra, world > 1 ? 1 : 2);
}

static void print_log(const Fixture *f, const char *output, int rank) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.rank%d.log", f->dir, output, rank);
    char *text = df_test_read_file(path, NULL);
    fprintf(stderr, "---- %s rank %d ----\n%s\n", output, rank, text ? text : "(no log)");
    free(text);
}

/* Exit status of pid, killing it after timeout_s (then -1). */
static int wait_exit(pid_t pid, double timeout_s) {
    double until = df_now_seconds() + timeout_s;
    int status;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (df_now_seconds() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        df_sleep_seconds(0.02);
    }
}

/* Runs a whole group (world ranks, or one process without the group
 * environment when world is 0) to its end; every rank must succeed. */
static void run_group(const Fixture *f, const char *output, int world, const char *extra) {
    int port = df_test_free_port(), n = world > 0 ? world : 1;
    pid_t pids[4];
    for (int r = 0; r < n; r++) pids[r] = start_rank(f, output, world, r, port, extra);
    int failed = 0;
    for (int r = 0; r < n; r++) {
        int rc = wait_exit(pids[r], 240);
        if (rc != 0) {
            fprintf(stderr, "%s rank %d exited %d\n", output, r, rc);
            failed = 1;
        }
    }
    if (failed)
        for (int r = 0; r < n; r++) print_log(f, output, r);
    assert_false(failed);
}

/* Loss of each step of OUTPUT/metrics.jsonl into loss[step - 1]; returns the step count. */
static int read_losses(const Fixture *f, const char *output, double *loss, int max) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", f->dir, output);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        int step = (int)cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble;
        assert_int_equal(step, n + 1);
        assert_true(n < max);
        loss[n++] = cJSON_GetObjectItemCaseSensitive(j, "loss")->valuedouble;
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

/* The fp32 master weights of OUTPUT's checkpoint of step. */
static float *read_weights(const Fixture *f, const char *output, int step, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/checkpoints/step-%08d.safetensors", f->dir, output, step);
    DfSafetensors st;
    DfError err = {{0}};
    if (df_safetensors_open(&st, path, &err) != 0) fprintf(stderr, "%s\n", err.msg);
    const DfTensorInfo *info = df_safetensors_find(&st, "params");
    assert_non_null(info);
    *n = info->nbytes / sizeof(float);
    float *w = df_safetensors_load_f32(&st, "params", info->ndim, info->shape, &err);
    assert_non_null(w);
    df_safetensors_close(&st);
    return w;
}

static void expect_curve_within(const double *ref, const double *got, int from, int to, double tolerance) {
    for (int i = from; i < to; i++) {
        double rel = fabs(got[i] - ref[i]) / fabs(ref[i]);
        if (rel > tolerance)
            fprintf(stderr, "step %d: loss %.17g, reference %.17g (rel %.3g)\n", i + 1, got[i], ref[i], rel);
        assert_true(rel <= tolerance);
    }
}

static void expect_same_curve(const double *ref, const double *got, int from, int to) {
    expect_curve_within(ref, got, from, to, 1e-5);
}

static double weights_error(const Fixture *f, const char *output, const char *reference, int step) {
    size_t n, m;
    float *a = read_weights(f, output, step, &n), *b = read_weights(f, reference, step, &m);
    assert_int_equal(n, m);
    double rel = df_rel_error(a, b, n);
    free(a), free(b);
    return rel;
}

/* What a change of summation order alone does to the weights after the
 * run's AdamW steps: the one-process run on one thread against two (the
 * CPU ops split their work by the thread count). AdamW divides each
 * gradient element by its own running size, so an element whose gradient
 * is small beside the others takes the last-bit differences of the large
 * terms as a relative error of its whole update: on CPUs whose BLAS kernels
 * are AVX2 (AMD EPYC, OPENBLAS_CORETYPE=Haswell) that reaches 2e-5 of the
 * largest weight, whatever splits the sums. */
static double summation_order_yardstick(const Fixture *f, int step) {
    char path[1024];
    snprintf(path, sizeof path, "%s/ref_one_thread/final", f->dir);
    if (!df_test_file_exists(path)) {
        pid_t pid = start_rank_on(f, "ref_one_thread", 0, 0, 0, "--steps 6", 1);
        assert_int_equal(wait_exit(pid, 240), 0);
    }
    return weights_error(f, "ref_one_thread", "ref", step);
}

static void expect_same_weights(const Fixture *f, const char *output, const char *reference, int step) {
    double rel = weights_error(f, output, reference, step), order = summation_order_yardstick(f, step);
    double bound = 3 * order > 1e-5 ? 3 * order : 1e-5;
    fprintf(stderr, "%s vs %s at step %d: weights within %.3g relative (one thread against two: %.3g)\n", output,
            reference, step, rel, order);
    assert_true(rel <= bound);
}

/* The one-process reference run, made once. */
static void reference(const Fixture *f, double *loss) {
    char path[1024];
    snprintf(path, sizeof path, "%s/ref/final", f->dir);
    if (!df_test_file_exists(path)) run_group(f, "ref", 0, "--steps 6");
    assert_int_equal(read_losses(f, "ref", loss, STEPS), STEPS);
}

/* ---- the host all-reduce --------------------------------------------------- */

enum { REDUCE_WORLD = 3 };
#define REDUCE_COUNT ((size_t)(DF_DIST_REDUCE_CHUNK_BYTES / sizeof(float)) + 1001) /* two collectives */

static float rank_value(int rank, size_t i) {
    uint64_t h = df_hash64_mix(((uint64_t)rank << 40) ^ i);
    return (float)((double)(h >> 11) / 9007199254740992.0 - 0.5) * (float)(1 + rank);
}

static void reduce_child(int rank, int port, int fd) {
    DfDistEnv env = {.rank = rank, .world_size = REDUCE_WORLD, .local_rank = rank, .master_port = port};
    snprintf(env.master_addr, sizeof env.master_addr, "127.0.0.1");
    DfError err = {{0}};
    uint64_t out[2] = {0, 0};
    DfDistGroup *g = df_dist_group_create(&env, NULL, &err);
    float *x = malloc(REDUCE_COUNT * sizeof *x);
    double d[3] = {rank + 0.25, 1e300 * (rank == 1), -1.0 * rank};
    if (g && x) {
        for (size_t i = 0; i < REDUCE_COUNT; i++) x[i] = rank_value(rank, i);
        if (df_dist_all_reduce_sum(g, x, REDUCE_COUNT, DF_DIST_F32, &err) == 0 &&
            df_dist_all_reduce_sum(g, d, 3, DF_DIST_F64, &err) == 0) {
            out[0] = df_hash64(x, REDUCE_COUNT * sizeof *x);
            out[1] = df_hash64(d, sizeof d);
        }
        df_dist_barrier(g, &err);
        df_dist_group_close(g);
    }
    free(x);
    _exit(write(fd, out, sizeof out) == (ssize_t)sizeof out ? 0 : 3);
}

static void test_all_reduce_sums_in_rank_order(void **state) {
    (void)state;
    int port = df_test_free_port(), fds[REDUCE_WORLD];
    pid_t pids[REDUCE_WORLD];
    for (int r = 0; r < REDUCE_WORLD; r++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            close(p[0]);
            reduce_child(r, port, p[1]);
        }
        close(p[1]);
        fds[r] = p[0];
    }
    float *want = malloc(REDUCE_COUNT * sizeof *want);
    for (size_t i = 0; i < REDUCE_COUNT; i++)
        want[i] = (rank_value(0, i) + rank_value(1, i)) + rank_value(2, i); /* in rank order, in fp32 */
    double want_d[3] = {0.25 + 1.25 + 2.25, 1e300, 0.0 - 1.0 - 2.0};
    uint64_t expect[2] = {df_hash64(want, REDUCE_COUNT * sizeof *want), df_hash64(want_d, sizeof want_d)};
    free(want);
    for (int r = 0; r < REDUCE_WORLD; r++) {
        uint64_t got[2] = {0, 0};
        assert_int_equal(read(fds[r], got, sizeof got), (ssize_t)sizeof got);
        close(fds[r]);
        assert_int_equal(wait_exit(pids[r], 60), 0);
        assert_true(got[0] == expect[0]);
        assert_true(got[1] == expect[1]);
    }
}

/* ---- rank shares ----------------------------------------------------------- */

static void test_rank_shares_partition_and_balance(void **state) {
    (void)state;
    int64_t lengths[] = {300, 20, 900, 450, 451, 77, 77, 1200, 5};
    int n = 9;
    for (int world = 1; world <= 12; world++) {
        int seen[9] = {0}, share[9], share2[9];
        int64_t lo = INT64_MAX, hi = 0;
        for (int r = 0; r < world; r++) {
            int k = df_rank_share(lengths, n, world, r, share);
            assert_int_equal(df_rank_share(lengths, n, world, r, share2), k); /* a pure function */
            assert_memory_equal(share, share2, (size_t)k * sizeof *share);
            int64_t load = 0;
            for (int i = 0; i < k; i++) {
                assert_true(share[i] >= 0 && share[i] < n);
                if (i) assert_true(share[i] > share[i - 1]); /* batch order */
                seen[share[i]]++;
                load += lengths[share[i]];
            }
            if (load < lo) lo = load;
            if (load > hi) hi = load;
        }
        for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1); /* every sample on exactly one rank */
        if (world == 1) assert_int_equal(hi, 3480);
        if (world <= n) assert_true(hi - lo <= 1200); /* greedy by length: within the longest sample */
        if (world > n) assert_int_equal(lo, 0);        /* more ranks than samples: some get none */
    }
}

/* ---- training -------------------------------------------------------------- */

static void test_two_ranks_match_one(void **state) {
    Fixture *f = *state;
    double ref[STEPS], got[STEPS];
    reference(f, ref);
    run_group(f, "dp2", 2, "--steps 6");
    assert_int_equal(read_losses(f, "dp2", got, STEPS), STEPS);
    expect_same_curve(ref, got, 0, STEPS);
    expect_same_weights(f, "dp2", "ref", STEPS);
    char path[1024];
    snprintf(path, sizeof path, "%s/dp2/final/model.safetensors", f->dir);
    assert_true(df_test_file_exists(path));
    snprintf(path, sizeof path, "%s/dp2/stages.json", f->dir);
    assert_true(df_test_file_exists(path));
    snprintf(path, sizeof path, "%s/dp2.rank1.log", f->dir);
    char *log = df_test_read_file(path, NULL);
    assert_non_null(strstr(log, "rank 1 of 2: done at step 6"));
    assert_null(strstr(log, "step 1/6")); /* rank 1 prints no progress */
    free(log);
}

static int metrics_lines(const Fixture *f, const char *output) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", f->dir, output);
    size_t len = 0;
    char *text = df_test_read_file(path, &len);
    int n = 0;
    for (size_t i = 0; text && i < len; i++) n += text[i] == '\n';
    free(text);
    return n;
}

/* Two ranks; rank 1 is killed after step 2: rank 0 must fail within 10 s
 * with a message naming rank 1. */
static void expect_lost_rank_stops_the_other(const Fixture *f, const char *output, const char *extra) {
    int port = df_test_free_port();
    pid_t p0 = start_rank(f, output, 2, 0, port, extra);
    pid_t p1 = start_rank(f, output, 2, 1, port, extra);
    double until = df_now_seconds() + 120;
    while (metrics_lines(f, output) < 2 && df_now_seconds() < until) df_sleep_seconds(0.05);
    assert_true(metrics_lines(f, output) >= 2);
    assert_int_equal(kill(p1, SIGKILL), 0);
    double t0 = df_now_seconds();
    int rc = wait_exit(p0, 30);
    double took = df_now_seconds() - t0;
    wait_exit(p1, 5);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.rank0.log", f->dir, output);
    char *log = df_test_read_file(path, NULL);
    const char *msg = strstr(log, "dflash train: rank 0:");
    fprintf(stderr, "rank 0 exited %d %.1f s after rank 1 was killed: %s", rc, took, msg ? msg : "(no message)\n");
    assert_true(rc > 0 && rc < 128);
    assert_true(took < 10);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "rank 1"));
    free(log);
}

static void test_lost_rank_stops_the_other(void **state) {
    expect_lost_rank_stops_the_other(*state, "lost", "--steps 500");
}

/* Stops at step 3 with one world size, resumes with another. */
static void resume_across(const Fixture *f, const char *output, int first_world, int second_world) {
    double ref[STEPS], got[STEPS];
    reference(f, ref);
    run_group(f, output, first_world, "--steps 6 --stop-at 3");
    run_group(f, output, second_world, "--steps 6 --resume");
    assert_int_equal(read_losses(f, output, got, STEPS), STEPS);
    expect_same_curve(ref, got, 0, STEPS);
    expect_same_weights(f, output, "ref", STEPS);
}

static void test_two_rank_checkpoint_resumes_in_one(void **state) { resume_across(*state, "two_then_one", 2, 0); }
static void test_one_rank_checkpoint_resumes_in_two(void **state) { resume_across(*state, "one_then_two", 0, 2); }

/* ---- the split layout -------------------------------------------------------- */

static void expect_split_matches_one(const Fixture *f, const char *output, int world) {
    double ref[STEPS], got[STEPS];
    reference(f, ref);
    run_group(f, output, world, "--steps 6 --layout split");
    assert_int_equal(read_losses(f, output, got, STEPS), STEPS);
    expect_curve_within(ref, got, 0, STEPS, 1e-6);
    expect_same_weights(f, output, "ref", STEPS);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/final/model.safetensors", f->dir, output);
    assert_true(df_test_file_exists(path)); /* written by rank 1, the first drafter rank */
    snprintf(path, sizeof path, "%s/%s.rank0.log", f->dir, output);
    char *log = df_test_read_file(path, NULL);
    char want[128];
    snprintf(want, sizeof want, "target rank 0 of %d: 6 steps for %d drafter rank(s)", world, world - 1);
    if (!strstr(log, want)) fprintf(stderr, "%s", log);
    assert_non_null(strstr(log, want));
    assert_null(strstr(log, "step 1/6")); /* the target rank prints no progress */
    free(log);
}

static void test_split_one_target_one_drafter_matches_one(void **state) {
    expect_split_matches_one(*state, "split2", 2);
}

static void test_split_one_target_two_drafters_matches_one(void **state) {
    expect_split_matches_one(*state, "split3", 3);
}

static void test_split_checkpoint_resumes_with_other_drafter_ranks(void **state) {
    const Fixture *f = *state;
    double ref[STEPS], got[STEPS];
    reference(f, ref);
    run_group(f, "split_resume", 3, "--steps 6 --stop-at 3 --layout split --queue-depth 2");
    run_group(f, "split_resume", 2, "--steps 6 --resume --layout split");
    assert_int_equal(read_losses(f, "split_resume", got, STEPS), STEPS);
    expect_curve_within(ref, got, 0, STEPS, 1e-6);
    expect_same_weights(f, "split_resume", "ref", STEPS);
}

/* --random-target-weights in the split layout: the target rank and the
 * drafter rank build the same random target (its layers on the one, its
 * embedding and head on the other), so the run equals one process with
 * the same random weights; and those differ from the loaded ones. */
static void test_split_with_random_target_weights(void **state) {
    const Fixture *f = *state;
    double loaded[STEPS], one[STEPS], split[STEPS];
    reference(f, loaded);
    run_group(f, "random_one", 1, "--steps 6 --random-target-weights");
    run_group(f, "random_split", 2, "--steps 6 --layout split --random-target-weights");
    assert_int_equal(read_losses(f, "random_one", one, STEPS), STEPS);
    assert_int_equal(read_losses(f, "random_split", split, STEPS), STEPS);
    expect_curve_within(one, split, 0, STEPS, 1e-6);
    assert_true(one[0] != loaded[0]);
}

static void test_split_lost_drafter_stops_the_target(void **state) {
    expect_lost_rank_stops_the_other(*state, "split_lost", "--steps 500 --layout split");
}

static void test_split_signal_on_target_stops_every_rank(void **state) {
    const Fixture *f = *state;
    int port = df_test_free_port();
    pid_t pids[3];
    for (int r = 0; r < 3; r++) pids[r] = start_rank(f, "split_signal", 3, r, port, "--steps 500 --layout split");
    double until = df_now_seconds() + 120;
    while (metrics_lines(f, "split_signal") < 2 && df_now_seconds() < until) df_sleep_seconds(0.05);
    assert_true(metrics_lines(f, "split_signal") >= 2);
    assert_int_equal(kill(pids[0], SIGTERM), 0);
    int failed = 0, status[3];
    for (int r = 0; r < 3; r++) { /* stopped on a signal, resumable: 75 where the stop was seen (0 allowed for the target rank) */
        status[r] = wait_exit(pids[r], 30);
        failed |= status[r] != 75 && !(r == 0 && status[r] == 0);
    }
    if (failed)
        for (int r = 0; r < 3; r++) print_log(f, "split_signal", r);
    assert_false(failed);
    int steps = metrics_lines(f, "split_signal");
    assert_true(steps >= 2 && steps < 500);
    char path[1024];
    snprintf(path, sizeof path, "%s/split_signal/checkpoints/step-%08d.safetensors", f->dir, steps);
    assert_true(df_test_file_exists(path));
    for (int r = 0; r < 3; r++) { /* every rank stopped after that step */
        snprintf(path, sizeof path, "%s/split_signal.rank%d.log", f->dir, r);
        char *log = df_test_read_file(path, NULL), want[128];
        snprintf(want, sizeof want, r == 1 ? "stopped after step %d of 500" : "done at step %d ", steps);
        if (!strstr(log, want)) fprintf(stderr, "rank %d: no '%s' in\n%s\n", r, want, log);
        assert_non_null(strstr(log, want));
        free(log);
    }
}

/* 5 blocks of 8 rows a micro-batch: every drafter rank's share of a step is cut, sequences across parts. */
static void expect_micro_batches_match_one(const Fixture *f, const char *output, int world, const char *layout,
                                           int writer) {
    double ref[STEPS], got[STEPS];
    reference(f, ref);
    char extra[256];
    snprintf(extra, sizeof extra, "--steps 6 --max-drafter-tokens 40 %s", layout);
    run_group(f, output, world, extra);
    assert_int_equal(read_losses(f, output, got, STEPS), STEPS);
    expect_same_curve(ref, got, 0, STEPS);
    expect_same_weights(f, output, "ref", STEPS);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.rank%d.log", f->dir, output, writer); /* the rank that prints the plan */
    char *log = df_test_read_file(path, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "micro-batches of up to 40 block rows"));
    free(log);
}

static void test_micro_batches_two_ranks(void **state) {
    expect_micro_batches_match_one(*state, "dp2_micro", 2, "", 0);
}

static void test_micro_batches_split(void **state) {
    expect_micro_batches_match_one(*state, "split_micro", 3, "--layout split", 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_reduce_sums_in_rank_order),
        cmocka_unit_test(test_rank_shares_partition_and_balance),
        cmocka_unit_test(test_two_ranks_match_one),
        cmocka_unit_test(test_lost_rank_stops_the_other),
        cmocka_unit_test(test_two_rank_checkpoint_resumes_in_one),
        cmocka_unit_test(test_one_rank_checkpoint_resumes_in_two),
        cmocka_unit_test(test_split_one_target_one_drafter_matches_one),
        cmocka_unit_test(test_split_one_target_two_drafters_matches_one),
        cmocka_unit_test(test_split_checkpoint_resumes_with_other_drafter_ranks),
        cmocka_unit_test(test_split_with_random_target_weights),
        cmocka_unit_test(test_split_lost_drafter_stops_the_target),
        cmocka_unit_test(test_split_signal_on_target_stops_every_rank),
        cmocka_unit_test(test_micro_batches_two_ranks),
        cmocka_unit_test(test_micro_batches_split),
    };
    /* one prepared store and one reference run for the whole group */
    return cmocka_run_group_tests(tests, setup, teardown);
}
