#define _GNU_SOURCE
#include "base/output_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The pid written in the lock file by its holder (0 when unreadable). */
static long holder_pid(int fd) {
    char text[32] = {0};
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    return n > 0 ? strtol(text, NULL, 10) : 0;
}

/* The lock is ours when the file we locked is still the one at path: a
 * holder that released it meanwhile unlinked it, and a third run may have
 * created a new one. */
static int still_linked(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int df_output_lock(DfOutputLock *l, const char *lock_path, const char *what, DfError *err) {
    l->fd = -1;
    l->path = NULL;
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) return df_fail_errno(err, "%s: cannot create the lock file %s", what, lock_path);
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            long pid = holder_pid(fd);
            close(fd);
            if (e != EWOULDBLOCK) {
                errno = e;
                return df_fail_errno(err, "%s: cannot lock %s", what, lock_path);
            }
            if (pid > 0)
                return df_fail(err, "%s is in use by another run (pid %ld, lock %s); one writer per output", what, pid,
                               lock_path);
            return df_fail(err, "%s is in use by another run (lock %s); one writer per output", what, lock_path);
        }
        if (!still_linked(fd, lock_path)) {
            close(fd);
            continue;
        }
        char text[32];
        int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
            df_fail_errno(err, "%s: cannot write the lock file %s", what, lock_path);
            close(fd);
            return -1;
        }
        l->fd = fd;
        l->path = strdup(lock_path);
        return 0;
    }
    return df_fail(err, "%s: the lock file %s keeps being replaced", what, lock_path);
}

void df_output_unlock(DfOutputLock *l) {
    if (l->fd < 0) return;
    if (l->path) unlink(l->path); /* while still held: a waiting run then retries on a new file */
    close(l->fd);
    free(l->path);
    l->fd = -1;
    l->path = NULL;
}
