#define _GNU_SOURCE
#include "base/atomic_file.h"

#include <sys/stat.h>

#include "base/input_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "NAME.tmp.PID" (or NAME.mask.tmp.PID, ...): the pid, or 0 when name is
 * not a temporary of base. */
static long temporary_pid(const char *name, const char *base) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || name[n] != '.') return 0;
    const char *tmp = strstr(name + n, ".tmp.");
    if (!tmp) return 0;
    for (const char *next; (next = strstr(tmp + 1, ".tmp."));) tmp = next;
    char *end;
    long pid = strtol(tmp + 5, &end, 10);
    return tmp[5] && !*end && pid > 0 ? pid : 0;
}

void df_atomic_remove_stale(const char *path) {
    char *dir_copy = df_xstrdup(path), *base_copy = df_xstrdup(path);
    const char *dir = dirname(dir_copy), *base = basename(base_copy);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        long pid = temporary_pid(e->d_name, base);
        if (!pid || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its writer is alive (or not ours to judge) */
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *victim = df_xmalloc(n, "temporary path");
        snprintf(victim, n, "%s/%s", dir, e->d_name);
        if (unlink(victim) == 0) fprintf(stderr, "dflash: removed %s, left by an interrupted run (pid %ld)\n", victim, pid);
        free(victim);
    }
    if (d) closedir(d);
    free(dir_copy);
    free(base_copy);
}

int df_output_path_resolve(const char *path, char **resolved, DfError *err) {
    *resolved = NULL;
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return df_fail_errno(err, "%s: cannot stat", path);
        *resolved = df_xstrdup(path);
        return 0;
    }
    if (S_ISLNK(st.st_mode)) {
        struct stat target;
        if (stat(path, &target) != 0)
            return df_fail_errno(err, "%s: a symbolic link whose target cannot be written in place", path);
        if (!S_ISREG(target.st_mode))
            return df_fail(err, "%s: a symbolic link to %s, not to a regular file; refusing to replace it", path,
                           df_file_kind(target.st_mode));
        char *real = realpath(path, NULL);
        if (!real) return df_fail_errno(err, "%s: cannot resolve the symbolic link", path);
        *resolved = real;
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return df_fail(err, "%s exists and is %s, not a regular file; refusing to replace it", path,
                       df_file_kind(st.st_mode));
    *resolved = df_xstrdup(path);
    return 0;
}

int df_atomic_open(DfAtomicFile *f, const char *path, DfError *err) {
    memset(f, 0, sizeof *f);
    char *final_path;
    if (df_output_path_resolve(path, &final_path, err)) return -1;
    df_atomic_remove_stale(final_path);
    size_t n = strlen(final_path) + 32;
    f->tmp_path = df_xmalloc(n, "temporary path");
    snprintf(f->tmp_path, n, "%s.tmp.%ld", final_path, (long)getpid());
    unlink(f->tmp_path); /* ours, left by an earlier write of this process (or of a dead one with our pid) */
    int fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    f->fp = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f->fp) {
        df_fail_errno(err, "%s: cannot create", f->tmp_path);
        if (fd >= 0) {
            close(fd);
            unlink(f->tmp_path);
        }
        free(f->tmp_path);
        free(final_path);
        f->tmp_path = NULL;
        return -1;
    }
    f->final_path = final_path;
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

int df_atomic_write_text(const char *path, const char *text, int newline, DfError *err) {
    DfAtomicFile f;
    if (df_atomic_open(&f, path, err)) return -1;
    size_t n = strlen(text);
    if (fwrite(text, 1, n, f.fp) != n || (newline && fputc('\n', f.fp) == EOF)) {
        df_atomic_abort(&f);
        return df_fail_errno(err, "%s: write failed", path);
    }
    return df_atomic_commit(&f, err); /* fsyncs the file and its directory */
}
