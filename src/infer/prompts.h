/* Input records for generate and eval, from JSONL:
 *   {"id"?, "prompt": str}            a prompt record (a "response" field, as
 *                                     in prepare's records, is ignored)
 *   {"id"?, "messages": [{"role", "content"}...]}
 *   {"id"?, "conversations": [{"from", "value"}...]}   (ShareGPT)
 *                                     a conversation (generate only)
 * The id is kept as JSON text so that it is written back exactly as it came
 * (string or number); a record without one gets its 0-based index. A
 * conversation keeps its role names as written ("human", "gpt", ...) so that
 * the output can use them again; its roles must be system, user/human or
 * assistant/gpt, its contents valid UTF-8, and it must have a user turn. */
#ifndef DF_INFER_PROMPTS_H
#define DF_INFER_PROMPTS_H

#include <stdint.h>

#include "base/error.h"
#include "text/chat_template.h"

typedef struct DfPromptTurn {
    char *role; /* as written */
    char *content;
    DfChatRole parsed;
} DfPromptTurn;

typedef struct DfPrompt {
    char *id_json;       /* e.g. "\"1-8005\"" or "17" */
    char *text;          /* a prompt record's prompt; NULL for a conversation */
    DfPromptTurn *turns; /* a conversation's messages */
    int n_turns;
    int sharegpt;        /* the conversation came as "conversations" (from/value) */
    int64_t line_no;     /* in the input file */
} DfPrompt;

typedef struct DfPromptSet {
    DfPrompt *items;
    int n;
    int n_chat; /* how many are conversations */
} DfPromptSet;

/* Prompt records only (a conversation is a bad record). */
int df_prompts_read(const char *path, DfPromptSet *set, DfError *err);
/* Prompt records and conversations. */
int df_prompts_read_any(const char *path, DfPromptSet *set, DfError *err);
void df_prompts_free(DfPromptSet *set);

#endif
