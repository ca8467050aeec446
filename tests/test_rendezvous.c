/* The TCP rendezvous: groups of forked processes on loopback (a free port
 * each time) form, broadcast and all-gather the right bytes, and a barrier
 * lets nobody out before the last rank comes in (timestamps on the shared
 * monotonic clock). Failures: a rank that exits, a rank that stops (SIGSTOP:
 * only the heartbeat timeout can tell), a rank that aborts, collectives out
 * of step, a duplicate RANK, a WORLD_SIZE mismatch, no rank 0 at all: each
 * ends the others with a message naming the rank within a bound, never a
 * hang (children are killed after 30 s). A process of another job (its
 * job token differs) and a hello with an absurd length are turned away
 * while rank 0 keeps waiting; the wire format's bounds. And the
 * environment parsing. */
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "dist/rendezvous.h"
#include "dist/tcp.h"
#include "dist/wire.h"
#include "test_util.h"

#define MAX_WORLD 4

typedef struct ChildResult {
    int rc;       /* 0: the child's scenario went as it should */
    double t[2];  /* timestamps the scenario wants to report */
    char msg[2 * DF_ERROR_MAX];
} ChildResult;

typedef void (*Scenario)(DfDistGroup *g, ChildResult *res);

typedef struct Spec {
    int rank, world; /* what this child claims */
    Scenario fn;     /* run once the group is formed */
    int expect_create_failure;
    double connect_timeout_s;
    int silent; /* gives no result (stops itself): not waited for */
    const char *token; /* the job token (NULL: none) */
    uint64_t raw_hello_len; /* > 0: no rank, a raw hello header claiming this length, then wait for rank 0 */
} Spec;

static DfDistOptions fast_options(double connect_timeout_s) {
    DfDistOptions o;
    df_dist_options_default(&o);
    o.connect_timeout_s = connect_timeout_s > 0 ? connect_timeout_s : 10;
    o.op_timeout_s = 20;
    o.heartbeat_interval_s = 0.2;
    o.heartbeat_timeout_s = 2.0;
    return o;
}

/* A client that sends a hello header with an absurd length and a few bytes:
 * rank 0 must close the connection without an answer, having read no more. */
static void raw_hello(const Spec *s, int port, ChildResult *res) {
    DfError err = {{0}};
    int fd = -1;
    for (double until = df_now_seconds() + 5; fd < 0 && df_now_seconds() < until;)
        fd = df_tcp_connect("localhost", port, df_now_seconds() + 1, NULL, NULL, &err);
    if (fd < 0) {
        res->rc = 1;
        snprintf(res->msg, sizeof res->msg, "raw client: %s", err.msg);
        return;
    }
    uint8_t msg[DF_WIRE_HEADER + 16] = {0};
    df_wire_put_header(msg, DF_MSG_HELLO, 0, s->raw_hello_len);
    double deadline = df_now_seconds() + 5;
    df_tcp_send_all(fd, msg, sizeof msg, deadline, NULL, NULL, NULL);
    uint8_t answer[DF_WIRE_HEADER];
    DfTcpStatus st = df_tcp_recv_all(fd, answer, sizeof answer, deadline, NULL, NULL, NULL);
    res->rc = st == DF_TCP_CLOSED || st == DF_TCP_ERROR ? 0 : 1;
    snprintf(res->msg, sizeof res->msg, "raw client: rank 0's answer: status %d", (int)st);
    close(fd);
}

