#define _GNU_SOURCE
#include "base/input_file.h"

#include <fcntl.h>
#include <unistd.h>

const char *df_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "a special file";
}

int df_open_regular(const char *path, struct stat *st_out, DfError *err) {
    /* O_NONBLOCK: opening a FIFO returns at once; cleared again for the reads */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return df_fail_errno(err, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        df_fail_errno(err, "%s: cannot stat", path);
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return df_fail(err, "%s: not a regular file (%s)", path, df_file_kind(st.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        df_fail_errno(err, "%s: cannot set blocking reads", path);
        close(fd);
        return -1;
    }
    if (st_out) *st_out = st;
    return fd;
}

FILE *df_fopen_regular(const char *path, DfError *err) {
    int fd = df_open_regular(path, NULL, err);
    if (fd < 0) return NULL;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        df_fail_errno(err, "%s: cannot open", path);
        close(fd);
    }
    return fp;
}
