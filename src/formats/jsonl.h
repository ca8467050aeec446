/* Streaming reader for JSON Lines files: one record per line, read through a
 * fixed-size buffer that grows only as far as the longest line, so a file of
 * any size is read without loading it whole. Blank lines (only spaces, tabs,
 * CR) are skipped; a final line without a newline is returned; a CR before the
 * newline (CRLF files) is dropped; a UTF-8 byte-order mark at the start of
 * the file is skipped. Line numbers are 1-based and count every line, blank
 * ones included, so that they match what an editor shows. */
#ifndef DF_FORMATS_JSONL_H
#define DF_FORMATS_JSONL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct DfJsonlReader {
    int fd;
    char *path;
    char *buf;          /* buf[start..end) holds bytes read but not yet returned */
    size_t cap, start, end;
    int eof;            /* read() returned 0 */
    int64_t line_no;    /* number of the line last returned (or skipped) */
    uint64_t consumed;  /* bytes of the file returned or skipped so far */
    uint64_t file_size; /* size at open time (0 for pipes) */
} DfJsonlReader;

int df_jsonl_open(DfJsonlReader *r, const char *path, DfError *err);
void df_jsonl_close(DfJsonlReader *r);

/* Reads the next non-blank line. Returns 1 with *line pointing at its text
 * (NUL-terminated, without the line ending; valid until the next call),
 * *len its length and *line_no its 1-based number; 0 at end of file; -1 on a
 * read error. */
int df_jsonl_next(DfJsonlReader *r, const char **line, size_t *len, int64_t *line_no, DfError *err);

/* Bytes of the file consumed so far, and the file's size: for progress. */
static inline uint64_t df_jsonl_bytes_read(const DfJsonlReader *r) { return r->consumed; }
static inline uint64_t df_jsonl_file_size(const DfJsonlReader *r) { return r->file_size; }

#endif
