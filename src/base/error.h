/* Error reporting without global state: every fallible function takes a
 * DfError* and returns -1 (or NULL) after filling it with a message that says
 * what went wrong and where (file, tensor, line, byte offset). */
#ifndef DF_BASE_ERROR_H
#define DF_BASE_ERROR_H

#include <stddef.h>

#define DF_ERROR_MAX 1024

typedef struct DfError {
    char msg[DF_ERROR_MAX];
} DfError;

/* Sets the message (printf-style) and returns -1, so that callers can write
 * `return df_fail(err, "...")`. A NULL err is allowed and ignored. */
int df_fail(DfError *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends context to an existing message: "context: old message". */
int df_context(DfError *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like df_fail, appending ": strerror(errno)". */
int df_fail_errno(DfError *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void df_error_clear(DfError *err);

/* Allocation that never returns NULL: out of memory exits 1 with a message
 * naming what was being allocated (there is nothing sensible to recover).
 * Allocations sized by an input (a tensor, a config's count) are bounded by
 * what the file holds first, or fail through DfError naming the file. */
void *df_xmalloc(size_t bytes, const char *what);
void *df_xcalloc(size_t count, size_t size, const char *what);
void *df_xrealloc(void *ptr, size_t bytes, const char *what);
char *df_xstrdup(const char *s);

#endif
