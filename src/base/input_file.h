/* Opening input files: only regular files are read. A FIFO, a device or a
 * socket given where a file is needed is refused by name, and the open itself
 * never blocks (a FIFO without a writer would block open() forever). */
#ifndef DF_BASE_INPUT_FILE_H
#define DF_BASE_INPUT_FILE_H

#include <stdio.h>
#include <sys/stat.h>

#include "base/error.h"

/* A read-only descriptor of the regular file at path (*st filled when not
 * NULL), or -1 with "PATH: cannot open: ..." / "PATH: not a regular file
 * (a FIFO)". */
int df_open_regular(const char *path, struct stat *st, DfError *err);

/* The same as a stdio stream ("rb"). */
FILE *df_fopen_regular(const char *path, DfError *err);

/* "a directory", "a FIFO", "a character device", ... */
const char *df_file_kind(mode_t mode);

#endif
