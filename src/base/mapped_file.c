#define _GNU_SOURCE
#include "base/mapped_file.h"
#include "base/input_file.h"
#include "base/mapping_guard.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int df_mapped_file_open(DfMappedFile *f, const char *path, DfError *err) {
    memset(f, 0, sizeof *f);
    struct stat st;
    int fd = df_open_regular(path, &st, err);
    if (fd < 0) return -1;
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return df_fail_errno(err, "%s: cannot map %zu bytes", path, f->size);
        }
        f->data = p;
    }
    close(fd);
    f->path = df_xstrdup(path);
    f->guard = df_mapping_guard_add(f->data, f->size, path);
    return 0;
}

void df_mapped_file_close(DfMappedFile *f) {
    df_mapping_guard_remove(f->guard);
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

char *df_read_text_file(const char *path, size_t *size_out, DfError *err) {
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = df_xmalloc(cap, path);
    for (;;) {
        if (n + 1 >= cap) buf = df_xrealloc(buf, cap *= 2, path);
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        df_fail(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = '\0';
    if (size_out) *size_out = n;
    return buf;
}
