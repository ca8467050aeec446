/* Output files that appear whole or not at all: written under a temporary
 * name in the same directory, fsynced, then renamed over the final name (and
 * the directory fsynced). An aborted write removes the temporary file. */
#ifndef DF_BASE_ATOMIC_FILE_H
#define DF_BASE_ATOMIC_FILE_H

#include <stdio.h>
#include "base/error.h"

typedef struct DfAtomicFile {
    FILE *fp;
    char *final_path;
    char *tmp_path;
} DfAtomicFile;

int df_atomic_open(DfAtomicFile *f, const char *path, DfError *err);
/* Flushes, fsyncs, renames into place. On failure the temporary is removed. */
int df_atomic_commit(DfAtomicFile *f, DfError *err);
/* Drops the temporary file; the final path is left untouched. */
void df_atomic_abort(DfAtomicFile *f);

/* fsyncs the directory that holds `path`, so that a rename is durable. */
int df_fsync_parent_dir(const char *path, DfError *err);

#endif
