#include "dist/feature_link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "dist/rendezvous_internal.h" /* the little-endian field helpers */
#include "dist/tcp.h"

#define LINK_MAGIC 0x4c464644u /* "DFFL" */
#define LINK_HEADER 32
#define LINK_TIMEOUT_S 1800.0  /* a peer silent this long (a checkpoint, a slow step) counts as gone */
#define CONNECT_TIMEOUT_S 300.0
#define ADDR_BYTES 64

enum { MSG_HELLO = 1, MSG_CREDIT, MSG_STOP, MSG_FEATURES };

typedef struct LinkHeader {
    uint32_t type, signal;
    uint64_t step, count;
} LinkHeader;

static const char *msg_name(uint32_t type) {
    switch (type) {
    case MSG_HELLO: return "hello";
    case MSG_CREDIT: return "credit";
    case MSG_STOP: return "stop";
    case MSG_FEATURES: return "features";
    default: return "unknown message";
    }
}

int df_feature_link_target_of(int global_rank, int target_ranks) {
    return (global_rank - target_ranks) % target_ranks;
}

static int group_failed(void *ctx) { return df_dist_poll_failure(ctx, NULL) != 0; }

/* A transfer with `peer` that did not complete: the group's message when the
 * group failed (it names the cause), else one naming the peer. */
static int link_failed(DfFeatureLinks *l, int peer, DfTcpStatus st, const char *what, DfError *err) {
    if (df_dist_poll_failure(l->group, err)) return -1;
    switch (st) {
    case DF_TCP_CLOSED:
        return df_fail(err, "rank %d lost: its feature link closed during %s (the process ended or was killed)", peer,
                       what);
    case DF_TCP_TIMEOUT:
        return df_fail(err, "rank %d did not answer on its feature link within %.0f s (%s)", peer, LINK_TIMEOUT_S,
                       what);
    default:
        return df_context(err, "feature link with rank %d (%s)", peer, what);
    }
}

static int send_header(DfFeatureLinks *l, int peer, const LinkHeader *h, DfError *err) {
    uint8_t buf[LINK_HEADER] = {0};
    df_wire_put_u32(buf, LINK_MAGIC);
    df_wire_put_u32(buf + 4, h->type);
    df_wire_put_u64(buf + 8, h->step);
    df_wire_put_u64(buf + 16, h->count);
    df_wire_put_u32(buf + 24, h->signal);
    DfTcpStatus st =
        df_tcp_send_all(l->fd[peer], buf, sizeof buf, df_now_seconds() + LINK_TIMEOUT_S, group_failed, l->group, err);
    return st == DF_TCP_OK ? 0 : link_failed(l, peer, st, msg_name(h->type), err);
}

static int recv_header(DfFeatureLinks *l, int peer, LinkHeader *h, DfError *err) {
    uint8_t buf[LINK_HEADER];
    DfTcpStatus st =
        df_tcp_recv_all(l->fd[peer], buf, sizeof buf, df_now_seconds() + LINK_TIMEOUT_S, group_failed, l->group, err);
    if (st != DF_TCP_OK) return link_failed(l, peer, st, "a feature link message", err);
    if (df_wire_get_u32(buf) != LINK_MAGIC) return df_fail(err, "rank %d sent garbage on its feature link", peer);
    h->type = df_wire_get_u32(buf + 4);
    h->step = df_wire_get_u64(buf + 8);
    h->count = df_wire_get_u64(buf + 16);
    h->signal = df_wire_get_u32(buf + 24);
    return 0;
}

/* ---- opening --------------------------------------------------------------- */

/* A communicator over the whole group for the sends and receives. */
static int open_nccl(DfFeatureLinks *l, DfError *err) {
    return df_group_nccl_open(&l->nccl, l->group, "the split layout's feature links on the device", err);
}

/* Target rank: accepts the connections of the drafter ranks it serves. */
static int accept_drafters(DfFeatureLinks *l, int lfd, DfError *err) {
    int expected = 0;
    for (int r = l->target_ranks; r < l->world; r++)
        expected += df_feature_link_target_of(r, l->target_ranks) == l->rank;
    double deadline = df_now_seconds() + CONNECT_TIMEOUT_S;
    for (int joined = 0; joined < expected;) {
        int fd = df_tcp_accept(lfd, deadline, err);
        if (fd < 0) return fd == DF_TCP_TIMEOUT ? df_fail(err, "the drafter ranks did not connect within %.0f s",
                                                         CONNECT_TIMEOUT_S)
                                                : df_context(err, "feature links (rank %d)", l->rank);
        uint8_t buf[LINK_HEADER];
        if (df_tcp_recv_all(fd, buf, sizeof buf, df_now_seconds() + 10.0, group_failed, l->group, NULL) != DF_TCP_OK ||
            df_wire_get_u32(buf) != LINK_MAGIC || df_wire_get_u32(buf + 4) != MSG_HELLO) {
            close(fd); /* not one of ours */
            continue;
        }
        uint64_t peer = df_wire_get_u64(buf + 8);
        if (peer < (uint64_t)l->target_ranks || peer >= (uint64_t)l->world ||
            df_feature_link_target_of((int)peer, l->target_ranks) != l->rank || l->fd[peer] >= 0) {
            close(fd);
            return df_fail(err, "feature links: rank %llu connected to target rank %d, which does not serve it",
                           (unsigned long long)peer, l->rank);
        }
        l->fd[peer] = fd;
        joined++;
    }
    return 0;
}

