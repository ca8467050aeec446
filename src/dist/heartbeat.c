/* The rendezvous monitor thread: heartbeats on the second connection of
 * every pair, lost-rank detection (a connection closed without goodbye, or
 * silent for heartbeat_timeout_s), and the relay of failure messages through
 * rank 0 so that every rank learns of a failure anywhere. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "dist/rendezvous_internal.h"
#include "dist/tcp.h"

/* Sends one message on a heartbeat link; failures are left to the reader
 * side, which sees the connection close. */
static void hb_send(DfDistGroup *g, int r, uint32_t type, const void *payload, size_t len) {
    DfHbLink *l = &g->hb[r];
    if (atomic_load(&l->state) != DF_LINK_LIVE) return;
    uint8_t head[DF_WIRE_HEADER];
    df_wire_put_header(head, type, 0, len);
    pthread_mutex_lock(&g->hb_send_mu);
    double deadline = df_now_seconds() + 2.0;
    if (df_tcp_send_all(l->fd, head, sizeof head, deadline, NULL, NULL, NULL) == DF_TCP_OK && len)
        df_tcp_send_all(l->fd, payload, len, deadline, NULL, NULL, NULL);
    pthread_mutex_unlock(&g->hb_send_mu);
}

void df_dist_record_failure(DfDistGroup *g, const char *msg, int notify, int skip) {
    pthread_mutex_lock(&g->fail_mu);
    int first = !atomic_load(&g->failed);
    if (first) {
        snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
        atomic_store(&g->failed, 1);
    }
    void (*hook)(void *) = first ? g->on_failure : NULL;
    void *hook_ctx = g->on_failure_ctx;
    pthread_mutex_unlock(&g->fail_mu);
    if (hook) hook(hook_ctx);
    if (!first || !notify) return;
    for (int r = 0; r < g->world; r++)
        if (r != g->rank && r != skip) hb_send(g, r, DF_MSG_ABORT, msg, strlen(msg));
}

void df_dist_set_failure_hook(DfDistGroup *g, void (*fn)(void *ctx), void *ctx) {
    if (!g) return;
    pthread_mutex_lock(&g->fail_mu);
    g->on_failure = fn;
    g->on_failure_ctx = ctx;
    int already = atomic_load(&g->failed);
    pthread_mutex_unlock(&g->fail_mu);
    if (already && fn) fn(ctx);
}

int df_dist_poll_failure(const DfDistGroup *g, DfError *err) {
    if (!g || !atomic_load(&g->failed)) return 0;
    DfDistGroup *m = (DfDistGroup *)g; /* the lock, not the state, is touched */
    pthread_mutex_lock(&m->fail_mu);
    df_fail(err, "%s", m->fail_msg);
    pthread_mutex_unlock(&m->fail_mu);
    return -1;
}

void df_dist_abort(DfDistGroup *g, const char *reason) {
    if (!g) return;
    char msg[DF_ERROR_MAX];
    snprintf(msg, sizeof msg, "rank %d aborted: %s", g->rank, reason ? reason : "(no reason given)");
    df_dist_record_failure(g, msg, 1, -1);
}

static void lose(DfDistGroup *g, int r, const char *why) {
    atomic_store(&g->hb[r].state, DF_LINK_LOST);
    char msg[DF_ERROR_MAX];
    snprintf(msg, sizeof msg, "rank %d lost: %s", r, why);
    df_dist_record_failure(g, msg, 1, r);
}

static void handle_message(DfDistGroup *g, int r, const DfWireHeader *h, const char *payload) {
    if (h->type == DF_MSG_GOODBYE) {
        atomic_store(&g->hb[r].state, DF_LINK_DEPARTED);
    } else if (h->type == DF_MSG_ABORT) {
        /* Every failure message names the rank at fault; rank 0 relays a
         * peer's to the others. */
        char msg[DF_ERROR_MAX];
        snprintf(msg, sizeof msg, "%.*s", (int)h->len, payload);
        df_dist_record_failure(g, msg, g->rank == 0, r);
    } else if (h->type != DF_MSG_HEARTBEAT) {
        lose(g, r, "it sent an unexpected message on the heartbeat connection");
    }
}

