/* Prompt records for generate and eval: JSONL with {"id"?, "prompt"} (a
 * "response" field, as in prepare's {"prompt", "response"} records, is
 * ignored). The id is kept as JSON text so that it is written back exactly as
 * it came (string or number); a record without one gets its 0-based index. */
#ifndef DF_INFER_PROMPTS_H
#define DF_INFER_PROMPTS_H

#include "base/error.h"

typedef struct DfPrompt {
    char *id_json; /* e.g. "\"1-8005\"" or "17" */
    char *text;
} DfPrompt;

typedef struct DfPromptSet {
    DfPrompt *items;
    int n;
} DfPromptSet;

int df_prompts_read(const char *path, DfPromptSet *set, DfError *err);
void df_prompts_free(DfPromptSet *set);

#endif
