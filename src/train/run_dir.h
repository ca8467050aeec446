/* A training run's directory (OUTPUT, train/trainer.h): creating it, its
 * lock and log, removing what a failed run created, the temporaries a killed
 * run left in it, and its JSON-lines logs cut back to the step a resumed run
 * continues from. */
#ifndef DF_TRAIN_RUN_DIR_H
#define DF_TRAIN_RUN_DIR_H

#include <stdint.h>

#include "base/error.h"
#include "base/output_lock.h"
#include "base/tee_output.h"

struct DfTrainOptions;

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

/* mkdir -p: creates the directory and any missing parents. */
int df_run_dir_make_all(const char *path, DfError *err);

/* The topmost directory of path that does not exist yet (caller frees):
 * what a run creates for --output, and removes again when it fails empty.
 * NULL when path exists. */
char *df_run_dir_first_missing(const char *path);

/* One writer per run directory: the rank that writes OUTPUT (every process
 * when there is one) holds OUTPUT/train.lock for the whole run, data
 * preparation included; creates OUTPUT first. Other ranks leave lock->fd
 * at -1. */
int df_run_dir_lock(const struct DfTrainOptions *o, DfOutputLock *lock, DfError *err);

/* OUTPUT/train.log: what the run prints (stdout and stderr), appended to
 * by each start of the run (a resume adds to it). */
int df_run_dir_start_log(const struct DfTrainOptions *o, DfTeeOutput *tee, DfError *err);

/* After a failed run: output_dir and its parents up to top (the ones the
 * run created), each only when empty (output_dir's own train.log aside:
 * the failure is said on stderr). */
void df_run_dir_remove_created(const char *output_dir, const char *top);

#endif