/* Drafter rank: connects to its target rank and says who it is. */
static int connect_target(DfFeatureLinks *l, const char *addr, int port, DfError *err) {
    int t = df_feature_link_target_of(l->rank, l->target_ranks);
    int fd = df_tcp_connect(addr, port, df_now_seconds() + CONNECT_TIMEOUT_S, group_failed, l->group, err);
    if (fd < 0) return df_context(err, "feature link to target rank %d at %s:%d", t, addr, port);
    l->fd[t] = fd;
    LinkHeader h = {.type = MSG_HELLO, .step = (uint64_t)l->rank};
    return send_header(l, t, &h, err);
}

int df_feature_links_open(DfFeatureLinks *l, DfDistGroup *group, DfBackend *be, int target_ranks, DfError *err) {
    memset(l, 0, sizeof *l);
    l->group = group;
    l->be = be;
    l->rank = df_dist_rank(group);
    l->world = df_dist_world_size(group);
    l->target_ranks = target_ranks;
    if (target_ranks < 1 || target_ranks >= l->world)
        return df_fail(err, "split layout: %d target ranks in a group of %d (need 1 .. %d)", target_ranks, l->world,
                       l->world - 1);
    l->fd = df_xmalloc((size_t)l->world * sizeof *l->fd, "feature links");
    for (int r = 0; r < l->world; r++) l->fd[r] = -1;
    int is_target = l->rank < target_ranks, lfd = -1;
    uint8_t mine[ADDR_BYTES + 4] = {0};
    if (is_target) {
        if ((lfd = df_tcp_listen(0, err)) < 0) return df_context(err, "feature links (rank %d)", l->rank);
        if (df_dist_local_address(group, (char *)mine, ADDR_BYTES, err)) {
            close(lfd);
            return -1;
        }
        df_wire_put_u32(mine + ADDR_BYTES, (uint32_t)df_tcp_local_port(lfd));
    }
    uint8_t *all = df_xmalloc((size_t)l->world * sizeof mine, "feature link addresses");
    int rc = df_dist_all_gather(group, mine, sizeof mine, all, err);
    if (rc == 0 && is_target) rc = accept_drafters(l, lfd, err);
    if (rc == 0 && !is_target) {
        const uint8_t *theirs = all + (size_t)df_feature_link_target_of(l->rank, target_ranks) * sizeof mine;
        char addr[ADDR_BYTES];
        memcpy(addr, theirs, ADDR_BYTES);
        addr[ADDR_BYTES - 1] = '\0';
        rc = connect_target(l, addr, (int)df_wire_get_u32(theirs + ADDR_BYTES), err);
    }
    free(all);
    if (lfd >= 0) close(lfd);
    l->use_nccl = df_backend_has(be, DF_CAP_STREAMS | DF_CAP_NCCL); /* features stay on the device */
    if (rc == 0 && l->use_nccl) rc = open_nccl(l, err);
    return rc;
}

/* ---- drafter side ---------------------------------------------------------- */

static int my_target(const DfFeatureLinks *l) { return df_feature_link_target_of(l->rank, l->target_ranks); }

int df_feature_link_grant(DfFeatureLinks *l, int64_t step, DfError *err) {
    LinkHeader h = {.type = MSG_CREDIT, .step = (uint64_t)step};
    return send_header(l, my_target(l), &h, err);
}

int df_feature_link_stop(DfFeatureLinks *l, int64_t last_step, DfError *err) {
    LinkHeader h = {.type = MSG_STOP, .step = (uint64_t)last_step};
    return send_header(l, my_target(l), &h, err);
}

static int transfer_nccl(DfFeatureLinks *l, int send, int peer, DfBuffer features, size_t count, DfError *err) {
    if (df_nccl_check_async(&l->nccl.comm, err)) return -1;
    if (features.elem_size != 2 && features.elem_size != 4)
        return df_fail(err, "internal: features of %d-byte elements", features.elem_size);
    DfNcclType type = features.elem_size == 2 ? DF_NCCL_BF16 : DF_NCCL_F32;
    void *stream = df_backend_native_stream(l->be);
    return send ? df_nccl_send(&l->nccl.comm, features.ptr, count, type, peer, stream, err)
                : df_nccl_recv(&l->nccl.comm, features.ptr, count, type, peer, stream, err);
}

