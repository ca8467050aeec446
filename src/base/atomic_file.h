/* Output files that appear whole or not at all: written under a temporary
 * name in the same directory, fsynced, then renamed over the final name (and
 * the directory fsynced). An aborted write removes the temporary file.
 *
 * What may be at the final name: nothing, or a regular file (replaced). A
 * symbolic link to a regular file is written through: the file it points to
 * is replaced atomically in its own directory, the link stays. Anything else
 * (a FIFO, a device, a directory, a dangling link) is refused. */
#ifndef DF_BASE_ATOMIC_FILE_H
#define DF_BASE_ATOMIC_FILE_H

#include <stdio.h>
#include "base/error.h"

typedef struct DfAtomicFile {
    FILE *fp;
    char *final_path;
    char *tmp_path;
} DfAtomicFile;

/* Also removes the temporaries of this path left by processes that no longer
 * exist (df_atomic_remove_stale). */
int df_atomic_open(DfAtomicFile *f, const char *path, DfError *err);

/* The file an output at path writes: path itself when absent or a regular
 * file, a symbolic link's regular target (absolute); else fails naming what
 * is there. *resolved is heap-allocated. */
int df_output_path_resolve(const char *path, char **resolved, DfError *err);

/* Removes "PATH.tmp.PID" (and "PATH.*.tmp.PID") of pids that are not alive. */
void df_atomic_remove_stale(const char *path);
/* Flushes, fsyncs, renames into place. On failure the temporary is removed. */
int df_atomic_commit(DfAtomicFile *f, DfError *err);
/* Drops the temporary file; the final path is left untouched. */
void df_atomic_abort(DfAtomicFile *f);

/* The whole file at once: text, and a newline after it when newline is set. */
int df_atomic_write_text(const char *path, const char *text, int newline, DfError *err);

/* fsyncs the directory that holds `path`, so that a rename is durable. */
int df_fsync_parent_dir(const char *path, DfError *err);

#endif