static void child_main(const Spec *s, int port, int out_fd) {
    ChildResult res = {0};
    DfDistEnv env = {.rank = s->rank, .world_size = s->world, .local_rank = s->rank, .master_port = port};
    snprintf(env.master_addr, sizeof env.master_addr, "localhost");
    if (s->token) df_job_token_from_string(&env.token, s->token, "DFLASH_JOB_TOKEN");
    if (s->raw_hello_len) {
        raw_hello(s, port, &res);
        ssize_t w = write(out_fd, &res, sizeof res);
        _exit(w == (ssize_t)sizeof res ? 0 : 3);
    }
    DfDistOptions opt = fast_options(s->connect_timeout_s);
    DfError err = {{0}};
    double t0 = df_now_seconds();
    DfDistGroup *g = df_dist_group_create(&env, &opt, &err);
    if (!g) {
        res.rc = s->expect_create_failure ? 0 : 1;
        res.t[0] = df_now_seconds() - t0;
        snprintf(res.msg, sizeof res.msg, "%s", err.msg);
    } else if (s->expect_create_failure) {
        res.rc = 1;
        snprintf(res.msg, sizeof res.msg, "the group formed although it should not have");
    } else {
        if (s->fn) s->fn(g, &res);
        df_dist_group_close(g);
    }
    ssize_t w = write(out_fd, &res, sizeof res);
    _exit(w == (ssize_t)sizeof res ? 0 : 3);
}

/* Forks one child per spec, waits (killing them all after 30 s) and
 * collects their results. */
static void run_children(const Spec *specs, int n, ChildResult *results) {
    int port = df_test_free_port();
    pid_t pids[MAX_WORLD];
    int fds[MAX_WORLD];
    for (int i = 0; i < n; i++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(p[0]);
            child_main(&specs[i], port, p[1]);
        }
        close(p[1]);
        fds[i] = p[0];
    }
    double deadline = df_now_seconds() + 30;
    for (int i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof results[i]);
        results[i].rc = -1;
        struct pollfd pfd = {.fd = fds[i], .events = POLLIN};
        int left_ms = specs[i].silent ? 0 : (int)((deadline - df_now_seconds()) * 1000);
        if (left_ms < 0) left_ms = 0;
        if (poll(&pfd, 1, left_ms) == 1 && read(fds[i], &results[i], sizeof results[i]) == sizeof results[i])
            ;
        else
            snprintf(results[i].msg, sizeof results[i].msg, "child %d gave no result (hung?)", i);
        close(fds[i]);
    }
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL); /* already gone, or stopped on purpose */
        waitpid(pids[i], NULL, 0);
    }
}

static void expect_child_ok(const ChildResult *r, int i) {
    if (r[i].rc != 0) print_error("child %d: %s\n", i, r[i].msg);
    assert_int_equal(r[i].rc, 0);
}

static void expect_ok(const ChildResult *r, int n) {
    for (int i = 0; i < n; i++) expect_child_ok(r, i);
}

static void expect_contains(const char *msg, const char *needle) {
    if (!strstr(msg, needle)) print_error("message '%s' lacks '%s'\n", msg, needle);
    assert_non_null(strstr(msg, needle));
}

/* ------------------------------------------------------ collectives */

static void pattern(uint8_t *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 31 + (size_t)seed * 7 + 1);
}

#define CHECK(cond, ...)                                                                                       \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            res->rc = 1;                                                                                       \
            snprintf(res->msg, sizeof res->msg, __VA_ARGS__);                                                  \
            return;                                                                                            \
        }                                                                                                      \
    } while (0)

