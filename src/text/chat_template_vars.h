/* The variables a chat template is rendered with, built as engine values
 * straight from the parsed messages (no JSON round trip): messages (each
 * message's strings tagged with its index, for the loss mask),
 * add_generation_prompt, the special tokens, date_string, and the kwargs. */
#ifndef DF_TEXT_CHAT_TEMPLATE_VARS_H
#define DF_TEXT_CHAT_TEMPLATE_VARS_H

#include "text/chat_template.h"
#include "text/jinja/value.h"

typedef struct DfChatVarsIn {
    const DfChatMessage *msgs;
    int n;
    int generation_prompt;
    const DfTokenizer *normalize_with; /* NULL: contents as given */
    const char *const *special;        /* 4 strings or NULLs */
    const char *const *special_names;
    const char *date;    /* NULL: none */
    const cJSON *kwargs; /* NULL or an object */
} DfChatVarsIn;

int df_chat_vars(JArena *a, const DfChatVarsIn *in, JDict **out, DfError *err);

#endif
