#define _DEFAULT_SOURCE /* sysconf's _SC_OPEN_MAX in closing inherited descriptors */
#include "base/tee_output.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes all of buf, retrying after interrupts; gives up on other errors
 * (a closed terminal must not stop the copy to the file). */
static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        buf += w, n -= (size_t)w;
    }
}

/* The child: copies each pipe to its original target and to the log until
 * both pipes end. */
static void copy_loop(int from_out, int from_err, int to_out, int to_err, int log) {
    struct pollfd p[2] = {{.fd = from_out, .events = POLLIN}, {.fd = from_err, .events = POLLIN}};
    const int to[2] = {to_out, to_err};
    char buf[65536];
    int open_pipes = 2;
    while (open_pipes > 0) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(p[i].fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                open_pipes--;
                continue;
            }
            write_all(to[i], buf, (size_t)n);
            write_all(log, buf, (size_t)n);
        }
    }
}

static void run_child(const int out_pipe[2], const int err_pipe[2], int saved_out, int saved_err, int log) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    close(out_pipe[1]);
    close(err_pipe[1]);
    long max_fd = sysconf(_SC_OPEN_MAX);
    for (int fd = 0; fd < (max_fd > 0 && max_fd < 65536 ? max_fd : 1024); fd++) /* e.g. a lock the parent takes */
        if (fd != out_pipe[0] && fd != err_pipe[0] && fd != saved_out && fd != saved_err && fd != log) close(fd);
    copy_loop(out_pipe[0], err_pipe[0], saved_out, saved_err, log);
    _exit(0);
}

int df_tee_output_start(DfTeeOutput *t, const char *log_path, DfError *err) {
    t->child = -1;
    t->saved_out = t->saved_err = -1;
    int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (log < 0) return df_fail_errno(err, "%s: cannot open the run's log", log_path);
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0) {
        close(log);
        return df_fail_errno(err, "%s: cannot make a pipe for the run's log", log_path);
    }
    if (pipe(err_pipe) != 0) {
        close(log), close(out_pipe[0]), close(out_pipe[1]);
        return df_fail_errno(err, "%s: cannot make a pipe for the run's log", log_path);
    }
    fflush(stdout);
    fflush(stderr);
    t->saved_out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    t->saved_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    pid_t pid = t->saved_out >= 0 && t->saved_err >= 0 ? fork() : -1;
    if (pid == 0) run_child(out_pipe, err_pipe, t->saved_out, t->saved_err, log);
    int rc = 0;
    if (pid < 0) rc = df_fail_errno(err, "%s: cannot start the copy to the run's log", log_path);
    else if (dup2(out_pipe[1], STDOUT_FILENO) < 0 || dup2(err_pipe[1], STDERR_FILENO) < 0)
        rc = df_fail_errno(err, "%s: cannot redirect the output to the run's log", log_path);
    close(out_pipe[0]), close(out_pipe[1]), close(err_pipe[0]), close(err_pipe[1]), close(log);
    t->child = pid;
    if (rc != 0) df_tee_output_stop(t);
    return rc;
}

void df_tee_output_stop(DfTeeOutput *t) {
    fflush(stdout);
    fflush(stderr);
    if (t->saved_out >= 0) dup2(t->saved_out, STDOUT_FILENO);
    if (t->saved_err >= 0) dup2(t->saved_err, STDERR_FILENO);
    if (t->saved_out >= 0) close(t->saved_out);
    if (t->saved_err >= 0) close(t->saved_err);
    t->saved_out = t->saved_err = -1;
    if (t->child > 0)
        while (waitpid(t->child, NULL, 0) < 0 && errno == EINTR) {
        }
    t->child = -1;
}
