/* Chat templates: a conversation rendered to text exactly as the target's
 * tokenizer_config.json chat_template renders it in transformers
 * (apply_chat_template(messages, tokenize=False), no tools, no generation
 * prompt), and the assistant-only loss mask of DFLASH.md section 5.
 *
 * Families, told apart by distinctive text of the template:
 *   Qwen3   ChatML (<|im_start|>role\n ... <|im_end|>\n) with its thinking
 *           rules: an assistant turn after the last user query gets a
 *           <think>\n...\n</think>\n\n block (empty when it has no reasoning,
 *           always in the last turn); reasoning ("<think>..</think>" in the
 *           content) is dropped from turns before the last user query.
 *   Llama-3 <|begin_of_text|> then <|start_header_id|>role<|end_header_id|>\n\n
 *           + content stripped of whitespace (Python's str.strip) + <|eot_id|>.
 *   Llama-3.1 (the template of Llama 3.1, 3.2 and 3.3 Instruct) as Llama-3,
 *           but a system turn always comes first: "Cutting Knowledge Date:
 *           December 2023\nToday Date: DATE\n\n" + the first message's
 *           content when it is a system message. DATE is the template's:
 *           today's where it calls strftime_now (as transformers renders it),
 *           else its fixed default; df_chat_template_set_date pins it (what
 *           apply_chat_template(..., date_string=DATE) does). Tools are not
 *           rendered.
 * Any other template is refused, naming the tokenizer_config.json.
 *
 * Loss mask: 1 on every token that starts inside an assistant turn's body
 * (what follows its role header, up to and including the end-of-turn token
 * that closes it: <|im_end|> or <|eot_id|>), 0 elsewhere (system and user
 * turns, role headers, <|begin_of_text|>). The conversation is rendered
 * whole, tokenized once, and the mask is derived from the byte spans. */
#ifndef DF_TEXT_CHAT_TEMPLATE_H
#define DF_TEXT_CHAT_TEMPLATE_H

#include <stddef.h>

#include "base/buffer.h"
#include "base/error.h"
#include "text/tokenizer.h"

typedef enum { DF_CHAT_QWEN3, DF_CHAT_LLAMA3, DF_CHAT_LLAMA31 } DfChatFamily;

/* Roles rendered; ShareGPT's human/gpt map to user/assistant. */
typedef enum { DF_ROLE_SYSTEM, DF_ROLE_USER, DF_ROLE_ASSISTANT } DfChatRole;

typedef struct DfChatMessage {
    DfChatRole role;
    const char *content; /* UTF-8, not necessarily NUL-terminated */
    size_t content_len;
} DfChatMessage;

/* Byte ranges [start, end) of the assistant turn bodies in a rendering. */
typedef struct DfChatSpans {
    size_t (*range)[2];
    size_t n, cap;
} DfChatSpans;

typedef struct DfChatTemplate DfChatTemplate;

/* path: the tokenizer directory, or its tokenizer.json (the
 * tokenizer_config.json beside it is read). */
DfChatTemplate *df_chat_template_load(const char *path, DfError *err);
void df_chat_template_free(DfChatTemplate *t);
DfChatFamily df_chat_template_family(const DfChatTemplate *t);
const char *df_chat_family_name(DfChatFamily family);

/* Llama-3.1 family only: the date of the system header (e.g. "26 Jul 2024");
 * fails for other families or a date that is empty, too long or multi-line. */
int df_chat_template_set_date(DfChatTemplate *t, const char *date, DfError *err);
/* The date the template renders, NULL for families without one. */
const char *df_chat_template_date(const DfChatTemplate *t);

/* "system", "user"/"human", "assistant"/"gpt" -> role; -1 for others. */
int df_chat_role_parse(const char *name, size_t len);

/* Appends the rendering to text; spans (may be NULL) gets the assistant
 * bodies, as offsets into text. */
int df_chat_render(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfChatSpans *spans,
                   DfError *err);

/* The prompt that asks the model for the next assistant turn: the rendering
 * of msgs followed by the template's generation prompt (what
 * apply_chat_template(..., add_generation_prompt=True) gives; Qwen3 with
 * thinking enabled, its default). */
int df_chat_render_prompt(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfError *err);

/* Renders, tokenizes with tok and appends the ids and the loss mask (0/1
 * bytes, one per id). */
int df_chat_tokenize(const DfChatTemplate *t, const DfTokenizer *tok, const DfChatMessage *msgs, int n,
                     DfI32Vec *ids, DfByteBuf *mask, DfError *err);

void df_chat_spans_free(DfChatSpans *s);

#endif
