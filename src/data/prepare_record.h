/* One training record of `dflash prepare` into token ids and a loss mask, or
 * a classified reason why the record is bad. A JSONL line may be
 *   {"prompt": str, "response": str}         loss on the response tokens
 *   {"input_ids": [int...], "loss_mask": [0|1...]}  already tokenized
 *   {"messages": [...]} / {"conversations": [...]}  chat, rendered with the
 *                                                   tokenizer's chat template
 * Arrow rows reach the same pieces through df_prepare_record_texts/_chat and
 * df_prepare_record_check. Pure and thread-safe (the tokenizer and the chat
 * template are immutable): prepare runs it on many threads at once. */
#ifndef DF_DATA_PREPARE_RECORD_H
#define DF_DATA_PREPARE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/buffer.h"
#include "data/records.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

typedef enum DfBadRecord {
    DF_RECORD_OK = -1,
    DF_BAD_JSON,
    DF_BAD_MISSING_FIELD,
    DF_BAD_WRONG_TYPE,
    DF_BAD_ID_RANGE,
    DF_BAD_MASK,
    DF_BAD_EMPTY,
    DF_BAD_NO_LOSS,
    DF_BAD_TOO_LONG,
    DF_BAD_TOKENIZE,
    DF_BAD_KIND_COUNT
} DfBadRecord;

enum { DF_RECORD_MSG_MAX = 320 };

typedef struct DfRecordRules {
    const DfTokenizer *tok;     /* for text and chat records */
    int vocab_size;             /* input_ids must lie in [0, vocab_size) */
    int max_length;             /* longer samples are bad (DF_BAD_TOO_LONG) */
    const DfChatTemplate *chat; /* NULL: chat records are bad, saying chat_error */
    const char *chat_error;
} DfRecordRules;

typedef struct DfPreparedRecord {
    DfI32Vec ids;
    DfByteBuf mask;          /* 0/1 bytes, one per id when good */
    DfChatMessages messages; /* scratch for chat records */
    DfBadRecord bad;
    char msg[DF_RECORD_MSG_MAX]; /* why it is bad (no file or line: the caller adds them) */
} DfPreparedRecord;

/* Parses one JSONL line text[0..len) (text[len] must be readable: the
 * line's NUL) into r, reusing r's arrays. Always succeeds: a bad record sets
 * r->bad and r->msg. */
void df_prepare_record(const DfRecordRules *rules, const char *text, size_t len, DfPreparedRecord *r);

/* The pieces, for other record sources (Arrow rows): */
void df_prepared_record_reset(DfPreparedRecord *r); /* empty and good */
void df_prepared_record_bad(DfPreparedRecord *r, DfBadRecord kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* prompt texts[0] (mask 0) and response texts[1] (mask 1), tokenized apart */
void df_prepare_record_texts(const DfRecordRules *rules, DfPreparedRecord *r, const char *const texts[2],
                             const size_t lens[2]);
/* r->messages rendered with the chat template and tokenized */
void df_prepare_record_chat(const DfRecordRules *rules, DfPreparedRecord *r);
/* a good record's final checks: not empty, a loss token, not too long */
void df_prepare_record_check(const DfRecordRules *rules, DfPreparedRecord *r);

void df_prepared_record_free(DfPreparedRecord *r);

/* "invalid JSON", "missing field", ... for the summary. */
const char *df_bad_record_name(DfBadRecord kind);

#endif
