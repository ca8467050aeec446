/* One writer per output: an exclusive lock (flock) on a lock file, held for
 * the whole run of a command that writes an output over time (train's run
 * directory, generate's JSONL). The lock file holds the holder's pid; a
 * second run is refused with a message naming it. The kernel drops the lock
 * when its holder exits, however it exits, so a killed run never leaves a
 * stale lock; a normal release also removes the file. */
#ifndef DF_BASE_OUTPUT_LOCK_H
#define DF_BASE_OUTPUT_LOCK_H

#include "base/error.h"

typedef struct DfOutputLock {
    int fd; /* -1: not held */
    char *path;
} DfOutputLock;

/* Takes the lock at lock_path (created when absent); `what` names the output
 * in the message: "OUTPUT is in use by another run (pid N, lock LOCK_PATH)". */
int df_output_lock(DfOutputLock *l, const char *lock_path, const char *what, DfError *err);

/* Removes the lock file and drops the lock (no-op when not held). */
void df_output_unlock(DfOutputLock *l);

#endif