static void collectives_scenario(DfDistGroup *g, ChildResult *res) {
    DfError err = {{0}};
    int rank = df_dist_rank(g), world = df_dist_world_size(g);
    /* a 128-byte blob, as an ncclUniqueId */
    uint8_t id[128] = {0}, want[128];
    pattern(want, sizeof want, 99);
    if (rank == 0) memcpy(id, want, sizeof id);
    CHECK(df_dist_broadcast(g, id, sizeof id, &err) == 0, "broadcast: %s", err.msg);
    CHECK(memcmp(id, want, sizeof id) == 0, "rank %d: broadcast bytes differ", rank);
    /* a large one: many partial sends and receives */
    size_t big_n = 3u << 20;
    uint8_t *big = calloc(big_n, 1), *big_want = malloc(big_n);
    pattern(big_want, big_n, 5);
    if (rank == 0) memcpy(big, big_want, big_n);
    int rc = df_dist_broadcast(g, big, big_n, &err);
    int same = memcmp(big, big_want, big_n) == 0;
    free(big);
    free(big_want);
    CHECK(rc == 0 && same, "rank %d: big broadcast: %s", rank, rc ? err.msg : "bytes differ");
    /* all-gather: each rank's 40 bytes in rank order */
    uint8_t mine[40], all[MAX_WORLD * 40];
    pattern(mine, sizeof mine, rank);
    CHECK(df_dist_all_gather(g, mine, sizeof mine, all, &err) == 0, "all-gather: %s", err.msg);
    for (int r = 0; r < world; r++) {
        uint8_t theirs[40];
        pattern(theirs, sizeof theirs, r);
        CHECK(memcmp(all + r * 40, theirs, 40) == 0, "rank %d: all-gather slot %d differs", rank, r);
    }
    /* barrier: the last rank comes 300 ms late; nobody may leave before it enters */
    if (rank == world - 1) {
        df_sleep_seconds(0.3);
    }
    res->t[0] = df_now_seconds(); /* entered */
    CHECK(df_dist_barrier(g, &err) == 0, "barrier: %s", err.msg);
    res->t[1] = df_now_seconds(); /* left */
    CHECK(df_dist_barrier(g, &err) == 0, "second barrier: %s", err.msg);
    CHECK(df_dist_poll_failure(g, &err) == 0, "poll after a clean run: %s", err.msg);
}

static void test_collectives(void **state) {
    (void)state;
    for (int world = 2; world <= 3; world++) {
        Spec s[MAX_WORLD];
        for (int r = 0; r < world; r++) s[r] = (Spec){.rank = r, .world = world, .fn = collectives_scenario};
        ChildResult res[MAX_WORLD];
        run_children(s, world, res);
        expect_ok(res, world);
        double last_entry = res[world - 1].t[0];
        for (int r = 0; r < world; r++) assert_true(res[r].t[1] >= last_entry);
        assert_true(res[0].t[1] - res[0].t[0] > 0.2); /* rank 0 did wait for the late one */
    }
}

static void test_world_of_one(void **state) {
    (void)state;
    DfDistEnv env = {.rank = 0, .world_size = 1};
    DfError err;
    DfDistGroup *g = df_dist_group_create(&env, NULL, &err);
    assert_non_null(g);
    uint8_t in[4] = {1, 2, 3, 4}, out[4] = {0};
    assert_int_equal(df_dist_broadcast(g, in, 4, &err), 0);
    assert_int_equal(df_dist_barrier(g, &err), 0);
    assert_int_equal(df_dist_all_gather(g, in, 4, out, &err), 0);
    assert_memory_equal(in, out, 4);
    df_dist_abort(g, "testing");
    assert_int_equal(df_dist_poll_failure(g, &err), -1);
    expect_contains(err.msg, "rank 0 aborted: testing");
    df_dist_group_close(g);
    DfDistOptions bad;
    df_dist_options_default(&bad);
    bad.heartbeat_timeout_s = 1.5 * bad.heartbeat_interval_s;
    assert_null(df_dist_group_create(&env, &bad, &err));
    expect_contains(err.msg, "at least twice heartbeat_interval_s");
}

/* ------------------------------------------------------ failures */

/* Waits in a barrier (or polls) until the group fails; t[0] = seconds it took. */
static void barrier_until_failure(DfDistGroup *g, ChildResult *res) {
    DfError err = {{0}};
    double t0 = df_now_seconds();
    int rc = df_dist_barrier(g, &err);
    res->t[0] = df_now_seconds() - t0;
    CHECK(rc == -1, "the barrier passed although a rank is gone");
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
}

static void poll_until_failure(DfDistGroup *g, ChildResult *res) {
    DfError err = {{0}};
    double t0 = df_now_seconds();
    while (df_dist_poll_failure(g, &err) == 0 && df_now_seconds() - t0 < 20) {
        df_sleep_seconds(0.02); /* a trainer step */
    }
    res->t[0] = df_now_seconds() - t0;
    CHECK(df_dist_poll_failure(g, &err) == -1, "no failure seen in 20 s");
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
}

