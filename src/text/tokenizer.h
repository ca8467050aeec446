/* Hugging Face tokenizer.json, byte-level BPE (Qwen3, Llama-3, coder-tiny):
 * NFC normalization, added/special tokens, the pre-tokenizer split regex,
 * byte-level mapping, BPE merges; and decoding back to UTF-8.
 * A loaded tokenizer is immutable: encode/decode may run from many threads. */
#ifndef DF_TEXT_TOKENIZER_H
#define DF_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buffer.h"
#include "base/error.h"

typedef struct DfTokenizer DfTokenizer;

/* path: a tokenizer.json file or a directory holding one. */
DfTokenizer *df_tokenizer_load(const char *path, DfError *err);
void df_tokenizer_free(DfTokenizer *tok);

/* Appends the ids of text[0..len) to out, as Hugging Face's
 * encode(text, add_special_tokens=False) does: added/special tokens written
 * in the text are recognized, none is added. */
int df_tokenizer_encode(const DfTokenizer *tok, const char *text, size_t len, DfI32Vec *out, DfError *err);

/* Appends the text of ids to out (special tokens included, as HF's
 * decode(ids, skip_special_tokens=False)). An id outside the vocabulary is an error. */
int df_tokenizer_decode(const DfTokenizer *tok, const int32_t *ids, size_t n, DfByteBuf *out, DfError *err);

/* Whether id has a text to decode to (a model's vocabulary may be padded
 * past the tokenizer's ids, or have holes). */
int df_tokenizer_has_id(const DfTokenizer *tok, int32_t id);

/* One more than the largest id the tokenizer can produce (added tokens included). */
int df_tokenizer_vocab_size(const DfTokenizer *tok);

/* Whether id is one of the tokenizer's added tokens (special or not). */
int df_tokenizer_is_added(const DfTokenizer *tok, int32_t id);

/* Id of a token string (vocabulary or added token), or -1. */
int32_t df_tokenizer_token_to_id(const DfTokenizer *tok, const char *token);

/* A 64-bit fingerprint of the vocabulary, merges and added tokens: two
 * tokenizers with the same fingerprint encode alike. */
uint64_t df_tokenizer_fingerprint(const DfTokenizer *tok);

#endif
