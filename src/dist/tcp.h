/* TCP sockets with deadlines for the rendezvous: every wait has a deadline
 * (monotonic seconds, base/clock.h) and an optional cancel check, so that no
 * call can hang on a peer that died or never came. Sockets are non-blocking
 * and close-on-exec; sends never raise SIGPIPE. */
#ifndef DF_DIST_TCP_H
#define DF_DIST_TCP_H

#include <stddef.h>

#include "base/error.h"

typedef enum DfTcpStatus {
    DF_TCP_OK = 0,
    DF_TCP_ERROR = -1,     /* err says why */
    DF_TCP_CLOSED = -2,    /* the peer closed the connection (or reset it) */
    DF_TCP_TIMEOUT = -3,   /* the deadline passed */
    DF_TCP_CANCELLED = -4, /* the cancel check said stop */
} DfTcpStatus;

/* Returns nonzero to stop a wait early (checked about every 50 ms). */
typedef int (*DfTcpCancel)(void *ctx);

/* Listens on every interface at `port` (IPv6 socket accepting IPv4 too,
 * or IPv4 only where the host has no IPv6). Returns the socket or -1. */
int df_tcp_listen(int port, DfError *err);

/* The local port of a bound socket, or -1. */
int df_tcp_local_port(int fd);

/* Accepts one connection before the deadline: the socket, or a DfTcpStatus. */
int df_tcp_accept(int listen_fd, double deadline, DfError *err);

/* Connects to host:port (every address getaddrinfo gives, IPv4 or IPv6),
 * retrying while nobody listens yet, until the deadline or until cancel (may
 * be NULL) says stop. The socket or -1. */
int df_tcp_connect(const char *host, int port, double deadline, DfTcpCancel cancel, void *ctx, DfError *err);

DfTcpStatus df_tcp_send_all(int fd, const void *data, size_t len, double deadline, DfTcpCancel cancel, void *ctx,
                            DfError *err);
DfTcpStatus df_tcp_recv_all(int fd, void *data, size_t len, double deadline, DfTcpCancel cancel, void *ctx,
                            DfError *err);

#endif
