#include "dist/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

#define POLL_SLICE_MS 50

static int set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* small control messages */
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    (void)set_nonblocking(fd);
}

/* Milliseconds to wait in one poll: at most a slice, at most until the deadline. */
static int slice_ms(double deadline) {
    double left = deadline - df_now_seconds();
    if (left <= 0) return 0;
    return left * 1000 < POLL_SLICE_MS ? (int)(left * 1000) + 1 : POLL_SLICE_MS;
}

int df_tcp_listen(int port, DfError *err) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(NULL, service, &hints, &res);
    if (rc) return df_fail(err, "cannot listen on port %d: %s", port, gai_strerror(rc));
    /* Prefer the IPv6 wildcard with IPv4-mapped addresses allowed: one socket for both. */
    int saved_errno = EAFNOSUPPORT;
    for (int want6 = 1; want6 >= 0; want6--) {
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            if ((a->ai_family == AF_INET6) != want6) continue;
            int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (fd < 0) {
                saved_errno = errno;
                continue;
            }
            int one = 1, zero = 0;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 256) == 0) {
                freeaddrinfo(res);
                tune(fd);
                return fd;
            }
            saved_errno = errno;
            close(fd);
        }
    }
    freeaddrinfo(res);
    errno = saved_errno;
    return df_fail_errno(err, "cannot listen on port %d", port);
}

int df_tcp_local_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len)) return -1;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

int df_tcp_accept(int listen_fd, double deadline, DfError *err) {
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd >= 0) {
            tune(fd);
            return fd;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            df_fail_errno(err, "accept failed");
            return DF_TCP_ERROR;
        }
        if (df_now_seconds() >= deadline) return DF_TCP_TIMEOUT;
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        poll(&p, 1, slice_ms(deadline));
    }
}

/* One non-blocking connect attempt to one address, waiting at most until `until`. */
static int connect_once(const struct addrinfo *a, double until, int *out_errno) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
        *out_errno = errno;
        return -1;
    }
    tune(fd);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
        *out_errno = errno;
        close(fd);
        return -1;
    }
    while (df_now_seconds() < until) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, slice_ms(until)) <= 0) continue;
        int so_error = 0;
        socklen_t len = sizeof so_error;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
        if (so_error == 0) return fd;
        *out_errno = so_error;
        close(fd);
        return -1;
    }
    *out_errno = ETIMEDOUT;
    close(fd);
    return -1;
}

int df_tcp_connect(const char *host, int port, double deadline, DfTcpCancel cancel, void *ctx, DfError *err) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int last_errno = ETIMEDOUT;
    const char *last_gai = NULL;
    for (;;) {
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(host, service, &hints, &res);
        if (rc == 0) {
            last_gai = NULL;
            for (struct addrinfo *a = res; a; a = a->ai_next) {
                double until = df_now_seconds() + 5.0; /* one unreachable address must not use up the deadline */
                int fd = connect_once(a, until < deadline ? until : deadline, &last_errno);
                if (fd >= 0) {
                    freeaddrinfo(res);
                    return fd;
                }
            }
            freeaddrinfo(res);
        } else if (rc != EAI_AGAIN) {
            return df_fail(err, "cannot resolve MASTER_ADDR '%s': %s", host, gai_strerror(rc));
        } else {
            last_gai = gai_strerror(rc);
        }
        if (cancel && cancel(ctx)) return df_fail(err, "connecting to %s port %d: cancelled", host, port);
        if (df_now_seconds() + 0.1 >= deadline) break;
        df_sleep_seconds(0.1); /* rank 0 may not be listening yet */
    }
    if (last_gai) return df_fail(err, "cannot resolve MASTER_ADDR '%s' before the deadline: %s", host, last_gai);
    return df_fail(err, "cannot connect to %s port %d before the deadline: %s", host, port, strerror(last_errno));
}

typedef enum { DIR_SEND, DIR_RECV } Direction;

static DfTcpStatus transfer(int fd, char *p, size_t len, Direction dir, double deadline, DfTcpCancel cancel,
                            void *ctx, DfError *err) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = dir == DIR_SEND ? send(fd, p + done, len - done, MSG_NOSIGNAL) : recv(fd, p + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0 && dir == DIR_RECV) return DF_TCP_CLOSED;
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return DF_TCP_CLOSED;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            df_fail_errno(err, dir == DIR_SEND ? "send failed" : "recv failed");
            return DF_TCP_ERROR;
        }
        if (cancel && cancel(ctx)) return DF_TCP_CANCELLED;
        if (df_now_seconds() >= deadline) return DF_TCP_TIMEOUT;
        struct pollfd pfd = {.fd = fd, .events = dir == DIR_SEND ? POLLOUT : POLLIN};
        poll(&pfd, 1, slice_ms(deadline));
    }
    return DF_TCP_OK;
}

DfTcpStatus df_tcp_send_all(int fd, const void *data, size_t len, double deadline, DfTcpCancel cancel, void *ctx,
                            DfError *err) {
    return transfer(fd, (char *)data, len, DIR_SEND, deadline, cancel, ctx, err);
}

DfTcpStatus df_tcp_recv_all(int fd, void *data, size_t len, double deadline, DfTcpCancel cancel, void *ctx,
                            DfError *err) {
    return transfer(fd, data, len, DIR_RECV, deadline, cancel, ctx, err);
}
