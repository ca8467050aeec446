/* The loaded tokenizer, shared by the files of src/text/ (not a public API). */
#ifndef DF_TEXT_TOKENIZER_INTERNAL_H
#define DF_TEXT_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"

struct DfTokenizer {
    char *path;
    DfBpe bpe;
    DfAddedTokens added;
    DfNormalizerKind normalizer;
    DfPreTokenizer pre;
    /* id -> the bytes the byte-level decoder gives for that token; an id with
     * no token has decoded_off[id] == UINT32_MAX */
    int32_t n_ids;
    uint32_t *decoded_off, *decoded_len;
    char *decoded;
    uint64_t fingerprint;
};

/* Parses tokenizer.json into tok (path is for messages). */
int df_tokenizer_parse_json(DfTokenizer *tok, const char *json, size_t len, const char *path, DfError *err);

/* Builds the id -> decoded bytes table once vocabulary and added tokens are in. */
void df_tokenizer_build_decode_table(DfTokenizer *tok);

#endif
