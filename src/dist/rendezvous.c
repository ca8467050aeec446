/* Forming the group and the collectives over the control connections
 * (the heartbeat side is dist/heartbeat.c). */
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "dist/rendezvous_internal.h"
#include "dist/tcp.h"

void df_dist_options_default(DfDistOptions *opt) {
    opt->connect_timeout_s = 300;
    opt->op_timeout_s = 1800;
    opt->heartbeat_interval_s = 1;
    opt->heartbeat_timeout_s = 30;
}

int df_dist_rank(const DfDistGroup *g) { return g->rank; }
int df_dist_world_size(const DfDistGroup *g) { return g->world; }

/* An IPv4 peer on the dual-stack socket ("::ffff:10.0.0.2"): the IPv4 address. */
static void strip_v4_mapped(char *buf) {
    const char *mapped = "::ffff:";
    size_t n = strlen(mapped);
    if (strncmp(buf, mapped, n) == 0 && strchr(buf + n, '.')) memmove(buf, buf + n, strlen(buf + n) + 1);
}

int df_dist_local_address(const DfDistGroup *g, char *buf, size_t cap, DfError *err) {
    int fd = g->world > 1 ? g->ctrl[g->rank == 0 ? 1 : 0] : -1;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len))
        return df_fail(err, "rendezvous: rank %d has no connection to take its address from", g->rank);
    int rc = getnameinfo((struct sockaddr *)&ss, len, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST);
    if (rc) return df_fail(err, "rendezvous: rank %d's own address: %s", g->rank, gai_strerror(rc));
    strip_v4_mapped(buf);
    return 0;
}

static int is_failed(void *ctx) { return atomic_load(&((DfDistGroup *)ctx)->failed); }

/* Records a failure this rank found (naming the rank at fault), tells the
 * others, and puts the group's message (the first failure) into err. */
