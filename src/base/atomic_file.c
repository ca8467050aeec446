#define _GNU_SOURCE
#include "base/atomic_file.h"

#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int df_atomic_open(DfAtomicFile *f, const char *path, DfError *err) {
    memset(f, 0, sizeof *f);
    size_t n = strlen(path) + 32;
    f->tmp_path = df_xmalloc(n, "temporary path");
    snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        df_fail_errno(err, "%s: cannot create", f->tmp_path);
        free(f->tmp_path);
        f->tmp_path = NULL;
        return -1;
    }
    f->final_path = df_xstrdup(path);
    return 0;
}

int df_fsync_parent_dir(const char *path, DfError *err) {
    char *copy = df_xstrdup(path);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        df_fail_errno(err, "%s: cannot open directory", dir);
        free(copy);
        return -1;
    }
    int rc = fsync(fd);
    close(fd);
    free(copy);
    if (rc != 0) return df_fail_errno(err, "%s: cannot fsync directory", path);
    return 0;
}

static void release(DfAtomicFile *f) {
    free(f->tmp_path);
    free(f->final_path);
    memset(f, 0, sizeof *f);
}

void df_atomic_abort(DfAtomicFile *f) {
    if (f->fp) fclose(f->fp);
    if (f->tmp_path) unlink(f->tmp_path);
    release(f);
}

int df_atomic_commit(DfAtomicFile *f, DfError *err) {
    int rc = 0;
    if (fflush(f->fp) != 0) rc = df_fail_errno(err, "%s: write failed", f->final_path);
    else if (fsync(fileno(f->fp)) != 0) rc = df_fail_errno(err, "%s: fsync failed", f->final_path);
    if (fclose(f->fp) != 0 && rc == 0) rc = df_fail_errno(err, "%s: close failed", f->final_path);
    f->fp = NULL;
    if (rc == 0 && rename(f->tmp_path, f->final_path) != 0)
        rc = df_fail_errno(err, "%s: cannot rename into place", f->final_path);
    if (rc == 0) rc = df_fsync_parent_dir(f->final_path, err);
    if (rc != 0) unlink(f->tmp_path);
    release(f);
    return rc;
}
