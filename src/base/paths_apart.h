/* No command overwrites what it reads. Before any work, every output a
 * command will write is checked against every input it reads, as files
 * (device and inode), so that another spelling of a path, a hard link or a
 * symbolic link at the output cannot pass: an output that exists (or the
 * file a symlinked output writes through to) must not be an input file, an
 * input directory, or a file inside an input directory (a model directory's
 * weights); an output directory replaced whole must not hold an input. */
#ifndef DF_BASE_PATHS_APART_H
#define DF_BASE_PATHS_APART_H

#include "base/error.h"

typedef enum {
    DF_OUTPUT_FILE,       /* a file, or a directory written into */
    DF_OUTPUT_WHOLE_DIR,  /* a directory replaced whole: nothing inside may be an input */
} DfOutputKind;

typedef struct DfPathArg {
    const char *option; /* "--output", "CHECKPOINT": named in the message */
    const char *path;   /* NULL: not given, skipped */
    DfOutputKind kind;  /* outputs only */
} DfPathArg;

/* 0, or -1 with "--output X is the same file as --input Y: give another
 * --output" (the caller exits 2). Inputs or outputs that do not exist are
 * skipped: opening them reports what is wrong. */
int df_paths_apart(const DfPathArg *inputs, int n_inputs, const DfPathArg *outputs, int n_outputs, DfError *err);

/* The same at a command's start: 0, or 2 (a usage error) after printing
 * "dflash COMMAND: MESSAGE" on stderr. */
int df_paths_apart_or_usage(const char *command, const DfPathArg *inputs, int n_inputs, const DfPathArg *outputs,
                            int n_outputs);

#endif