static int fail_group(DfDistGroup *g, DfError *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_group(DfDistGroup *g, DfError *err, const char *fmt, ...) {
    char msg[DF_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    df_dist_record_failure(g, msg, 1, -1); /* a rank out of step must hear it too */
    return df_dist_poll_failure(g, err);
}

/* The message for a control connection to rank r that did not complete. */
static int transfer_failed(DfDistGroup *g, int r, DfTcpStatus st, const char *what, DfError *err) {
    switch (st) {
    case DF_TCP_CLOSED:
        /* A rank that closes may have sent the reason first on its heartbeat
         * connection (rank 0 relaying another rank's failure, a goodbye):
         * let the monitor read it, so that the message names the cause. */
        for (double until = df_now_seconds() + 2.0; df_now_seconds() < until;) {
            if (atomic_load(&g->failed) || atomic_load(&g->hb[r].state) != DF_LINK_LIVE) break;
            df_sleep_seconds(0.01);
        }
        if (atomic_load(&g->failed)) return df_dist_poll_failure(g, err);
        if (atomic_load(&g->hb[r].state) == DF_LINK_DEPARTED)
            return fail_group(g, err, "rank %d left the group (closed normally) while rank %d was in %s", r,
                              g->rank, what);
        return fail_group(g, err, "rank %d lost: its connection closed during %s (the process ended or was killed)",
                          r, what);
    case DF_TCP_TIMEOUT:
        return fail_group(g, err, "rank %d did not take part in %s within %.0f s (op_timeout_s)", r, what,
                          g->opt.op_timeout_s);
    case DF_TCP_CANCELLED:
        return df_dist_poll_failure(g, err);
    default:
        return fail_group(g, err, "connection to rank %d failed during %s: %s", r, what, err ? err->msg : "");
    }
}

static int send_msg(DfDistGroup *g, int r, uint32_t type, const void *payload, size_t len, DfError *err) {
    uint8_t head[DF_WIRE_HEADER];
    df_wire_put_header(head, type, g->seq, len);
    double deadline = df_now_seconds() + g->opt.op_timeout_s;
    DfTcpStatus st = df_tcp_send_all(g->ctrl[r], head, sizeof head, deadline, is_failed, g, err);
    if (st == DF_TCP_OK && len) st = df_tcp_send_all(g->ctrl[r], payload, len, deadline, is_failed, g, err);
    return st == DF_TCP_OK ? 0 : transfer_failed(g, r, st, df_wire_type_name(type), err);
}

/* Receives the message of this collective from rank r: its type, sequence
 * number and length must be the expected ones. */
static int recv_msg(DfDistGroup *g, int r, uint32_t type, void *payload, size_t len, DfError *err) {
    const char *what = df_wire_type_name(type);
    uint8_t head[DF_WIRE_HEADER];
    double deadline = df_now_seconds() + g->opt.op_timeout_s;
    DfTcpStatus st = df_tcp_recv_all(g->ctrl[r], head, sizeof head, deadline, is_failed, g, err);
    if (st != DF_TCP_OK) return transfer_failed(g, r, st, what, err);
    DfWireHeader h;
    if (df_wire_get_header(head, &h))
        return fail_group(g, err, "rank %d sent garbage on its control connection during %s", r, what);
    if (h.type != type || h.seq != g->seq)
        return fail_group(g, err,
                          "collectives out of step: rank %d is in %s #%llu but rank %d sent %s #%llu (every rank "
                          "must call the same collectives in the same order)",
                          g->rank, what, (unsigned long long)g->seq, r, df_wire_type_name(h.type),
                          (unsigned long long)h.seq);
    if (h.len != len)
        return fail_group(g, err, "%s #%llu: rank %d expects %zu bytes but rank %d sent %llu", what,
                          (unsigned long long)g->seq, g->rank, len, r, (unsigned long long)h.len);
    st = df_tcp_recv_all(g->ctrl[r], payload, len, deadline, is_failed, g, err);
    return st == DF_TCP_OK ? 0 : transfer_failed(g, r, st, what, err);
}

/* Common start of a collective: 1 when there is nothing to do (one rank). */
static int begin_collective(DfDistGroup *g, size_t len, DfError *err) {
    if (df_dist_poll_failure(g, err)) return -1;
    if (len > DF_WIRE_MAX_PAYLOAD / (size_t)g->world)
        return df_fail(err, "rendezvous: %zu bytes per rank is too large for a collective", len);
    g->seq++;
    return g->world == 1;
}

int df_dist_broadcast(DfDistGroup *g, void *buf, size_t len, DfError *err) {
    int rc = begin_collective(g, len, err);
    if (rc) return rc < 0 ? -1 : 0;
    if (g->rank != 0) return recv_msg(g, 0, DF_MSG_BROADCAST, buf, len, err);
    for (int r = 1; r < g->world; r++)
        if (send_msg(g, r, DF_MSG_BROADCAST, buf, len, err)) return -1;
    return 0;
}

int df_dist_barrier(DfDistGroup *g, DfError *err) {
    int rc = begin_collective(g, 0, err);
    if (rc) return rc < 0 ? -1 : 0;
    if (g->rank != 0) {
        if (send_msg(g, 0, DF_MSG_BARRIER_IN, NULL, 0, err)) return -1;
        return recv_msg(g, 0, DF_MSG_BARRIER_OUT, NULL, 0, err);
    }
    for (int r = 1; r < g->world; r++)
        if (recv_msg(g, r, DF_MSG_BARRIER_IN, NULL, 0, err)) return -1;
    for (int r = 1; r < g->world; r++)
        if (send_msg(g, r, DF_MSG_BARRIER_OUT, NULL, 0, err)) return -1;
    return 0;
}

int df_dist_all_gather(DfDistGroup *g, const void *in, size_t len, void *out, DfError *err) {
    int rc = begin_collective(g, len, err);
    if (rc < 0) return -1;
    memmove((char *)out + (size_t)g->rank * len, in, len);
    if (rc) return 0;
    size_t total = (size_t)g->world * len;
    if (g->rank != 0) {
        if (send_msg(g, 0, DF_MSG_GATHER_IN, in, len, err)) return -1;
        return recv_msg(g, 0, DF_MSG_GATHER_OUT, out, total, err);
    }
    for (int r = 1; r < g->world; r++)
        if (recv_msg(g, r, DF_MSG_GATHER_IN, (char *)out + (size_t)r * len, len, err)) return -1;
    for (int r = 1; r < g->world; r++)
        if (send_msg(g, r, DF_MSG_GATHER_OUT, out, total, err)) return -1;
    return 0;
}

/* dst += src, element by element, in the element type. */
static void add_into(void *dst, const void *src, size_t count, DfDistElem elem) {
    if (elem == DF_DIST_F32) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < count; i++) d[i] += s[i];
    } else {
        double *d = dst;
        const double *s = src;
        for (size_t i = 0; i < count; i++) d[i] += s[i];
    }
}

