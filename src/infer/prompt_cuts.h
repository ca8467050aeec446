/* More prompts from the same texts, for regenerating training data when
 * prompts are few (train --prompt-cuts N): a prompt record's whole text (its
 * prompt, and its response where it has one, as prepare joins them) is cut
 * at N line boundaries spread evenly over its lines, and cut k becomes the
 * prompt record {"id": "ID#k", "prompt": the text up to the end of that
 * line} (k from 1; ID is the record's id as a string, or its 0-based index
 * when it has none), whose response the target then writes. A text of m
 * lines (m - 1 boundaries before its last line) gives min(N, m - 1) prompts;
 * one without a line boundary stays the prompt record it was. Conversations
 * ({"messages"}, {"conversations"}) are written as they are. The output
 * depends only on the input and N, so a resumed run makes the same file. */
#ifndef DF_INFER_PROMPT_CUTS_H
#define DF_INFER_PROMPT_CUTS_H

#include <stddef.h>

#include "base/error.h"

/* The byte offsets (into text) where the cuts of a text of len bytes end,
 * ascending, at most n_cuts; returns how many. A boundary is the position
 * just after a '\n' that is not the text's last byte; of m boundaries, cut
 * k (1..n_cuts) takes boundary round(k * m / (n_cuts + 1)) (1-based,
 * clamped to 1..m), repeats dropped. */
int df_prompt_cut_offsets(const char *text, size_t len, int n_cuts, size_t *offsets);

/* Reads JSONL records from input and writes their cuts to output
 * (atomically); *n_written: the records written. Fails naming input:line on
 * a record that is neither a prompt record nor a conversation. */
int df_prompt_cuts_write(const char *input, int n_cuts, const char *output, int *n_written, DfError *err);

#endif
