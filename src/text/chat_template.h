/* Chat templates: a conversation rendered to text exactly as the target's
 * Jinja chat template renders it in transformers' apply_chat_template, by the
 * Jinja engine of src/text/jinja (any template, no per-family code).
 *
 * The template comes from, in order: an explicit file (--chat-template), the
 * chat_template.jinja beside the tokenizer (as newer checkpoints ship it),
 * or tokenizer_config.json's chat_template (a string, or the list entry named
 * "default"). Rendering variables: messages, add_generation_prompt,
 * bos_token / eos_token / unk_token / pad_token from tokenizer_config.json,
 * date_string when a date is set, and the chat-template kwargs (a JSON object,
 * e.g. {"enable_thinking": false}), which override the others.
 *
 * Loss mask: the rendering reports where each assistant message's strings
 * (content, reasoning_content, tool calls) landed; the span from the first to
 * the last of those bytes, plus the special token the template writes right
 * after it (its end of turn: <|im_end|>, <|eot_id|>, <end_of_turn>, ...), is
 * trained on; where the template writes text of its own before the end of
 * turn (Qwen3.5's </parameter></function></tool_call> after a tool call), the
 * span runs on through that text and the end-of-turn token, unless another
 * message's strings come first. A template with {% generation %} blocks is
 * masked by those blocks instead (transformers' return_assistant_tokens_mask).
 * The ids are those of tokenizing the whole rendered text. */
#ifndef DF_TEXT_CHAT_TEMPLATE_H
#define DF_TEXT_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "base/buffer.h"
#include "base/error.h"
#include "text/tokenizer.h"

/* Roles; ShareGPT's human/gpt map to user/assistant. */
typedef enum { DF_ROLE_SYSTEM, DF_ROLE_USER, DF_ROLE_ASSISTANT, DF_ROLE_TOOL } DfChatRole;

typedef struct DfChatMessage {
    DfChatRole role;
    const char *content; /* UTF-8, not necessarily NUL-terminated */
    size_t content_len;
    const cJSON *json; /* the message object when it came from JSON: its other fields
                          (reasoning_content, tool_calls, ...) reach the template; may be NULL */
} DfChatMessage;

/* Byte ranges [start, end) of the trained spans of a rendering. */
typedef struct DfChatSpans {
    size_t (*range)[2];
    size_t n, cap;
} DfChatSpans;

typedef struct DfChatTemplate DfChatTemplate;

/* path: the tokenizer directory, or its tokenizer.json. template_file: NULL,
 * or a Jinja file that replaces the tokenizer's template. kwargs_json: NULL,
 * or a JSON object of extra template variables. */
DfChatTemplate *df_chat_template_open(const char *path, const char *template_file, const char *kwargs_json,
                                      DfError *err);
DfChatTemplate *df_chat_template_load(const char *path, DfError *err); /* open(path, NULL, NULL) */
void df_chat_template_free(DfChatTemplate *t);
/* Where the template came from (a file path, or "PATH (chat_template)"). */
const char *df_chat_template_source(const DfChatTemplate *t);

/* The date_string variable (Llama 3.1's "Today Date"), e.g. "26 Jul 2024";
 * a date that is empty, too long or multi-line is refused. */
int df_chat_template_set_date(DfChatTemplate *t, const char *date, DfError *err);
/* The date set, or NULL. */
const char *df_chat_template_date(const DfChatTemplate *t);

/* "system", "user"/"human", "assistant"/"gpt", "tool" -> role; -1 for others. */
int df_chat_role_parse(const char *name, size_t len);

/* Appends the rendering to text; spans (may be NULL) gets the assistant
 * messages' spans (without their end-of-turn token). A conversation the
 * template rejects (raise_exception) fails with the template's message. */
int df_chat_render(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfChatSpans *spans,
                   DfError *err);

/* The prompt asking for the next assistant turn: the rendering with
 * add_generation_prompt=True. */
int df_chat_render_prompt(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfError *err);

/* Renders, tokenizes with tok and appends the ids and the loss mask (0/1
 * bytes, one per id). */
int df_chat_tokenize(const DfChatTemplate *t, const DfTokenizer *tok, const DfChatMessage *msgs, int n,
                     DfI32Vec *ids, DfByteBuf *mask, DfError *err);

/* The token the template writes right after an assistant message's content
 * (its end of turn), found by rendering a probe conversation. */
int df_chat_template_end_of_turn(const DfChatTemplate *t, const DfTokenizer *tok, int32_t *id, DfError *err);

void df_chat_spans_free(DfChatSpans *s);

#endif