/* One collective over count elements (count * size <= the chunk). Rank 0
 * adds the ranks' values in rank order into its own and sends the sums. */
static int all_reduce_chunk(DfDistGroup *g, void *buf, size_t count, DfDistElem elem, void *tmp, DfError *err) {
    size_t len = count * (elem == DF_DIST_F32 ? sizeof(float) : sizeof(double));
    int rc = begin_collective(g, len, err);
    if (rc) return rc < 0 ? -1 : 0;
    if (g->rank != 0) {
        if (send_msg(g, 0, DF_MSG_REDUCE_IN, buf, len, err)) return -1;
        return recv_msg(g, 0, DF_MSG_REDUCE_OUT, buf, len, err);
    }
    for (int r = 1; r < g->world; r++) {
        if (recv_msg(g, r, DF_MSG_REDUCE_IN, tmp, len, err)) return -1;
        add_into(buf, tmp, count, elem);
    }
    for (int r = 1; r < g->world; r++)
        if (send_msg(g, r, DF_MSG_REDUCE_OUT, buf, len, err)) return -1;
    return 0;
}

int df_dist_all_reduce_sum(DfDistGroup *g, void *buf, size_t count, DfDistElem elem, DfError *err) {
    size_t size = elem == DF_DIST_F32 ? sizeof(float) : sizeof(double);
    size_t chunk = DF_DIST_REDUCE_CHUNK_BYTES / size;
    if (g->world == 1 || count == 0) return df_dist_poll_failure(g, err);
    void *tmp = g->rank == 0 ? df_xmalloc((count < chunk ? count : chunk) * size, "all-reduce buffer") : NULL;
    int rc = 0;
    for (size_t at = 0; at < count && rc == 0; at += chunk) {
        size_t n = count - at < chunk ? count - at : chunk;
        rc = all_reduce_chunk(g, (char *)buf + at * size, n, elem, tmp, err);
    }
    free(tmp);
    return rc;
}

/* ------------------------------------------------------------ forming */

static DfDistGroup *group_alloc(const DfDistEnv *env, const DfDistOptions *opt) {
    DfDistGroup *g = df_xcalloc(1, sizeof *g, "process group");
    g->rank = env->rank;
    g->world = env->world_size;
    if (opt)
        g->opt = *opt;
    else
        df_dist_options_default(&g->opt);
    g->ctrl = df_xcalloc((size_t)g->world, sizeof *g->ctrl, "process group");
    g->hb = df_xcalloc((size_t)g->world, sizeof *g->hb, "process group");
    for (int r = 0; r < g->world; r++) {
        g->ctrl[r] = -1;
        g->hb[r].fd = -1;
        atomic_init(&g->hb[r].state, DF_LINK_NONE);
    }
    atomic_init(&g->failed, 0);
    pthread_mutex_init(&g->fail_mu, NULL);
    pthread_mutex_init(&g->hb_send_mu, NULL);
    return g;
}

static void group_free(DfDistGroup *g) {
    for (int r = 0; r < g->world; r++) {
        if (g->ctrl[r] >= 0) close(g->ctrl[r]);
        if (g->hb[r].fd >= 0) close(g->hb[r].fd);
    }
    pthread_mutex_destroy(&g->fail_mu);
    pthread_mutex_destroy(&g->hb_send_mu);
    free(g->ctrl);
    free(g->hb);
    free(g);
}

void df_dist_group_close(DfDistGroup *g) {
    if (!g) return;
    df_dist_monitor_stop(g);
    group_free(g);
}

