/* The normalizer of tokenizer.json: none, or Unicode NFC (utf8proc). */
#ifndef DF_TEXT_NORMALIZER_H
#define DF_TEXT_NORMALIZER_H

#include <stddef.h>

#include "base/error.h"

typedef enum { DF_NORMALIZER_NONE, DF_NORMALIZER_NFC } DfNormalizerKind;

/* Normalizes s[0..n) (valid UTF-8). Returns a heap string the caller frees
 * (*out_len set), or NULL when the text is unchanged (as ASCII always is under
 * NFC), or NULL with err set on failure (*out_len = SIZE_MAX then). */
char *df_normalize(DfNormalizerKind kind, const char *s, size_t n, size_t *out_len, DfError *err);

#endif
