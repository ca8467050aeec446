/* One JSONL training record (a line of `dflash prepare`'s input) into token
 * ids and a loss mask, or a classified reason why the record is bad:
 *   {"prompt": str, "response": str}  tokenized, loss on the response only
 *   {"input_ids": [int...], "loss_mask": [0|1...]}  already tokenized
 * Pure and thread-safe (the tokenizer is immutable): prepare runs it on many
 * threads at once. */
#ifndef DF_CLI_PREPARE_RECORD_H
#define DF_CLI_PREPARE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/buffer.h"
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
    const DfTokenizer *tok; /* for prompt/response records */
    int vocab_size;         /* input_ids must lie in [0, vocab_size) */
    int max_length;         /* longer samples are bad (DF_BAD_TOO_LONG) */
} DfRecordRules;

typedef struct DfPreparedRecord {
    DfI32Vec ids;
    uint8_t *mask; /* mask_len entries, as many as ids.len when good */
    size_t mask_len, mask_cap;
    DfBadRecord bad;
    char msg[DF_RECORD_MSG_MAX]; /* why it is bad (no file or line: the caller adds them) */
} DfPreparedRecord;

/* Parses text[0..len) (text[len] must be readable: the line's NUL) into r,
 * reusing r's arrays. Always succeeds: a bad record sets r->bad and r->msg. */
void df_prepare_record(const DfRecordRules *rules, const char *text, size_t len, DfPreparedRecord *r);

void df_prepared_record_free(DfPreparedRecord *r);

/* "invalid JSON", "missing field", ... for the summary. */
const char *df_bad_record_name(DfBadRecord kind);

#endif