/* The failure hook ends a wait that nothing else would end, as the NCCL
 * transport's hook ends a collective blocked on the GPU: the main thread
 * blocks in read() on a pipe that only the hook (on the monitor thread)
 * writes to. */
static void wake_pipe(void *ctx) {
    int fd = *(int *)ctx;
    ssize_t w = write(fd, "x", 1);
    (void)w;
}

static void blocked_until_hook(DfDistGroup *g, ChildResult *res) {
    static int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    df_dist_set_failure_hook(g, wake_pipe, &fds[1]);
    double t0 = df_now_seconds();
    char c;
    CHECK(read(fds[0], &c, 1) == 1, "the blocked read ended without the hook");
    res->t[0] = df_now_seconds() - t0;
    DfError err = {{0}};
    CHECK(df_dist_poll_failure(g, &err) == -1, "the hook ran but the group is not failed");
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
}

static void exit_at_once(DfDistGroup *g, ChildResult *res) { _exit(0); } /* no goodbye: a crash */

static void stop_self(DfDistGroup *g, ChildResult *res) { raise(SIGSTOP); } /* heartbeats stop too */

static void abort_oom(DfDistGroup *g, ChildResult *res) {
    df_dist_abort(g, "out of memory");
    df_sleep_seconds(1.0); /* keep the connection up: the abort, not a closed socket, must tell */
}

static void test_rank_that_exits(void **state) {
    (void)state;
    /* rank 2 exits; rank 0 learns it from the closed sockets, rank 1 from rank 0 */
    Spec s[3] = {{.rank = 0, .world = 3, .fn = barrier_until_failure}, {.rank = 1, .world = 3, .fn = barrier_until_failure}, {.rank = 2, .world = 3, .fn = exit_at_once}};
    ChildResult res[3];
    run_children(s, 3, res);
    for (int r = 0; r < 2; r++) {
        expect_child_ok(res, r);
        expect_contains(res[r].msg, "rank 2 lost");
        assert_true(res[r].t[0] < 10.0);
    }
    /* the loser is rank 0: rank 1 must name rank 0 */
    Spec s0[2] = {{.rank = 0, .world = 2, .fn = exit_at_once}, {.rank = 1, .world = 2, .fn = poll_until_failure}};
    run_children(s0, 2, res);
    expect_child_ok(res, 1);
    expect_contains(res[1].msg, "rank 0 lost");
    assert_true(res[1].t[0] < 10.0);
}

/* A rank blocked where no collective can fail (a GPU collective) is freed by the failure hook. */
static void test_failure_hook_ends_a_blocked_wait(void **state) {
    (void)state;
    Spec s[2] = {{.rank = 0, .world = 2, .fn = blocked_until_hook}, {.rank = 1, .world = 2, .fn = exit_at_once}};
    ChildResult res[2];
    run_children(s, 2, res);
    expect_child_ok(res, 0);
    expect_contains(res[0].msg, "rank 1 lost");
    assert_true(res[0].t[0] < 10.0);
}

static void test_rank_that_stops(void **state) {
    (void)state;
    /* a stopped process keeps its sockets open: the 2 s heartbeat timeout must catch it */
    Spec s[3] = {{.rank = 0, .world = 3, .fn = poll_until_failure}, {.rank = 1, .world = 3, .fn = stop_self, .silent = 1}, {.rank = 2, .world = 3, .fn = poll_until_failure}};
    ChildResult res[3];
    run_children(s, 3, res);
    for (int r = 0; r < 3; r += 2) {
        expect_child_ok(res, r);
        expect_contains(res[r].msg, "rank 1 lost: no heartbeat");
        assert_true(res[r].t[0] > 1.5 && res[r].t[0] < 10.0);
    }
}

static void test_rank_that_aborts(void **state) {
    (void)state;
    Spec s[3] = {{.rank = 0, .world = 3, .fn = poll_until_failure}, {.rank = 1, .world = 3, .fn = abort_oom}, {.rank = 2, .world = 3, .fn = poll_until_failure}};
    ChildResult res[3];
    run_children(s, 3, res);
    for (int r = 0; r < 3; r += 2) {
        expect_child_ok(res, r);
        expect_contains(res[r].msg, "rank 1 aborted: out of memory");
        assert_true(res[r].t[0] < 5.0);
    }
}

