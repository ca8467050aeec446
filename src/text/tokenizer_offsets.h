/* Encoding with token byte offsets, and the tokenizer's normalizer on its
 * own: what the chat-template loss mask needs to map text spans to tokens. */
#ifndef DF_TEXT_TOKENIZER_OFFSETS_H
#define DF_TEXT_TOKENIZER_OFFSETS_H

#include "text/tokenizer.h"

/* As df_tokenizer_encode, and appends to starts the byte offset at which each
 * token begins. The offsets index the text as the tokenizer's normalizer
 * leaves it, which is `text` itself when normalization changes nothing (no
 * normalizer, or text already in NFC: see df_tokenizer_normalize). */
int df_tokenizer_encode_offsets(const DfTokenizer *tok, const char *text, size_t len, DfI32Vec *ids,
                                DfI32Vec *starts, DfError *err);

/* Appends text[0..len) to out as the tokenizer's normalizer rewrites it (NFC
 * for Qwen, unchanged for Llama-3). */
int df_tokenizer_normalize(const DfTokenizer *tok, const char *text, size_t len, DfByteBuf *out, DfError *err);

#endif
