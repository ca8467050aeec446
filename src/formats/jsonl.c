#define _GNU_SOURCE
#include "formats/jsonl.h"
#include "base/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { DF_JSONL_INITIAL_BUFFER = 1 << 20 };

int df_jsonl_open(DfJsonlReader *r, const char *path, DfError *err) {
    memset(r, 0, sizeof *r);
    struct stat st;
    r->fd = df_open_regular(path, &st, err);
    if (r->fd < 0) return -1;
    r->file_size = (uint64_t)st.st_size;
    r->path = df_xstrdup(path);
    r->cap = DF_JSONL_INITIAL_BUFFER;
    r->buf = df_xmalloc(r->cap, "JSONL read buffer");
    return 0;
}

void df_jsonl_close(DfJsonlReader *r) {
    if (r->path && r->fd >= 0) close(r->fd);
    free(r->buf);
    free(r->path);
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

/* Moves the unread bytes to the front of the buffer, grows it when a single
 * line fills it (one byte always stays free for the terminating NUL), and
 * reads more. Returns the number of bytes read (0 at end of file) or -1. */
static ssize_t refill(DfJsonlReader *r, DfError *err) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end + 1 >= r->cap) {
        r->cap *= 2;
        r->buf = df_xrealloc(r->buf, r->cap, "JSONL line buffer");
    }
    for (;;) {
        ssize_t got = read(r->fd, r->buf + r->end, r->cap - 1 - r->end);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            df_fail_errno(err, "%s: read error after line %lld", r->path, (long long)r->line_no);
            return -1;
        }
        if (got == 0) r->eof = 1;
        r->end += (size_t)got;
        return got;
    }
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* Skips a UTF-8 byte-order mark at the very start of the file. */
static int skip_bom(DfJsonlReader *r, DfError *err) {
    while (r->end - r->start < 3 && !r->eof)
        if (refill(r, err) < 0) return -1;
    if (r->end - r->start >= 3 && memcmp(r->buf + r->start, "\xEF\xBB\xBF", 3) == 0) {
        r->start += 3;
        r->consumed += 3;
    }
    return 0;
}

int df_jsonl_next(DfJsonlReader *r, const char **line, size_t *len, int64_t *line_no, DfError *err) {
    if (r->line_no == 0 && r->consumed == 0 && skip_bom(r, err) != 0) return -1;
    size_t scanned = 0; /* bytes after start already known to hold no newline */
    for (;;) {
        char *begin = r->buf + r->start;
        size_t avail = r->end - r->start;
        char *nl = memchr(begin + scanned, '\n', avail - scanned);
        if (!nl && !r->eof) {
            scanned = avail;
            if (refill(r, err) < 0) return -1;
            continue;
        }
        if (!nl && avail == 0) return 0; /* end of file */
        size_t n = nl ? (size_t)(nl - begin) : avail;
        r->start += n + (nl ? 1 : 0);
        r->consumed += n + (nl ? 1 : 0);
        r->line_no++;
        scanned = 0;
        if (is_blank(begin, n)) continue;
        if (begin[n - 1] == '\r') n--;
        begin[n] = '\0'; /* over the '\n' or '\r', or in the spare byte at the end */
        *line = begin;
        *len = n;
        *line_no = r->line_no;
        return 1;
    }
}