static void broadcast_then_poll(DfDistGroup *g, ChildResult *res) {
    uint8_t b[16] = {0};
    DfError err;
    CHECK(df_dist_broadcast(g, b, sizeof b, &err) == 0, "broadcast: %s", err.msg);
    poll_until_failure(g, res);
}

static void test_collectives_out_of_step(void **state) {
    (void)state;
    Spec s[2] = {{.rank = 0, .world = 2, .fn = broadcast_then_poll}, {.rank = 1, .world = 2, .fn = barrier_until_failure}};
    ChildResult res[2];
    run_children(s, 2, res);
    for (int r = 0; r < 2; r++) {
        expect_child_ok(res, r);
        expect_contains(res[r].msg, "out of step: rank 1 is in barrier #1 but rank 0 sent broadcast #1");
        assert_true(res[r].t[0] < 5.0);
    }
}

static void test_duplicate_rank(void **state) {
    (void)state;
    Spec s[3] = {{.rank = 0, .world = 3, .expect_create_failure = 1}, {.rank = 1, .world = 3, .expect_create_failure = 1}, {.rank = 1, .world = 3, .expect_create_failure = 1}};
    ChildResult res[3];
    run_children(s, 3, res);
    expect_ok(res, 3);
    expect_contains(res[0].msg, "two processes joined as RANK=1");
    assert_true(res[0].t[0] < 10.0);
    /* both learn rank 0's reason, soon */
    for (int i = 1; i < 3; i++) {
        expect_contains(res[i].msg, "rank 0 turned rank 1 away: rendezvous: two processes joined as RANK=1");
        assert_true(res[i].t[0] < 5.0);
    }
}

static void test_world_size_mismatch(void **state) {
    (void)state;
    Spec s[2] = {{.rank = 0, .world = 2, .expect_create_failure = 1}, {.rank = 1, .world = 3, .expect_create_failure = 1}};
    ChildResult res[2];
    run_children(s, 2, res);
    expect_ok(res, 2);
    for (int r = 0; r < 2; r++) expect_contains(res[r].msg, "rank 1 has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2");
}

static void test_missing_ranks_time_out(void **state) {
    (void)state;
    /* rank 0 waits for ranks 1 and 2 that never come; a lone rank 1 finds nobody listening */
    Spec s[1] = {{.rank = 0, .world = 3, .expect_create_failure = 1, .connect_timeout_s = 1.0}};
    ChildResult res[1];
    run_children(s, 1, res);
    expect_ok(res, 1);
    expect_contains(res[0].msg, "rank(s) 1, 2 of 3 never joined");
    assert_true(res[0].t[0] >= 0.9 && res[0].t[0] < 5.0);
    Spec s1[1] = {{.rank = 1, .world = 2, .expect_create_failure = 1, .connect_timeout_s = 1.0}};
    run_children(s1, 1, res);
    expect_ok(res, 1);
    expect_contains(res[0].msg, "cannot connect to localhost port");
    assert_true(res[0].t[0] >= 0.9 && res[0].t[0] < 5.0);
}

static void test_same_token_forms(void **state) {
    (void)state;
    Spec s[2] = {{.rank = 0, .world = 2, .token = "job-7f3a"}, {.rank = 1, .world = 2, .token = "job-7f3a"}};
    ChildResult res[2];
    run_children(s, 2, res);
    expect_ok(res, 2);
}