/* Sends a whole message on a socket that is not (yet) a group link. */
static int send_raw(int fd, uint32_t type, const void *payload, size_t len, double deadline, DfError *err) {
    uint8_t head[DF_WIRE_HEADER];
    df_wire_put_header(head, type, 0, len);
    if (df_tcp_send_all(fd, head, sizeof head, deadline, NULL, NULL, err) != DF_TCP_OK) return -1;
    return len && df_tcp_send_all(fd, payload, len, deadline, NULL, NULL, err) != DF_TCP_OK ? -1 : 0;
}

/* The joining process's address, for rank 0's log ("?" when unknown). */
static void peer_address(int fd, char *buf, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0 ||
        getnameinfo((struct sockaddr *)&ss, len, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0) {
        snprintf(buf, cap, "?");
        return;
    }
    strip_v4_mapped(buf);
}

/* A process with another job's token (or none): told why and logged, and the
 * wait goes on, so that a stray process cannot end the group. */
static int turn_away(int fd, const DfWireHello *hello, const DfDistEnv *env, double deadline) {
    char addr[256], msg[DF_ERROR_MAX];
    peer_address(fd, addr, sizeof addr);
    snprintf(msg, sizeof msg,
             "rendezvous: refused a process at %s joining as RANK=%u: its job token differs from rank 0's (rank 0's "
             "comes from %s; give every rank the same DFLASH_JOB_TOKEN, or launch them all in one job)",
             addr, hello->rank, env->token.source ? env->token.source : "none");
    fprintf(stderr, "dflash: %s\n", msg);
    send_raw(fd, DF_MSG_ABORT, msg, strlen(msg), deadline, NULL);
    close(fd);
    return 1;
}

