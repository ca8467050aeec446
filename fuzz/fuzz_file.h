/* For the fuzz targets whose parser reads a path: the input as an in-memory
 * file (memfd), opened by the parser through /proc/self/fd/N. */
#ifndef DF_FUZZ_FILE_H
#define DF_FUZZ_FILE_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct FuzzFile {
    int fd;
    char path[64];
} FuzzFile;

/* Writes data into a fresh memfd; aborts when the system cannot (not a finding). */
static inline void fuzz_file_make(FuzzFile *f, const uint8_t *data, size_t size) {
    f->fd = memfd_create("dflash-fuzz", 0);
    if (f->fd < 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(f->fd, data + done, size - done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

static inline void fuzz_file_drop(FuzzFile *f) { close(f->fd); }

#endif