static void test_wrong_token_refused(void **state) {
    (void)state;
    /* another job's rank 1: turned away with the reason, and rank 0 goes on waiting for its own */
    Spec s[2] = {{.rank = 0, .world = 2, .token = "job-7f3a", .expect_create_failure = 1, .connect_timeout_s = 3.0},
                 {.rank = 1, .world = 2, .token = "job-0b21", .expect_create_failure = 1, .connect_timeout_s = 3.0}};
    ChildResult res[2];
    run_children(s, 2, res);
    expect_ok(res, 2);
    expect_contains(res[0].msg, "rank(s) 1 of 2 never joined");
    expect_contains(res[1].msg, "rank 0 turned rank 1 away");
    expect_contains(res[1].msg, "job token differs");
    assert_true(res[1].t[0] < 5.0);
    /* a token against none: refused too */
    Spec s2[2] = {{.rank = 0, .world = 2, .expect_create_failure = 1, .connect_timeout_s = 3.0},
                  {.rank = 1, .world = 2, .token = "job-0b21", .expect_create_failure = 1, .connect_timeout_s = 3.0}};
    run_children(s2, 2, res);
    expect_ok(res, 2);
    expect_contains(res[1].msg, "job token differs");
}

static void test_absurd_hello_length_dropped(void **state) {
    (void)state;
    uint64_t lengths[3] = {(uint64_t)1 << 40, DF_WIRE_HELLO_BYTES + 1, 3};
    for (int i = 0; i < 3; i++) {
        Spec s[2] = {{.rank = 0, .world = 2, .expect_create_failure = 1, .connect_timeout_s = 3.0},
                     {.raw_hello_len = lengths[i]}};
        ChildResult res[2];
        run_children(s, 2, res);
        expect_ok(res, 2);
        expect_contains(res[0].msg, "rank(s) 1 of 2 never joined"); /* not crashed, still waiting */
    }
}

static void test_wire_bounds(void **state) {
    (void)state;
    uint8_t b[DF_WIRE_HEADER];
    DfWireHeader h;
    df_wire_put_header(b, DF_MSG_ABORT, 0, DF_ERROR_MAX - 1);
    assert_int_equal(df_wire_get_header(b, &h), 0);
    df_wire_put_header(b, DF_MSG_ABORT, 0, DF_ERROR_MAX);
    assert_int_equal(df_wire_get_header(b, &h), -1);
    df_wire_put_header(b, DF_MSG_HEARTBEAT, 0, 1);
    assert_int_equal(df_wire_get_header(b, &h), -1);
    df_wire_put_header(b, DF_MSG_HELLO, 0, DF_WIRE_HELLO_BYTES + 1);
    assert_int_equal(df_wire_get_header(b, &h), -1);
    df_wire_put_header(b, DF_MSG_BROADCAST, 0, DF_WIRE_MAX_PAYLOAD);
    assert_int_equal(df_wire_get_header(b, &h), 0);
    df_wire_put_header(b, DF_MSG_BROADCAST, 0, DF_WIRE_MAX_PAYLOAD + 1);
    assert_int_equal(df_wire_get_header(b, &h), -1);
    uint32_t unknown[3] = {0, DF_MSG_TYPE_END, 0xffffffffu};
    for (int i = 0; i < 3; i++) {
        df_wire_put_header(b, unknown[i], 0, 0);
        assert_int_equal(df_wire_get_header(b, &h), -1);
    }
    df_wire_put_header(b, DF_MSG_WELCOME, 0, 0);
    b[0] ^= 1; /* the magic */
    assert_int_equal(df_wire_get_header(b, &h), -1);
    /* hellos: too short; another version's (told apart, no token); this version's, short or whole */
    DfWireHello in = {.rank = 3, .world = 4, .channel = 1, .version = DF_WIRE_VERSION}, out;
    memcpy(in.token, "abc", 3);
    uint8_t p[DF_WIRE_HELLO_BYTES];
    df_wire_put_hello(p, &in);
    assert_int_equal(df_wire_get_hello(p, 15, &out, NULL), -1);
    assert_int_equal(df_wire_get_hello(p, DF_WIRE_HELLO_BYTES - 1, &out, NULL), -1);
    assert_int_equal(df_wire_get_hello(p, DF_WIRE_HELLO_BYTES, &out, NULL), 0);
    assert_int_equal(out.rank, 3);
    assert_memory_equal(out.token, in.token, DF_JOB_TOKEN_BYTES);
    in.version = 1;
    df_wire_put_hello(p, &in);
    assert_int_equal(df_wire_get_hello(p, 16, &out, NULL), 0);
    assert_int_equal(out.version, 1);
}

