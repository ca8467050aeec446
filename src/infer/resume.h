/* Resuming a JSONL output written record by record (dflash generate): the
 * lines already there must be the outputs of the first input records, in
 * order (same ids; a "response" for a prompt record, "messages" or
 * "conversations" as the input had it for a conversation). A last line cut
 * off by an interrupted run (no newline, or not valid JSON) is dropped: the
 * file is truncated after the last complete record. */
#ifndef DF_INFER_RESUME_H
#define DF_INFER_RESUME_H

#include "infer/prompts.h"

/* *n_done: how many leading input records already have their output line
 * (0 when path does not exist). Errors name the line that does not match. */
int df_resume_scan(const char *path, const DfPromptSet *inputs, int *n_done, DfError *err);

#endif
