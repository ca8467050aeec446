/* A training run's directory (OUTPUT, train/trainer.h): creating it, the
 * temporaries a killed run left in it, and its JSON-lines logs cut back to
 * the step a resumed run continues from. */
#ifndef DF_TRAIN_RUN_DIR_H
#define DF_TRAIN_RUN_DIR_H

#include <stdint.h>

#include "base/error.h"

/* mkdir of one level; an existing directory is fine, anything else there fails. */
int df_run_dir_make(const char *path, DfError *err);

/* Removes the temporaries ("NAME.tmp.PID", base/atomic_file.h) that a
 * killed run left in dir: a checkpoint's can be as large as a checkpoint,
 * and a run that crashes now and then over days would fill the disk. */
void df_run_dir_remove_stale_temporaries(const char *dir);

/* Keeps the lines of a JSON-lines log (metrics.jsonl, eval.jsonl) whose
 * "step" is <= last_step (a torn last line is dropped), rewriting the file
 * atomically; a missing file is no error. Returns the "elapsed_s" of the
 * line of last_step through *elapsed (0 without one). */
int df_run_dir_truncate_jsonl(const char *path, int64_t last_step, double *elapsed, DfError *err);

/* Whether dir holds a checkpoint (of this run or an earlier call). */
int df_run_dir_has_checkpoint(const char *dir);

#endif