static void test_job_token(void **state) {
    (void)state;
    DfJobToken a, b;
    DfError err = {{0}};
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("SLURM_JOB_ID");
    setenv("DFLASH_JOB_TOKEN", "s3cret", 1);
    assert_int_equal(df_job_token_read(&a, 29500, &err), 0);
    assert_string_equal(a.source, "DFLASH_JOB_TOKEN");
    df_job_token_from_string(&b, "s3cret", "x");
    assert_true(df_job_token_equal(a.bytes, b.bytes));
    setenv("DFLASH_JOB_TOKEN", "", 1);
    assert_int_equal(df_job_token_read(&a, 29500, &err), -1);
    expect_contains(err.msg, "DFLASH_JOB_TOKEN");
    char long_token[80];
    memset(long_token, 'x', 65);
    long_token[65] = '\0';
    setenv("DFLASH_JOB_TOKEN", long_token, 1);
    assert_int_equal(df_job_token_read(&a, 29500, &err), -1);
    unsetenv("DFLASH_JOB_TOKEN");
    /* derived: the launcher's job id with the port; another port or job differs */
    setenv("SLURM_JOB_ID", "81234", 1);
    assert_int_equal(df_job_token_read(&a, 29500, &err), 0);
    assert_string_equal(a.source, "SLURM_JOB_ID");
    assert_int_equal(df_job_token_read(&b, 29501, &err), 0);
    assert_false(df_job_token_equal(a.bytes, b.bytes));
    setenv("TORCHELASTIC_RUN_ID", "none-1", 1);
    assert_int_equal(df_job_token_read(&b, 29500, &err), 0);
    assert_string_equal(b.source, "TORCHELASTIC_RUN_ID");
    assert_false(df_job_token_equal(a.bytes, b.bytes));
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("SLURM_JOB_ID");
    assert_int_equal(df_job_token_read(&a, 29500, &err), 0);
    assert_string_equal(a.source, "none");
    /* a long derived one keeps a hash of the whole: two that share 64 bytes differ */
    char s1[200], s2[200];
    memset(s1, 'j', 150), memset(s2, 'j', 150);
    s1[150] = s2[150] = '\0';
    s2[149] = 'k';
    df_job_token_from_string(&a, s1, "x");
    df_job_token_from_string(&b, s2, "x");
    assert_false(df_job_token_equal(a.bytes, b.bytes));
}

/* ------------------------------------------------------ environment */

static void set_env(const char *rank, const char *world, const char *local, const char *addr, const char *port) {
    const char *names[5] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    const char *values[5] = {rank, world, local, addr, port};
    for (int i = 0; i < 5; i++) {
        if (values[i])
            setenv(names[i], values[i], 1);
        else
            unsetenv(names[i]);
    }
}

static void expect_env_error(const char *needle) {
    DfDistEnv env;
    DfError err = {{0}};
    assert_int_equal(df_dist_env_read(&env, &err), -1);
    expect_contains(err.msg, needle);
}

static void test_environment(void **state) {
    (void)state;
    set_env("1", "4", "1", "node-a", "29500");
    DfDistEnv env;
    DfError err;
    assert_int_equal(df_dist_env_read(&env, &err), 0);
    assert_int_equal(env.rank, 1);
    assert_int_equal(env.world_size, 4);
    assert_int_equal(env.local_rank, 1);
    assert_string_equal(env.master_addr, "node-a");
    assert_int_equal(env.master_port, 29500);
    assert_true(df_dist_env_present());

    set_env(NULL, "4", "1", "node-a", "29500");
    expect_env_error("environment variable RANK is not set");
    set_env("1", NULL, "1", "node-a", "29500");
    expect_env_error("environment variable WORLD_SIZE is not set");
    assert_false(df_dist_env_present());
    set_env("1", "4", NULL, "node-a", "29500");
    expect_env_error("LOCAL_RANK is not set");
    set_env("1", "4", "1", NULL, "29500");
    expect_env_error("MASTER_ADDR is not set");
    set_env("1", "4", "1", "node-a", NULL);
    expect_env_error("MASTER_PORT is not set");
    set_env("1", "four", "1", "node-a", "29500");
    expect_env_error("WORLD_SIZE='four' is not an integer");
    set_env("4", "4", "1", "node-a", "29500");
    expect_env_error("RANK='4' is not an integer in [0, 3]");
    set_env("1", "4", "-1", "node-a", "29500");
    expect_env_error("LOCAL_RANK='-1'");
    set_env("1", "4", "1", "node-a", "70000");
    expect_env_error("MASTER_PORT='70000' is not an integer in [1, 65535]");
    set_env("1", "4", "1", "node-a", "29500x");
    expect_env_error("MASTER_PORT='29500x'");
    set_env(NULL, NULL, NULL, NULL, NULL);
}

