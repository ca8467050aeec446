/* Training records in their input shapes -> the pieces a sample is made of,
 * without tokenizing: chat messages from JSON (`messages` role/content, or
 * ShareGPT `conversations` from/value) and from Arrow rows, and the Arrow
 * column layout of a dataset (pre-tokenized input_ids + loss_mask or labels,
 * messages, conversations, or prompt/response strings). */
#ifndef DF_DATA_RECORDS_H
#define DF_DATA_RECORDS_H

#include <cjson/cJSON.h>

#include "base/buffer.h"
#include "base/error.h"
#include "formats/arrow.h"

/* A chat message, defined with the chat template that renders it
 * (text/chat_template.h); named here only, so that this header does not
 * need text/. */
typedef struct DfChatMessage DfChatMessage;

/* Growable message list. Contents point into the JSON / Arrow data. */
typedef struct DfChatMessages {
    DfChatMessage *items;
    int n, cap;
} DfChatMessages;
void df_chat_messages_free(DfChatMessages *m);

/* JSON array of {"role","content"} (sharegpt: {"from","value"}) -> out
 * (cleared first). Errors say which message and field. */
int df_records_json_messages(const cJSON *array, int sharegpt, DfChatMessages *out, DfError *err);

typedef enum {
    DF_LAYOUT_PRETOKENIZED, /* input_ids + loss_mask */
    DF_LAYOUT_LABELS,       /* input_ids + labels (-100: masked) */
    DF_LAYOUT_MESSAGES,     /* messages: list<struct<role, content>> */
    DF_LAYOUT_CONVERSATIONS,/* conversations: list<struct<from, value>> */
    DF_LAYOUT_PROMPT_RESPONSE
} DfRecordLayoutKind;

typedef struct DfRecordLayout {
    DfRecordLayoutKind kind;
    int col[2];   /* the columns used, in the order named above */
    int field[2]; /* chat: the struct children holding role and content */
} DfRecordLayout;

/* Picks the layout from the column names and checks their types. */
int df_records_arrow_layout(const DfArrowSchema *s, DfRecordLayout *out, DfError *err);
const char *df_records_layout_name(DfRecordLayoutKind kind);

/* Row `row` of a batch. Each returns 0, or -1 with err saying what is wrong
 * with the record (a bad record, not a bad file). */
int df_records_arrow_ids(const DfRecordLayout *l, const DfArrowBatch *b, int64_t row, int vocab_size, DfI32Vec *ids,
                         DfByteBuf *mask, DfError *err);
int df_records_arrow_messages(const DfRecordLayout *l, const DfArrowBatch *b, int64_t row, DfChatMessages *out,
                              DfError *err);
int df_records_arrow_strings(const DfRecordLayout *l, const DfArrowBatch *b, int64_t row, const char *text[2],
                             size_t len[2], DfError *err);

#endif
