/* Read-only memory-mapped files (weights, token stores). */
#ifndef DF_BASE_MAPPED_FILE_H
#define DF_BASE_MAPPED_FILE_H

#include <stddef.h>
#include "base/error.h"

typedef struct DfMappedFile {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
    char *path;
    int guard; /* base/mapping_guard.h's handle: a truncation while mapped is reported, not a bare SIGBUS */
} DfMappedFile;

int df_mapped_file_open(DfMappedFile *f, const char *path, DfError *err);
void df_mapped_file_close(DfMappedFile *f);

/* Reads a whole (small) file into a NUL-terminated heap buffer. */
char *df_read_text_file(const char *path, size_t *size_out, DfError *err);

#endif