static void reserve_host(DfFeatureLinks *l, size_t count) {
    if (count <= l->host_cap) return;
    free(l->host);
    l->host = df_xmalloc(count * sizeof *l->host, "feature staging");
    l->host_cap = count;
}

int df_feature_link_recv(DfFeatureLinks *l, int64_t step, DfBuffer features, size_t count, int *signal,
                         DfError *err) {
    int t = my_target(l);
    LinkHeader h;
    if (recv_header(l, t, &h, err)) return -1;
    if (h.type != MSG_FEATURES || h.step != (uint64_t)step || h.count != count)
        return df_fail(err, "feature link: expected the features of step %lld (%zu values) from target rank %d, got "
                            "%s of step %llu (%llu values): do both ranks run the same options?",
                       (long long)step, count, t, msg_name(h.type), (unsigned long long)h.step,
                       (unsigned long long)h.count);
    *signal = (int)h.signal;
    if (count == 0) return 0;
    if (count > features.count)
        return df_fail(err, "internal: %zu features into a buffer of %zu", count, features.count);
    if (l->use_nccl) return transfer_nccl(l, 0, t, features, count, err);
    reserve_host(l, count);
    DfTcpStatus st = df_tcp_recv_all(l->fd[t], l->host, count * sizeof *l->host, df_now_seconds() + LINK_TIMEOUT_S,
                                     group_failed, l->group, err);
    if (st != DF_TCP_OK) return link_failed(l, t, st, "features", err);
    return l->be->ops->upload_f32(l->be, df_buffer_view(features, 0, count), l->host, err);
}

int df_feature_link_drain(DfFeatureLinks *l, int64_t step, DfBuffer features, DfError *err) {
    int t = my_target(l);
    LinkHeader h;
    if (recv_header(l, t, &h, err)) return -1;
    if (h.type != MSG_FEATURES || h.step != (uint64_t)step || h.count > features.count)
        return df_fail(err, "feature link: expected the features of step %lld from target rank %d, got %s of step "
                            "%llu (%llu values)",
                       (long long)step, t, msg_name(h.type), (unsigned long long)h.step, (unsigned long long)h.count);
    if (h.count == 0) return 0;
    if (l->use_nccl) return transfer_nccl(l, 0, t, features, h.count, err) || l->be->ops->sync(l->be, err) ? -1 : 0;
    reserve_host(l, h.count);
    DfTcpStatus st = df_tcp_recv_all(l->fd[t], l->host, h.count * sizeof *l->host, df_now_seconds() + LINK_TIMEOUT_S,
                                     group_failed, l->group, err);
    return st == DF_TCP_OK ? 0 : link_failed(l, t, st, "features", err);
}

/* ---- target side ----------------------------------------------------------- */

int df_feature_link_await_credit(DfFeatureLinks *l, int peer, int64_t step, int *stopped, DfError *err) {
    LinkHeader h;
    if (recv_header(l, peer, &h, err)) return -1;
    *stopped = h.type == MSG_STOP;
    if (*stopped) l->stopped_after = (int64_t)h.step;
    if (*stopped || (h.type == MSG_CREDIT && h.step == (uint64_t)step)) return 0;
    return df_fail(err, "feature link: expected drafter rank %d's credit for step %lld, got %s of step %llu", peer,
                   (long long)step, msg_name(h.type), (unsigned long long)h.step);
}

int df_feature_link_send(DfFeatureLinks *l, int peer, int64_t step, DfBuffer features, size_t count, int signal,
                         DfError *err) {
    if (count > features.count)
        return df_fail(err, "internal: %zu features from a buffer of %zu", count, features.count);
    LinkHeader h = {.type = MSG_FEATURES, .step = (uint64_t)step, .count = count, .signal = (uint32_t)signal};
    if (send_header(l, peer, &h, err)) return -1;
    if (count == 0) return 0;
    if (l->use_nccl) return transfer_nccl(l, 1, peer, features, count, err);
    reserve_host(l, count);
    if (l->be->ops->sync(l->be, err) ||
        l->be->ops->download_f32(l->be, l->host, df_buffer_view(features, 0, count), err))
        return -1;
    DfTcpStatus st = df_tcp_send_all(l->fd[peer], l->host, count * sizeof *l->host, df_now_seconds() + LINK_TIMEOUT_S,
                                     group_failed, l->group, err);
    return st == DF_TCP_OK ? 0 : link_failed(l, peer, st, "features", err);
}

/* ---- closing --------------------------------------------------------------- */

void df_feature_links_abort(DfFeatureLinks *l) { df_group_nccl_abort(&l->nccl); }

void df_feature_links_close(DfFeatureLinks *l) {
    df_group_nccl_close(&l->nccl);
    for (int r = 0; l->fd && r < l->world; r++)
        if (l->fd[r] >= 0) close(l->fd[r]);
    free(l->fd);
    free(l->host);
    memset(l, 0, sizeof *l);
}