/* Sets (value non-NULL) or clears the three variables of a launcher. */
static void set_launcher(const char *rank_var, const char *size_var, const char *local_var, const char *rank,
                         const char *size, const char *local) {
    const char *names[3] = {rank_var, size_var, local_var}, *values[3] = {rank, size, local};
    for (int i = 0; i < 3; i++) {
        if (values[i])
            setenv(names[i], values[i], 1);
        else
            unsetenv(names[i]);
    }
}

/* mpirun (Open MPI, MPICH's Hydra) and srun give a process its place when
 * torchrun's variables are absent; one task alone is not a group; torchrun's
 * variables win over theirs. */
static void test_environment_from_mpi_and_slurm(void **state) {
    (void)state;
    DfDistEnv env;
    DfError err;
    set_env(NULL, NULL, NULL, "node-a", "29500");
    set_launcher("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "5", "8", "1");
    assert_true(df_dist_env_present());
    assert_int_equal(df_dist_env_read(&env, &err), 0);
    assert_string_equal(env.launcher, "Open MPI");
    assert_int_equal(env.rank, 5);
    assert_int_equal(env.world_size, 8);
    assert_int_equal(env.local_rank, 1);
    set_launcher("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "5", "8", NULL);
    expect_env_error("OMPI_COMM_WORLD_LOCAL_RANK is not set (a distributed run started by Open MPI");
    set_launcher("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "0", "1", "0");
    assert_false(df_dist_env_present());
    set_launcher("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", NULL, NULL, NULL);

    set_launcher("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "2", "4", "2");
    assert_int_equal(df_dist_env_read(&env, &err), 0);
    assert_string_equal(env.launcher, "MPICH/Hydra");
    assert_int_equal(env.rank, 2);
    set_launcher("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", NULL, NULL, NULL);

    set_launcher("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "3", "16", "3");
    set_env(NULL, NULL, NULL, NULL, "29500");
    expect_env_error("MASTER_ADDR is not set (a distributed run started by Slurm");
    set_env("1", "2", "1", "node-b", "29501"); /* torchrun's variables inside a Slurm job */
    assert_int_equal(df_dist_env_read(&env, &err), 0);
    assert_string_equal(env.launcher, "torchrun");
    assert_int_equal(env.world_size, 2);
    set_launcher("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, NULL, NULL);
    set_env(NULL, NULL, NULL, NULL, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_environment_from_mpi_and_slurm),
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_rank_that_exits),
        cmocka_unit_test(test_failure_hook_ends_a_blocked_wait),
        cmocka_unit_test(test_rank_that_stops),
        cmocka_unit_test(test_rank_that_aborts),
        cmocka_unit_test(test_collectives_out_of_step),
        cmocka_unit_test(test_duplicate_rank),
        cmocka_unit_test(test_world_size_mismatch),
        cmocka_unit_test(test_missing_ranks_time_out),
        cmocka_unit_test(test_same_token_forms),
        cmocka_unit_test(test_wrong_token_refused),
        cmocka_unit_test(test_absurd_hello_length_dropped),
        cmocka_unit_test(test_wire_bounds),
        cmocka_unit_test(test_job_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