/* Reads whatever is there on one link (non-blocking), handling whole messages. */
static void read_link(DfDistGroup *g, int r, double now) {
    DfHbLink *l = &g->hb[r];
    for (;;) {
        DfWireHeader h = {0};
        size_t need = DF_WIRE_HEADER;
        if (l->have >= DF_WIRE_HEADER) {
            df_wire_get_header(l->buf, &h); /* checked when it arrived */
            need += h.len;
        }
        ssize_t n = recv(l->fd, l->buf + l->have, need - l->have, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) { /* closed (or reset); the link is not polled again */
            l->have = 0;
            if (atomic_load(&l->state) == DF_LINK_LIVE)
                lose(g, r, "its connection closed without a goodbye (the process ended or was killed)");
            return;
        }
        l->have += (size_t)n;
        l->last_seen = now;
        if (l->have == DF_WIRE_HEADER) {
            if (df_wire_get_header(l->buf, &h) || h.len >= DF_ERROR_MAX) {
                lose(g, r, "it sent garbage on the heartbeat connection");
                return;
            }
        }
        if (l->have >= DF_WIRE_HEADER) {
            df_wire_get_header(l->buf, &h);
            if (l->have == DF_WIRE_HEADER + h.len) {
                handle_message(g, r, &h, (const char *)l->buf + DF_WIRE_HEADER);
                l->have = 0;
                if (atomic_load(&l->state) != DF_LINK_LIVE) return;
            }
        }
    }
}

static void check_silence(DfDistGroup *g, double now) {
    for (int r = 0; r < g->world; r++) {
        DfHbLink *l = &g->hb[r];
        if (atomic_load(&l->state) != DF_LINK_LIVE || now - l->last_seen <= g->opt.heartbeat_timeout_s) continue;
        char why[160];
        snprintf(why, sizeof why, "no heartbeat for %.1f s (the process is stopped or hung, or the network is down)",
                 now - l->last_seen);
        lose(g, r, why);
    }
}

static void *monitor_main(void *arg) {
    DfDistGroup *g = arg;
    struct pollfd *fds = df_xcalloc((size_t)g->world + 1, sizeof *fds, "heartbeat poll set");
    int *who = df_xcalloc((size_t)g->world + 1, sizeof *who, "heartbeat poll set");
    double next_beat = 0;
    for (;;) {
        double now = df_now_seconds();
        if (now >= next_beat) {
            for (int r = 0; r < g->world; r++) hb_send(g, r, DF_MSG_HEARTBEAT, NULL, 0);
            next_beat = now + g->opt.heartbeat_interval_s;
        }
        check_silence(g, now);
        int n = 0;
        fds[n++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        for (int r = 0; r < g->world; r++)
            if (atomic_load(&g->hb[r].state) == DF_LINK_LIVE) {
                who[n] = r;
                fds[n++] = (struct pollfd){.fd = g->hb[r].fd, .events = POLLIN};
            }
        int wait_ms = (int)((next_beat - now) * 1000) + 1;
        if (wait_ms > 100) wait_ms = 100;
        if (poll(fds, (nfds_t)n, wait_ms) <= 0) continue;
        if (fds[0].revents) break; /* df_dist_monitor_stop */
        now = df_now_seconds();
        for (int i = 1; i < n; i++)
            if (fds[i].revents) read_link(g, who[i], now);
    }
    free(fds);
    free(who);
    return NULL;
}

int df_dist_monitor_start(DfDistGroup *g, DfError *err) {
    if (pipe(g->wake)) return df_fail_errno(err, "rendezvous: cannot create the monitor's pipe");
    fcntl(g->wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(g->wake[1], F_SETFD, FD_CLOEXEC);
    double now = df_now_seconds();
    for (int r = 0; r < g->world; r++) g->hb[r].last_seen = now;
    int rc = pthread_create(&g->monitor, NULL, monitor_main, g);
    if (rc) {
        close(g->wake[0]);
        close(g->wake[1]);
        errno = rc;
        return df_fail_errno(err, "rendezvous: cannot start the heartbeat thread");
    }
    g->monitor_started = 1;
    return 0;
}

void df_dist_monitor_stop(DfDistGroup *g) {
    for (int r = 0; r < g->world; r++) hb_send(g, r, DF_MSG_GOODBYE, NULL, 0);
    if (!g->monitor_started) return;
    char c = 'q';
    ssize_t w = write(g->wake[1], &c, 1);
    (void)w;
    pthread_join(g->monitor, NULL);
    g->monitor_started = 0;
    close(g->wake[0]);
    close(g->wake[1]);
}