/* Rank 0 turns down a joining process: tells it why, and fails. */
static int refuse(int fd, double deadline, DfError *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int refuse(int fd, double deadline, DfError *err, const char *fmt, ...) {
    char msg[DF_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    send_raw(fd, DF_MSG_ABORT, msg, strlen(msg), deadline, NULL);
    close(fd);
    return df_fail(err, "%s", msg);
}

/* Reads a joining connection's hello and files it; 1 when it was no
 * rendezvous client at all, or another job's (dropped, the wait goes on). */
static int take_hello(DfDistGroup *g, const DfDistEnv *env, int fd, double deadline, DfError *err) {
    double hello_deadline = df_now_seconds() + 5.0;
    if (hello_deadline > deadline) hello_deadline = deadline;
    uint8_t head[DF_WIRE_HEADER], p[DF_WIRE_HELLO_BYTES];
    DfWireHeader h;
    DfWireHello hello;
    /* the header's length is bounded (dist/wire.h) before the payload is read */
    if (df_tcp_recv_all(fd, head, sizeof head, hello_deadline, NULL, NULL, NULL) != DF_TCP_OK ||
        df_wire_get_header(head, &h) || h.type != DF_MSG_HELLO ||
        df_tcp_recv_all(fd, p, h.len, hello_deadline, NULL, NULL, NULL) != DF_TCP_OK ||
        df_wire_get_hello(p, h.len, &hello, NULL)) {
        close(fd);
        return 1;
    }
    uint32_t rank = hello.rank, world = hello.world, channel = hello.channel, version = hello.version;
    if (version != DF_WIRE_VERSION)
        return refuse(fd, deadline, err, "rendezvous: rank %u speaks protocol version %u, rank 0 version %u (mixed "
                      "dflash builds?)", rank, version, DF_WIRE_VERSION);
    if (!df_job_token_equal(hello.token, env->token.bytes)) return turn_away(fd, &hello, env, deadline);
    if (world != (uint32_t)g->world)
        return refuse(fd, deadline, err, "rendezvous: rank %u has WORLD_SIZE=%u but rank 0 has WORLD_SIZE=%d", rank,
                      world, g->world);
    if (rank == 0 || rank >= (uint32_t)g->world || channel > DF_CHANNEL_HEARTBEAT)
        return refuse(fd, deadline, err, "rendezvous: a process joined as RANK=%u, which is not in 1..%d", rank,
                      g->world - 1);
    int *slot = channel == DF_CHANNEL_CONTROL ? &g->ctrl[rank] : &g->hb[rank].fd;
    if (*slot >= 0)
        return refuse(fd, deadline, err, "rendezvous: two processes joined as RANK=%u (is RANK set the same on two "
                      "processes?)", rank);
    *slot = fd;
    /* the hello's answer, so that a refused process learns why before its next connection */
    if (send_raw(fd, DF_MSG_HELLO, NULL, 0, deadline, err)) return df_context(err, "rendezvous: answering rank %u", rank);
    return 0;
}

static void list_missing(const DfDistGroup *g, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int r = 1; r < g->world && n + 16 < cap; r++)
        if (g->ctrl[r] < 0 || g->hb[r].fd < 0) n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", r);
}

/* Rank 0 gives up forming the group: the ranks that joined learn why. */
static int abort_joined(DfDistGroup *g, DfError *err) {
    double deadline = df_now_seconds() + 1.0;
    for (int r = 1; r < g->world; r++)
        if (g->ctrl[r] >= 0) send_raw(g->ctrl[r], DF_MSG_ABORT, err->msg, strlen(err->msg), deadline, NULL);
    return -1;
}

static int form_as_rank0(DfDistGroup *g, const DfDistEnv *env, DfError *err) {
    int lfd = df_tcp_listen(env->master_port, err);
    if (lfd < 0) return df_context(err, "rendezvous (rank 0, MASTER_PORT=%d)", env->master_port);
    double deadline = df_now_seconds() + g->opt.connect_timeout_s;
    for (int joined = 0; joined < 2 * (g->world - 1);) {
        int fd = df_tcp_accept(lfd, deadline, err);
        if (fd == DF_TCP_TIMEOUT) {
            char missing[256];
            list_missing(g, missing, sizeof missing);
            close(lfd);
            return df_fail(err, "rendezvous: after %.0f s rank(s) %s of %d never joined rank 0 on port %d (all "
                                "started? same MASTER_ADDR and MASTER_PORT everywhere?)",
                           g->opt.connect_timeout_s, missing, g->world, env->master_port);
        }
        if (fd < 0) {
            close(lfd);
            return df_context(err, "rendezvous (rank 0, port %d)", env->master_port);
        }
        int rc = take_hello(g, env, fd, deadline, err);
        if (rc < 0) {
            abort_joined(g, err); /* before closing the listener, whose backlog gets reset */
            close(lfd);
            return -1;
        }
        joined += rc == 0;
    }
    close(lfd);
    for (int r = 1; r < g->world; r++) {
        if (send_raw(g->ctrl[r], DF_MSG_WELCOME, NULL, 0, deadline, err))
            return df_context(err, "rendezvous: welcoming rank %d", r);
        atomic_store(&g->hb[r].state, DF_LINK_LIVE);
    }
    return 0;
}

/* Reads rank 0's answer on a joining connection: `expected` (0), or a
 * failure naming the reason (rank 0 turned this rank away, closed, or the
 * deadline passed). */
static int await_answer(int fd, const DfDistEnv *env, uint32_t expected, double deadline, double timeout_s,
                        DfError *err) {
    uint8_t head[DF_WIRE_HEADER];
    DfWireHeader h;
    DfTcpStatus st = df_tcp_recv_all(fd, head, sizeof head, deadline, NULL, NULL, err);
    if (st == DF_TCP_TIMEOUT)
        return df_fail(err, "rendezvous (rank %d): joined rank 0 at %s:%d but the group did not form within %.0f s "
                            "(other ranks missing?)",
                       env->rank, env->master_addr, env->master_port, timeout_s);
    if (st != DF_TCP_OK || df_wire_get_header(head, &h))
        return df_fail(err, "rendezvous (rank %d): rank 0 at %s:%d closed the connection while the group was forming "
                            "(see rank 0's error)",
                       env->rank, env->master_addr, env->master_port);
    if (h.type == DF_MSG_ABORT && h.len < DF_ERROR_MAX) {
        char msg[DF_ERROR_MAX] = {0};
        df_tcp_recv_all(fd, msg, h.len, deadline, NULL, NULL, NULL);
        return df_fail(err, "rank 0 turned rank %d away: %s", env->rank, msg);
    }
    if (h.type != expected || h.len != 0)
        return df_fail(err, "rendezvous (rank %d): unexpected %s from rank 0 at %s:%d", env->rank,
                       df_wire_type_name(h.type), env->master_addr, env->master_port);
    return 0;
}

/* Cancels the second connection's retries once rank 0 has said something
 * (or closed) on the first: it gave up on the group. */
static int has_input(void *ctx) {
    struct pollfd p = {.fd = *(const int *)ctx, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

static int connect_and_hello(const DfDistEnv *env, int channel, double deadline, double timeout_s, int *ctrl,
                             DfError *err) {
    int fd = df_tcp_connect(env->master_addr, env->master_port, deadline, ctrl ? has_input : NULL, ctrl, err);
    if (fd < 0) {
        df_context(err, "rendezvous (rank %d) with rank 0", env->rank);
        return -1;
    }
    DfWireHello hello = {.rank = (uint32_t)env->rank, .world = (uint32_t)env->world_size,
                         .channel = (uint32_t)channel, .version = DF_WIRE_VERSION};
    memcpy(hello.token, env->token.bytes, DF_JOB_TOKEN_BYTES);
    uint8_t payload[DF_WIRE_HELLO_BYTES];
    df_wire_put_hello(payload, &hello);
    if (send_raw(fd, DF_MSG_HELLO, payload, sizeof payload, deadline, err) ||
        await_answer(fd, env, DF_MSG_HELLO, deadline, timeout_s, err)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int form_as_peer(DfDistGroup *g, const DfDistEnv *env, DfError *err) {
    double timeout = g->opt.connect_timeout_s, deadline = df_now_seconds() + timeout;
    g->ctrl[0] = connect_and_hello(env, DF_CHANNEL_CONTROL, deadline, timeout, NULL, err);
    if (g->ctrl[0] < 0) return -1;
    g->hb[0].fd = connect_and_hello(env, DF_CHANNEL_HEARTBEAT, deadline, timeout, &g->ctrl[0], err);
    if (g->hb[0].fd < 0) { /* rank 0 may have given up: its reason comes on the first connection */
        struct pollfd p = {.fd = g->ctrl[0], .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0) return -1;
    }
    /* the welcome, or rank 0's reason for giving up */
    if (await_answer(g->ctrl[0], env, DF_MSG_WELCOME, deadline, timeout, err)) return -1;
    if (g->hb[0].fd < 0) return df_fail(err, "rendezvous (rank %d): welcomed without a heartbeat connection", g->rank);
    atomic_store(&g->hb[0].state, DF_LINK_LIVE);
    return 0;
}

DfDistGroup *df_dist_group_create(const DfDistEnv *env, const DfDistOptions *opt, DfError *err) {
    if (env->world_size < 1 || env->rank < 0 || env->rank >= env->world_size) {
        df_fail(err, "rendezvous: RANK=%d is not in 0..WORLD_SIZE-1 (WORLD_SIZE=%d)", env->rank, env->world_size);
        return NULL;
    }
    if (opt && !(opt->connect_timeout_s > 0 && opt->op_timeout_s > 0 && opt->heartbeat_interval_s > 0 &&
                 opt->heartbeat_timeout_s >= 2 * opt->heartbeat_interval_s)) {
        df_fail(err, "rendezvous: timeouts must be positive and heartbeat_timeout_s (%g) at least twice "
                     "heartbeat_interval_s (%g)",
                opt->heartbeat_timeout_s, opt->heartbeat_interval_s);
        return NULL;
    }
    DfDistGroup *g = group_alloc(env, opt);
    if (g->world == 1) return g;
    int rc = g->rank == 0 ? form_as_rank0(g, env, err) : form_as_peer(g, env, err);
    if (rc == 0) rc = df_dist_monitor_start(g, err);
    if (rc) {
        group_free(g);
        return NULL;
    }
    return g;
}
