#include "base/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_fail(DfError *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int df_fail_errno(DfError *err, const char *fmt, ...) {
    int saved = errno;
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err->msg)
        snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", strerror(saved));
    return -1;
}

int df_context(DfError *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[DF_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[DF_ERROR_MAX];
    memcpy(old, err->msg, sizeof old);
    /* "prefix: old", cut at the buffer's end (a long message loses its tail) */
    size_t n = strlen(prefix);
    memcpy(err->msg, prefix, n);
    size_t room = sizeof err->msg - n;
    if (room > 2) {
        memcpy(err->msg + n, ": ", 2);
        n += 2;
        size_t old_len = strnlen(old, sizeof old - 1);
        size_t take = old_len < sizeof err->msg - 1 - n ? old_len : sizeof err->msg - 1 - n;
        memcpy(err->msg + n, old, take);
        n += take;
    }
    err->msg[n] = '\0';
    return -1;
}

void df_error_clear(DfError *err) {
    if (err) err->msg[0] = '\0';
}

static void out_of_memory(size_t bytes, const char *what) {
    fprintf(stderr, "dflash: out of memory allocating %zu bytes for %s\n", bytes, what ? what : "?");
    exit(1); /* a failed command (README's exit codes) */
}

void *df_xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory(bytes, what);
    return p;
}

void *df_xcalloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size, what);
    return p;
}

void *df_xrealloc(void *ptr, size_t bytes, const char *what) {
    void *p = realloc(ptr, bytes ? bytes : 1);
    if (!p) out_of_memory(bytes, what);
    return p;
}

char *df_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = df_xmalloc(n, "string");
    memcpy(p, s, n);
    return p;
}
