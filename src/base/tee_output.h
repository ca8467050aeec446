/* A copy of what a command prints, in a file: standard output and standard
 * error still reach where they went (a terminal, a pipe, a job's log), each
 * as its own stream, and both are appended to the file in the order they
 * were written. A child process does the copying, so that nothing written is
 * lost when the command exits at once (a second signal, an abort): the child
 * drains the pipes to their end. It ignores SIGINT and SIGTERM (a Ctrl-C
 * reaches the whole process group) and exits when the command's ends of the
 * pipes are closed. */
#ifndef DF_BASE_TEE_OUTPUT_H
#define DF_BASE_TEE_OUTPUT_H

#include <sys/types.h>

#include "base/error.h"

typedef struct DfTeeOutput {
    pid_t child;              /* -1: not started */
    int saved_out, saved_err; /* the original standard output and error */
} DfTeeOutput;

/* Starts copying stdout and stderr to log_path (appended to, created when
 * missing). Call before opening files that a child must not keep open (it
 * closes every other descriptor it inherits, but only after the fork). */
int df_tee_output_start(DfTeeOutput *t, const char *log_path, DfError *err);

/* Flushes stdio, gives stdout and stderr back their original targets and
 * waits for the copy to reach its end. No-op when not started. */
void df_tee_output_stop(DfTeeOutput *t);

#endif
